"""SCRAM-SHA-256/512 (RFC 5802, RFC 7677) as Kafka's broker runs it: credentials and the server side.

A credential is what Kafka stores, never the password: a salt, the iteration count and two keys
derived from SaltedPassword = PBKDF2-HMAC(password, salt, iterations):

    StoredKey = H(HMAC(SaltedPassword, "Client Key"))    ServerKey = HMAC(SaltedPassword, "Server Key")

in Kafka's text form ``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>``.

The exchange (client-first, server-first, client-final, server-final):

    n,,n=<user>,r=<cnonce>      →  r=<cnonce><snonce>,s=<b64 salt>,i=<n>
    c=biws,r=<nonce>,p=<proof>  →  v=<b64 ServerSignature>

The proof is checked by recovering ClientKey = proof XOR HMAC(StoredKey, AuthMessage) and comparing
H(ClientKey) with StoredKey in constant time; AuthMessage is built from the messages' bytes as
received. As in Kafka: the GS2 flag must be ``n`` (no channel binding), user names unescape
``=2C``/``=3D`` and get no SASLprep, an unknown user fails at the first message, credentials below
4096 iterations are refused, and the client-final nonce need only *end with* the server's nonce
(librdkafka before 2.6.1 repeats the client nonce in front of it). Extensions other than Kafka's
``tokenauth`` are ignored; ``tokenauth`` (delegation tokens) is refused.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass

MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# KIP-554's mechanism codes (DescribeUserScramCredentials / AlterUserScramCredentials).
MECHANISM_CODES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}


class ScramError(Exception):
    """The exchange failed; the message is for the broker's log (never holds a secret)."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_kafka(self) -> str:
        b64 = base64.b64encode
        return (
            f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
            f"server_key={b64(self.server_key).decode()},iterations={self.iterations}"
        )

    @classmethod
    def from_kafka(cls, text: str) -> ScramCredential:
        fields = dict(part.split("=", 1) for part in text.split(","))
        return cls(
            base64.b64decode(fields["salt"]),
            base64.b64decode(fields["stored_key"]),
            base64.b64decode(fields["server_key"]),
            int(fields["iterations"]),
        )


def _hmac(hash_name: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hash_name).digest()


def salted_password(hash_name: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iterations)


def credential_from_salted(hash_name: str, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
    client_key = _hmac(hash_name, salted, b"Client Key")
    stored_key = hashlib.new(hash_name, client_key).digest()
    return ScramCredential(salt, stored_key, _hmac(hash_name, salted, b"Server Key"), iterations)


def make_credential(
    mechanism: str, password: str, iterations: int = MIN_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    hash_name = HASHES[mechanism]
    salt = salt if salt is not None else secrets.token_bytes(32)
    return credential_from_salted(
        hash_name, salted_password(hash_name, password, salt, iterations), salt, iterations
    )


def _attributes(text: str) -> list[tuple[str, str]]:
    out = []
    for part in text.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ScramError(f"malformed attribute {part[:20]!r}")
        out.append((part[0], part[2:]))
    return out


def _unescape_name(name: str) -> str:
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise ScramError("malformed user name escape")
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """One exchange on the broker's side: `first` then `final`; either raises ScramError on failure."""

    def __init__(
        self,
        mechanism: str,
        lookup: Callable[[str], ScramCredential | None],
        nonce: Callable[[], str] = lambda: secrets.token_urlsafe(24),
    ) -> None:
        self.hash_name = HASHES[mechanism]
        self._lookup = lookup
        self._nonce = nonce
        self.username: str | None = None
        self._credential: ScramCredential | None = None
        self._gs2 = b""
        self._client_first_bare = b""
        self._server_first = b""
        self._server_nonce = ""

    def first(self, message: bytes) -> bytes:
        try:
            text = message.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("client-first message is not UTF-8") from None
        flag, sep1, rest = text.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not (sep1 and sep2) or flag != "n":
            raise ScramError("client-first message: only GS2 flag 'n' (no channel binding) is accepted")
        attrs = _attributes(bare)
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r" or not attrs[1][1]:
            raise ScramError("client-first message lacks n= and r=")
        username = _unescape_name(attrs[0][1])
        if not username:
            raise ScramError("client-first message has an empty user name")
        if authzid and (not authzid.startswith("a=") or _unescape_name(authzid[2:]) != username):
            raise ScramError("authorization id differs from the user name")
        for key, value in attrs[2:]:
            if key == "t" or value.startswith("tokenauth"):
                raise ScramError("delegation tokens are not supported")
        if any(key == "m" for key, _ in attrs[2:]):
            raise ScramError("reserved extension m= is not supported")
        credential = self._lookup(username)
        if credential is None:
            raise ScramError(f"unknown user {username!r}")
        if credential.iterations < MIN_ITERATIONS:
            raise ScramError(f"credential of {username!r} has fewer than {MIN_ITERATIONS} iterations")
        self.username, self._credential = username, credential
        self._gs2 = f"{flag},{authzid},".encode()
        self._client_first_bare = bare.encode()
        self._server_nonce = attrs[1][1] + self._nonce()
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._server_nonce},s={salt},i={credential.iterations}".encode()
        return self._server_first

    def final(self, message: bytes) -> bytes:
        credential = self._credential
        if credential is None:
            raise ScramError("client-final message before client-first")
        without_proof, sep, proof_b64 = message.rpartition(b",p=")
        if not sep:
            raise ScramError("client-final message has no proof")
        try:
            attrs = _attributes(without_proof.decode("ascii"))
            proof = base64.b64decode(proof_b64, validate=True)
            channel = base64.b64decode(attrs[0][1], validate=True) if attrs and attrs[0][0] == "c" else None
        except (UnicodeDecodeError, ValueError):
            raise ScramError("client-final message is malformed") from None
        if channel != self._gs2:
            raise ScramError("client-final channel binding differs from the client-first GS2 header")
        if len(attrs) < 2 or attrs[1][0] != "r" or not attrs[1][1].endswith(self._server_nonce):
            raise ScramError("client-final nonce does not match")
        auth_message = self._client_first_bare + b"," + self._server_first + b"," + without_proof
        signature = _hmac(self.hash_name, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise ScramError("client proof has the wrong length")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self.hash_name, client_key).digest(), credential.stored_key):
            raise ScramError(f"wrong password for {self.username!r}")
        server_signature = _hmac(self.hash_name, credential.server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature)


class ScramClient:
    """The client side (a broker logging in to another): `first`, `final`, then `verify`."""

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self.hash_name = HASHES[mechanism]
        self._username = username.replace("=", "=3D").replace(",", "=2C")
        self._password = password
        self._nonce = secrets.token_urlsafe(24)
        self._bare = b""
        self._server_signature = b""

    def first(self) -> bytes:
        self._bare = f"n={self._username},r={self._nonce}".encode()
        return b"n,," + self._bare

    def final(self, server_first: bytes) -> bytes:
        attrs = dict(_attributes(server_first.decode("ascii")))
        nonce, salt, iterations = attrs.get("r", ""), attrs.get("s", ""), int(attrs.get("i", "0"))
        if not nonce.startswith(self._nonce) or iterations < MIN_ITERATIONS:
            raise ScramError("unexpected server-first message")
        salted = salted_password(self.hash_name, self._password, base64.b64decode(salt), iterations)
        client_key = _hmac(self.hash_name, salted, b"Client Key")
        stored_key = hashlib.new(self.hash_name, client_key).digest()
        without_proof = f"c=biws,r={nonce}".encode()
        auth_message = self._bare + b"," + server_first + b"," + without_proof
        signature = _hmac(self.hash_name, stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = _hmac(self.hash_name, salted, b"Server Key")
        self._server_signature = _hmac(self.hash_name, server_key, auth_message)
        return without_proof + b",p=" + base64.b64encode(proof)

    def verify(self, server_final: bytes) -> None:
        if not hmac.compare_digest(server_final, b"v=" + base64.b64encode(self._server_signature)):
            raise ScramError("the server's signature does not match")
