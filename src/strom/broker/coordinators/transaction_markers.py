"""Writing a transaction's COMMIT/ABORT marker to one of its partitions, wherever its leader is.

The transaction coordinator (`transaction_service.py`) asks `MarkerWriter.write_all` for the partitions
of a Prepare* transaction still without their marker, with the leader epoch of the id's
``__transaction_state`` partition as the coordinator epoch. All of them are written at once, as Kafka's
marker channel does: one WriteTxnMarkers per other leader and this broker's own appends, side by side
(one after the other, each waiting for its ISR, a transaction over many partitions took one
replication round trip per partition before its CompleteCommit). Per partition:

* a partition whose topic is gone (or that no longer exists) needs no marker, as in Kafka: done;
* a partition without a leader right now: retry later;
* a partition this broker leads: the marker is appended as leader and waits for the ISR (acks=-1),
  through the coordinator partitions' adapter (`write_local`, also what the WriteTxnMarkers handler
  runs for other coordinators and admin tools); then the marker listeners hear of it (the group
  coordinator materialises or drops that producer's transactional offsets);
* a partition led by another broker: WriteTxnMarkers v0 to it with all its partitions of the
  transaction (Strom brokers all serve it), over one connection per leader, re-made when the leader's
  address changes.

INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED from a partition ends the attempt there (a
newer epoch or coordinator already ended that transaction there, Kafka stops too).

Call only from the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from strom._util.clock import Clock
from strom.broker.coordinators.coordinator_partitions import CoordinatorPartitions
from strom.broker.metadata_cache import ClusterMetadataStore
from strom.broker.network.net_client import BrokerConnections
from strom.broker.security.client import ClientSecurity
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.protocol.messages import WriteTxnMarkersRequestWritableTxnMarker
from strom.protocol.records.control import ControlType

log = logging.getLogger(__name__)

MARKER_TIMEOUT_MS = 5_000  # how long a marker append waits for the ISR
# (topic, partition, producer id, commit) of a marker written to a partition this broker leads.
MarkerListener = Callable[[str, int, int, bool], None]


class MarkerWriter:
    def __init__(
        self,
        partitions: CoordinatorPartitions,
        metadata: ClusterMetadataStore,
        security: ClientSecurity,
        clock: Clock,
    ) -> None:
        self._partitions = partitions
        self._metadata = metadata
        self.listeners: list[MarkerListener] = []
        # To the partition leaders, for WriteTxnMarkers (``security``: how this broker reaches others).
        self._connections = BrokerConnections(f"txn-coordinator-{partitions.node_id}", security, clock)

    def close(self) -> None:
        self._connections.close()

    async def write_all(
        self,
        partitions: list[tuple[str, int]],
        pid: int,
        epoch: int,
        commit: bool,
        coordinator_epoch: int,
    ) -> set[tuple[str, int]]:
        """Write the marker to every partition at once: one WriteTxnMarkers per other leader, the
        local appends side by side (each waits for its ISR). Returns the partitions done (written, or
        needing none); the others are retried later."""
        done: set[tuple[str, int]] = set()
        local: list[tuple[str, int]] = []
        remote: dict[int, list[tuple[str, int]]] = {}
        for topic, partition in partitions:
            info = self._metadata.topics.get(topic)
            if info is None or partition >= info.partitions:
                log.info("%s-%d is gone: no transaction marker for producer %d", topic, partition, pid)
                done.add((topic, partition))
                continue
            state = self._metadata.partitions.get((topic, partition))
            if state is None or state.leader < 0:
                continue  # no leader right now: retry
            if state.leader == self._partitions.node_id:
                local.append((topic, partition))
            else:
                remote.setdefault(state.leader, []).append((topic, partition))
        writes = [self._local_codes(tp, pid, epoch, commit, coordinator_epoch) for tp in local]
        writes += [
            self._send(leader, tps, pid, epoch, commit, coordinator_epoch) for leader, tps in remote.items()
        ]
        # one write (the common case) without gather, whose task would cost an event-loop turn
        outcomes = [await writes[0]] if len(writes) == 1 else list(await asyncio.gather(*writes))
        for codes in outcomes:
            for (topic, partition), code in codes.items():
                if code in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED):
                    log.warning("%s-%d: marker for producer %d refused: %s", topic, partition, pid, code.name)
                    done.add((topic, partition))
                elif code is ErrorCode.NONE:
                    done.add((topic, partition))
        return done

    async def _local_codes(
        self, tp: tuple[str, int], pid: int, epoch: int, commit: bool, coordinator_epoch: int
    ) -> dict[tuple[str, int], ErrorCode]:
        return {tp: await self.write_local(tp[0], tp[1], pid, epoch, commit, coordinator_epoch)}

    async def write_local(
        self, topic: str, partition: int, pid: int, epoch: int, commit: bool, coordinator_epoch: int
    ) -> ErrorCode:
        """Append a marker to a partition this broker leads and wait for its ISR (WriteTxnMarkers, as
        Kafka's leader does with acks=-1); then tell the marker listeners."""
        control = ControlType.COMMIT if commit else ControlType.ABORT
        code = await self._partitions.write_marker(
            topic, partition, pid, epoch, control, coordinator_epoch, MARKER_TIMEOUT_MS
        )
        if code is ErrorCode.NONE:
            for listener in self.listeners:
                listener(topic, partition, pid, commit)
        return code

    async def _send(
        self,
        leader: int,
        partitions: list[tuple[str, int]],
        pid: int,
        epoch: int,
        commit: bool,
        coordinator_epoch: int,
    ) -> dict[tuple[str, int], ErrorCode]:
        """WriteTxnMarkers v0 with the leader's partitions of the transaction."""
        broker = self._metadata.brokers.get(leader)
        if broker is None:
            return dict.fromkeys(partitions, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        connection = self._connections.get(leader, broker.host, broker.port)
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        marker: WriteTxnMarkersRequestWritableTxnMarker = {
            "producer_id": pid,
            "producer_epoch": epoch,
            "transaction_result": commit,
            "topics": [{"name": name, "partition_indexes": parts} for name, parts in by_topic.items()],
            "coordinator_epoch": coordinator_epoch,
        }
        codes = dict.fromkeys(partitions, ErrorCode.UNKNOWN_SERVER_ERROR)
        try:
            response = await connection.send(ApiKey.WRITE_TXN_MARKERS, 0, {"markers": [marker]}, 15_000)
            for answered in response["markers"][0]["topics"]:
                for part in answered["partitions"]:
                    tp = (answered["name"], int(part["partition_index"]))
                    if tp in codes:
                        codes[tp] = ErrorCode(int(part["error_code"]))
        except (ConnectionError, LookupError, ValueError) as exc:
            log.info("WriteTxnMarkers to broker %d for %s failed: %s", leader, partitions, exc)
            return dict.fromkeys(partitions, ErrorCode.NETWORK_EXCEPTION)
        return codes
