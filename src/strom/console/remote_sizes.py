"""The remote size of tiered partitions, for ``strom topics describe``: read from ``__remote_log_metadata``.

No Kafka API reports how many bytes of a partition are in remote storage: DescribeLogDirs' sizes are
the replicas' local ones (as Kafka's), and Kafka's ``RemoteLogSizeBytes`` metric is per topic, on each
broker's metrics endpoint. The record of truth is the remote log metadata topic (KIP-405), where a
partition's leader records every event of each remote segment with the segment's size. So the CLI
reads, with a consumer, the metadata partitions holding the described partitions' records
(``crc32("<topic>-<partition>") % partitions``, the brokers' own rule) from their start to their high
watermark, replays each partition's records as a broker does (strom.tiered.metadata_cache: the latest
valid state per segment; records of an earlier topic of the same name, another topic id, skipped), and
sums the sizes of the segments whose copy finished and that are not deleted yet: the bytes the remote
log holds, as ``RemoteLogSizeBytes`` adds them up for the topic. The metadata partitions grow by a
few small records per remote segment, so the read stays short.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from strom.broker.tiered.config_defs import METADATA_TOPIC
from strom.console.clients import LIBRDKAFKA_LOGGER, ClientOptions
from strom.console.errors import ConsoleError
from strom.tiered.metadata_cache import RemotePartitionMetadata
from strom.tiered.segment_metadata import CorruptMetadataRecordError, decode, metadata_partition


def remote_sizes(
    options: ClientOptions,
    wanted: Iterable[tuple[str, int]],
    topic_ids: Mapping[str, str],
    metadata_partitions: int,
) -> dict[tuple[str, int], int]:
    """(topic, partition) -> bytes in remote storage, for each of ``wanted`` (0 when nothing is remote).

    ``topic_ids``: each topic's id (Kafka's text form); ``metadata_partitions``: the metadata topic's
    partition count (0: the topic does not exist yet, nothing is remote).
    """
    states = {tp: RemotePartitionMetadata(topic_ids.get(tp[0])) for tp in wanted}
    if metadata_partitions > 0 and states:
        keys = {f"{t}-{p}".encode(): (t, p) for t, p in states}
        targets = sorted({metadata_partition(t, p, metadata_partitions) for t, p in states})
        for key, value in _records(options, targets):
            tp = keys.get(key or b"")
            if tp is None or value is None:
                continue
            try:
                metadata = decode(value)
            except CorruptMetadataRecordError:
                continue  # a broker skips it too (and logs it)
            if metadata.topic_id == states[tp].topic_id:
                states[tp].apply(metadata)
    return {tp: state.size_bytes for tp, state in states.items()}


def _records(options: ClientOptions, targets: list[int]) -> Iterable[tuple[bytes | None, bytes | None]]:
    """(key, value) of every record of the metadata partitions ``targets`` below their high watermarks."""
    consumer = Consumer(
        options.config(**{"group.id": "strom-topics-describe", "enable.auto.commit": "false"}),
        logger=LIBRDKAFKA_LOGGER,
    )
    try:
        ends: dict[int, int] = {}
        for p in targets:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(METADATA_TOPIC, p), timeout=options.timeout_s
            )
            if high > low:
                ends[p] = high
        consumer.assign([TopicPartition(METADATA_TOPIC, p, OFFSET_BEGINNING) for p in ends])
        deadline = time.monotonic() + options.timeout_s
        while ends:
            if time.monotonic() > deadline:
                raise ConsoleError(f"timed out reading {METADATA_TOPIC} for the remote sizes")
            for msg in consumer.consume(1000, 0.5):
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise ConsoleError(f"cannot read {METADATA_TOPIC}: {error.str()}")
                partition, offset = msg.partition(), msg.offset()
                if partition in ends and offset is not None and offset < ends[partition]:
                    yield msg.key(), msg.value()
                    if offset + 1 >= ends[partition]:
                        del ends[partition]
    finally:
        consumer.close()


__all__ = ["remote_sizes"]
