"""Request handlers, one module per API family; importing this package registers them all."""

from __future__ import annotations

from strom.broker.handlers import (  # noqa: F401  (imported for their @handles registrations)
    acls,
    api_versions,
    client_quotas,
    cluster,
    cluster_describe,
    configs,
    consumer_groups,
    fetch,
    groups,
    list_offsets,
    log_dirs,
    metadata,
    offsets,
    produce,
    producer_ids,
    sasl,
    share_fetch,
    share_groups,
    share_offsets,
    share_offsets_admin,
    share_state,
    telemetry,
    topics,
    transaction_admin,
    transactions,
)
from strom.broker.handlers.base import HANDLERS, Handler, RequestContext, advertised_api_keys, handles

__all__ = ["HANDLERS", "Handler", "RequestContext", "advertised_api_keys", "handles"]
