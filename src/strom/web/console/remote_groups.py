"""Consumer groups coordinated by other brokers, for the console of any broker, over the Kafka protocol.

A group lives on one broker, its coordinator (the leader of its ``__consumer_offsets`` partition). The
console of another broker draws it from what Kafka's own tools ask, with this broker's inter-broker
login (the HTTP side has already checked the person's DESCRIBE on the group):

* the list: ListGroups v2 to every other live broker (each answers the groups it coordinates), then
  DescribeGroups v4 and ConsumerGroupDescribe v0 there for their types, states and member counts;
* one group: FindCoordinator v2, then at the coordinator ConsumerGroupDescribe v0 (a KIP-848 consumer
  group: state, epoch, assignor, members with their assignments) or else DescribeGroups v4 (a classic
  one: state, protocol, assignor, members), OffsetFetch v5 (committed offsets), and ListOffsets latest
  at each partition's leader, one request per leader (the high watermark, for the lag; a partition
  with a replica here uses it).

A broker that does not answer is left out of the list and named on the page (`ClusterGroups.failed`).
The lag chart is kept by the coordinator's own history, so a group drawn from elsewhere has none.
"""

from __future__ import annotations

from strom.broker.broker import Broker
from strom.broker.coordinators.leader_watermarks import answered_watermarks, by_leader, list_offsets_body
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponseDescribedGroup,
    DescribeGroupsRequest,
    DescribeGroupsResponseDescribedGroup,
    FindCoordinatorRequest,
    ListGroupsRequest,
    OffsetFetchRequest,
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponseDescribedGroup,
)
from strom.web.console.remote import LeaderReads, RemoteReadError
from strom.web.console.views import GroupOffset, GroupRow, GroupView, MemberView, consumer_assignment

TIMEOUT_MS = 10_000


class ClusterGroups:
    def __init__(self, broker: Broker, reads: LeaderReads) -> None:
        self._broker = broker
        self._reads = reads
        self.failed: list[int] = []  # brokers that did not answer the last listing

    async def _describe(
        self, node_id: int, host: str, port: int, ids: list[str]
    ) -> list[DescribeGroupsResponseDescribedGroup]:
        conn = self._reads.broker_connection(node_id, host, port)
        body: DescribeGroupsRequest = {"groups": ids, "include_authorized_operations": False}
        answer = await conn.send(ApiKey.DESCRIBE_GROUPS, 4, body, timeout_ms=TIMEOUT_MS)
        return list(answer["groups"])

    async def _describe_consumer(
        self, node_id: int, host: str, port: int, ids: list[str]
    ) -> dict[str, ConsumerGroupDescribeResponseDescribedGroup]:
        """The KIP-848 consumer groups among ``ids`` (a classic group is answered with an error)."""
        conn = self._reads.broker_connection(node_id, host, port)
        body: ConsumerGroupDescribeRequest = {"group_ids": ids, "include_authorized_operations": False}
        answer = await conn.send(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, body, timeout_ms=TIMEOUT_MS)
        return {g["group_id"]: g for g in answer["groups"] if not g["error_code"]}

    async def _describe_share(
        self, node_id: int, host: str, port: int, ids: list[str]
    ) -> dict[str, ShareGroupDescribeResponseDescribedGroup]:
        """The share groups (KIP-932) among ``ids`` (other groups are answered with an error)."""
        conn = self._reads.broker_connection(node_id, host, port)
        body: ShareGroupDescribeRequest = {"group_ids": ids, "include_authorized_operations": False}
        answer = await conn.send(ApiKey.SHARE_GROUP_DESCRIBE, 1, body, timeout_ms=TIMEOUT_MS)
        return {g["group_id"]: g for g in answer["groups"] if not g["error_code"]}

    async def rows(self) -> list[GroupRow]:
        """The groups every other live broker coordinates (without lag: it is the coordinator's)."""
        rows: list[GroupRow] = []
        self.failed = []
        for b in sorted(self._broker.metadata.brokers.values(), key=lambda b: b.node_id):
            if b.node_id == self._broker.node_id:
                continue
            try:
                conn = self._reads.broker_connection(b.node_id, b.host, b.port)
                listed_body: ListGroupsRequest = {"states_filter": [], "types_filter": []}
                listed = await conn.send(ApiKey.LIST_GROUPS, 5, listed_body, timeout_ms=TIMEOUT_MS)
                # v5 names each group's type: share groups are described with their own API.
                shared = sorted(g["group_id"] for g in listed["groups"] if g["group_type"] == "share")
                ids = sorted(g["group_id"] for g in listed["groups"] if g["group_type"] != "share")
                described = await self._describe(b.node_id, b.host, b.port, ids) if ids else []
                consumer = await self._describe_consumer(b.node_id, b.host, b.port, ids) if ids else {}
                share = await self._describe_share(b.node_id, b.host, b.port, shared) if shared else {}
            except ConnectionError:
                self.failed.append(b.node_id)
                continue
            for s in share.values():
                rows.append(GroupRow(s["group_id"], "share", s["group_state"], len(s["members"]), None))
            for g in described:
                found = consumer.get(g["group_id"])
                if found is not None:
                    rows.append(
                        GroupRow(g["group_id"], "consumer", found["group_state"], len(found["members"]), None)
                    )
                elif not g["error_code"]:
                    rows.append(GroupRow(g["group_id"], "classic", g["group_state"], len(g["members"]), None))
        return rows

    async def coordinator(self, group_id: str) -> tuple[int, str, int]:
        """(node id, host, port) of the group's coordinator.

        Raises:
            RemoteReadError: no coordinator is known (its error code).
        """
        own = self._broker.advertised
        conn = self._reads.broker_connection(self._broker.node_id, own.host, own.port)
        body: FindCoordinatorRequest = {"key": group_id, "key_type": 0}
        try:
            found = await conn.send(ApiKey.FIND_COORDINATOR, 2, body, timeout_ms=TIMEOUT_MS)
        except ConnectionError as exc:
            raise RemoteReadError(str(exc)) from None
        if found["error_code"]:
            raise RemoteReadError(f"FindCoordinator answered {ErrorCode(found['error_code']).name}")
        return int(found["node_id"]), str(found["host"]), int(found["port"])

    async def view(self, group_id: str, node_id: int, host: str, port: int) -> GroupView | None:
        """The group as its coordinator ``node_id`` describes it; None when it does not exist there."""
        try:
            described = (await self._describe(node_id, host, port, [group_id]))[0]
            consumer = (await self._describe_consumer(node_id, host, port, [group_id])).get(group_id)
            share = (await self._describe_share(node_id, host, port, [group_id])).get(group_id)
            conn = self._reads.broker_connection(node_id, host, port)
            fetch_body: OffsetFetchRequest = {"group_id": group_id, "topics": None}
            fetched = await conn.send(ApiKey.OFFSET_FETCH, 5, fetch_body, timeout_ms=TIMEOUT_MS)
        except ConnectionError as exc:
            raise RemoteReadError(str(exc)) from None
        committed = {
            (t["name"], p["partition_index"]): (int(p["committed_offset"]), p["metadata"] or "")
            for t in fetched["topics"]
            for p in t["partitions"]
            if not p["error_code"] and p["committed_offset"] >= 0
        }
        if share is not None:  # its share-partitions' offsets are on their leaders' consoles
            members = [
                MemberView(
                    m["member_id"],
                    m["client_id"],
                    m["client_host"],
                    {t["topic_name"]: sorted(t["partitions"]) for t in m["assignment"]["topic_partitions"]},
                )
                for m in share["members"]
            ]
            return GroupView(group_id, "share", share["group_state"], "share", share["assignor_name"] or None,
                             share["group_epoch"], members, [])  # fmt: skip
        head: tuple[str, str, str | None, str | None, int]  # type, state, protocol type, assignor, generation
        if consumer is not None:
            members = [
                MemberView(
                    m["member_id"], m["client_id"], m["client_host"],
                    {t["topic_name"]: sorted(t["partitions"]) for t in m["assignment"]["topic_partitions"]},
                )
                for m in consumer["members"]
            ]  # fmt: skip
            assignor = consumer["assignor_name"] or None
            head = ("consumer", consumer["group_state"], "consumer", assignor, consumer["group_epoch"])
        elif described["error_code"] or (described["group_state"] == "Dead" and not committed):
            return None
        else:
            members = [
                MemberView(
                    m["member_id"],
                    m["client_id"],
                    m["client_host"],
                    consumer_assignment(m["member_assignment"]),
                )
                for m in described["members"]
            ]
            head = ("classic", described["group_state"], described["protocol_type"] or None,
                    described["protocol_data"] or None, -1)  # fmt: skip
        owners = {(t, p): m.member_id for m in members for t, ps in m.assignment.items() for p in ps}
        ends = await self._high_watermarks(list(committed))
        offsets = []
        for (topic, index), (offset, metadata) in sorted(committed.items()):
            end = ends.get((topic, index))
            lag = None if end is None else max(end - offset, 0)
            offsets.append(GroupOffset(topic, index, offset, end, lag, owners.get((topic, index)), metadata))
        return GroupView(group_id, *head, members, offsets)

    async def _high_watermarks(self, wanted: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        hosted = self._broker.replica_manager.partitions
        found = {tp: hosted[tp].log.high_watermark for tp in wanted if tp in hosted}

        def leader_of(topic: str, index: int) -> int | None:
            leader = self._broker.metadata.partition_leader(topic, index)
            return None if leader is None else leader.node_id

        for leader_id, topics in by_leader([tp for tp in wanted if tp not in hosted], leader_of).items():
            leader = self._broker.metadata.brokers.get(leader_id)
            if leader is None:
                continue
            conn = self._reads.broker_connection(leader_id, leader.host, leader.port)
            try:
                answer = await conn.send(
                    ApiKey.LIST_OFFSETS, 2, list_offsets_body(topics), timeout_ms=TIMEOUT_MS
                )
            except ConnectionError:
                continue  # its partitions' lag stays unknown ('-')
            found.update(answered_watermarks(answer))
        return found
