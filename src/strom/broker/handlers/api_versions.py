"""ApiVersions (key 18): the ranges a client may use. Header v0 and no tagged fields (PROTOCOL-NOTES P1, P11)."""

from __future__ import annotations

from strom.broker.handlers.base import Body, RequestContext, handles
from strom.protocol.api import ApiKey


@handles(ApiKey.API_VERSIONS)
async def handle_api_versions(ctx: RequestContext, req: Body) -> Body:
    from strom.broker.handlers import advertised_api_keys

    return {"error_code": 0, "api_keys": advertised_api_keys(), "throttle_time_ms": 0}
