"""KIP-368 on one connection's SASL state (security/sasl.py), on a clock the test moves: which frames
the authenticator takes after login, session ends, re-authentication rules."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.metadata_clients import local_client

from strom._util.clock import ManualClock
from strom.broker.security.credentials import ZkCredentialStore
from strom.broker.security.sasl import SaslAuthenticator, SaslSettings, Step
from strom.protocol.api import ApiKey
from strom.protocol.codec import decode_response, encode_request
from strom.protocol.request_header import peek_request_header

ALICE = b"\0alice\0alice-secret"


def _at(clock: ManualClock, monotonic_ms: int) -> None:
    clock.advance(monotonic_ms - clock.monotonic_ms())


def _authenticator(clock: ManualClock, tmp: str, reauth_ms: int = 1000) -> SaslAuthenticator:
    settings = SaslSettings(
        "CLIENT",
        ("PLAIN", "SCRAM-SHA-512"),
        {"alice": "alice-secret", "bob": "bob-secret"},
        lambda: ZkCredentialStore(local_client()[0]),
        {"PLAIN": reauth_ms, "SCRAM-SHA-512": reauth_ms},
        0,
    )
    return SaslAuthenticator(settings, clock)


def _frame(key: int, version: int, body: dict[str, Any]) -> bytearray:
    return bytearray(encode_request(key, version, 1, "t", body)[4:])


def _send(auth: SaslAuthenticator, key: int, version: int, body: dict[str, Any]) -> tuple[Step, Any]:
    frame = _frame(key, version, body)
    step = asyncio.run(auth.receive(frame, peek_request_header(frame), "10.0.0.1"))
    if not step.answer:
        return step, None
    payload = b"".join(bytes(chunk) for chunk in step.answer)[4:]  # type: ignore[arg-type,unused-ignore]
    return step, decode_response(key, version, payload)[1]


def _login(auth: SaslAuthenticator, token: bytes = ALICE, version: int = 1) -> tuple[Step, Any]:
    step, answer = _send(auth, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    assert not step.close and answer["error_code"] == 0
    return _send(auth, ApiKey.SASL_AUTHENTICATE, version, {"auth_bytes": token})


def test_session_end_and_re_authentication(tmp_path: Any) -> None:
    clock = ManualClock()
    auth = _authenticator(clock, str(tmp_path))
    _, answer = _login(auth)
    assert (answer["error_code"], answer["session_lifetime_ms"]) == (0, 1000)
    metadata = _frame(ApiKey.METADATA, 1, {"topics": None})
    assert not auth.gates(peek_request_header(metadata))  # within the session: the handlers answer
    _at(clock, 999)
    assert not auth.gates(peek_request_header(metadata))
    _, answer = _login(auth)  # re-authenticated before the end: a new session from now
    assert answer["session_lifetime_ms"] == 1000 and auth.reauthentications == 1
    _at(clock, 1_999)
    assert not auth.gates(peek_request_header(metadata))
    _at(clock, 2_000)
    assert auth.gates(peek_request_header(metadata))
    step, _ = _send(auth, ApiKey.METADATA, 1, {"topics": None})
    assert step.close and step.answer is None  # closed without a reply


def test_after_the_end_only_a_v1_handshake_re_authenticates(tmp_path: Any) -> None:
    clock = ManualClock()
    late, v0_handshake, v0_client = (_authenticator(clock, str(tmp_path)) for _ in range(3))
    for auth in (late, v0_handshake):
        _login(auth)
    _login(v0_client, version=0)  # SaslAuthenticate v0: never told the lifetime, cannot re-authenticate
    _at(clock, 5_000)
    _, answer = _login(late)
    assert answer["error_code"] == 0 and not late.gates(
        peek_request_header(_frame(ApiKey.METADATA, 1, {"topics": None}))
    )
    step, _ = _send(v0_handshake, ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})
    assert step.close
    step, _ = _send(v0_client, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    assert step.close


def test_re_authentication_keeps_the_principal_and_the_mechanism(tmp_path: Any) -> None:
    clock = ManualClock()
    other, scram = _authenticator(clock, str(tmp_path)), _authenticator(clock, str(tmp_path))
    _login(other)
    step, answer = _login(other, b"\0bob\0bob-secret")
    assert step.close and answer["error_code"] == 58 and other.principal == "User:alice"
    _login(scram)
    step, answer = _send(scram, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-512"})
    assert step.close and answer["error_code"] == 33


def test_without_a_lifetime_sessions_never_end(tmp_path: Any) -> None:
    clock = ManualClock()
    auth = _authenticator(clock, str(tmp_path), reauth_ms=0)
    _, answer = _login(auth)
    assert answer["session_lifetime_ms"] == 0
    _at(clock, 10**12)
    assert not auth.gates(peek_request_header(_frame(ApiKey.METADATA, 1, {"topics": None})))
