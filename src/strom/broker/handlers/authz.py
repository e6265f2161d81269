"""ACL checks for request handlers, in Kafka's vocabulary (operations, resource types, error codes).

With no authorizer configured `ctx.ports.authorizer` is None and every helper returns at its first
test, so handlers on hot paths (produce, fetch) pay one attribute read per request.
"""

from __future__ import annotations

from strom.acl.model import CLUSTER_NAME, AclOperation, ResourceType
from strom.broker.handlers.base import RequestContext

Op = AclOperation
Res = ResourceType

__all__ = ["Op", "Res", "allowed", "allowed_cluster", "authorized_operations", "denied"]


def allowed(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
    auth = ctx.ports.authorizer
    return auth is None or auth.allowed(ctx.principal, ctx.client_host, operation, resource_type, name)


def denied(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
    auth = ctx.ports.authorizer
    return auth is not None and not auth.allowed(
        ctx.principal, ctx.client_host, operation, resource_type, name
    )


def allowed_cluster(ctx: RequestContext, operation: AclOperation) -> bool:
    return allowed(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)


# The operations Kafka reports in authorized-operations fields, per resource type (its ResourceType's
# supported operations).
_REPORTED: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (
        Op.READ,
        Op.WRITE,
        Op.CREATE,
        Op.DESCRIBE,
        Op.DELETE,
        Op.ALTER,
        Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE),
    ResourceType.CLUSTER: (
        Op.CREATE,
        Op.CLUSTER_ACTION,
        Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS,
        Op.IDEMPOTENT_WRITE,
        Op.ALTER,
        Op.DESCRIBE,
    ),
}


def authorized_operations(ctx: RequestContext, resource_type: ResourceType, name: str) -> int:
    """Kafka's bitfield (1 << operation code) of what the sender may do to the resource."""
    bits = 0
    for op in _REPORTED[resource_type]:
        if allowed(ctx, op, resource_type, name):
            bits |= 1 << int(op)
    return bits
