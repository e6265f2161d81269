"""``strom topics``: create, list, describe, delete, alter configs and add partitions.

Every operation goes through confluent-kafka's AdminClient, i.e. through the broker's CreateTopics,
Metadata, DescribeConfigs, DeleteTopics, IncrementalAlterConfigs and CreatePartitions APIs; nothing
here reads broker state any other way, so these commands double as an end-to-end check of those APIs.

Many topics at once (``create_topics``): the names go to the broker in batches, one CreateTopics
request per batch (``batch_size`` topics), so a thousand names cost ten round trips rather than a
thousand; each topic still succeeds or fails on its own (an existing name, a bad config), every failure
is reported and the rest are created. Progress is drawn on a terminal (``strom.console.progress``). No
answer at all (no broker reachable, a timeout) stops the command: the next batch would only wait as long.

Output follows ``kafka-topics.sh`` where there is an equivalent (``Created topic X.``; the describe
layout ``Topic: X\\tPartitionCount: N ...``) so that Kafka users can read it, and scripts written for
Kafka's tool keep parsing it. A tiered topic's partition lines end with its remote and local offset
ranges and the leader's local size (strom.console.tiers, through kafka-python's admin client); an
Iceberg topic's with the next offset its table records and its translation lag, from the leader
(strom.console.lake_lag).
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from strom.broker.lake.lag import TableLag
from strom.console._admin_api import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)
from strom.console.clients import (
    LIBRDKAFKA_LOGGER,
    ClientOptions,
    describe_kafka_error,
    fail,
    kafka_error_text,
    unreachable,
    wait,
)
from strom.console.errors import ConsoleError
from strom.console.lake_lag import describe_fields, now_ms, translation_lag
from strom.console.progress import progress
from strom.console.tiers import PartitionTiers, partition_tiers

#: Topics per CreateTopics request when creating many.
DEFAULT_CREATE_BATCH = 100


def admin_client(options: ClientOptions) -> AdminClient:
    """An AdminClient for ``options`` (librdkafka logs routed away from the terminal).

    Callers keep it in a local variable until its futures are resolved: a client that is garbage
    collected early fails its pending futures with ``_DESTROY``.
    """
    return AdminClient(options.config(), logger=LIBRDKAFKA_LOGGER)


def create_topic(
    options: ClientOptions,
    name: str,
    out: TextIO,
    *,
    partitions: int | None = None,
    replication_factor: int | None = None,
    configs: Mapping[str, str] | None = None,
) -> None:
    """Create one topic; ``None`` leaves partitions / replication factor to the broker's defaults."""
    new_topic = _new_topic(name, partitions, replication_factor, configs)
    admin = admin_client(options)
    futures = admin.create_topics([new_topic], request_timeout=options.timeout_s)
    wait(futures[name], f"cannot create topic {name!r}", options)
    print(f"Created topic {name}.", file=out)


def create_topics(
    options: ClientOptions,
    names: Sequence[str],
    out: TextIO,
    err: TextIO,
    *,
    partitions: int | None = None,
    replication_factor: int | None = None,
    configs: Mapping[str, str] | None = None,
    batch_size: int = DEFAULT_CREATE_BATCH,
) -> None:
    """Create every topic of ``names`` (duplicates once), ``batch_size`` per CreateTopics request.

    Prints ``Created topic NAME.`` for each topic created and one line on ``err`` for each that was
    not; then raises if any failed. One name behaves exactly as :func:`create_topic`.

    Raises:
        ConsoleError: some topics were not created (how many), or no broker answered.
    """
    wanted = list(dict.fromkeys(names))
    if len(wanted) == 1:
        create_topic(
            options,
            wanted[0],
            out,
            partitions=partitions,
            replication_factor=replication_factor,
            configs=configs,
        )
        return
    admin = admin_client(options)
    failures = 0
    with progress("Creating topics", total=len(wanted), unit="topics") as bar:
        for start in range(0, len(wanted), batch_size):
            batch = [
                _new_topic(n, partitions, replication_factor, configs)
                for n in wanted[start : start + batch_size]
            ]
            futures = admin.create_topics(batch, request_timeout=options.timeout_s)
            for new_topic in batch:
                name = new_topic.topic
                what = f"cannot create topic {name!r}"
                try:
                    futures[name].result(timeout=options.timeout_s + 1.0)
                except concurrent.futures.TimeoutError:
                    raise ConsoleError(
                        f"{what}: no answer within {options.timeout_s:g}s from {options.bootstrap_servers}"
                    ) from None
                except KafkaException as exc:
                    if unreachable(exc):
                        raise fail(what, exc, options) from None
                    failures += 1
                    bar.echo(fail(what, exc, options).message, err)
                else:
                    bar.echo(f"Created topic {name}.", out)
                bar.advance()
    if failures:
        raise ConsoleError(f"{failures} of {len(wanted)} topics were not created")


def _new_topic(
    name: str, partitions: int | None, replication_factor: int | None, configs: Mapping[str, str] | None
) -> NewTopic:
    return NewTopic(
        name,
        num_partitions=-1 if partitions is None else partitions,
        replication_factor=-1 if replication_factor is None else replication_factor,
        config=dict(configs or {}),
    )


def list_topics(options: ClientOptions, out: TextIO) -> None:
    """Print every topic name the broker's Metadata returns, sorted, one per line."""
    for name in sorted(_cluster_metadata(options).topics):
        print(name, file=out)


def describe_topics(options: ClientOptions, names: Sequence[str], out: TextIO) -> None:
    """Print partitions (leader, replicas, ISR as Metadata reports them) and non-default configs.

    With no ``names`` every topic is described. A name the broker does not know is an error, raised
    before anything is printed.
    """
    metadata = _cluster_metadata(options)
    wanted = list(dict.fromkeys(names)) if names else sorted(metadata.topics)
    missing = [name for name in wanted if name not in metadata.topics]
    if missing:
        raise ConsoleError(f"unknown topic(s): {', '.join(missing)}")
    for name in wanted:
        topic = metadata.topics[name]
        if topic.error is not None:
            raise ConsoleError(f"cannot describe topic {name!r}: {kafka_error_text(topic.error)}")
    configs = _topic_overrides(options, wanted)
    tiered = {
        name: [(p.id, p.leader) for p in metadata.topics[name].partitions.values()]
        for name in wanted
        if configs[name].get("remote.storage.enable") == "true"
    }
    tiers = partition_tiers(options, tiered)
    lags = translation_lag(
        options,
        [
            (name, p)
            for name in wanted
            if configs[name].get("strom.iceberg.mode", "disabled") != "disabled"
            for p in metadata.topics[name].partitions
        ],
    )
    for name in wanted:
        _print_topic(metadata.topics[name], configs[name], out, tiers, lags)


def delete_topics(options: ClientOptions, names: Sequence[str], out: TextIO) -> None:
    """Delete topics; every name is attempted, and all failures are reported in one line at the end."""
    admin = admin_client(options)
    futures = admin.delete_topics(list(dict.fromkeys(names)), request_timeout=options.timeout_s)
    failures: list[str] = []
    for name, future in futures.items():
        try:
            wait(future, name, options)
        except ConsoleError as exc:
            failures.append(exc.message)
        else:
            print(f"Deleted topic {name}.", file=out)
    if failures:
        raise ConsoleError(f"cannot delete topic(s): {'; '.join(failures)}")


def alter_topic_config(
    options: ClientOptions,
    name: str,
    out: TextIO,
    *,
    set_configs: Mapping[str, str],
    delete_configs: Sequence[str] = (),
) -> None:
    """Set and/or delete topic config overrides with IncrementalAlterConfigs.

    Deleting an override reverts the config to the broker default; configs not named are untouched
    (unlike the legacy AlterConfigs API, which replaces the whole set).
    """
    overlap = sorted(set(set_configs) & set(delete_configs))
    if overlap:
        raise ConsoleError(f"config(s) both set and deleted: {', '.join(overlap)}")
    if not set_configs and not delete_configs:
        raise ConsoleError("nothing to change: give --set key=value and/or --delete key")
    entries = [
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
        for key, value in set_configs.items()
    ]
    entries += [
        ConfigEntry(key, None, incremental_operation=AlterConfigOpType.DELETE) for key in delete_configs
    ]
    resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=entries)
    admin = admin_client(options)
    futures = admin.incremental_alter_configs([resource], request_timeout=options.timeout_s)
    for future in futures.values():
        wait(future, f"cannot alter configs of topic {name!r}", options)
    print(f"Updated configs of topic {name}.", file=out)


def add_partitions(options: ClientOptions, name: str, total: int, out: TextIO) -> None:
    """Grow a topic to ``total`` partitions (Kafka never shrinks a topic)."""
    admin = admin_client(options)
    futures = admin.create_partitions([NewPartitions(name, total)], request_timeout=options.timeout_s)
    wait(futures[name], f"cannot add partitions to topic {name!r}", options)
    print(f"Topic {name} now has {total} partitions.", file=out)


def _cluster_metadata(options: ClientOptions) -> Any:
    try:
        return admin_client(options).list_topics(timeout=options.timeout_s)
    except KafkaException as exc:
        raise fail("cannot fetch metadata", exc, options) from None


def _topic_overrides(options: ClientOptions, names: Sequence[str]) -> dict[str, dict[str, str]]:
    """Each topic's configs whose source is a topic-level override (what ``kafka-topics`` shows)."""
    if not names:
        return {}
    resources = [ConfigResource(ResourceType.TOPIC, name) for name in names]
    admin = admin_client(options)
    futures = admin.describe_configs(resources, request_timeout=options.timeout_s)
    overrides: dict[str, dict[str, str]] = {}
    for resource, future in futures.items():
        entries: dict[str, ConfigEntry] = wait(
            future, f"cannot describe configs of {resource.name!r}", options
        )
        overrides[resource.name] = {
            key: _shown_value(entry) for key, entry in sorted(entries.items()) if _is_topic_override(entry)
        }
    return overrides


def _is_topic_override(entry: ConfigEntry) -> bool:
    # librdkafka's C layer hands back the source as a plain int, while ConfigEntry is typed with the
    # enum; accept both.
    source: object = entry.source
    return getattr(source, "value", source) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value


def _shown_value(entry: ConfigEntry) -> str:
    return "<sensitive>" if entry.is_sensitive else str(entry.value)


def _print_topic(
    topic: Any,
    configs: Mapping[str, str],
    out: TextIO,
    tiers: Mapping[tuple[str, int], PartitionTiers],
    lags: Mapping[tuple[str, int], TableLag],
) -> None:
    partitions = [topic.partitions[pid] for pid in sorted(topic.partitions)]
    replication = len(partitions[0].replicas) if partitions else 0
    config_text = ",".join(f"{key}={value}" for key, value in configs.items())
    print(
        f"Topic: {topic.topic}\tPartitionCount: {len(partitions)}\tReplicationFactor: {replication}"
        f"\tConfigs: {config_text}",
        file=out,
    )
    for partition in partitions:
        line = (
            f"\tTopic: {topic.topic}\tPartition: {partition.id}\tLeader: {partition.leader}"
            f"\tReplicas: {_ids(partition.replicas)}\tIsr: {_ids(partition.isrs)}"
        )
        if (found := tiers.get((topic.topic, partition.id))) is not None:
            line += found.fields()  # tiered storage: the remote and the local part of the log
        if (lag := lags.get((topic.topic, partition.id))) is not None:
            line += describe_fields(lag, now_ms())  # an Iceberg topic: how far its table is behind
        if partition.error is not None and partition.error.code() != KafkaError.NO_ERROR:
            line += f"\tError: {describe_kafka_error(partition.error)}"
        print(line, file=out)


def _ids(broker_ids: Sequence[int]) -> str:
    return ",".join(str(broker_id) for broker_id in broker_ids)
