"""One connection's SASL exchange (security/sasl.py) walked through its states (sasl_state.py) without
sockets: PLAIN and SCRAM over SaslAuthenticate, the legacy v0 exchange, and each way to fail."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.metadata_clients import local_client

from strom._util.clock import ManualClock
from strom.broker.security.credentials import ZkCredentialStore
from strom.broker.security.sasl import SaslAuthenticator, SaslSettings, Step
from strom.broker.security.sasl_state import SaslState
from strom.broker.security.scram import ScramClient, make_credential
from strom.protocol.api import ApiKey
from strom.protocol.codec import decode_response, encode_request
from strom.protocol.errors import ErrorCode
from strom.protocol.request_header import peek_request_header

SCRAM = "SCRAM-SHA-256"


def authenticator(tmp: Path) -> SaslAuthenticator:
    store = ZkCredentialStore(local_client(tmp)[0])
    asyncio.run(store.alter([("carol", SCRAM, make_credential(SCRAM, "carol-secret", 4096))], []))
    settings = SaslSettings("CLIENT", ("PLAIN", SCRAM), {"alice": "alice-secret"}, lambda: store, {}, 0)
    return SaslAuthenticator(settings, ManualClock())


def send(auth: SaslAuthenticator, key: int, version: int, body: dict[str, Any]) -> tuple[Step, Any]:
    frame = bytearray(encode_request(key, version, 1, "t", body)[4:])
    step = asyncio.run(auth.receive(frame, peek_request_header(frame), "10.0.0.1"))
    if not step.answer:
        return step, None
    payload = b"".join(bytes(chunk) for chunk in step.answer)[4:]  # type: ignore[arg-type,unused-ignore]
    return step, decode_response(key, version, payload)[1]


def handshake(auth: SaslAuthenticator, mechanism: str, version: int = 1) -> Any:
    return send(auth, ApiKey.SASL_HANDSHAKE, version, {"mechanism": mechanism})[1]


def authenticate(auth: SaslAuthenticator, token: bytes) -> tuple[Step, Any]:
    return send(auth, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token})


def test_plain_handshake_authenticate_complete(tmp_path: Path) -> None:
    auth = authenticator(tmp_path)
    assert auth.state is SaslState.HANDSHAKE
    assert not auth.gates((ApiKey.API_VERSIONS, 3, 1))  # ApiVersions goes to its handler
    assert auth.gates((ApiKey.METADATA, 9, 1))
    assert handshake(auth, "PLAIN")["error_code"] == 0
    assert auth.state is SaslState.AUTHENTICATE
    assert auth.gates((ApiKey.API_VERSIONS, 3, 2))  # mid-exchange every frame is the exchange's
    step, answer = authenticate(auth, b"\0alice\0alice-secret")
    assert (step.close, answer["error_code"], auth.state) == (False, 0, SaslState.COMPLETE)
    assert auth.authenticated and auth.principal == "User:alice"
    assert not auth.gates((ApiKey.METADATA, 9, 3))


def test_scram_stays_in_authenticate_between_its_two_tokens(tmp_path: Path) -> None:
    auth = authenticator(tmp_path)
    handshake(auth, SCRAM)
    client = ScramClient(SCRAM, "carol", "carol-secret")
    _, first = authenticate(auth, client.first())
    assert auth.state is SaslState.AUTHENTICATE and not auth.authenticated
    _, final = authenticate(auth, client.final(first["auth_bytes"]))
    client.verify(final["auth_bytes"])
    assert (auth.state, auth.principal) == (SaslState.COMPLETE, "User:carol")


def test_the_legacy_exchange_takes_a_bare_token(tmp_path: Path) -> None:
    auth = authenticator(tmp_path)
    assert handshake(auth, "PLAIN", version=0)["error_code"] == 0
    assert auth.state is SaslState.LEGACY_TOKEN
    token = bytearray(b"\0alice\0alice-secret")
    step = asyncio.run(auth.receive(token, peek_request_header(token), "10.0.0.1"))
    assert step.answer == [b"\0\0\0\0"] and not step.close  # an empty PLAIN reply, size-prefixed
    assert auth.state is SaslState.COMPLETE


def test_a_wrong_legacy_token_fails_without_a_word(tmp_path: Path) -> None:
    auth = authenticator(tmp_path)
    handshake(auth, "PLAIN", version=0)
    token = bytearray(b"\0alice\0wrong-secret")
    step = asyncio.run(auth.receive(token, peek_request_header(token), "10.0.0.1"))
    assert (step.answer, step.close, auth.state) == (None, True, SaslState.FAILED)


def test_wrong_credentials_fail(tmp_path: Path) -> None:
    auth = authenticator(tmp_path)
    handshake(auth, "PLAIN")
    step, answer = authenticate(auth, b"\0alice\0wrong")
    assert step.close and answer["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert auth.state is SaslState.FAILED and not auth.authenticated


def test_requests_out_of_turn_fail(tmp_path: Path) -> None:
    early = authenticator(tmp_path)
    step, answer = authenticate(early, b"\0alice\0alice-secret")  # no handshake yet
    assert step.close and answer["error_code"] == ErrorCode.ILLEGAL_SASL_STATE
    assert early.state is SaslState.FAILED
    twice = authenticator(tmp_path)
    handshake(twice, "PLAIN")
    assert handshake(twice, "PLAIN")["error_code"] == ErrorCode.ILLEGAL_SASL_STATE
    assert twice.state is SaslState.FAILED
    other = authenticator(tmp_path)
    step, answer = send(other, ApiKey.METADATA, 1, {"topics": None})
    assert (step.close, answer, other.state) == (True, None, SaslState.FAILED)


def test_an_unknown_mechanism_fails(tmp_path: Path) -> None:
    auth = authenticator(tmp_path)
    answer = handshake(auth, "GSSAPI")
    assert answer["error_code"] == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert answer["mechanisms"] == ["PLAIN", SCRAM] and auth.state is SaslState.FAILED


def test_re_authentication_goes_through_reauthenticate(tmp_path: Path) -> None:
    auth = authenticator(tmp_path)
    handshake(auth, "PLAIN")
    authenticate(auth, b"\0alice\0alice-secret")
    assert handshake(auth, "PLAIN")["error_code"] == 0
    assert auth.state is SaslState.REAUTHENTICATE and auth.authenticated
    assert auth.gates((ApiKey.METADATA, 9, 5))  # only SaslAuthenticate may come now
    authenticate(auth, b"\0alice\0alice-secret")
    assert (auth.state, auth.reauthentications) == (SaslState.COMPLETE, 1)
