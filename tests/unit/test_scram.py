"""SCRAM server against RFC 5802 (SHA-1 core) and RFC 7677 (SHA-256) test vectors, Kafka's quirks."""

from __future__ import annotations

import base64

import pytest

from strom.broker.security import scram
from strom.broker.security.scram import ScramCredential, ScramError, ScramServer


def _server(hash_name: str, password: str, salt_b64: str, snonce: str) -> ScramServer:
    salt = base64.b64decode(salt_b64)
    cred = scram.credential_from_salted(
        hash_name, scram.salted_password(hash_name, password, salt, 4096), salt, 4096
    )
    server = ScramServer("SCRAM-SHA-256", lambda user: cred if user == "user" else None, lambda: snonce)
    server.hash_name = hash_name  # the RFC 5802 vector is SHA-1: same algorithm, other hash
    return server


def test_rfc5802_sha1_vector() -> None:
    server = _server("sha1", "pencil", "QSXCR+Q6sek8bf92", "3rfcNHYJY1ZVvWVs7j")
    first = server.first(b"n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL")
    assert first == b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096"
    final = server.final(
        b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts="
    )
    assert final == b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ="


def test_rfc7677_sha256_vector() -> None:
    server = _server("sha256", "pencil", "W22ZaJ0SNY7soEsUEjb6gQ==", "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    first = server.first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = server.final(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def _client_final(mechanism: str, password: str, cnonce: str, server_first: bytes, nonce: str) -> bytes:
    """A client's final message computed independently (RFC 5802 section 3)."""
    import hashlib
    import hmac

    hash_name = scram.HASHES[mechanism]
    attrs = dict(part.split("=", 1) for part in server_first.decode().split(","))
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", hash_name).digest()
    stored = hashlib.new(hash_name, client_key).digest()
    without_proof = f"c=biws,r={nonce}".encode()
    auth = f"n=user,r={cnonce}".encode() + b"," + server_first + b"," + without_proof
    sig = hmac.new(stored, auth, hash_name).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, sig, strict=True))
    return without_proof + b",p=" + base64.b64encode(proof)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_round_trip_and_librdkafka_doubled_nonce(mechanism: str) -> None:
    cred = scram.make_credential(mechanism, "secret", 4096)
    assert ScramCredential.from_kafka(cred.to_kafka()) == cred
    for doubled in (False, True):
        server = ScramServer(mechanism, {"user": cred}.get)
        first = server.first(b"n,,n=user,r=abc")
        nonce = first.decode().split(",")[0][2:]
        sent = ("abc" + nonce) if doubled else nonce  # librdkafka < 2.6.1 sends cnonce + cnonce + snonce
        assert server.final(_client_final(mechanism, "secret", "abc", first, sent)).startswith(b"v=")
        assert server.username == "user"
    server = ScramServer(mechanism, {"user": cred}.get)
    first = server.first(b"n,,n=user,r=abc")
    with pytest.raises(ScramError, match="wrong password"):
        server.final(_client_final(mechanism, "wrong", "abc", first, first.decode().split(",")[0][2:]))


@pytest.mark.parametrize(
    "message",
    [
        b"",
        b"y,,n=user,r=abc",
        b"p=tls-unique,,n=user,r=abc",
        b"n,,n=,r=abc",
        b"n,,n=nobody,r=abc",
        b"n,a=other,n=user,r=abc",
        b"n,,r=abc",
        b"n,,n=user,r=abc,tokenauth=true",
        b"n,,n=us=er,r=abc",
        b"\xff\xfe",
    ],
)
def test_bad_client_first_messages_fail(message: bytes) -> None:
    cred = scram.make_credential("SCRAM-SHA-256", "secret")
    with pytest.raises(ScramError):
        ScramServer("SCRAM-SHA-256", {"user": cred}.get).first(message)


def test_low_iterations_refused_and_escaped_names() -> None:
    low = scram.make_credential("SCRAM-SHA-256", "secret", 4095)
    with pytest.raises(ScramError, match="iterations"):
        ScramServer("SCRAM-SHA-256", {"user": low}.get).first(b"n,,n=user,r=abc")
    cred = scram.make_credential("SCRAM-SHA-256", "secret")
    server = ScramServer("SCRAM-SHA-256", {"a,b=c": cred}.get)
    server.first(b"n,,n=a=2Cb=3Dc,r=abc")
    assert server.username == "a,b=c"


@pytest.mark.parametrize(
    "final",
    [
        b"c=biws,r=x",
        b"c=biws,r=zzz,p=AAAA",
        b"c=eSws,r={nonce},p=AAAA",
        b"c=biws,r={nonce},p=!!",
        b"r={nonce},p=AA==",
    ],
)
def test_bad_client_final_messages_fail(final: bytes) -> None:
    cred = scram.make_credential("SCRAM-SHA-256", "secret")
    server = ScramServer("SCRAM-SHA-256", {"user": cred}.get)
    nonce = server.first(b"n,,n=user,r=abc").decode().split(",")[0][2:]
    with pytest.raises(ScramError):
        server.final(final.replace(b"{nonce}", nonce.encode()))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_broker_client_against_the_server(mechanism: str) -> None:
    """The client side brokers use for inter-broker SCRAM logins, against the server side."""
    cred = scram.make_credential(mechanism, "p=ss,word", 4096)
    server = ScramServer(mechanism, {"broker,1": cred}.get)
    client = scram.ScramClient(mechanism, "broker,1", "p=ss,word")
    client.verify(server.final(client.final(server.first(client.first()))))
    assert server.username == "broker,1"
    wrong = scram.ScramClient(mechanism, "broker,1", "other")
    server = ScramServer(mechanism, {"broker,1": cred}.get)
    with pytest.raises(ScramError, match="wrong password"):
        server.final(wrong.final(server.first(wrong.first())))
    with pytest.raises(ScramError, match="signature"):
        client.verify(b"v=AAAA")
