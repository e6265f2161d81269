"""Pure parts of strom.broker.coordinators.leader_watermarks (consumer lag of partitions without a local
replica): the per-leader batching, the ListOffsets body on the wire, reading the answer, and the background
refresh stopping once no one scrapes."""

from __future__ import annotations

import asyncio

from strom._util.clock import ManualClock
from strom.broker.coordinators.leader_watermarks import (
    LIST_OFFSETS_VERSION,
    LeaderWatermarks,
    answered_watermarks,
    by_leader,
    list_offsets_body,
)
from strom.broker.metadata_cache import ClusterMetadataStore
from strom.broker.security.client import ClientSecurity
from strom.protocol.api import ApiKey
from strom.protocol.codec import decode_request, decode_response, encode_request, encode_response
from strom.protocol.errors import ErrorCode


def test_partitions_are_batched_per_leader_then_topic() -> None:
    leaders = {("a", 0): 1, ("a", 1): 2, ("a", 2): 1, ("b", 0): 1, ("c", 0): None}
    wanted = [("b", 0), ("a", 2), ("a", 0), ("a", 1), ("c", 0), ("a", 0)]
    assert by_leader(wanted, lambda t, p: leaders[(t, p)]) == {
        1: {"a": [0, 2], "b": [0]},
        2: {"a": [1]},
    }
    assert by_leader([], lambda t, p: 1) == {}


def test_the_request_asks_the_latest_read_uncommitted_offset_as_a_consumer() -> None:
    frame = encode_request(
        int(ApiKey.LIST_OFFSETS), LIST_OFFSETS_VERSION, 7, "lag-1", list_offsets_body({"b": [3], "a": [0, 2]})
    )
    body = decode_request(frame[4:]).body
    assert body["replica_id"] == -1
    assert body["isolation_level"] == 0
    assert [
        (t["name"], [(p["partition_index"], p["timestamp"]) for p in t["partitions"]]) for t in body["topics"]
    ] == [
        ("a", [(0, -1), (2, -1)]),
        ("b", [(3, -1)]),
    ]


def test_partitions_answered_with_an_error_are_left_out() -> None:
    def part(index: int, code: ErrorCode, offset: int) -> dict[str, object]:
        return {"partition_index": index, "error_code": int(code), "timestamp": -1, "offset": offset}

    response = {
        "throttle_time_ms": 0,
        "topics": [
            {
                "name": "a",
                "partitions": [
                    part(0, ErrorCode.NONE, 42),
                    part(1, ErrorCode.NOT_LEADER_OR_FOLLOWER, -1),
                    part(2, ErrorCode.OFFSET_NOT_AVAILABLE, -1),
                ],
            },
            {"name": "b", "partitions": [part(3, ErrorCode.NONE, 0)]},
        ],
    }
    frame = encode_response(int(ApiKey.LIST_OFFSETS), LIST_OFFSETS_VERSION, 7, response)
    _, decoded = decode_response(int(ApiKey.LIST_OFFSETS), LIST_OFFSETS_VERSION, frame[4:])
    assert answered_watermarks(decoded) == {("a", 0): 42, ("b", 3): 0}


def test_the_refresh_runs_while_scrapes_come_and_stops_when_they_do_not() -> None:
    clock = ManualClock()
    metadata = ClusterMetadataStore("c", lambda topic: {}, lambda n: 0)  # no leader known: nothing learned
    watermarks = LeaderWatermarks(
        metadata, "lag-1", ClientSecurity(None), clock, refresh_ms=10, idle_ms=10_000
    )

    async def scenario() -> None:
        assert watermarks.known([]) == {}
        assert watermarks._task is None  # nothing wanted: nothing started
        assert watermarks.known([("a", 0)]) == {}
        task = watermarks._task
        assert task is not None
        await asyncio.sleep(0.05)
        assert not task.done()  # scraped within idle_ms: still refreshing
        clock.advance(11_000)
        await asyncio.wait_for(task, 1)  # no scrape for idle_ms: the task ends by itself
        watermarks.known([("a", 0)])
        assert watermarks._task is not task and not watermarks._task.done()  # the next scrape restarts it
        await watermarks.close()
        assert watermarks._task is None

    asyncio.run(scenario())
