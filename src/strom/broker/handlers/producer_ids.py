"""InitProducerId (22): producer ids for idempotent and transactional producers.

Without a transactional id the producer gets a fresh id from the persisted counter at epoch 0 (the
timeout is not checked: idempotent aiokafka producers send INT32_MAX). With one, the transaction
coordinator of that id answers (`TransactionService.init_producer_id`): an epoch bump that fences older
instances, after the change is durable in ``__transaction_state``. From v3 the request may carry the
producer's current id and epoch (KIP-360: a producer bumps its own epoch to recover from an abortable
error); a stale one gets PRODUCER_FENCED, answered as INVALID_PRODUCER_EPOCH below v4, as Kafka does.
An idempotent producer always gets a new producer id (with or without its old one), as from Kafka.
ACLs: a transactional id needs WRITE on it (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an idempotent
producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679; else
CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from strom.broker.handlers.authz import Op, Res, allowed_cluster
from strom.broker.handlers.base import RequestContext, handles
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.messages import (
    InitProducerIdRequest,
    InitProducerIdResponse,
)

PRODUCER_FENCED_FROM_VERSION = 4


@handles(ApiKey.INIT_PRODUCER_ID)
async def handle_init_producer_id(ctx: RequestContext, req: InitProducerIdRequest) -> InitProducerIdResponse:
    tid = req.get("transactional_id")
    if (auth := ctx.ports.authorizer) is not None:
        who, host = ctx.principal, ctx.client_host
        if tid is not None and not auth.allowed(who, host, Op.WRITE, Res.TRANSACTIONAL_ID, tid):
            return _response(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1, -1)
        # KIP-679: an idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on any topic.
        if tid is None and not (
            allowed_cluster(ctx, Op.IDEMPOTENT_WRITE) or auth.allowed_any(who, host, Op.WRITE, Res.TOPIC)
        ):
            return _response(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, -1, -1)
    if tid is None:
        return _response(ErrorCode.NONE, ctx.ports.metadata.next_producer_id(), 0)
    service = ctx.ports.transactions
    try:
        service.ensure_topic()
    except KafkaError:
        return _response(ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1)
    decision = await service.init_producer_id(
        tid,
        int(req["transaction_timeout_ms"]),
        int(req.get("producer_id", -1)),
        int(req.get("producer_epoch", -1)),
    )
    code = decision.error
    if code is ErrorCode.PRODUCER_FENCED and ctx.api_version < PRODUCER_FENCED_FROM_VERSION:
        code = ErrorCode.INVALID_PRODUCER_EPOCH
    if code is not ErrorCode.NONE:
        return _response(code, -1, -1)
    return _response(code, decision.producer_id, decision.producer_epoch)


def _response(code: ErrorCode, producer_id: int, producer_epoch: int) -> InitProducerIdResponse:
    return {
        "throttle_time_ms": 0,
        "error_code": int(code),
        "producer_id": producer_id,
        "producer_epoch": producer_epoch,
    }
