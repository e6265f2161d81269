"""strom.protocol.spec and strom.protocol.api: parsing Kafka's JSON specs from kafka-python."""

from __future__ import annotations

import json
import warnings
from typing import Any

import pytest

from strom.protocol import api
from strom.protocol.api import SUPPORTED, ApiKey
from strom.protocol.spec import (
    MAX_VERSION,
    FieldSpec,
    VersionRange,
    all_api_specs,
    header_spec,
    load_spec,
    parse_spec,
    request_spec,
    response_spec,
    snake_case,
    spec_dir,
)


def test_spec_dir_is_inside_installed_kafka_python_not_repo() -> None:
    assert spec_dir().parts[-4:] == ("kafka", "protocol", "schemas", "resources")
    assert "site-packages" in spec_dir().parts


def test_all_request_response_specs_parse() -> None:
    specs = all_api_specs()
    assert len(specs) >= 100
    keys = {k for k, _ in specs}
    assert all((k, "response") in specs for k in keys)


def test_api_key_enum_names_every_spec_key() -> None:
    for (key, kind), spec in all_api_specs().items():
        if kind == "request":
            assert ApiKey(key).name == snake_case(spec.name.removesuffix("Request")).upper()
    assert ApiKey.PRODUCE == 0 and ApiKey.OFFSET_DELETE == 47 and ApiKey.API_VERSIONS == 18


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("none", VersionRange(1, 0)),
        ("3+", VersionRange(3, MAX_VERSION)),
        ("1-3", VersionRange(1, 3)),
        ("5", VersionRange(5, 5)),
    ],
)
def test_version_range_parse(text: str, expected: VersionRange) -> None:
    assert VersionRange.parse(text) == expected
    assert (
        VersionRange.parse("none").empty
        and 2 in VersionRange.parse("1-3")
        and 4 not in VersionRange.parse("1-3")
    )


@pytest.mark.parametrize(
    ("name", "attr"),
    [
        ("TopicData", "topic_data"),
        ("ThrottleTimeMs", "throttle_time_ms"),
        ("ProducerId", "producer_id"),
        ("IsInternal", "is_internal"),
        ("ClientSoftwareName", "client_software_name"),
    ],
)
def test_snake_case(name: str, attr: str) -> None:
    assert snake_case(name) == attr


def _kp_field_names(kp_fields: Any, ours: tuple[FieldSpec, ...], path: str) -> list[tuple[str, str, str]]:
    """(path, ours, theirs) for every field, recursively, in spec order."""
    pairs = []
    for field, (name, kp_field) in zip(ours, kp_fields.items(), strict=True):
        pairs.append((path, field.attr, name))
        if field.fields:
            pairs += _kp_field_names(kp_field.fields, field.fields, f"{path}.{field.attr}")
    return pairs


def test_field_names_match_kafka_python() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from test_codec_oracle import KP
    renamed = {"authorized_operations"}  # kafka-python's own Metadata/DescribeGroups rewrite
    for (key, kind), spec in all_api_specs().items():
        kp = KP.get((key, kind))
        if kp is None:
            continue
        for path, ours, theirs in _kp_field_names(kp._struct.fields, spec.fields, spec.name):
            assert ours == theirs or theirs in renamed, (path, ours, theirs)


def test_produce_request_fields_and_defaults() -> None:
    spec = request_spec(ApiKey.PRODUCE)
    assert spec is not None
    assert (spec.valid_versions, spec.flexible_versions) == (
        VersionRange(3, 13),
        VersionRange(9, MAX_VERSION),
    )
    txn, acks, _, topic_data = spec.fields
    assert (txn.attr, txn.present(2), txn.present(3), txn.default_for(3)) == (
        "transactional_id",
        False,
        True,
        None,
    )
    assert acks.default_for(0) == 0
    assert topic_data.is_array and topic_data.type == "struct"
    records = topic_data.fields[2].fields[1]
    assert (records.type, records.nullable(0), records.default_for(8)) == ("records", True, None)


def test_metadata_response_defaults_and_tags() -> None:
    spec = response_spec(ApiKey.METADATA)
    assert spec is not None
    by_attr = {f.attr: f for f in spec.fields}
    assert by_attr["cluster_authorized_operations"].default_for(8) == -2147483648
    assert by_attr["controller_id"].default_for(1) == -1
    assert by_attr["cluster_id"].default_for(2) is None


def test_api_versions_response_tagged_fields() -> None:
    spec = response_spec(ApiKey.API_VERSIONS)
    assert spec is not None
    tagged = {f.attr: (f.tag, f.default_for(3)) for f in spec.fields if f.tagged(3)}
    assert tagged == {
        "supported_features": (0, []),
        "finalized_features_epoch": (1, -1),
        "finalized_features": (2, []),
        "zk_migration_ready": (3, False),
    }


def test_common_structs_are_resolved() -> None:
    spec = load_spec("AddPartitionsToTxnRequest")
    names = {f.struct_name for f in spec.fields[0].fields if f.struct_name}
    assert spec.fields and names
    assert all(f.fields for f in spec.fields[0].fields if f.type == "struct")


def test_request_header_client_id_is_never_flexible() -> None:
    header = header_spec("RequestHeader")
    client_id = header.fields[-1]
    assert (client_id.attr, client_id.never_flexible, client_id.nullable(1)) == ("client_id", True, True)
    assert header.flexible(2) and not header.flexible(1)


def test_parse_spec_strips_comments_and_parses_defaults() -> None:
    text = "// licence\n" + json.dumps(
        {
            "apiKey": 999,
            "type": "request",
            "name": "TestRequest",
            "validVersions": "0-2",
            "flexibleVersions": "2+",
            "fields": [
                {"name": "Big", "type": "int32", "versions": "0+", "default": "0x7fffffff"},
                {"name": "Flag", "type": "bool", "versions": "1+", "default": "true"},
                {"name": "Ratio", "type": "float64", "versions": "0+", "default": "1.5"},
                {"name": "Id", "type": "uuid", "versions": "0+"},
            ],
        }
    )
    spec = parse_spec(text)
    assert [f.default_for(2) for f in spec.fields] == [0x7FFFFFFF, True, 1.5, bytes(16)]
    assert spec.max_version == 2 and spec.flexible(2)


# Flexible (KIP-482) versions the broker advertises, each added deliberately with per-version tests by
# real clients or raw requests (docs/protocol.md#the-table names the module of each): the data-path,
# topic, config and classic group APIs up to the newest version of the specs (topic ids, KIP-516; new
# leaders, KIP-951), the describe APIs of newer admin clients, ApiVersions 3-4, OffsetFetch 6-9, the
# transactional APIs' v3 (KIP-360, KIP-447), the flexible-only APIs of KIP-664, KIP-455 and KIP-554,
# WriteTxnMarkers 1, SaslAuthenticate 2, KIP-848's consumer-group APIs, the client-quota APIs and
# KIP-932's share-group APIs. Any other advertised version must be pre-flexible.
FLEXIBLE_ADVERTISED = {
    ApiKey.PRODUCE: [9, 10, 11, 12, 13],
    ApiKey.FETCH: [12, 13, 14, 15, 16, 17, 18],
    ApiKey.LIST_OFFSETS: [6, 7, 8, 9, 10, 11],
    ApiKey.METADATA: [9, 10, 11, 12, 13],
    ApiKey.OFFSET_COMMIT: [8, 9],
    ApiKey.OFFSET_FETCH: [6, 7, 8, 9],
    ApiKey.FIND_COORDINATOR: [3, 4, 5, 6],
    ApiKey.JOIN_GROUP: [6, 7, 8, 9],
    ApiKey.HEARTBEAT: [4],
    ApiKey.LEAVE_GROUP: [4, 5],
    ApiKey.SYNC_GROUP: [4, 5],
    ApiKey.DESCRIBE_GROUPS: [5, 6],
    ApiKey.LIST_GROUPS: [3, 4, 5],
    ApiKey.API_VERSIONS: [3, 4],
    ApiKey.CREATE_TOPICS: [5, 6, 7],
    ApiKey.DELETE_TOPICS: [4, 5, 6],
    ApiKey.DELETE_RECORDS: [2],
    ApiKey.INIT_PRODUCER_ID: [2, 3, 4, 5],
    ApiKey.ADD_PARTITIONS_TO_TXN: [3, 4, 5],
    ApiKey.ADD_OFFSETS_TO_TXN: [3, 4],
    ApiKey.END_TXN: [3, 4],
    ApiKey.TXN_OFFSET_COMMIT: [3, 4],
    ApiKey.DESCRIBE_PRODUCERS: [0],
    ApiKey.DESCRIBE_TRANSACTIONS: [0],
    ApiKey.LIST_TRANSACTIONS: [0, 1, 2],
    ApiKey.WRITE_TXN_MARKERS: [1, 2],
    ApiKey.DESCRIBE_ACLS: [2, 3],
    ApiKey.CREATE_ACLS: [2, 3],
    ApiKey.DELETE_ACLS: [2, 3],
    ApiKey.DESCRIBE_CONFIGS: [4],
    ApiKey.ALTER_CONFIGS: [2],
    ApiKey.INCREMENTAL_ALTER_CONFIGS: [1],
    ApiKey.CREATE_PARTITIONS: [2, 3],
    ApiKey.DELETE_GROUPS: [2],
    ApiKey.CONSUMER_GROUP_HEARTBEAT: [0, 1],
    ApiKey.CONSUMER_GROUP_DESCRIBE: [0, 1],
    ApiKey.OFFSET_FOR_LEADER_EPOCH: [4],
    ApiKey.ELECT_LEADERS: [2],
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: [0],
    ApiKey.LIST_PARTITION_REASSIGNMENTS: [0],
    ApiKey.DESCRIBE_CLUSTER: [0, 1, 2],
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: [0],
    ApiKey.DESCRIBE_LOG_DIRS: [2, 3, 4, 5],
    ApiKey.ALTER_REPLICA_LOG_DIRS: [2],
    ApiKey.GET_TELEMETRY_SUBSCRIPTIONS: [0],
    ApiKey.PUSH_TELEMETRY: [0],
    ApiKey.SASL_AUTHENTICATE: [2],
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: [0],
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: [0],
    ApiKey.DESCRIBE_CLIENT_QUOTAS: [1],
    ApiKey.ALTER_CLIENT_QUOTAS: [1],
    ApiKey.SHARE_GROUP_HEARTBEAT: [1],
    ApiKey.SHARE_GROUP_DESCRIBE: [1],
    ApiKey.SHARE_FETCH: [1],
    ApiKey.SHARE_ACKNOWLEDGE: [1],
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: [0, 1],
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: [0],
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: [0],
}


def test_supported_table_is_within_specs_and_flexible_only_where_listed() -> None:
    for key, (low, high) in SUPPORTED.items():
        spec = request_spec(key)
        assert spec is not None and 0 <= low <= high <= spec.max_version
        flexible = [v for v in range(low, high + 1) if api.flexible(key, v)]
        assert flexible == FLEXIBLE_ADVERTISED.get(key, []), key.name
    assert api.flexible(ApiKey.PRODUCE, 9) and not api.flexible(ApiKey.PRODUCE, 8)
    assert not api.flexible(999, 0)
    assert api.max_spec_version(ApiKey.METADATA) == 13 and api.max_spec_version(999) == -1
