"""What each request counts against the client quotas, and its throttle (client_quotas.py's table).

`QuotaRecorder` is called by request_dispatch.py only while some quota is configured: `before` (ahead of
the handler: a topic mutation's `MutationQuota`, strom.quota.mutation, which the handler consults topic by
topic) and `after` (with the handler's response body, before it is encoded: Produce bytes, handler time,
the mutation quota's throttle), then `fetched` with the encoded Fetch response's size. Each returns the
throttle time earned, which the dispatcher writes into the response's ``throttle_time_ms`` (the largest
of the quotas a request violates, as Kafka reports it) and hands to the connection.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from strom._util.clock import Clock
from strom.broker.handlers.base import RequestContext
from strom.broker.network.client_quotas import ClientQuotas, quota_user
from strom.protocol.api import INTERNAL, ApiKey
from strom.quota.entity import (
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
)
from strom.quota.mutation import strict_mutation_quota

__all__ = ["QuotaRecorder"]

# Handler time to a percentage of one thread-second (Kafka: nanos * 100 / 1e9 recorded, rate per second).
_NANOS_TO_PERCENT = 100.0 / 1e9
# Not subject to the request quota: version negotiation, logins and the brokers' own requests (Kafka
# exempts them too: the controller's, transaction markers; a follower's Fetch is checked by replica_id).
_EXEMPT = frozenset(
    {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE, ApiKey.WRITE_TXN_MARKERS}
    | set(INTERNAL)
)
_MUTATIONS = frozenset({ApiKey.CREATE_TOPICS, ApiKey.CREATE_PARTITIONS, ApiKey.DELETE_TOPICS})


class QuotaRecorder:
    def __init__(self, quotas: ClientQuotas, clock: Clock) -> None:
        self._quotas = quotas
        self._clock = clock

    def before(self, ctx: RequestContext) -> None:
        """Hand a topic mutation request its controller mutation quota (none if none applies)."""
        if ctx.api_key not in _MUTATIONS or not self._quotas.applies(CONTROLLER_MUTATION_RATE):
            return
        ctx.mutation_quota = self._quotas.mutation_quota(
            quota_user(ctx.principal),
            ctx.client_id or "",
            strict_mutation_quota(ctx.api_key, ctx.api_version),
            self._clock.monotonic_ms,
        )

    def after(
        self,
        ctx: RequestContext,
        request: Mapping[str, Any],
        request_size: int,
        response: Mapping[str, Any] | None,
        handler_ns: int,
    ) -> int:
        """Record the request on its quotas (but the Fetch bytes); the throttle time earned (ms)."""
        quotas = self._quotas
        user, client_id = quota_user(ctx.principal), ctx.client_id or ""
        now_ms = self._clock.monotonic_ms()
        throttle = 0
        key = ctx.api_key
        if key == ApiKey.PRODUCE:
            throttle = quotas.record(PRODUCER_BYTE_RATE, user, client_id, request_size, now_ms)
        if key not in _EXEMPT and not (key == ApiKey.FETCH and request.get("replica_id", -1) >= 0):
            percent = handler_ns * _NANOS_TO_PERCENT
            throttle = max(throttle, quotas.record(REQUEST_PERCENTAGE, user, client_id, percent, now_ms))
        if (mutation := ctx.mutation_quota) is not None:
            quotas.mutation_done(mutation, user, client_id, now_ms)
            throttle = max(throttle, mutation.throttle_ms)
        return throttle

    def fetched(self, ctx: RequestContext, request: Mapping[str, Any], response_size: int) -> int:
        """Record a consumer's Fetch response size (followers are exempt); the throttle time earned."""
        if request.get("replica_id", -1) >= 0:
            return 0
        user, client_id = quota_user(ctx.principal), ctx.client_id or ""
        return self._quotas.record(
            CONSUMER_BYTE_RATE, user, client_id, response_size, self._clock.monotonic_ms()
        )
