"""ApiVersions (key 18): the version ranges a client may use.

Always header v0 and no tagged fields in the body (docs/protocol.md#apiversions). From v3 the request
names the client's software, which the connection keeps for client telemetry's selectors. A name or a
version Kafka would not accept (letters, digits, '-' and '.', starting and ending with a letter or
digit; empty is not a name) is answered INVALID_REQUEST without the API list, as Kafka answers it.
"""

from __future__ import annotations

from strom.broker.client_telemetry import valid_software
from strom.broker.handlers.base import RequestContext, advertised_api_keys, handles
from strom.protocol.api import ApiKey
from strom.protocol.codec import Chunk, encode_response_chunks
from strom.protocol.errors import ErrorCode
from strom.protocol.messages import ApiVersionsRequest, ApiVersionsResponse


def api_versions_fallback(correlation_id: int) -> list[Chunk]:
    """UNSUPPORTED_VERSION for an ApiVersions version we do not serve (KIP-511), always as a v0 body:
    the only layout a client can parse before versions are agreed."""
    body: ApiVersionsResponse = {
        "error_code": int(ErrorCode.UNSUPPORTED_VERSION),
        "api_keys": advertised_api_keys(),
    }
    return encode_response_chunks(ApiKey.API_VERSIONS, 0, correlation_id, body)


@handles(ApiKey.API_VERSIONS)
async def handle_api_versions(ctx: RequestContext, req: ApiVersionsRequest) -> ApiVersionsResponse:
    if ctx.api_version >= 3:
        name, version = req.get("client_software_name"), req.get("client_software_version")
        if not valid_software(name, version):
            return {"error_code": int(ErrorCode.INVALID_REQUEST), "api_keys": [], "throttle_time_ms": 0}
        if ctx.client_info is not None:
            ctx.client_info.learn_software(name, version)
    return {"error_code": 0, "api_keys": advertised_api_keys(), "throttle_time_ms": 0}
