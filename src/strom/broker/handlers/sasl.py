"""SASL and SCRAM credential APIs.

SaslHandshake (17) and SaslAuthenticate (36) are answered here only once a connection is
authenticated, or on a listener without SASL: ILLEGAL_SASL_STATE, as Kafka answers them (the exchange
itself runs before any handler, security/sasl.py). DescribeUserScramCredentials (50) and
AlterUserScramCredentials (51) (KIP-554, flexible-only v0) read and change the broker's SCRAM
credentials: the client sends a salt and the salted password, never the password, and the broker
derives StoredKey and ServerKey from them. Kafka's checks: an empty name or iterations outside
4096..16384 → UNACCEPTABLE_CREDENTIAL, an unknown mechanism → UNSUPPORTED_SASL_MECHANISM, a
user/mechanism pair twice → DUPLICATE_RESOURCE, deleting a missing credential or describing an
unknown user → RESOURCE_NOT_FOUND; one result per user; with an authorizer, DESCRIBE / ALTER on the
cluster or CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from collections import Counter

from strom.broker.handlers.authz import Op, allowed_cluster
from strom.broker.handlers.base import RequestContext, handles
from strom.broker.security.scram import (
    HASHES,
    MAX_ITERATIONS,
    MECHANISM_CODES,
    MIN_ITERATIONS,
    ScramCredential,
    credential_from_salted,
)
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.protocol.messages import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResponseResult,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    DescribeUserScramCredentialsResponseResult,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

_CODES = {name: code for code, name in MECHANISM_CODES.items()}


@handles(ApiKey.SASL_HANDSHAKE)
async def handle_sasl_handshake(ctx: RequestContext, req: SaslHandshakeRequest) -> SaslHandshakeResponse:
    return {"error_code": int(ErrorCode.ILLEGAL_SASL_STATE), "mechanisms": []}


@handles(ApiKey.SASL_AUTHENTICATE)
async def handle_sasl_authenticate(
    ctx: RequestContext, req: SaslAuthenticateRequest
) -> SaslAuthenticateResponse:
    return {
        "error_code": int(ErrorCode.ILLEGAL_SASL_STATE),
        "error_message": "SaslAuthenticate on an authenticated connection or a listener without SASL",
        "auth_bytes": b"",
        "session_lifetime_ms": 0,
    }


@handles(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS)
async def handle_describe_user_scram_credentials(
    ctx: RequestContext, req: DescribeUserScramCredentialsRequest
) -> DescribeUserScramCredentialsResponse:
    if not allowed_cluster(ctx, Op.DESCRIBE):
        code = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        return {"throttle_time_ms": 0, "error_code": code, "error_message": None, "results": []}
    known = ctx.ports.credentials.describe()
    requested = [u["name"] for u in req.get("users") or []]
    results: list[DescribeUserScramCredentialsResponseResult] = []
    names = requested or sorted(known)
    counts = Counter(names)  # not names.count per name: quadratic in a client-sized list
    for name in counts:
        entry: DescribeUserScramCredentialsResponseResult = {
            "user": name,
            "error_code": 0,
            "error_message": None,
            "credential_infos": [],
        }
        if counts[name] > 1:
            entry["error_code"], entry["error_message"] = (
                int(ErrorCode.DUPLICATE_RESOURCE),
                "user named twice",
            )
        elif name not in known:
            entry["error_code"] = int(ErrorCode.RESOURCE_NOT_FOUND)
            entry["error_message"] = f"no SCRAM credentials for user {name}"
        else:
            entry["credential_infos"] = [
                {"mechanism": _CODES[mech], "iterations": iterations}
                for mech, iterations in sorted(known[name].items())
            ]
        results.append(entry)
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "results": results}


def _check(name: str, code: int, iterations: int | None) -> tuple[ErrorCode, str] | None:
    if not name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "empty user name"
    if code not in MECHANISM_CODES:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"unknown SCRAM mechanism {code}"
    if iterations is not None and not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, f"iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}"
    return None


@handles(ApiKey.ALTER_USER_SCRAM_CREDENTIALS)
async def handle_alter_user_scram_credentials(
    ctx: RequestContext, req: AlterUserScramCredentialsRequest
) -> AlterUserScramCredentialsResponse:
    if not allowed_cluster(ctx, Op.ALTER):
        names = dict.fromkeys(
            i["name"] for i in [*(req.get("deletions") or []), *(req.get("upsertions") or [])]
        )
        code = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        return {
            "throttle_time_ms": 0,
            "results": [{"user": n, "error_code": code, "error_message": None} for n in names],
        }
    store = ctx.ports.credentials
    errors: dict[str, tuple[ErrorCode, str]] = {}
    pairs = [(d["name"], int(d["mechanism"])) for d in req.get("deletions") or []]
    pairs += [(u["name"], int(u["mechanism"])) for u in req.get("upsertions") or []]
    order = list(dict.fromkeys(name for name, _ in pairs))
    for (name, _code), count in Counter(pairs).items():
        if count > 1:
            errors.setdefault(name, (ErrorCode.DUPLICATE_RESOURCE, "a user/mechanism pair appears twice"))
    known = store.describe()
    deletions: list[tuple[str, str]] = []
    for item in req.get("deletions") or []:
        name, code = item["name"], int(item["mechanism"])
        problem = _check(name, code, None)
        if problem is None and MECHANISM_CODES[code] not in known.get(name, {}):
            problem = ErrorCode.RESOURCE_NOT_FOUND, f"no {MECHANISM_CODES[code]} credential for {name}"
        if problem is not None:
            errors.setdefault(name, problem)
        else:
            deletions.append((name, MECHANISM_CODES[code]))
    upserts: list[tuple[str, str, ScramCredential]] = []
    for item in req.get("upsertions") or []:
        name, code, iterations = item["name"], int(item["mechanism"]), int(item["iterations"])
        problem = _check(name, code, iterations)
        if problem is not None:
            errors.setdefault(name, problem)
            continue
        mechanism = MECHANISM_CODES[code]
        credential = credential_from_salted(
            HASHES[mechanism], bytes(item["salted_password"]), bytes(item["salt"]), iterations
        )
        upserts.append((name, mechanism, credential))
    # A user with any error changes nothing (Kafka applies per user).
    # In a cluster this writes ZooKeeper off the event loop (security/credentials.py).
    await store.alter(
        [u for u in upserts if u[0] not in errors], [d for d in deletions if d[0] not in errors]
    )
    results: list[AlterUserScramCredentialsResponseResult] = []
    for name in order:
        code, message = errors.get(name, (ErrorCode.NONE, None))
        results.append({"user": name, "error_code": int(code), "error_message": message})
    return {"throttle_time_ms": 0, "results": results}
