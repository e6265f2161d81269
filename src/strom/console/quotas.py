"""``strom quotas``: client quotas through DescribeClientQuotas and AlterClientQuotas (KIP-546).

Neither confluent-kafka's nor kafka-python's admin client exposes these APIs; kafka-python ships their
message classes, so the requests are built here and sent over the connection `strom.console.kafka_admin`
opens (the CLI's security settings), as `strom.console.subject_acls` does for its ACLs. Entities are
named as ``kafka-configs.sh`` names them (``users``/``clients``, a name or the default) and printed in
its words: ``Quota configs for user-principal 'alice', client-id 'app' are producer_byte_rate=1024.0``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest

from strom.console.clients import ClientOptions
from strom.console.errors import ConsoleError
from strom.console.kafka_admin import admin_call, kafka_admin

# kafka-configs.sh's entity types -> the protocol's.
ENTITY_TYPES = {"users": "user", "clients": "client-id"}
_LABELS = {"user": "user-principal", "client-id": "client-id"}
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2

# One entity component as given on the command line: (protocol entity type, name or None for default).
Component = tuple[str, str | None]


def _send(options: ClientOptions, what: str, request: Any) -> Any:
    with kafka_admin(options, "quotas") as admin:
        manager = admin._manager  # kafka-python's own request path (routing, retries, security)
        return admin_call(options, what, lambda: manager.run(manager.send, request))


def entity_text(components: Sequence[Component]) -> str:
    return ", ".join(
        f"the default {_LABELS[t]}" if name is None else f"{_LABELS[t]} '{name}'" for t, name in components
    )


def describe(
    options: ClientOptions, components: Sequence[tuple[str, str | None, bool]], strict: bool
) -> list[tuple[list[Component], dict[str, float]]]:
    """Entities matching the filter (type, name or None, default?) with their quotas, sorted."""
    request = DescribeClientQuotasRequest(
        components=[
            DescribeClientQuotasRequest.ComponentData(
                entity_type=t,
                match_type=MATCH_DEFAULT if default else MATCH_EXACT if name is not None else MATCH_ANY,
                match=name,
            )
            for t, name, default in components
        ],
        strict=strict,
    )
    response = _send(options, "cannot describe client quotas", request)
    if response.error_code:
        raise ConsoleError(f"cannot describe client quotas: {response.error_message or response.error_code}")
    found = [
        ([(e.entity_type, e.entity_name) for e in entry.entity], {v.key: v.value for v in entry.values})
        for entry in response.entries or []
    ]
    return sorted(found, key=lambda row: [(t, n or "") for t, n in row[0]])


def alter(
    options: ClientOptions,
    entity: Sequence[Component],
    add: Mapping[str, float],
    delete: Sequence[str],
    validate_only: bool,
) -> None:
    ops = [
        AlterClientQuotasRequest.EntryData.OpData(key=k, value=float(v), remove=False) for k, v in add.items()
    ]
    ops += [AlterClientQuotasRequest.EntryData.OpData(key=k, value=0.0, remove=True) for k in delete]
    request = AlterClientQuotasRequest(
        entries=[
            AlterClientQuotasRequest.EntryData(
                entity=[
                    AlterClientQuotasRequest.EntryData.EntityData(entity_type=t, entity_name=n)
                    for t, n in entity
                ],
                ops=ops,
            )
        ],
        validate_only=validate_only,
    )
    response = _send(options, "cannot alter client quotas", request)
    for entry in response.entries:
        if entry.error_code:
            raise ConsoleError(
                f"cannot alter the quotas of {entity_text(entity)}: {entry.error_message or entry.error_code}"
            )


def describe_lines(rows: Sequence[tuple[list[Component], dict[str, float]]]) -> list[str]:
    return [
        f"Quota configs for {entity_text(entity)} are "
        + ", ".join(f"{k}={float(v)}" for k, v in sorted(values.items()))
        for entity, values in rows
    ]
