"""ApiVersions (key 18): the version ranges a client may use.

Always header v0 and no tagged fields in the body (PROTOCOL-NOTES P1, P11).
"""

from __future__ import annotations

from strom.broker.handlers.base import Body, RequestContext, advertised_api_keys, handles
from strom.protocol.api import ApiKey


@handles(ApiKey.API_VERSIONS)
async def handle_api_versions(ctx: RequestContext, req: Body) -> Body:
    return {"error_code": 0, "api_keys": advertised_api_keys(), "throttle_time_ms": 0}
