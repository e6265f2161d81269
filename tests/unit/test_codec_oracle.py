"""Cross-check strom.protocol.codec against kafka-python 3.0's kafka.protocol (the oracle).

For every advertised (api, version) -- plus a few flexible versions we will advertise later -- a
representative message is generated from the spec (every field present, distinct values, nulls,
nested arrays, tagged fields in flexible versions), then:

* request: kafka-python encodes a framed request with header -> ours decodes -> same values;
* response: ours encodes -> kafka-python decodes -> same values;
* round trip: ours -> ours, both kinds, byte-identical on re-encode.
"""

from __future__ import annotations

import importlib
import pkgutil
import uuid
import warnings
from typing import Any

import pytest

with warnings.catch_warnings():
    # kafka-python loads its specs with importlib.resources' deprecated legacy API
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka.protocol
    from kafka.protocol.api_message import ApiMessage

from strom.protocol import codec
from strom.protocol.api import SUPPORTED, ApiKey
from strom.protocol.spec import FieldSpec, request_spec, response_spec

# Flexible versions beyond the advertised table, exercised because they will be advertised later.
EXTRA = [(ApiKey.METADATA, v) for v in (9, 10, 11, 12)] + [(ApiKey.PRODUCE, 9), (ApiKey.FETCH, 12)]
CASES = sorted({(int(k), v) for k, (lo, hi) in SUPPORTED.items() for v in range(lo, hi + 1)} | set(EXTRA))
IDS = [f"{ApiKey(k).name.lower()}-v{v}" for k, v in CASES]


def _kafka_python_classes() -> dict[tuple[int, str], type[Any]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for mod in pkgutil.walk_packages(kafka.protocol.__path__, "kafka.protocol."):
            if ".old" not in mod.name and "generate" not in mod.name:
                importlib.import_module(mod.name)
    found: dict[tuple[int, str], type[Any]] = {}
    todo = list(ApiMessage.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if getattr(cls, "_class_version", None) is None and getattr(cls, "_json", None):
            found[(cls.API_KEY, cls.type)] = cls
    return found


KP = _kafka_python_classes()
# kafka-python has no classes for some advertised APIs (KIP-848's consumer-group APIs, described in
# strom.protocol.consumer_group_specs): those get the round trip here and golden encodings elsewhere.
ORACLE_CASES = [case for case in CASES if (case[0], "request") in KP]
ORACLE_IDS = [f"{ApiKey(k).name.lower()}-v{v}" for k, v in ORACLE_CASES]


# -- representative messages ---------------------------------------------------------------------


def sample_value(f: FieldSpec, version: int, flexible: bool, seed: int) -> Any:
    nullable = f.nullable(version)
    if f.is_array:
        if nullable and seed % 4 == 0:
            return None
        if f.type == "struct":
            return [sample_struct(f.fields, version, flexible, seed * 3 + i) for i in range(2)]
        return [scalar(f.type, seed + i, False) for i in range(3)]
    if f.type == "struct":
        if nullable and seed % 4 == 0:
            return None
        return sample_struct(f.fields, version, flexible, seed * 5)
    return scalar(f.type, seed, nullable)


def scalar(type_: str, seed: int, nullable: bool) -> Any:
    if nullable and seed % 3 == 0:
        return None
    values: dict[str, Any] = {
        "int8": seed % 100 + 1,
        "int16": seed * 7 % 30000 + 1,
        "uint16": seed * 13 % 60000 + 1,
        "int32": seed * 1000 + 3,
        "int64": seed * 10_000_000_000 + 5,
        "float64": seed + 0.5,
        "bool": True,
        "uuid": bytes((seed + i) % 256 for i in range(16)),
        "string": f"s{seed}-ü",
        "bytes": bytes(range(seed % 7 + 1)),
        "records": bytes(range(20 + seed % 5)),
    }
    return values[type_]


def sample_struct(fields: tuple[FieldSpec, ...], version: int, flexible: bool, seed: int) -> dict[str, Any]:
    body: dict[str, Any] = {}
    for i, f in enumerate(fields):
        if f.present(version):
            body[f.attr] = sample_value(f, version, flexible, seed + i + 1)
    return body


def sample_body(api_key: int, version: int, kind: str) -> dict[str, Any]:
    spec = request_spec(api_key) if kind == "request" else response_spec(api_key)
    assert spec is not None
    body = sample_struct(spec.fields, version, spec.flexible(version), api_key * 31 + version)
    if api_key == ApiKey.API_VERSIONS and kind == "response":
        body["error_code"] = 0  # non-zero switches the body to v0 (tested separately)
    if api_key == ApiKey.METADATA and kind == "response":
        # kafka-python rewrites these into a set-valued "authorized_operations"; send the default.
        if "cluster_authorized_operations" in body:
            body["cluster_authorized_operations"] = -2147483648
        for topic in body.get("topics") or []:
            if "topic_authorized_operations" in topic:
                topic["topic_authorized_operations"] = -2147483648
    return body


# -- conversion to and from kafka-python objects -------------------------------------------------


def to_kp(cls: Any, value: dict[str, Any], version: int | None = None) -> Any:
    kwargs: dict[str, Any] = {}
    fields = cls._struct.fields
    for name, raw in value.items():
        field = fields.get(name)
        if field is None:  # kafka-python renamed it (Metadata authorized operations)
            continue
        v = raw
        if field.is_struct_array() and raw is not None:
            v = [to_kp(field.data_class, e) for e in raw]
        elif field.is_struct() and raw is not None:
            v = to_kp(field.data_class, raw)
        elif field.type_str == "uuid" and raw is not None:
            v = uuid.UUID(bytes=raw)
        kwargs[name] = v
    return cls(version=version, **kwargs) if version is not None else cls(**kwargs)


def normalize(value: Any, drop: str = "\0") -> Any:
    """Comparable form: memoryview/bytearray -> bytes, UUID -> bytes, keys ending in ``drop`` removed."""
    if isinstance(value, dict):
        return {k: normalize(v, drop) for k, v in value.items() if not k.endswith(drop)}
    if isinstance(value, list | tuple):
        return [normalize(v, drop) for v in value]
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    if isinstance(value, uuid.UUID):
        return value.bytes
    return value


def fill_uuid_none(value: Any, expected: Any) -> Any:
    """kafka-python decodes the all-zero UUID as None."""
    if isinstance(expected, dict) and isinstance(value, dict):
        return {k: fill_uuid_none(value.get(k), v) for k, v in expected.items()}
    if isinstance(expected, list) and isinstance(value, list):
        return [fill_uuid_none(a, b) for a, b in zip(value, expected, strict=False)]
    if value is None and expected == bytes(16):
        return expected
    return value


# -- tests ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("api_key", "version"), ORACLE_CASES, ids=ORACLE_IDS)
def test_request_kafka_python_to_ours(api_key: int, version: int) -> None:
    body = sample_body(api_key, version, "request")
    message = to_kp(KP[(api_key, "request")], body, version)
    message.with_header(correlation_id=4242, client_id="oracle-ü")
    frame = message.encode(header=True, framed=True)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    request = codec.decode_request(frame[4:])
    assert (request.api_key, request.api_version) == (api_key, version)
    assert (request.correlation_id, request.client_id) == (4242, "oracle-ü")
    assert normalize(request.body) == normalize(body)
    # ours re-encodes the same bytes kafka-python produced
    assert codec.encode_request(api_key, version, 4242, "oracle-ü", request.body) == bytes(frame)


@pytest.mark.parametrize(("api_key", "version"), ORACLE_CASES, ids=ORACLE_IDS)
def test_response_ours_to_kafka_python(api_key: int, version: int) -> None:
    body = sample_body(api_key, version, "response")
    frame = codec.encode_response(api_key, version, 99, body)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    decoded = KP[(api_key, "response")].decode(frame, version=version, header=True, framed=True)
    assert decoded.header.correlation_id == 99
    # kafka-python turns authorized operations (Metadata, DescribeGroups, DescribeCluster,
    # DescribeTopicPartitions) into a set "authorized_operations"
    quirky = api_key in (
        ApiKey.METADATA,
        ApiKey.DESCRIBE_GROUPS,
        ApiKey.DESCRIBE_CLUSTER,
        ApiKey.DESCRIBE_TOPIC_PARTITIONS,
    )
    drop = "authorized_operations" if quirky else "\0"
    expected = normalize(body, drop)
    assert fill_uuid_none(normalize(decoded.to_dict(json=False), drop), expected) == expected


@pytest.mark.parametrize(("api_key", "version"), CASES, ids=IDS)
def test_round_trip_ours(api_key: int, version: int) -> None:
    request_body = sample_body(api_key, version, "request")
    frame = codec.encode_request(api_key, version, 7, None, request_body)
    request = codec.decode_request(frame[4:])
    assert request.client_id is None
    assert normalize(request.body) == normalize(request_body)
    response_body = sample_body(api_key, version, "response")
    frame = codec.encode_response(api_key, version, 8, response_body)
    correlation_id, decoded = codec.decode_response(api_key, version, frame[4:])
    assert correlation_id == 8
    assert normalize(decoded) == normalize(response_body)
    assert codec.encode_response(api_key, version, 8, decoded) == frame
