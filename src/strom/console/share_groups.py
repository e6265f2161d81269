"""Share groups (KIP-932) in ``strom groups``: describe, reset and delete offsets (they are listed with
every group, by `strom.console.group_listing`).

No installed admin client has the share-group APIs, so these go over `strom.console.wire` to the
group's coordinator: ShareGroupDescribe v1 (state, members and their partitions),
DescribeShareGroupOffsets v1 (per partition the share-partition start offset and the lag: records
from it to the high watermark not yet acknowledged or archived; where the coordinator hosts no replica
of the partition it cannot tell, and the lag is counted from the start offset to the high watermark
the partition's leader answers to ListOffsets), AlterShareGroupOffsets and
DeleteShareGroupOffsets v0 (the group must be empty: the broker answers NON_EMPTY_GROUP otherwise),
as ``kafka-share-groups.sh --describe --offsets/--members``, ``--reset-offsets`` and
``--delete-offsets`` do.

A group is taken for a share group when ShareGroupDescribe knows it (with members, or kept Empty after
they left), or when share-partition state is stored for it on the topics asked about
(``is_share_group``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from strom.console.clients import ClientOptions, print_table
from strom.console.errors import ConsoleError
from strom.console.group_listing import constant_name
from strom.console.leader_offsets import high_watermarks
from strom.console.wire import WireClient
from strom.protocol.api import ApiKey
from strom.protocol.errors import COORDINATOR_ERRORS, ErrorCode
from strom.protocol.messages import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequestTopic,
    ShareGroupDescribeRequest,
)

_NONE = "-"


def _ask_coordinator(
    wire: WireClient,
    group: str,
    api_key: ApiKey,
    body: ShareGroupDescribeRequest | DescribeShareGroupOffsetsRequest,
    codes: Callable[[Any], list[int]],
) -> Any:
    """The group coordinator's answer to ``body`` (version 1). While ``codes`` of the answer hold a
    coordinator error (`COORDINATOR_ERRORS`: a share coordinator still loading a fresh
    `__share_group_state`, a fail-over), the coordinator is looked up and asked again within the
    command's timeout, as Kafka's admin client does; the last answer is returned."""
    deadline = time.monotonic() + wire.timeout_s
    backoff_s = 0.1
    while True:
        answer = wire.call(wire.coordinator(group), api_key, 1, body)
        if not COORDINATOR_ERRORS.intersection(codes(answer)) or time.monotonic() + backoff_s > deadline:
            return answer
        time.sleep(backoff_s)
        backoff_s = min(2 * backoff_s, 1.0)


def share_description(wire: WireClient, group: str) -> Any | None:
    """The group's ShareGroupDescribe entry, or None when the coordinator knows no share group so named
    (a coordinator that is still loading is asked again; one that never answers fails the command)."""
    answer = _ask_coordinator(
        wire,
        group,
        ApiKey.SHARE_GROUP_DESCRIBE,
        {"group_ids": [group], "include_authorized_operations": False},
        lambda answer: [g["error_code"] for g in answer["groups"]],
    )
    (described,) = answer["groups"]
    code = described["error_code"]
    if code in COORDINATOR_ERRORS:
        _check(code, f"cannot describe group {group!r}")
    return described if code == 0 else None


def start_offsets(
    wire: WireClient, group: str, topics: Sequence[tuple[str, Sequence[int]]] | None, strict: bool = True
) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (start offset, lag) by DescribeShareGroupOffsets v1 (``topics`` None: the
    members' subscriptions); -1 for what is not stored or not known. Not ``strict``: a partition the
    broker could not describe is left out instead of failing the command."""
    asked: list[DescribeShareGroupOffsetsRequestTopic] | None = (
        None if topics is None else [{"topic_name": t, "partitions": list(p)} for t, p in topics]
    )
    answer = _ask_coordinator(
        wire,
        group,
        ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
        {"groups": [{"group_id": group, "topics": asked}]},
        lambda answer: [
            code
            for g in answer["groups"]
            for code in [g["error_code"], *(p["error_code"] for t in g["topics"] for p in t["partitions"])]
        ],
    )
    (described,) = answer["groups"]
    _check(described["error_code"], f"cannot describe the offsets of group {group!r}")
    found: dict[tuple[str, int], tuple[int, int]] = {}
    for topic in described["topics"]:
        for part in topic["partitions"]:
            key = (str(topic["topic_name"]), int(part["partition_index"]))
            if part["error_code"] and not strict:
                continue
            _check(part["error_code"], f"cannot describe the offset of {key[0]} [{key[1]}]")
            found[key] = (int(part["start_offset"]), int(part.get("lag", -1)))
    return found


def is_share_group(wire: WireClient, group: str, topics: Sequence[tuple[str, Sequence[int]]]) -> bool:
    """Whether ``group`` is a share group: one with members, or one with state stored on a partition of
    ``topics`` ((topic, partitions) pairs)."""
    if share_description(wire, group) is not None:
        return True
    stored = start_offsets(wire, group, topics, strict=False) if topics else {}
    return any(start >= 0 for start, _ in stored.values())


def print_share_group(wire: WireClient, description: Any, out: TextIO) -> None:
    """``groups describe`` of a share group: state and members, then per partition its start offset,
    lag and the members it is assigned to."""
    group = description["group_id"]
    members = description["members"]
    print(
        f"Group {group}: type share, state {constant_name(description['group_state'])}, "
        f"{len(members)} member(s), assignor {description['assignor_name'] or _NONE}",
        file=out,
    )
    owners: dict[tuple[str, int], list[Any]] = {}
    for member in members:
        for tp in member["assignment"]["topic_partitions"]:
            for index in tp["partitions"]:
                owners.setdefault((str(tp["topic_name"]), int(index)), []).append(member)
    offsets = _lag_from_leaders(wire, start_offsets(wire, group, None))
    rows = [["TOPIC", "PARTITION", "START-OFFSET", "LAG", "MEMBERS", "CONSUMER-IDS", "CLIENT-IDS"]]
    for key in sorted(set(offsets) | set(owners)):
        start, lag = offsets.get(key, (-1, -1))
        held = owners.get(key, [])
        rows.append(
            [
                key[0],
                str(key[1]),
                _NONE if start < 0 else str(start),
                _NONE if lag < 0 else str(lag),
                str(len(held)),
                ",".join(m["member_id"] for m in held) or _NONE,
                ",".join(sorted({m["client_id"] for m in held})) or _NONE,
            ]
        )
    print_table(rows, out)


def _lag_from_leaders(
    wire: WireClient, offsets: dict[tuple[str, int], tuple[int, int]]
) -> dict[tuple[str, int], tuple[int, int]]:
    """``offsets`` with the lag of each stored share-partition the coordinator could not measure (it
    hosts no replica: lag -1) computed from its leader's high watermark, as Kafka's tools ask a
    partition's leader for its offsets. Counted from the start offset, so records already acknowledged
    above it (at most the in-flight window) are counted too; a leader that does not answer leaves -1."""
    unknown = [key for key, (start, lag) in offsets.items() if start >= 0 and lag < 0]
    if not unknown:
        return offsets
    ends = high_watermarks(wire, unknown)
    return {
        key: (start, max(ends[key] - start, 0)) if key in ends and lag < 0 <= start else (start, lag)
        for key, (start, lag) in offsets.items()
    }


def alter_start_offsets(wire: WireClient, group: str, plan: Sequence[tuple[tuple[str, int], int]]) -> None:
    """Set the share group's start offsets (AlterShareGroupOffsets).

    Raises:
        ConsoleError: the group or a partition was refused (a group with members: NON_EMPTY_GROUP).
    """
    by_topic: dict[str, list[dict[str, int]]] = {}
    for (topic, index), offset in plan:
        by_topic.setdefault(topic, []).append({"partition_index": index, "start_offset": offset})
    body = {"group_id": group, "topics": [{"topic_name": t, "partitions": p} for t, p in by_topic.items()]}
    answer = wire.call(wire.coordinator(group), ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, body)
    _check_answer(answer, f"cannot reset the offsets of share group {group!r}")


def delete_share_offsets(options: ClientOptions, group: str, topics: Sequence[str], out: TextIO) -> None:
    """``groups delete-offsets`` of a share group: its state on every partition of the topics goes
    (DeleteShareGroupOffsets); the group starts them over at ``share.auto.offset.reset``."""
    with WireClient(options) as wire:
        body = {"group_id": group, "topics": [{"topic_name": t} for t in dict.fromkeys(topics)]}
        answer = wire.call(wire.coordinator(group), ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, body)
    what = f"cannot delete the offsets of share group {group!r}"
    _check(answer["error_code"], what)
    for topic in answer["responses"]:  # one error per topic (Kafka 4.1's layout)
        _check(topic["error_code"], f"{what}: {topic['topic_name']}")
    for topic in answer["responses"]:
        print(f"Deleted the offsets of share group {group} on topic {topic['topic_name']}.", file=out)


def _check_answer(answer: Any, what: str) -> None:
    _check(answer["error_code"], what)
    for topic in answer["responses"]:
        for part in topic["partitions"]:
            _check(part["error_code"], f"{what}: {topic['topic_name']} [{part['partition_index']}]")


def _check(code: int, what: str) -> None:
    if code:
        raise ConsoleError(f"{what}: {ErrorCode(code).name}")
