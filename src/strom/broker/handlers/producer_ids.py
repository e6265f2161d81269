"""InitProducerId (22): producer ids for idempotent producers, from a persisted counter.

Transactions are not implemented, so a request naming a transactional id is refused with
INVALID_REQUEST (final, rather than a retriable code a client would spin on).
"""

from __future__ import annotations

from strom.broker.handlers.base import Body, RequestContext, handles
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode


@handles(ApiKey.INIT_PRODUCER_ID)
async def handle_init_producer_id(ctx: RequestContext, req: Body) -> Body:
    if req.get("transactional_id") is not None:
        return {
            "throttle_time_ms": 0,
            "error_code": int(ErrorCode.INVALID_REQUEST),
            "producer_id": -1,
            "producer_epoch": -1,
        }
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "producer_id": ctx.broker.metadata.next_producer_id(),
        "producer_epoch": 0,
    }
