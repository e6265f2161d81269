"""Per-(API, version) conformance of a live single-node broker, over raw TCP.

Every (key, version) the broker advertises in its own ApiVersions response is exercised here with a real
request at exactly that version and a semantic check of the answer (values, error codes, effects seen
through other APIs), except the group and offset APIs, which tests/integration/test_groups_protocol.py
covers version by version. `test_advertised_set_is_exactly_what_is_tested` keeps the two in step
(docs/protocol.md#advertise-nothing-untested). Each response frame is also decoded by kafka-python's
own protocol classes, an independent reading of the same bytes.
"""

from __future__ import annotations

import importlib
import pkgutil
import struct
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.protocol.api import ApiKey
from strom.protocol.codec import decode_response, encode_request
from strom.protocol.errors import ErrorCode
from strom.protocol.records.builder import decode_batches
from strom.testing import BrokerProcess

from .rawclient import RawClient, batch, fetch_body, produce_body

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka.protocol
    from kafka.protocol.api_message import ApiMessage

# The versions this module tests, written out (not read from strom.protocol.api) so that widening the
# advertised table without adding a test fails `test_advertised_set_is_exactly_what_is_tested`.
PRODUCE_V = range(14)
FETCH_V = range(4, 19)
LIST_OFFSETS_V = range(1, 12)
METADATA_V = range(14)
API_VERSIONS_V = range(5)
CREATE_TOPICS_V = range(8)
DELETE_TOPICS_V = range(7)
DELETE_RECORDS_V = range(3)
INIT_PRODUCER_ID_V = range(6)
DESCRIBE_CONFIGS_V = range(5)
ALTER_CONFIGS_V = range(3)
INCREMENTAL_ALTER_CONFIGS_V = range(2)
CREATE_PARTITIONS_V = range(4)

TESTED_HERE: dict[int, range] = {
    ApiKey.PRODUCE: PRODUCE_V,
    ApiKey.FETCH: FETCH_V,
    ApiKey.LIST_OFFSETS: LIST_OFFSETS_V,
    ApiKey.METADATA: METADATA_V,
    ApiKey.API_VERSIONS: API_VERSIONS_V,
    ApiKey.CREATE_TOPICS: CREATE_TOPICS_V,
    ApiKey.DELETE_TOPICS: DELETE_TOPICS_V,
    ApiKey.DELETE_RECORDS: DELETE_RECORDS_V,
    ApiKey.INIT_PRODUCER_ID: INIT_PRODUCER_ID_V,
    ApiKey.DESCRIBE_CONFIGS: DESCRIBE_CONFIGS_V,
    ApiKey.ALTER_CONFIGS: ALTER_CONFIGS_V,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: INCREMENTAL_ALTER_CONFIGS_V,
    ApiKey.CREATE_PARTITIONS: CREATE_PARTITIONS_V,
}
# Keys whose every advertised version is tested by another module of this directory (add yours here).
GROUP_KEYS = frozenset({8, 9, 10, 11, 12, 13, 14, 15, 16, 42, 47})
COVERED_ELSEWHERE: dict[int, str] = dict.fromkeys(GROUP_KEYS, "test_groups_protocol.py")
COVERED_ELSEWHERE.update(dict.fromkeys((23, 43, 45, 46), "test_conformance_cluster_apis.py"))
COVERED_ELSEWHERE.update(dict.fromkeys((24, 25, 26, 28), "test_transactions.py"))
COVERED_ELSEWHERE.update(dict.fromkeys((27, 61, 65, 66), "test_transaction_admin.py"))
COVERED_ELSEWHERE.update(dict.fromkeys((29, 30, 31), "test_acls.py"))
COVERED_ELSEWHERE.update(dict.fromkeys((17, 36, 50, 51), "test_sasl.py"))
COVERED_ELSEWHERE.update(dict.fromkeys((68, 69), "test_consumer_group_protocol.py"))
COVERED_ELSEWHERE.update(dict.fromkeys((48, 49), "test_client_quotas.py"))
COVERED_ELSEWHERE.update(dict.fromkeys((35, 60, 75), "test_admin_apis.py"))
COVERED_ELSEWHERE[34] = "test_log_dir_moves.py"
COVERED_ELSEWHERE.update(dict.fromkeys((71, 72), "test_client_telemetry.py"))
COVERED_ELSEWHERE.update(dict.fromkeys((76, 77, 78, 79), "test_share_groups.py"))
COVERED_ELSEWHERE[90] = "test_share_state.py"
COVERED_ELSEWHERE.update(dict.fromkeys((91, 92), "test_share_offsets_admin.py"))

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_DEFAULT = 5
AUTHORIZED_OPERATIONS_OMITTED = -2147483648


def _kafka_python_classes() -> dict[tuple[int, str], Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for mod in pkgutil.walk_packages(kafka.protocol.__path__, "kafka.protocol."):
            if ".old" not in mod.name and "generate" not in mod.name:
                importlib.import_module(mod.name)
    found: dict[tuple[int, str], Any] = {}
    todo = list(ApiMessage.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if getattr(cls, "_class_version", None) is None and getattr(cls, "_json", None):
            found[(cls.API_KEY, cls.type)] = cls
    return found


KP = _kafka_python_classes()


def call(raw: RawClient, key: int, version: int, body: dict[str, Any]) -> Any:
    """One request; the response is decoded by Strom's codec and, independently, by kafka-python's."""
    cid = raw.send(key, version, body)
    frame = raw.recv_frame()
    got, ours = decode_response(key, version, frame)
    assert got == cid
    theirs = KP[(key, "response")].decode(
        struct.pack(">i", len(frame)) + frame, version=version, header=True, framed=True
    )
    assert theirs.header.correlation_id == cid
    for name in ("error_code", "throttle_time_ms"):
        if name in ours:
            assert getattr(theirs, name) == ours[name]
    return ours


@pytest.fixture
def raw(broker: BrokerProcess) -> Iterator[RawClient]:
    with RawClient(broker.bootstrap) as client:
        yield client


def values_at(raw: RawClient, topic: str, partition: int, offset: int = 0) -> list[tuple[int, bytes | None]]:
    part = raw.fetch(topic, partition, offset)
    assert part["error_code"] == 0
    return [(r.offset, r.value) for b in decode_batches(part["records"]) for r in b.records]


def topic_id(raw: RawClient, name: str) -> bytes:
    """The topic's id (KIP-516), from Metadata v12."""
    (topic,) = call(raw, ApiKey.METADATA, 12, {"topics": [{"name": name}]})["topics"]
    assert topic["error_code"] == 0 and topic["topic_id"] != bytes(16)
    return bytes(topic["topic_id"])


def with_topic_ids(body: dict[str, Any], key: str, ids: dict[str, bytes]) -> dict[str, Any]:
    """``body`` with each topic's id beside its name (versions naming topics by id read only the id)."""
    name_key = "name" if key == "topic_data" else "topic"
    return {**body, key: [{**t, "topic_id": ids.get(t[name_key], bytes(16))} for t in body[key]]}


def metadata_topics(raw: RawClient, names: list[str] | None, version: int = 8, auto: bool = False) -> Any:
    topics = None if names is None else [{"name": n} for n in names]
    resp = call(raw, ApiKey.METADATA, version, {"topics": topics, "allow_auto_topic_creation": auto})
    return {t["name"]: t for t in resp["topics"]}


# -- Produce ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", PRODUCE_V)
def test_produce(raw: RawClient, topic_name: str, version: int) -> None:
    assert raw.create_topic(topic_name, 2) == 0
    raw.produce(topic_name, 1, batch([b"first"]))
    ids = {topic_name: topic_id(raw, topic_name)}
    body = with_topic_ids(produce_body(topic_name, 1, batch([b"a", b"b", b"c"])), "topic_data", ids)
    resp = call(raw, ApiKey.PRODUCE, version, body)
    assert version < 1 or resp["throttle_time_ms"] == 0
    (topic,) = resp["responses"]
    if version >= 13:  # topics by id (KIP-516)
        assert topic["topic_id"] == ids[topic_name]
        unknown = with_topic_ids(
            produce_body("nameless", 0, batch([b"x"])), "topic_data", {"nameless": b"u" * 16}
        )
        (gone,) = call(raw, ApiKey.PRODUCE, version, unknown)["responses"]
        assert gone["topic_id"] == b"u" * 16
        assert gone["partition_responses"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_ID
    else:
        assert topic["name"] == topic_name
    (part,) = topic["partition_responses"]
    assert part["index"] == 1
    if version < 3:
        # Kafka 4 rejects the magic v0/v1 versions while still advertising them
        # (docs/protocol.md#why-the-minimums-are-low).
        assert part["error_code"] == ErrorCode.UNSUPPORTED_VERSION
        assert values_at(raw, topic_name, 1) == [(0, b"first")]
        return
    assert part["error_code"] == 0
    assert part["base_offset"] == 1
    if version >= 2:
        assert part["log_append_time_ms"] == -1
    if version >= 5:
        assert part["log_start_offset"] == 0
    if version >= 8:
        assert part["record_errors"] == []
        assert part["error_message"] is None
    assert values_at(raw, topic_name, 1) == [(0, b"first"), (1, b"a"), (2, b"b"), (3, b"c")]
    assert values_at(raw, topic_name, 0) == []


# -- Fetch ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", FETCH_V)
def test_fetch(raw: RawClient, topic_name: str, version: int) -> None:
    assert raw.create_topic(topic_name, 2) == 0
    assert raw.produce(topic_name, 0, batch([b"a", b"b"]))["base_offset"] == 0
    assert raw.produce(topic_name, 0, batch([b"c"]))["base_offset"] == 2
    ids = {topic_name: topic_id(raw, topic_name)}
    for isolation in (0, 1):
        body = fetch_body(
            [(topic_name, 0, 0, 1 << 20), (topic_name, 1, 0, 1 << 20)], isolation_level=isolation
        )
        resp = call(raw, ApiKey.FETCH, version, with_topic_ids(body, "topics", ids))
        if version >= 7:
            assert resp["error_code"] == 0
            assert resp["session_id"] == 0  # sessions declined (docs/protocol.md#fetch-responses)
        (topic,) = resp["responses"]
        if version >= 13:  # topics by id (KIP-516)
            assert topic["topic_id"] == ids[topic_name]
        else:
            assert topic["topic"] == topic_name
        p0, p1 = topic["partitions"]
        assert (p0["partition_index"], p1["partition_index"]) == (0, 1)
        assert p0["error_code"] == p1["error_code"] == 0
        assert (p0["high_watermark"], p0["last_stable_offset"]) == (3, 3)
        assert (p1["high_watermark"], p1["last_stable_offset"]) == (0, 0)
        records = [(r.offset, r.value) for b in decode_batches(p0["records"]) for r in b.records]
        assert records == [(0, b"a"), (1, b"b"), (2, b"c")]
        assert decode_batches(p1["records"] or b"") == []
        if version >= 5:
            assert p0["log_start_offset"] == 0
        if version >= 11:
            assert p0["preferred_read_replica"] == -1
        if isolation == 1:
            assert not p0["aborted_transactions"]
    # a fetch from the middle of the log starts at the batch holding that offset
    middle = with_topic_ids(fetch_body([(topic_name, 0, 2, 1 << 20)]), "topics", ids)
    (part,) = call(raw, ApiKey.FETCH, version, middle)["responses"][0]["partitions"]
    assert part["records"][:8] == struct.pack(">q", 2)
    if version >= 13:
        unknown = with_topic_ids(fetch_body([("nameless", 0, 0, 1 << 20)]), "topics", {"nameless": b"u" * 16})
        (gone,) = call(raw, ApiKey.FETCH, version, unknown)["responses"]
        assert gone["topic_id"] == b"u" * 16
        assert gone["partitions"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_ID


# -- ListOffsets ------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", LIST_OFFSETS_V)
def test_list_offsets(raw: RawClient, topic_name: str, version: int) -> None:
    assert raw.create_topic(topic_name, 1) == 0
    t0 = int(time.time() * 1000) - 60_000
    raw.produce(topic_name, 0, batch([b"a", b"b"], timestamp_ms=t0))  # t0, t0+1
    raw.produce(topic_name, 0, batch([b"c", b"d"], timestamp_ms=t0 + 1000))  # t0+1000, t0+1001

    def lookup(timestamp: int, isolation: int = 0) -> dict[str, Any]:
        body = {
            "replica_id": -1,
            "isolation_level": isolation,
            "topics": [
                {
                    "name": topic_name,
                    "partitions": [
                        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp}
                    ],
                }
            ],
        }
        resp = call(raw, ApiKey.LIST_OFFSETS, version, body)
        (topic,) = resp["topics"]
        (part,) = topic["partitions"]
        assert part["partition_index"] == 0
        assert part["error_code"] == 0
        if version >= 4:
            assert part["leader_epoch"] in (-1, 0)
        return dict(part)

    assert lookup(-2)["offset"] == 0  # earliest
    assert lookup(-1)["offset"] == 4  # latest = high watermark
    if version >= 2:
        assert lookup(-1, isolation=1)["offset"] == 4  # read_committed: LSO == HWM
    found = lookup(t0 + 500)
    assert (found["offset"], found["timestamp"]) == (2, t0 + 1000)
    found = lookup(t0 + 1)
    assert (found["offset"], found["timestamp"]) == (1, t0 + 1)
    found = lookup(t0 + 10_000)
    assert (found["offset"], found["timestamp"]) == (-1, -1)
    if version >= 7:  # KIP-734: the first record with the largest timestamp
        raw.produce(topic_name, 0, batch([b"e"], timestamp_ms=t0 + 5))  # older than d
        found = lookup(-3)
        assert (found["offset"], found["timestamp"]) == (3, t0 + 1001)
    if version >= 8:  # KIP-405's local log start: the log start offset without tiered storage
        assert lookup(-4)["offset"] == 0
    if version >= 9:  # KIP-1005's last tiered offset: nothing is tiered
        assert (lookup(-5)["offset"], lookup(-5)["leader_epoch"]) == (-1, -1)
    if version >= 11:  # KIP-1023's earliest pending upload: nothing is pending
        assert lookup(-6)["offset"] == -1
    unknown = raw.call(
        ApiKey.LIST_OFFSETS,
        version,
        {"replica_id": -1, "topics": [{"name": topic_name, "partitions": [{"partition_index": 7}]}]},
    )
    assert unknown["topics"][0]["partitions"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


# -- Metadata ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", METADATA_V)
def test_metadata(raw: RawClient, broker: BrokerProcess, topic_name: str, version: int) -> None:
    assert raw.create_topic(topic_name, 3) == 0
    all_topics = metadata_topics(raw, [] if version == 0 else None, version)  # v0: empty list = all
    assert topic_name in all_topics
    if version >= 1:
        assert metadata_topics(raw, [], version) == {}  # v1+: empty list = none
    resp = call(raw, ApiKey.METADATA, version, {"topics": [{"name": topic_name}]})
    (broker_entry,) = resp["brokers"]
    assert (broker_entry["node_id"], broker_entry["host"], broker_entry["port"]) == (
        0,
        "127.0.0.1",
        broker.port,
    )
    if version >= 1:
        assert resp["controller_id"] == 0
        assert broker_entry["rack"] is None
    if version >= 2:
        assert isinstance(resp["cluster_id"], str) and resp["cluster_id"]
    if 8 <= version <= 10:  # (v11+ asks DescribeCluster instead, KIP-700)
        assert resp["cluster_authorized_operations"] == AUTHORIZED_OPERATIONS_OMITTED  # P3
    (topic,) = resp["topics"]
    assert (topic["error_code"], topic["name"]) == (0, topic_name)
    if version >= 10:  # topic ids (KIP-516)
        assert len(topic["topic_id"]) == 16 and topic["topic_id"] != bytes(16)
    if version >= 12:  # a topic named by its id alone
        by_id = call(
            raw, ApiKey.METADATA, version, {"topics": [{"name": None, "topic_id": topic["topic_id"]}]}
        )
        assert [(t["name"], t["error_code"]) for t in by_id["topics"]] == [(topic_name, 0)]
        unknown = call(raw, ApiKey.METADATA, version, {"topics": [{"name": None, "topic_id": b"u" * 16}]})
        assert [(t["name"], t["topic_id"], t["error_code"]) for t in unknown["topics"]] == [
            (None, b"u" * 16, ErrorCode.UNKNOWN_TOPIC_ID)
        ]
    if version >= 13:
        assert resp["error_code"] == 0
    if version >= 1:
        assert topic["is_internal"] is False
    if version >= 8:
        assert topic["topic_authorized_operations"] == AUTHORIZED_OPERATIONS_OMITTED
    assert [p["partition_index"] for p in topic["partitions"]] == [0, 1, 2]
    for p in topic["partitions"]:
        assert (p["error_code"], p["leader_id"], p["replica_nodes"], p["isr_nodes"]) == (0, 0, [0], [0])
        if version >= 5:
            assert p["offline_replicas"] == []
        if version >= 7:
            assert p["leader_epoch"] == 0  # the epoch stamped in stored batches

    bad = metadata_topics(raw, ["bad/name"], version)
    assert bad["bad/name"]["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
    missing = f"{topic_name}-auto"
    if version >= 4:
        # v4+: the request can forbid auto-creation
        got = metadata_topics(raw, [missing], version, auto=False)
        assert got[missing]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert got[missing]["partitions"] == []
        assert missing not in metadata_topics(raw, None)
        got = metadata_topics(raw, [missing], version, auto=True)
    else:
        got = metadata_topics(raw, [missing], version)  # v0-3 always allow it
    assert got[missing]["error_code"] in (0, ErrorCode.LEADER_NOT_AVAILABLE)
    assert missing in metadata_topics(raw, None)


# -- ApiVersions ------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", API_VERSIONS_V)
def test_api_versions(raw: RawClient, version: int) -> None:
    body = {"client_software_name": "strom-tests", "client_software_version": "1.0"}
    cid = raw.send(ApiKey.API_VERSIONS, version, body)
    frame = raw.recv_frame()
    assert struct.unpack_from(">i", frame)[0] == cid  # header v0 at every version: no tag byte follows
    _, resp = decode_response(ApiKey.API_VERSIONS, version, frame)
    assert resp["error_code"] == 0
    ranges = {e["api_key"]: (e["min_version"], e["max_version"]) for e in resp["api_keys"]}
    assert [e["api_key"] for e in resp["api_keys"]] == sorted(ranges)
    assert ranges[ApiKey.API_VERSIONS] == (0, 4)
    assert ranges[ApiKey.PRODUCE] == (0, 13)  # min 0 so old librdkafka keeps compressing
    if version >= 1:
        assert resp["throttle_time_ms"] == 0
    if version >= 3:
        assert frame[-1] == 0  # the body's tagged-field section is empty
        assert resp["finalized_features_epoch"] == -1
        assert resp["supported_features"] == [] and resp["finalized_features"] == []
    theirs = KP[(ApiKey.API_VERSIONS, "response")].decode(
        struct.pack(">i", len(frame)) + frame, version=version, header=True, framed=True
    )
    assert theirs.header.correlation_id == cid
    assert theirs.error_code == 0
    assert len(theirs.api_keys) == len(ranges)


@pytest.mark.parametrize("version", [3, 4])
@pytest.mark.parametrize(
    ("name", "software_version"),
    [
        ("", "1.0"),
        ("-strom", "1.0"),
        ("strom.", "1.0"),
        ("strom tests", "1.0"),
        ("strom", "1.0+x"),
        ("strom", ""),
    ],
)
def test_api_versions_with_an_invalid_software_name_is_an_invalid_request(
    raw: RawClient, version: int, name: str, software_version: str
) -> None:
    """Kafka checks ClientSoftwareName and ClientSoftwareVersion against its pattern and answers
    INVALID_REQUEST, with no API list; the connection stays open and a valid request is served."""
    body = {"client_software_name": name, "client_software_version": software_version}
    resp = raw.call(ApiKey.API_VERSIONS, version, body)
    assert (resp["error_code"], resp["api_keys"]) == (ErrorCode.INVALID_REQUEST, [])
    valid = {
        "client_software_name": "confluent-kafka-python",
        "client_software_version": "2.16.0-rdkafka-2.16.0",
    }
    again = raw.call(ApiKey.API_VERSIONS, version, valid)
    assert again["error_code"] == 0 and again["api_keys"]


def api_versions_frame(version: int, correlation_id: int) -> bytes:
    """An ApiVersions request at a version the codec does not know: header v2 plus a v3-style body."""
    client_id = b"future-client"
    payload = struct.pack(">hhih", ApiKey.API_VERSIONS, version, correlation_id, len(client_id))
    payload += client_id + b"\x00"  # empty header tags
    payload += b"\x05strom\x041.0\x00"  # compact strings + empty body tags
    return struct.pack(">i", len(payload)) + payload


@pytest.mark.parametrize("version", [5, 99, 0x7FFF])
def test_api_versions_unsupported_version(raw: RawClient, version: int) -> None:
    raw.send_bytes(api_versions_frame(version, 4242))
    frame = raw.recv_frame()
    got, resp = decode_response(ApiKey.API_VERSIONS, 0, frame)  # a v0 body, header v0
    assert got == 4242
    assert resp["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    ranges = {e["api_key"]: (e["min_version"], e["max_version"]) for e in resp["api_keys"]}
    assert ranges[ApiKey.API_VERSIONS] == (0, 4)
    # the connection stays usable: the client retries at a version we speak
    again = raw.call(ApiKey.API_VERSIONS, 3, {"client_software_name": "x", "client_software_version": "1"})
    assert again["error_code"] == 0


def test_advertised_set_is_exactly_what_is_tested(raw: RawClient) -> None:
    """docs/protocol.md#advertise-nothing-untested: every advertised (key, version) has a per-version test,
    here or in the module named by COVERED_ELSEWHERE (which must exercise that key at its SUPPORTED range)."""
    resp = raw.call(ApiKey.API_VERSIONS, 0, {})
    advertised = {
        (e["api_key"], v) for e in resp["api_keys"] for v in range(e["min_version"], e["max_version"] + 1)
    }
    tested_here = {(int(k), v) for k, vs in TESTED_HERE.items() for v in vs}
    here = {(k, v) for k, v in advertised if k not in COVERED_ELSEWHERE}
    assert here == tested_here, (
        f"advertised but untested: {sorted(here - tested_here)}; tested but not advertised: "
        f"{sorted(tested_here - here)}"
    )
    from strom.protocol.api import SUPPORTED

    elsewhere = {(k, v) for k, v in advertised if k in COVERED_ELSEWHERE}
    assert elsewhere == {
        (int(k), v) for k, (lo, hi) in SUPPORTED.items() if k in COVERED_ELSEWHERE for v in range(lo, hi + 1)
    }
    for key in {k for k, _ in elsewhere}:
        module = Path(__file__).with_name(COVERED_ELSEWHERE[key])
        assert f"ApiKey.{ApiKey(key).name}" in module.read_text(), (
            f"{module.name} does not test {ApiKey(key)!r}"
        )


# -- CreateTopics -----------------------------------------------------------------------------------


def _create(raw: RawClient, version: int, topics: list[dict[str, Any]], validate_only: bool = False) -> Any:
    full = [
        {
            "num_partitions": 1,
            "replication_factor": 1,
            "assignments": [],
            "configs": [],
            **t,
        }
        for t in topics
    ]
    resp = call(
        raw,
        ApiKey.CREATE_TOPICS,
        version,
        {"topics": full, "timeout_ms": 10_000, "validate_only": validate_only},
    )
    return {t["name"]: t for t in resp["topics"]}


@pytest.mark.parametrize("version", CREATE_TOPICS_V)
def test_create_topics(raw: RawClient, topic_name: str, version: int) -> None:
    bad_cfg = f"{topic_name}-cfg"
    unknown_cfg = f"{topic_name}-cfg2"
    out = _create(
        raw,
        version,
        [
            {
                "name": topic_name,
                "num_partitions": 3,
                "configs": [{"name": "retention.ms", "value": "3600000"}],
            },
            {"name": "bad/name"},
            {"name": f"{topic_name}-p0", "num_partitions": 0},
            {"name": f"{topic_name}-rf2", "replication_factor": 2},
            {"name": bad_cfg, "configs": [{"name": "retention.ms", "value": "soon"}]},
            {"name": unknown_cfg, "configs": [{"name": "no.such.config", "value": "1"}]},
        ],
    )
    assert out[topic_name]["error_code"] == 0
    assert out["bad/name"]["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert out[f"{topic_name}-p0"]["error_code"] == ErrorCode.INVALID_PARTITIONS
    assert out[f"{topic_name}-rf2"]["error_code"] == ErrorCode.INVALID_REPLICATION_FACTOR
    assert out[bad_cfg]["error_code"] == ErrorCode.INVALID_CONFIG
    assert out[unknown_cfg]["error_code"] == ErrorCode.INVALID_CONFIG
    if version >= 1:
        assert out[topic_name]["error_message"] is None
        assert out[bad_cfg]["error_message"]  # a reason for the user
    if version >= 5:  # what was created, with its configs (KIP-525)
        created = out[topic_name]
        assert (created["num_partitions"], created["replication_factor"]) == (3, 1)
        configs = {c["name"]: c for c in created["configs"]}
        assert (configs["retention.ms"]["value"], configs["retention.ms"]["config_source"]) == (
            "3600000",
            SOURCE_DYNAMIC_TOPIC,
        )
        assert configs["cleanup.policy"]["config_source"] == SOURCE_DEFAULT
        assert out[bad_cfg]["num_partitions"] == -1
    if version >= 7:  # the new topic's id (KIP-516), the one Metadata reports
        assert out[topic_name]["topic_id"] == topic_id(raw, topic_name)
        assert out[bad_cfg]["topic_id"] == bytes(16)
    again = _create(raw, version, [{"name": topic_name}])
    assert again[topic_name]["error_code"] == ErrorCode.TOPIC_ALREADY_EXISTS
    meta = metadata_topics(raw, None)
    assert len(meta[topic_name]["partitions"]) == 3
    for failed in ("bad/name", f"{topic_name}-p0", f"{topic_name}-rf2", bad_cfg, unknown_cfg):
        assert failed not in meta
    if version >= 1:
        dry = f"{topic_name}-dry"
        assert _create(raw, version, [{"name": dry}], validate_only=True)[dry]["error_code"] == 0
        assert dry not in metadata_topics(raw, None)
        bad = _create(raw, version, [{"name": dry, "num_partitions": -5}], validate_only=True)
        assert bad[dry]["error_code"] == ErrorCode.INVALID_PARTITIONS
    if version >= 4:
        # KIP-464: -1 means the broker's num.partitions / default.replication.factor
        dflt = f"{topic_name}-defaults"
        got = _create(raw, version, [{"name": dflt, "num_partitions": -1, "replication_factor": -1}])
        assert got[dflt]["error_code"] == 0
        assert len(metadata_topics(raw, [dflt])[dflt]["partitions"]) == 1
    described = _describe(raw, 1, topic_name, ["retention.ms"])
    assert described["retention.ms"]["value"] == "3600000"


# -- DeleteTopics -----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", DELETE_TOPICS_V)
def test_delete_topics(raw: RawClient, topic_name: str, version: int) -> None:
    assert raw.create_topic(topic_name, 2) == 0
    raw.produce(topic_name, 0, batch([b"x"]))
    missing = f"{topic_name}-missing"
    names = [topic_name, missing]
    body = {
        "topic_names": names,
        "topics": [{"name": name, "topic_id": bytes(16)} for name in names],
        "timeout_ms": 5000,
    }
    old_id = topic_id(raw, topic_name)
    resp = call(raw, ApiKey.DELETE_TOPICS, version, body)
    codes = {r["name"]: r["error_code"] for r in resp["responses"]}
    assert codes == {topic_name: 0, missing: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    if version >= 6:  # topic ids (KIP-516): answered with the id, and a topic can be named by its id
        assert resp["responses"][0]["topic_id"] == old_id
        assert raw.create_topic(f"{topic_name}-by-id", 1) == 0
        by_id = {
            "topics": [{"name": None, "topic_id": topic_id(raw, f"{topic_name}-by-id")}],
            "timeout_ms": 5000,
        }
        (gone,) = call(raw, ApiKey.DELETE_TOPICS, version, by_id)["responses"]
        assert (gone["name"], gone["error_code"]) == (f"{topic_name}-by-id", 0)
        assert f"{topic_name}-by-id" not in metadata_topics(raw, None)
        (again,) = call(raw, ApiKey.DELETE_TOPICS, version, by_id)["responses"]
        assert (again["name"], again["error_code"]) == (None, ErrorCode.UNKNOWN_TOPIC_ID)
        both = {"topics": [{"name": missing, "topic_id": old_id}], "timeout_ms": 5000}
        assert call(raw, ApiKey.DELETE_TOPICS, version, both)["responses"][0]["error_code"] == (
            ErrorCode.INVALID_REQUEST
        )
    assert topic_name not in metadata_topics(raw, None)
    assert raw.fetch(topic_name, 0, 0)["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # the name can be reused, and the new topic starts empty, with a new id
    assert raw.create_topic(topic_name, 1) == 0
    assert raw.list_offset(topic_name, 0, -1)["offset"] == 0
    assert topic_id(raw, topic_name) != old_id


# -- DeleteRecords ----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", DELETE_RECORDS_V)
def test_delete_records(raw: RawClient, topic_name: str, version: int) -> None:
    assert raw.create_topic(topic_name, 1) == 0
    for i in range(5):
        raw.produce(topic_name, 0, batch([b"%d" % i]))

    def delete(partition: int, offset: int) -> dict[str, Any]:
        body = {
            "topics": [
                {"name": topic_name, "partitions": [{"partition_index": partition, "offset": offset}]}
            ],
            "timeout_ms": 5000,
        }
        resp = call(raw, ApiKey.DELETE_RECORDS, version, body)
        return dict(resp["topics"][0]["partitions"][0])

    got = delete(0, 3)
    assert (got["error_code"], got["low_watermark"]) == (0, 3)
    assert raw.list_offset(topic_name, 0, -2)["offset"] == 3
    assert raw.fetch(topic_name, 0, 0)["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE
    assert values_at(raw, topic_name, 0, 3) == [(3, b"3"), (4, b"4")]
    assert raw.fetch(topic_name, 0, 3, version=5)["log_start_offset"] == 3
    assert delete(0, 99)["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE
    assert delete(4, 1)["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    got = delete(0, -1)  # -1: up to the high watermark
    assert (got["error_code"], got["low_watermark"]) == (0, 5)
    assert raw.produce(topic_name, 0, batch([b"5"]))["base_offset"] == 5


# -- InitProducerId ---------------------------------------------------------------------------------


@pytest.mark.parametrize("version", INIT_PRODUCER_ID_V)
def test_init_producer_id(raw: RawClient, version: int) -> None:
    body = {"transactional_id": None, "transaction_timeout_ms": 60_000}
    first = call(raw, ApiKey.INIT_PRODUCER_ID, version, body)
    second = call(raw, ApiKey.INIT_PRODUCER_ID, version, body)
    for resp in (first, second):
        assert (resp["error_code"], resp["producer_epoch"]) == (0, 0)
        assert resp["producer_id"] >= 0
    assert second["producer_id"] > first["producer_id"]
    # A transactional id: the coordinator's producer id, its epoch bumped by every new instance.
    tid = f"txn-conformance-{version}"
    txn = call(raw, ApiKey.INIT_PRODUCER_ID, version, {**body, "transactional_id": tid})
    again = call(raw, ApiKey.INIT_PRODUCER_ID, version, {**body, "transactional_id": tid})
    assert (txn["error_code"], again["error_code"]) == (0, 0)
    assert again["producer_id"] == txn["producer_id"] >= 0
    assert again["producer_epoch"] == txn["producer_epoch"] + 1
    too_long = call(
        raw, ApiKey.INIT_PRODUCER_ID, version, {"transactional_id": tid, "transaction_timeout_ms": 900_001}
    )
    assert too_long["error_code"] == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    if version >= 3:
        _init_producer_id_epoch_bumps(
            raw, version, tid, int(again["producer_id"]), int(again["producer_epoch"])
        )


def _init_producer_id_epoch_bumps(raw: RawClient, version: int, tid: str, pid: int, epoch: int) -> None:
    """KIP-360 (v3+): the current id and epoch bump the epoch; a retry of that bump (the previous epoch)
    answers the same again; an older epoch or another producer id is fenced (INVALID_PRODUCER_EPOCH
    below v4). An idempotent producer's old id is not reused."""
    body = {"transactional_id": tid, "transaction_timeout_ms": 60_000}
    bumped = call(
        raw, ApiKey.INIT_PRODUCER_ID, version, {**body, "producer_id": pid, "producer_epoch": epoch}
    )
    assert (bumped["error_code"], bumped["producer_id"], bumped["producer_epoch"]) == (0, pid, epoch + 1)
    retry = call(raw, ApiKey.INIT_PRODUCER_ID, version, {**body, "producer_id": pid, "producer_epoch": epoch})
    assert (retry["error_code"], retry["producer_id"], retry["producer_epoch"]) == (0, pid, epoch + 1)
    fenced = ErrorCode.PRODUCER_FENCED if version >= 4 else ErrorCode.INVALID_PRODUCER_EPOCH
    for stale in (
        {"producer_id": pid, "producer_epoch": epoch - 1},
        {"producer_id": pid + 1, "producer_epoch": 0},
    ):
        answer = call(raw, ApiKey.INIT_PRODUCER_ID, version, {**body, **stale})
        assert (answer["error_code"], answer["producer_id"], answer["producer_epoch"]) == (fenced, -1, -1)
    idempotent = {"transactional_id": None, "transaction_timeout_ms": 60_000}
    fresh = call(
        raw, ApiKey.INIT_PRODUCER_ID, version, {**idempotent, "producer_id": pid, "producer_epoch": 5}
    )
    assert fresh["error_code"] == 0 and fresh["producer_id"] > pid and fresh["producer_epoch"] == 0


# -- DescribeConfigs / AlterConfigs / IncrementalAlterConfigs ----------------------------------------


def _describe(
    raw: RawClient, version: int, name: str, keys: list[str] | None = None, rtype: int = TOPIC_RESOURCE
) -> dict[str, Any]:
    resp = call(
        raw,
        ApiKey.DESCRIBE_CONFIGS,
        version,
        {
            "resources": [{"resource_type": rtype, "resource_name": name, "configuration_keys": keys}],
            "include_synonyms": False,
            "include_documentation": False,
        },
    )
    (result,) = resp["results"]
    assert (result["resource_type"], result["resource_name"]) == (rtype, name)
    if result["error_code"]:
        return {"__error__": result["error_code"]}
    return {c["name"]: c for c in result["configs"]}


@pytest.mark.parametrize("version", DESCRIBE_CONFIGS_V)
def test_describe_configs(raw: RawClient, topic_name: str, version: int) -> None:
    assert raw.create_topic(topic_name, 1, {"retention.ms": "12345"}) == 0
    configs = _describe(raw, version, topic_name)
    assert {"retention.ms", "cleanup.policy", "max.message.bytes", "min.insync.replicas"} <= set(configs)
    override, default = configs["retention.ms"], configs["cleanup.policy"]
    assert override["value"] == "12345"
    assert default["value"] == "delete"
    assert configs["max.message.bytes"]["value"] == "1048588"
    for entry in configs.values():
        assert entry["is_sensitive"] is False
    if version == 0:
        assert (override["is_default"], default["is_default"]) == (False, True)
    else:
        assert override["config_source"] == SOURCE_DYNAMIC_TOPIC
        assert default["config_source"] == SOURCE_DEFAULT
    if version >= 3:
        assert override["config_type"] in (0, 5)  # UNKNOWN or LONG
    assert set(_describe(raw, version, topic_name, ["retention.ms"])) == {"retention.ms"}
    assert _describe(raw, version, f"{topic_name}-missing") == {
        "__error__": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    }
    brokers = _describe(raw, version, "0", rtype=BROKER_RESOURCE)
    assert brokers["message.max.bytes"]["value"] == "1048588"
    assert brokers["log.dirs"]["value"]


@pytest.mark.parametrize("version", ALTER_CONFIGS_V)
def test_alter_configs(raw: RawClient, topic_name: str, version: int) -> None:
    assert raw.create_topic(topic_name, 1, {"retention.ms": "12345"}) == 0

    def alter(name: str, configs: dict[str, str], validate_only: bool = False) -> int:
        body = {
            "resources": [
                {
                    "resource_type": TOPIC_RESOURCE,
                    "resource_name": name,
                    "configs": [{"name": k, "value": v} for k, v in configs.items()],
                }
            ],
            "validate_only": validate_only,
        }
        (result,) = call(raw, ApiKey.ALTER_CONFIGS, version, body)["responses"]
        assert (result["resource_type"], result["resource_name"]) == (TOPIC_RESOURCE, name)
        return int(result["error_code"])

    assert alter(topic_name, {"segment.ms": "600000"}, validate_only=True) == 0
    assert _describe(raw, 1, topic_name)["segment.ms"]["config_source"] == SOURCE_DEFAULT
    # AlterConfigs replaces the whole override set
    assert alter(topic_name, {"segment.ms": "600000"}) == 0
    configs = _describe(raw, 1, topic_name)
    assert (configs["segment.ms"]["value"], configs["segment.ms"]["config_source"]) == (
        "600000",
        SOURCE_DYNAMIC_TOPIC,
    )
    assert configs["retention.ms"]["config_source"] == SOURCE_DEFAULT
    assert alter(topic_name, {"segment.ms": "-7"}) == ErrorCode.INVALID_CONFIG
    assert alter(topic_name, {"no.such.config": "1"}) == ErrorCode.INVALID_CONFIG
    assert _describe(raw, 1, topic_name)["segment.ms"]["value"] == "600000"
    assert alter(f"{topic_name}-missing", {"segment.ms": "1000"}) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize("version", INCREMENTAL_ALTER_CONFIGS_V)
def test_incremental_alter_configs(raw: RawClient, topic_name: str, version: int) -> None:
    assert raw.create_topic(topic_name, 1, {"retention.ms": "12345"}) == 0

    def alter(name: str, ops: list[tuple[str, int, str | None]], validate_only: bool = False) -> int:
        body = {
            "resources": [
                {
                    "resource_type": TOPIC_RESOURCE,
                    "resource_name": name,
                    "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in ops],
                }
            ],
            "validate_only": validate_only,
        }
        (result,) = call(raw, ApiKey.INCREMENTAL_ALTER_CONFIGS, version, body)["responses"]
        return int(result["error_code"])

    assert alter(topic_name, [("segment.ms", 0, "600000")]) == 0  # SET keeps the other overrides
    configs = _describe(raw, 1, topic_name)
    assert (configs["segment.ms"]["value"], configs["retention.ms"]["value"]) == ("600000", "12345")
    assert alter(topic_name, [("retention.ms", 1, None)]) == 0  # DELETE reverts to the default
    assert _describe(raw, 1, topic_name)["retention.ms"]["config_source"] == SOURCE_DEFAULT
    assert alter(topic_name, [("cleanup.policy", 0, "shred")]) == ErrorCode.INVALID_CONFIG
    assert alter(topic_name, [("cleanup.policy", 0, "compact")], validate_only=True) == 0
    assert _describe(raw, 1, topic_name)["cleanup.policy"]["value"] == "delete"
    # APPEND then SUBTRACT every policy: an empty list is accepted, as Kafka accepts it
    assert alter(topic_name, [("cleanup.policy", 2, "compact")]) == 0
    assert _describe(raw, 1, topic_name)["cleanup.policy"]["value"] == "compact,delete"
    assert alter(topic_name, [("cleanup.policy", 3, "delete,compact")]) == 0
    assert _describe(raw, 1, topic_name)["cleanup.policy"]["value"] == ""
    assert alter(topic_name, [("message.format.version", 0, "0.10.0.0")]) == 0  # read as 0.10.0
    assert _describe(raw, 1, topic_name)["message.format.version"]["value"] == "0.10.0.0"
    assert alter(f"{topic_name}-missing", [("segment.ms", 0, "1")]) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


# -- CreatePartitions -------------------------------------------------------------------------------


@pytest.mark.parametrize("version", CREATE_PARTITIONS_V)
def test_create_partitions(raw: RawClient, topic_name: str, version: int) -> None:
    assert raw.create_topic(topic_name, 1) == 0

    def grow(name: str, count: int, validate_only: bool = False) -> int:
        body = {
            "topics": [{"name": name, "count": count, "assignments": None}],
            "timeout_ms": 5000,
            "validate_only": validate_only,
        }
        (result,) = call(raw, ApiKey.CREATE_PARTITIONS, version, body)["results"]
        assert result["name"] == name
        return int(result["error_code"])

    assert grow(topic_name, 3, validate_only=True) == 0
    assert len(metadata_topics(raw, [topic_name])[topic_name]["partitions"]) == 1
    assert grow(topic_name, 3) == 0
    assert len(metadata_topics(raw, [topic_name])[topic_name]["partitions"]) == 3
    assert raw.produce(topic_name, 2, batch([b"new"]))["error_code"] == 0
    assert values_at(raw, topic_name, 2) == [(0, b"new")]
    assert grow(topic_name, 3) == ErrorCode.INVALID_PARTITIONS
    assert grow(topic_name, 2) == ErrorCode.INVALID_PARTITIONS
    assert grow(f"{topic_name}-missing", 2) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_request_encoding_matches_kafka_python() -> None:
    """The raw client's frames are what kafka-python itself would send (so the tests speak real Kafka)."""
    body = {"topics": None, "allow_auto_topic_creation": False}
    ours = encode_request(ApiKey.METADATA, 8, 77, "strom-raw", body)
    theirs = KP[(ApiKey.METADATA, "request")](
        version=8,
        topics=None,
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    theirs.with_header(correlation_id=77, client_id="strom-raw")
    assert ours == bytes(theirs.encode(header=True, framed=True))
