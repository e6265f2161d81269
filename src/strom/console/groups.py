"""``strom groups``: list, describe, reset offsets of, and delete consumer groups and share groups.

Through confluent-kafka's AdminClient: ListGroups, DescribeGroups, OffsetFetch, ListOffsets,
OffsetCommit (to alter a group's offsets) and DeleteGroups. Share groups (KIP-932), which that client
lists with an unknown type and cannot describe, go through `strom.console.share_groups`: ``list``
names their type and state, ``describe`` shows their members and per partition the share-partition
start offset and lag, ``reset-offsets`` sets their start offsets, ``delete-offsets`` forgets them.

``reset-offsets`` follows ``kafka-consumer-groups.sh``: it prints the plan and changes nothing unless
``execute`` is set; the group must have no active members (its state Empty, or Dead/unknown for a
group that does not exist yet), since a live member would overwrite the new offsets with its next
commit. A ``--to-offset`` outside ``[log start offset, log end offset]`` is clamped to the nearer end,
as Kafka's tool does, and a ``--to-datetime`` after the last record resets to the log end offset.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from strom.console import group_listing, share_groups, wire
from strom.console._admin_api import OffsetSpec, earliest_spec, latest_spec, timestamp_spec
from strom.console.clients import ClientOptions, describe_kafka_error, fail, print_table, wait
from strom.console.errors import ConsoleError
from strom.console.topics import admin_client

_NO_OFFSET = "-"
_INACTIVE_STATES = frozenset({ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD, ConsumerGroupState.UNKNOWN})


class ResetTarget(enum.Enum):
    """Where ``reset-offsets`` moves a group's committed offsets."""

    EARLIEST = "to-earliest"
    LATEST = "to-latest"
    DATETIME = "to-datetime"
    OFFSET = "to-offset"


@dataclass(frozen=True, slots=True)
class ResetRequest:
    """A ``reset-offsets`` invocation: ``value`` is the offset or timestamp (ms) when the target needs one."""

    group: str
    topic: str
    target: ResetTarget
    value: int | None = None
    partitions: Sequence[int] = ()
    execute: bool = False


def list_groups(
    options: ClientOptions, out: TextIO, with_state: bool = False, with_type: bool = False
) -> None:
    """Print every group id the brokers know, sorted, one per line; with ``with_type`` and
    ``with_state``, a table with each group's type (classic, consumer, share) and state, as
    ``kafka-consumer-groups.sh --list --type --state`` prints it. Types and states come from ListGroups
    v5 at every broker (`strom.console.group_listing`): confluent-kafka lists no share group and names
    a consumer group's Assigning and Reconciling states UNKNOWN. Where the CLI's protocol client cannot
    connect (a SASL mechanism it does not speak), confluent-kafka's listing is used, and a group it
    lists as UNKNOWN is asked by describing the group."""
    admin = admin_client(options)
    future = admin.list_consumer_groups(request_timeout=options.timeout_s)
    result = wait(future, "cannot list groups", options)
    if result.errors:
        raise ConsoleError(f"cannot list groups: {describe_kafka_error(result.errors[0])}")
    found: dict[str, tuple[str, str]] = {}
    if wire.supported(options):
        with wire.WireClient(options) as client:
            found = group_listing.list_groups(client)
    ids = sorted({*found, *(listing.group_id for listing in result.valid)})
    if not (with_state or with_type):
        for group_id in ids:
            print(group_id, file=out)
        return
    for listing in result.valid:
        if listing.group_id in found:
            continue  # the broker's own names
        group_type, state = _name(listing.type), _name(listing.state)
        if "UNKNOWN" in (group_type, state):
            described = _describe(admin, options, listing.group_id)
            group_type, state = _name(described.type), _name(described.state)
        found[listing.group_id] = (group_type, state)
    header = ["GROUP", *(["TYPE"] if with_type else []), *(["STATE"] if with_state else [])]
    rows = [header]
    for group_id in ids:
        group_type, state = found[group_id]
        rows.append([group_id, *([group_type] if with_type else []), *([state] if with_state else [])])
    print_table(rows, out)


def _name(value: Any) -> str:
    """An enum of confluent-kafka's (ConsumerGroupType, ConsumerGroupState) as its name."""
    return str(getattr(value, "name", value) or "UNKNOWN")


def describe_group(options: ClientOptions, group: str, out: TextIO) -> None:
    """Print state and members, then per partition: committed offset, log end offset, lag, owner (of a
    share group: start offset, lag and members)."""
    if _describe_share_group(options, group, out):
        return
    admin = admin_client(options)
    description = _describe(admin, options, group)
    committed = _committed_offsets(admin, options, group)
    if committed is None:
        # GROUP_ID_NOT_FOUND: the id belongs to a group of another type, e.g. a share group whose
        # first member joined since it was looked up above.
        if _describe_share_group(options, group, out):
            return
        raise ConsoleError(f"group {group!r} does not exist")
    if description.state == ConsumerGroupState.DEAD and not committed and not description.members:
        # DescribeGroups answers an unknown group id with an empty Dead group rather than an error.
        raise ConsoleError(f"group {group!r} does not exist")
    owners = {
        (tp.topic, tp.partition): member
        for member in description.members
        for tp in member.assignment.topic_partitions
    }
    partitions = sorted(set(committed) | set(owners))
    end_offsets = _list_offsets(admin, options, partitions, latest_spec())
    state = _name(description.state)
    if state == "UNKNOWN" and wire.supported(options):
        # librdkafka names a consumer group's Assigning and Reconciling states UNKNOWN.
        with wire.WireClient(options) as client:
            state = (group_listing.group_listing(client, group) or ("", state))[1]
    print(
        f"Group {group}: type {_name(description.type).lower()}, state {state}, "
        f"{len(description.members)} member(s), assignor {description.partition_assignor or '-'}",
        file=out,
    )
    rows = [
        ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
    ]
    for key in partitions:
        rows.append(_describe_row(key, committed.get(key), end_offsets.get(key), owners.get(key)))
    print_table(rows, out)


def reset_offsets(options: ClientOptions, request: ResetRequest, out: TextIO) -> None:
    """Compute (and with ``execute``, commit) new offsets for a group's partitions of one topic."""
    admin = admin_client(options)
    description = _describe(admin, options, request.group)
    if request.execute and description.state not in _INACTIVE_STATES:
        raise ConsoleError(
            f"group {request.group!r} has active members (state {description.state.name}); "
            "offsets can only be reset while it is inactive"
        )
    partitions = _topic_partitions(admin, options, request.topic, request.partitions)
    plan = _plan(admin, options, request, partitions)
    rows = [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]]
    rows += [[request.group, topic, str(partition), str(offset)] for (topic, partition), offset in plan]
    print_table(rows, out)
    if not request.execute:
        print("(dry run: nothing changed; add --execute to commit these offsets)", file=out)
        return
    if wire.supported(options):
        with wire.WireClient(options) as client:
            indexes = [index for _, index in partitions]
            if share_groups.is_share_group(client, request.group, [(request.topic, indexes)]):
                share_groups.alter_start_offsets(client, request.group, plan)
                return
    offsets = [TopicPartition(topic, partition, offset) for (topic, partition), offset in plan]
    future = admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(request.group, offsets)], request_timeout=options.timeout_s
    )
    result = wait(future[request.group], f"cannot reset offsets of group {request.group!r}", options)
    for tp in result.topic_partitions:
        if tp.error is not None:
            raise ConsoleError(
                f"cannot reset offset of {tp.topic} [{tp.partition}]: {describe_kafka_error(tp.error)}"
            )


def delete_groups(options: ClientOptions, groups: Sequence[str], out: TextIO) -> None:
    """Delete groups; every one is attempted and all failures are reported in one line."""
    admin = admin_client(options)
    futures = admin.delete_consumer_groups(list(dict.fromkeys(groups)), request_timeout=options.timeout_s)
    failures: list[str] = []
    for group, future in futures.items():
        try:
            wait(future, group, options)
        except ConsoleError as exc:
            failures.append(exc.message)
        else:
            print(f"Deleted group {group}.", file=out)
    if failures:
        raise ConsoleError(f"cannot delete group(s): {'; '.join(failures)}")


def _describe(admin: AdminClient, options: ClientOptions, group: str) -> Any:
    futures = admin.describe_consumer_groups([group], request_timeout=options.timeout_s)
    return wait(futures[group], f"cannot describe group {group!r}", options)


def _describe_share_group(options: ClientOptions, group: str, out: TextIO) -> bool:
    """Print ``group`` as a share group if its coordinator holds one so named."""
    if not wire.supported(options):
        return False
    with wire.WireClient(options) as client:
        shared = share_groups.share_description(client, group)
        if shared is None:
            return False
        share_groups.print_share_group(client, shared, out)
        return True


def _committed_offsets(
    admin: AdminClient, options: ClientOptions, group: str
) -> dict[tuple[str, int], int] | None:
    """The group's committed offsets; None when the coordinator answers GROUP_ID_NOT_FOUND (the id is
    held by a group of another type)."""
    futures = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], request_timeout=options.timeout_s
    )
    future = futures[group]
    try:
        result = wait(future, f"cannot fetch committed offsets of group {group!r}", options)
    except ConsoleError:
        error = future.exception(timeout=0) if future.done() else None
        if isinstance(error, KafkaException) and error.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND:
            return None
        raise
    return {
        (tp.topic, tp.partition): tp.offset
        for tp in result.topic_partitions
        if tp.error is None and tp.offset >= 0
    }


def _list_offsets(
    admin: AdminClient, options: ClientOptions, partitions: Iterable[tuple[str, int]], spec: OffsetSpec
) -> dict[tuple[str, int], int]:
    query = {TopicPartition(topic, partition): spec for topic, partition in partitions}
    if not query:
        return {}
    futures = admin.list_offsets(query, request_timeout=options.timeout_s)
    return {
        (tp.topic, tp.partition): wait(
            future, f"cannot list offsets of {tp.topic} [{tp.partition}]", options
        ).offset
        for tp, future in futures.items()
    }


def _topic_partitions(
    admin: AdminClient, options: ClientOptions, topic_name: str, wanted: Sequence[int]
) -> list[tuple[str, int]]:
    try:
        metadata = admin.list_topics(topic_name, timeout=options.timeout_s)
    except KafkaException as exc:
        raise fail("cannot fetch metadata", exc, options) from None
    topic = metadata.topics.get(topic_name)
    if topic is None or topic.error is not None:
        raise ConsoleError(f"topic {topic_name!r} does not exist")
    unknown = sorted(set(wanted) - set(topic.partitions))
    if unknown:
        raise ConsoleError(f"topic {topic_name!r} has no partition(s) {', '.join(map(str, unknown))}")
    return [(topic_name, p) for p in sorted(wanted or topic.partitions)]


def _plan(
    admin: AdminClient, options: ClientOptions, request: ResetRequest, partitions: list[tuple[str, int]]
) -> list[tuple[tuple[str, int], int]]:
    earliest = _list_offsets(admin, options, partitions, earliest_spec())
    latest = _list_offsets(admin, options, partitions, latest_spec())
    if request.target is ResetTarget.EARLIEST:
        return [(key, earliest[key]) for key in partitions]
    if request.target is ResetTarget.LATEST:
        return [(key, latest[key]) for key in partitions]
    value = request.value if request.value is not None else 0
    if request.target is ResetTarget.DATETIME:
        found = _list_offsets(admin, options, partitions, timestamp_spec(value))
        return [(key, latest[key] if found[key] < 0 else found[key]) for key in partitions]
    return [(key, min(max(value, earliest[key]), latest[key])) for key in partitions]


def _describe_row(key: tuple[str, int], committed: int | None, log_end: int | None, member: Any) -> list[str]:
    lag = _NO_OFFSET if committed is None or log_end is None else str(max(log_end - committed, 0))
    return [
        key[0],
        str(key[1]),
        _NO_OFFSET if committed is None else str(committed),
        _NO_OFFSET if log_end is None else str(log_end),
        lag,
        member.member_id if member else _NO_OFFSET,
        member.host if member else _NO_OFFSET,
        member.client_id if member else _NO_OFFSET,
    ]
