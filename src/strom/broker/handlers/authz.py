"""ACL checks for request handlers, in Kafka's vocabulary (operations, resource types, error codes).

With no authorizer configured `ctx.broker.authorizer` is None and every helper returns at its first
test, so handlers on hot paths (produce, fetch) pay one attribute read per request.
"""

from __future__ import annotations

from strom.acl.model import CLUSTER_NAME, AclOperation, ResourceType
from strom.broker.handlers.base import RequestContext

Op = AclOperation
Res = ResourceType

__all__ = ["Op", "Res", "allowed", "allowed_cluster", "denied"]


def allowed(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
    auth = ctx.broker.authorizer
    return auth is None or auth.allowed(ctx.principal, ctx.client_host, operation, resource_type, name)


def denied(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
    auth = ctx.broker.authorizer
    return auth is not None and not auth.allowed(
        ctx.principal, ctx.client_host, operation, resource_type, name
    )


def allowed_cluster(ctx: RequestContext, operation: AclOperation) -> bool:
    return allowed(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)
