"""A share-partition leader's way to its share coordinator (KIP-932's ``Persister``), local or remote.

`ShareStatePersister` implements `strom.coordinator.share.state.SharePersister` for the leaders'
`SharePartitionManager`. For a share-partition (group, topic, partition) it finds the share
coordinator (the leader of the key's `__share_group_state` partition, from the metadata cache;
the topic's creation is asked for on first use, and there is no coordinator until it exists) and

* when that is this broker, calls the share coordinator (`ShareStateService`) directly;
* otherwise sends ReadShareGroupState / WriteShareGroupState v0 to it, over one connection per
  coordinator, re-made when its address changes.

The share-group admin (AlterShareGroupOffsets, DeleteShareGroupOffsets, DeleteGroups) uses the same
way: `delete` removes a share-partition's state (DeleteShareGroupState v0 when remote), and
`delete_group` every state of a group, at each broker that leads a `__share_group_state` partition
(DeleteShareGroupState with no topics: Strom's form for "all of the group's", answered with the
share-partitions removed; one attempt per broker).

Retriable failures (no coordinator known yet, NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS while
the coordinator moves or loads, a lost connection) are retried every `RETRY_BACKOFF_MS` until the
caller's deadline (the asking request's own timeout; at most `RETRY_TIMEOUT_MS`): a coordinator
fail-over or the topic's creation in a cluster takes a moment, but a request answers in its time.
An attempt under way is not cut short (it is bounded by `REQUEST_TIMEOUT_MS`): a write may have
landed. What is left then is the caller's error (COORDINATOR_NOT_AVAILABLE for one that never
answered).

Call only from the broker's event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from strom._util.clock import Clock, sleep_ms
from strom.broker.coordinators.share_state_service import SHARE_STATE_TOPIC, ShareStateService
from strom.broker.metadata_cache import ClusterMetadataStore
from strom.broker.network.net_client import BrokerConnections
from strom.broker.security.client import ClientSecurity
from strom.coordinator.share.state import ShareState, StateKey, batches_from_wire, batches_to_wire
from strom.protocol import messages as m
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

T = TypeVar("T")

RETRY_BACKOFF_MS = 100
RETRY_TIMEOUT_MS = 15_000
REQUEST_TIMEOUT_MS = 10_000
_RETRIABLE = frozenset(
    {
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.REQUEST_TIMED_OUT,
    }
)


class ShareStatePersister:
    def __init__(
        self,
        service: ShareStateService,
        metadata: ClusterMetadataStore,
        security: ClientSecurity,
        clock: Clock,
    ) -> None:
        self._service = service
        self._metadata = metadata
        self._clock = clock
        self._connections = BrokerConnections(f"share-persister-{service.node_id}", security, clock)

    def close(self) -> None:
        self._connections.close()

    def _key(self, group_id: str, topic: str, partition: int) -> StateKey:
        info = self._metadata.topics.get(topic)
        if info is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic} is not known")
        return StateKey(group_id, info.topic_id, partition)

    # --- SharePersister ------------------------------------------------------------------------
    async def read(
        self, group_id: str, topic: str, partition: int, leader_epoch: int, deadline_ms: int | None = None
    ) -> ShareState | None:
        key = self._key(group_id, topic, partition)
        code, state = await self._retrying(lambda: self._read_once(key, leader_epoch), deadline_ms)
        if code is not ErrorCode.NONE:
            raise KafkaError(code, f"share state of {key.coordinator_key()} not read: {code.name}")
        return state

    async def write(
        self, group_id: str, topic: str, partition: int, state: ShareState, deadline_ms: int | None = None
    ) -> ErrorCode:
        try:
            key = self._key(group_id, topic, partition)
        except KafkaError as exc:
            return exc.code
        code, _ = await self._retrying(lambda: self._write_once(key, state), deadline_ms)
        return code

    async def delete(self, group_id: str, topic: str, partition: int) -> ErrorCode:
        """Remove the share-partition's stored state; NONE once durable (or nothing was stored)."""
        if SHARE_STATE_TOPIC not in self._metadata.topics:
            return ErrorCode.NONE  # never created: nothing is stored
        try:
            key = self._key(group_id, topic, partition)
        except KafkaError as exc:
            return exc.code
        code, _ = await self._retrying(lambda: self._delete_once(key), None)
        return code

    # --- one attempt ---------------------------------------------------------------------------
    async def _retrying(
        self, attempt: Callable[[], Awaitable[tuple[ErrorCode, T]]], deadline_ms: int | None
    ) -> tuple[ErrorCode, T]:
        now = self._clock.monotonic_ms()
        deadline = now + RETRY_TIMEOUT_MS if deadline_ms is None else min(deadline_ms, now + RETRY_TIMEOUT_MS)
        while True:
            code, result = await attempt()
            remaining = deadline - self._clock.monotonic_ms()
            if code not in _RETRIABLE or remaining <= 0:
                return code, result
            await sleep_ms(self._clock, min(RETRY_BACKOFF_MS, remaining))

    def _coordinator(self, key: StateKey) -> tuple[int, str, int] | None:
        self._service.request_topic()  # not there yet: None until it is
        return self._service.coordinator_of(key)

    async def _read_once(self, key: StateKey, leader_epoch: int) -> tuple[ErrorCode, ShareState | None]:
        coordinator = self._coordinator(key)
        if coordinator is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        if coordinator[0] == self._service.node_id:
            return await self._service.read(key, leader_epoch)
        body: m.ReadShareGroupStateRequest = {
            "group_id": key.group_id,
            "topics": [
                {
                    "topic_id": key.topic_id,
                    "partitions": [{"partition": key.partition, "leader_epoch": leader_epoch}],
                }
            ],
        }
        try:
            response = await self._connections.get(*coordinator).send(
                ApiKey.READ_SHARE_GROUP_STATE, 0, body, REQUEST_TIMEOUT_MS
            )
            answer = response["results"][0]["partitions"][0]
        except (ConnectionError, LookupError, ValueError) as exc:
            log.info("ReadShareGroupState to broker %d failed: %s", coordinator[0], exc)
            return ErrorCode.NETWORK_EXCEPTION, None
        code = ErrorCode(int(answer["error_code"]))
        if code is not ErrorCode.NONE or int(answer["start_offset"]) < 0:
            return code, None
        batches = batches_from_wire(answer["state_batches"])
        return code, ShareState(
            int(answer["state_epoch"]), leader_epoch, int(answer["start_offset"]), batches
        )

    async def _write_once(self, key: StateKey, state: ShareState) -> tuple[ErrorCode, None]:
        coordinator = self._coordinator(key)
        if coordinator is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        if coordinator[0] == self._service.node_id:
            return await self._service.write(key, state), None
        partition: m.WriteShareGroupStateRequestPartitionData = {
            "partition": key.partition,
            "state_epoch": state.state_epoch,
            "leader_epoch": state.leader_epoch,
            "start_offset": state.start_offset,
            "state_batches": batches_to_wire(state.batches),
        }
        body: m.WriteShareGroupStateRequest = {
            "group_id": key.group_id,
            "topics": [{"topic_id": key.topic_id, "partitions": [partition]}],
        }
        try:
            response = await self._connections.get(*coordinator).send(
                ApiKey.WRITE_SHARE_GROUP_STATE, 0, body, REQUEST_TIMEOUT_MS
            )
            code = ErrorCode(int(response["results"][0]["partitions"][0]["error_code"]))
        except (ConnectionError, LookupError, ValueError) as exc:
            log.info("WriteShareGroupState to broker %d failed: %s", coordinator[0], exc)
            return ErrorCode.NETWORK_EXCEPTION, None
        return code, None

    async def _delete_once(self, key: StateKey) -> tuple[ErrorCode, None]:
        coordinator = self._coordinator(key)
        if coordinator is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        if coordinator[0] == self._service.node_id:
            return await self._service.delete(key), None
        body: m.DeleteShareGroupStateRequest = {
            "group_id": key.group_id,
            "topics": [{"topic_id": key.topic_id, "partitions": [{"partition": key.partition}]}],
        }
        try:
            response = await self._connections.get(*coordinator).send(
                ApiKey.DELETE_SHARE_GROUP_STATE, 0, body, REQUEST_TIMEOUT_MS
            )
            code = ErrorCode(int(response["results"][0]["partitions"][0]["error_code"]))
        except (ConnectionError, LookupError, ValueError) as exc:
            log.info("DeleteShareGroupState to broker %d failed: %s", coordinator[0], exc)
            return ErrorCode.NETWORK_EXCEPTION, None
        return code, None

    async def delete_group(self, group_id: str) -> tuple[ErrorCode, int]:
        """Remove every stored share-partition state of the group, on every share coordinator; the
        first error (NONE if all answered) and how many states were removed. A partition of
        ``__share_group_state`` without a leader may hold some of the group's state: the answer is then
        COORDINATOR_NOT_AVAILABLE (the client tries again), not a success that leaves state behind for
        a later group of the same id."""
        info = self._metadata.topics.get(SHARE_STATE_TOPIC)
        if info is None:
            return ErrorCode.NONE, 0  # never created: nothing stored
        found = [self._metadata.partition_leader(SHARE_STATE_TOPIC, p) for p in range(info.partitions)]
        leaders = {leader.node_id: (leader.host, leader.port) for leader in found if leader is not None}
        error = ErrorCode.COORDINATOR_NOT_AVAILABLE if None in found else ErrorCode.NONE
        removed = 0
        for node_id, (host, port) in sorted(leaders.items()):
            if node_id == self._service.node_id:
                code, keys = await self._service.delete_group(group_id)
                count = len(keys)
            else:
                code, count = await self._delete_group_at((node_id, host, port), group_id)
            removed += count
            if error is ErrorCode.NONE:
                error = code
        return error, removed

    async def _delete_group_at(
        self, coordinator: tuple[int, str, int], group_id: str
    ) -> tuple[ErrorCode, int]:
        body: m.DeleteShareGroupStateRequest = {"group_id": group_id, "topics": []}
        try:
            response = await self._connections.get(*coordinator).send(
                ApiKey.DELETE_SHARE_GROUP_STATE, 0, body, REQUEST_TIMEOUT_MS
            )
        except (ConnectionError, LookupError, ValueError) as exc:
            log.info("DeleteShareGroupState to broker %d failed: %s", coordinator[0], exc)
            return ErrorCode.NETWORK_EXCEPTION, 0
        codes = [ErrorCode(int(p["error_code"])) for r in response["results"] for p in r["partitions"]]
        failed = [c for c in codes if c is not ErrorCode.NONE]
        return (failed[0] if failed else ErrorCode.NONE), len(codes) - len(failed)
