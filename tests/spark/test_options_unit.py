"""Pure unit tests of strom.spark option parsing (no JVM, no broker)."""

from __future__ import annotations

import json

import pytest

from strom.spark.options import (
    EARLIEST,
    LATEST,
    DeliveryGuarantee,
    KafkaOptionError,
    StartingKind,
    offsets_from_json,
    offsets_to_json,
    parse_partition_offsets,
    parse_sink_options,
    parse_source_options,
)

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}


def parse(streaming: bool = False, **extra: str) -> object:
    return parse_source_options({**BASE, **{k.lower(): v for k, v in extra.items()}}, streaming=streaming)


def test_defaults_batch_and_streaming() -> None:
    batch = parse_source_options(BASE, streaming=False)
    stream = parse_source_options(BASE, streaming=True)
    assert batch.starting.kind is StartingKind.EARLIEST
    assert batch.ending.kind is StartingKind.LATEST
    assert stream.starting.kind is StartingKind.LATEST
    assert batch.fail_on_data_loss is True
    assert batch.include_headers is False
    assert batch.client_config == {"bootstrap.servers": "127.0.0.1:9092", "isolation.level": "read_committed"}


def test_options_arrive_lower_cased_with_string_values() -> None:
    opts = parse_source_options(
        {
            "kafka.bootstrap.servers": "h:1",
            "subscribepattern": "clicks-.*",
            "failondataloss": "false",
            "includeheaders": "TRUE",
            "maxoffsetspertrigger": "500",
            "minoffsetspertrigger": "10",
            "maxtriggerdelay": "30s",
            "minpartitions": "8",
            "kafka.fetch.wait.max.ms": "50",
        },
        streaming=True,
    )
    assert opts.subscription.pattern == "clicks-.*"
    assert opts.subscription.matches("clicks-1") and not opts.subscription.matches("xclicks-1")
    assert (opts.fail_on_data_loss, opts.include_headers) == (False, True)
    assert (opts.max_offsets_per_trigger, opts.min_offsets_per_trigger) == (500, 10)
    assert opts.max_trigger_delay_ms == 30_000
    assert opts.min_partitions == 8
    assert opts.client_config["fetch.wait.max.ms"] == "50"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "t"}, "kafka.bootstrap.servers"),
        ({"kafka.bootstrap.servers": "h:1"}, "One of the following options must be specified"),
        ({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "assign": '{"t":[0]}'}, "Only one of"),
        ({"kafka.bootstrap.servers": "h:1", "subscribe": " , "}, "No topics to subscribe to"),
        ({"kafka.bootstrap.servers": "h:1", "subscribepattern": ""}, "Pattern to subscribe is empty"),
        ({"kafka.bootstrap.servers": "h:1", "subscribepattern": "("}, "subscribePattern"),
        ({"kafka.bootstrap.servers": "h:1", "assign": "[1]"}, "Expected e.g."),
        ({"kafka.bootstrap.servers": "h:1", "assign": "{}"}, "No topicpartitions to assign"),
        ({**BASE, "kafka.auto.offset.reset": "earliest"}, "'auto.offset.reset' is not supported"),
        ({**BASE, "kafka.key.deserializer": "x"}, "'key.deserializer' is not supported"),
        ({**BASE, "kafka.value.deserializer": "x"}, "'value.deserializer' is not supported"),
        ({**BASE, "kafka.enable.auto.commit": "true"}, "'enable.auto.commit' is not supported"),
        ({**BASE, "kafka.interceptor.classes": "x"}, "'interceptor.classes' is not supported"),
        ({**BASE, "startingoffsets": "latest"}, "starting offset can't be latest for batch"),
        ({**BASE, "endingoffsets": "earliest"}, "ending offset can't be earliest for batch"),
        ({**BASE, "startingoffsets": '{"t":{"0":-1}}'}, "can't be latest for batch"),
        ({**BASE, "endingoffsets": '{"t":{"0":-2}}'}, "can't be earliest for batch"),
        ({**BASE, "startingoffsets": '{"t":{"0":-3}}'}, "Invalid offset -3"),
        ({**BASE, "startingoffsets": "nonsense"}, "Expected e.g."),
        ({**BASE, "minpartitions": "0"}, "must be a positive integer"),
        ({**BASE, "failondataloss": "yes"}, "must be true or false"),
        ({**BASE, "startingtimestamp": "abc"}, "epoch milliseconds"),
        ({**BASE, "startingoffsetsbytimestampstrategy": "maybe"}, "must be 'error' or 'latest'"),
    ],
)
def test_batch_option_errors(options: dict[str, str], message: str) -> None:
    with pytest.raises(KafkaOptionError, match=None) as e:
        parse_source_options(options, streaming=False)
    assert message in str(e.value)


@pytest.mark.parametrize("key", ["endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"])
def test_ending_options_rejected_in_streaming(key: str) -> None:
    with pytest.raises(KafkaOptionError, match="not valid in streaming queries"):
        parse_source_options({**BASE, key: "1"}, streaming=True)


def test_streaming_accepts_latest_and_per_partition_latest() -> None:
    opts = parse_source_options({**BASE, "startingoffsets": '{"t":{"0":-1,"1":5}}'}, streaming=True)
    assert opts.starting.kind is StartingKind.SPECIFIC_OFFSETS
    assert opts.starting.offsets == {("t", 0): LATEST, ("t", 1): 5}


def test_timestamp_precedence_global_then_per_partition_then_offsets() -> None:
    both = {**BASE, "startingtimestamp": "1000", "startingoffsetsbytimestamp": '{"t":{"0":5}}'}
    assert parse_source_options(both, streaming=True).starting.kind is StartingKind.TIMESTAMP
    per = {**BASE, "startingoffsetsbytimestamp": '{"t":{"0":5}}', "startingoffsets": "earliest"}
    bound = parse_source_options(per, streaming=True).starting
    assert bound.kind is StartingKind.SPECIFIC_TIMESTAMPS
    assert bound.offsets == {("t", 0): 5}


def test_assign_parsing() -> None:
    opts = parse_source_options(
        {"kafka.bootstrap.servers": "h:1", "assign": '{"b":[1,0],"a":[2]}'}, streaming=False
    )
    assert opts.subscription.assign == (("a", 2), ("b", 0), ("b", 1))
    assert opts.subscription.matches("a") and not opts.subscription.matches("c")


def test_offsets_json_round_trip_and_shape() -> None:
    offsets = {("b", 10): 7, ("a", 1): 0, ("a", 0): 123_456_789_012}
    as_json = offsets_to_json(offsets)
    assert json.dumps(as_json) == '{"a": {"0": 123456789012, "1": 0}, "b": {"10": 7}}'
    assert offsets_from_json(json.loads(json.dumps(as_json))) == offsets
    assert parse_partition_offsets('{"t":{"0":23,"1":-1},"u":{"0":-2}}') == {
        ("t", 0): 23,
        ("t", 1): LATEST,
        ("u", 0): EARLIEST,
    }


@pytest.mark.parametrize("text", ['{"t":{"x":1}}', '{"t":[1]}', '{"t":{"0":true}}', "[]", '{"t":{"0":1.5}}'])
def test_offsets_json_rejects_malformed(text: str) -> None:
    with pytest.raises(KafkaOptionError, match=r"Expected e\.g\."):
        parse_partition_offsets(text)


def test_sink_options() -> None:
    assert parse_sink_options({"kafka.bootstrap.servers": "h:1", "topic": "out"}).topic == "out"
    assert parse_sink_options({"kafka.bootstrap.servers": "h:1"}).topic is None
    with pytest.raises(KafkaOptionError, match=r"'key\.serializer' is not supported"):
        parse_sink_options({"kafka.bootstrap.servers": "h:1", "kafka.key.serializer": "x"})
    with pytest.raises(KafkaOptionError, match=r"'value\.serializer' is not supported"):
        parse_sink_options({"kafka.bootstrap.servers": "h:1", "kafka.value.serializer": "x"})
    with pytest.raises(KafkaOptionError, match=r"kafka\.bootstrap\.servers"):
        parse_sink_options({"topic": "x"})


def test_isolation_level_defaults_to_read_committed() -> None:
    for streaming in (False, True):
        assert parse(streaming).client_config["isolation.level"] == "read_committed"  # type: ignore[attr-defined]
    uncommitted = parse(**{"kafka.isolation.level": "READ_UNCOMMITTED"})
    assert uncommitted.client_config["isolation.level"] == "read_uncommitted"  # type: ignore[attr-defined]
    with pytest.raises(KafkaOptionError, match=r"'isolation\.level', must be read_committed or"):
        parse(**{"kafka.isolation.level": "snapshot"})


SINK = {"kafka.bootstrap.servers": "h:1", "topic": "out"}


def test_delivery_guarantee_defaults() -> None:
    assert parse_sink_options(SINK, streaming=True).delivery_guarantee is DeliveryGuarantee.EXACTLY_ONCE
    assert parse_sink_options(SINK).delivery_guarantee is DeliveryGuarantee.AT_LEAST_ONCE
    plain = parse_sink_options({**SINK, "deliveryGuarantee": "At-Least-Once"}, streaming=True)
    assert plain.delivery_guarantee is DeliveryGuarantee.AT_LEAST_ONCE
    assert parse_sink_options(SINK, streaming=True).transactional_id_prefix == "strom-sink"
    custom = parse_sink_options({**SINK, "transactionalidprefix": "etl"}, streaming=True)
    assert custom.transactional_id_prefix == "etl"


def test_delivery_guarantee_errors() -> None:
    with pytest.raises(KafkaOptionError, match="'deliveryGuarantee', must be 'exactly-once' or"):
        parse_sink_options({**SINK, "deliveryguarantee": "exactly-twice"}, streaming=True)
    with pytest.raises(KafkaOptionError, match="'exactly-once' is for streaming writes"):
        parse_sink_options({**SINK, "deliveryguarantee": "exactly-once"})
    with pytest.raises(KafkaOptionError, match=r"'transactional\.id' is not supported"):
        parse_sink_options({**SINK, "kafka.transactional.id": "mine"}, streaming=True)
    with pytest.raises(KafkaOptionError, match=r"'enable\.idempotence' cannot be false"):
        parse_sink_options({**SINK, "kafka.enable.idempotence": "false"}, streaming=True)
    with pytest.raises(KafkaOptionError, match="'transactionalIdPrefix' must not be empty"):
        parse_sink_options({**SINK, "transactionalidprefix": " "}, streaming=True)
