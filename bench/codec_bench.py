"""Codec micro-benchmark: strom.protocol.codec vs kafka-python 3.0's kafka.protocol, side by side.

Each case times one "op" on the broker's hot path -- decode a request frame (header included) and/or
build + encode the framed response -- and prints the median µs/op over several repeats.

    .venv/bin/python bench/codec_bench.py [--number 20000] [--repeat 7]
    .venv/bin/python bench/codec_bench.py --fetch-versions [--number 20000] [--repeat 7]
    .venv/bin/python bench/codec_bench.py --produce-versions [--number 20000] [--repeat 7]

``--fetch-versions`` instead times a Fetch request's body decoded and its response's body encoded
(6 partitions of ~300 B, or 100 partitions as a follower asks) at v11 and at the flexible versions,
each through the generated codec and through what the codec runs now (fetch_codec.py from v12).

``--produce-versions`` times the broker's own path for Produce (the lean bodies of produce_codec.py): a
request frame of ~300 B records per partition decoded, header included, and its response encoded
(``decode_request`` and ``encode_response_chunks`` with ``lean=True``), 1 and 100 partitions, at v8 and
at the flexible versions v9, v12 and v13.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

from strom.protocol import codec, fetch_codec
from strom.protocol.codegen import compile_decoder, compile_encoder
from strom.protocol.spec import request_spec, response_spec

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.consumer import FetchRequest, FetchResponse
    from kafka.protocol.consumer.group import HeartbeatRequest, HeartbeatResponse
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse
    from kafka.protocol.producer import ProduceRequest, ProduceResponse

RECORDS = bytes(range(256)) + bytes(44)  # ~300 B stand-in for a record batch
PRODUCE_PART = ProduceRequest.TopicProduceData.PartitionProduceData
Op = Callable[[], Any]


def median_us(fn: Op, number: int, repeat: int) -> float:
    # CPU time of this process: less disturbed than wall time by other jobs on a shared machine.
    samples = []
    for _ in range(repeat):
        start = time.process_time()
        for _ in range(number):
            fn()
        samples.append((time.process_time() - start) / number * 1e6)
    return statistics.median(samples)


# -- Produce v8: decode request + encode response -------------------------------------------------


def produce_cases(version: int) -> tuple[Op, Op]:
    request = ProduceRequest[version](
        transactional_id=None,
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="events",
                partition_data=[PRODUCE_PART(index=0, records=RECORDS)],
            )
        ],
    )
    request.with_header(correlation_id=17, client_id="bench")
    frame = request.encode(header=True, framed=True)
    payload = frame[4:]

    def ours() -> bytes:
        req = codec.decode_request(payload)
        topic = req.body["topic_data"][0]
        body = {
            "responses": [
                {
                    "name": topic["name"],
                    "partition_responses": [{"index": 0, "error_code": 0, "base_offset": 1234}],
                }
            ],
            "throttle_time_ms": 0,
        }
        return codec.encode_response(req.api_key, req.api_version, req.correlation_id, body)

    Resp = ProduceResponse
    TopicResp = Resp.TopicProduceResponse
    PartResp = TopicResp.PartitionProduceResponse

    def theirs() -> bytes:
        req = ProduceRequest.decode(payload, version=version, header=True)
        topic = req.topic_data[0]
        resp = Resp(
            version=version,
            responses=[
                TopicResp(
                    name=topic.name, partition_responses=[PartResp(index=0, error_code=0, base_offset=1234)]
                )
            ],
            throttle_time_ms=0,
        )
        resp.with_header(correlation_id=req.header.correlation_id)
        out: bytes = resp.encode(header=True, framed=True)
        return out

    return ours, theirs


# -- Metadata v8: encode a response with 1 broker and 3 partitions ------------------------------


def metadata_cases(version: int) -> tuple[Op, Op]:
    def ours() -> bytes:
        body = {
            "throttle_time_ms": 0,
            "brokers": [{"node_id": 1, "host": "localhost", "port": 9092, "rack": None}],
            "cluster_id": "strom-cluster",
            "controller_id": 1,
            "topics": [
                {
                    "error_code": 0,
                    "name": "events",
                    "is_internal": False,
                    "partitions": [
                        {
                            "error_code": 0,
                            "partition_index": p,
                            "leader_id": 1,
                            "leader_epoch": -1,
                            "replica_nodes": [1],
                            "isr_nodes": [1],
                            "offline_replicas": [],
                        }
                        for p in range(3)
                    ],
                }
            ],
        }
        return codec.encode_response(3, version, 5, body)

    Resp = MetadataResponse
    Broker, Topic = Resp.MetadataResponseBroker, Resp.MetadataResponseTopic
    Partition = Topic.MetadataResponsePartition

    def theirs() -> bytes:
        resp = Resp(
            version=version,
            throttle_time_ms=0,
            brokers=[Broker(node_id=1, host="localhost", port=9092, rack=None)],
            cluster_id="strom-cluster",
            controller_id=1,
            topics=[
                Topic(
                    error_code=0,
                    name="events",
                    is_internal=False,
                    partitions=[
                        Partition(
                            error_code=0,
                            partition_index=p,
                            leader_id=1,
                            leader_epoch=-1,
                            replica_nodes=[1],
                            isr_nodes=[1],
                            offline_replicas=[],
                        )
                        for p in range(3)
                    ],
                )
            ],
        )
        resp.with_header(correlation_id=5)
        out: bytes = resp.encode(header=True, framed=True)
        return out

    return ours, theirs


def metadata_request_cases(version: int) -> tuple[Op, Op]:
    request = MetadataRequest[version](
        topics=[MetadataRequest.MetadataRequestTopic(name="events")], allow_auto_topic_creation=False
    )
    request.with_header(correlation_id=3, client_id="bench")
    payload = request.encode(header=True, framed=True)[4:]
    return (lambda: codec.decode_request(payload)), (
        lambda: MetadataRequest.decode(payload, version=version, header=True)
    )


# -- Fetch v11: decode request (1 partition) + encode response carrying ~300 B ---------------------


def fetch_cases(version: int) -> tuple[Op, Op]:
    Topic = FetchRequest.FetchTopic
    request = FetchRequest[version](
        replica_id=-1,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=52428800,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[Topic(topic="events", partitions=[Topic.FetchPartition(partition=0, fetch_offset=100)])],
        forgotten_topics_data=[],
        rack_id="",
    )
    request.with_header(correlation_id=9, client_id="bench")
    payload = request.encode(header=True, framed=True)[4:]

    def ours() -> bytes:
        req = codec.decode_request(payload)
        topic = req.body["topics"][0]
        body = {
            "responses": [
                {
                    "topic": topic["topic"],
                    "partitions": [
                        {
                            "partition_index": 0,
                            "high_watermark": 500,
                            "last_stable_offset": 500,
                            "records": RECORDS,
                        }
                    ],
                }
            ]
        }
        return codec.encode_response(1, version, req.correlation_id, body)

    RespTopic = FetchResponse.FetchableTopicResponse
    RespPart = RespTopic.PartitionData

    def theirs() -> bytes:
        req = FetchRequest.decode(payload, version=version, header=True)
        resp = FetchResponse(
            version=version,
            responses=[
                RespTopic(
                    topic=req.topics[0].topic,
                    partitions=[
                        RespPart(
                            partition_index=0, high_watermark=500, last_stable_offset=500, records=RECORDS
                        )
                    ],
                )
            ],
        )
        resp.with_header(correlation_id=req.header.correlation_id)
        out: bytes = resp.encode(header=True, framed=True)
        return out

    return ours, theirs


def heartbeat_cases(version: int) -> tuple[Op, Op]:
    request = HeartbeatRequest[version](group_id="g", generation_id=3, member_id="m-1")
    request.with_header(correlation_id=4, client_id="bench")
    payload = request.encode(header=True, framed=True)[4:]

    def ours() -> bytes:
        req = codec.decode_request(payload)
        return codec.encode_response(12, version, req.correlation_id, {"error_code": 0})

    def theirs() -> bytes:
        req = HeartbeatRequest.decode(payload, version=version, header=True)
        resp = HeartbeatResponse(version=version, throttle_time_ms=0, error_code=0)
        resp.with_header(correlation_id=req.header.correlation_id)
        out: bytes = resp.encode(header=True, framed=True)
        return out

    return ours, theirs


CASES: list[tuple[str, Callable[[int], tuple[Op, Op]], int]] = [
    ("Produce v8  decode req + encode resp (1 topic/1 part, 300 B)", produce_cases, 8),
    ("Produce v9  (flexible) same", produce_cases, 9),
    ("Fetch v11   decode req + encode resp (1 part, 300 B)", fetch_cases, 11),
    ("Metadata v8 decode req (1 topic)", metadata_request_cases, 8),
    ("Metadata v8 encode resp (1 broker, 3 partitions)", metadata_cases, 8),
    ("Metadata v12 (flexible) encode resp", metadata_cases, 12),
    ("Heartbeat v3 decode req + encode resp", heartbeat_cases, 3),
]


def fetch_body_ops(version: int, partitions: int) -> tuple[Op, Op]:
    """(generated, current): decode a Fetch request body and encode its response body."""
    request = {
        "replica_id": -1,
        "max_wait_ms": 500,
        "min_bytes": 1,
        "max_bytes": 52428800,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": "events",
                "topic_id": b"\x01" * 16,
                "partitions": [
                    {"partition": p, "fetch_offset": 100, "partition_max_bytes": 1 << 20}
                    for p in range(partitions)
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    frame = memoryview(codec.encode_request(1, version, 9, "bench", request)[4:])
    start = 2 + 2 + 4 + 2 + len("bench") + (1 if version >= 12 else 0)
    response = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [
            {
                "topic": "events",
                "topic_id": b"\x01" * 16,
                "partitions": [
                    {
                        "partition_index": p,
                        "error_code": 0,
                        "high_watermark": 500,
                        "last_stable_offset": 500,
                        "log_start_offset": 0,
                        "aborted_transactions": None,
                        "preferred_read_replica": -1,
                        "records": RECORDS,
                    }
                    for p in range(partitions)
                ],
            }
        ],
    }
    decode, encode = compile_decoder(request_spec(1), version), compile_encoder(response_spec(1), version)  # type: ignore[arg-type]

    def generated() -> None:
        decode(frame, start)
        encode(response, bytearray())

    if version not in fetch_codec.FLEXIBLE_VERSIONS:
        return generated, generated

    def current() -> None:
        fetch_codec.decode_request(frame, start, version)
        fetch_codec.encode_response(response, bytearray(), version)

    return generated, current


def produce_lean_op(version: int, partitions: int) -> Op:
    """The broker's Produce path at ``version``: decode a framed request, encode its lean response."""
    topic: dict[str, Any] = {
        "name": "events",
        "topic_id": b"\x01" * 16,
        "partition_data": [{"index": p, "records": RECORDS} for p in range(partitions)],
    }
    request = {"transactional_id": None, "acks": -1, "timeout_ms": 30000, "topic_data": [topic]}
    payload = codec.encode_request(0, version, 17, "bench", request)[4:]

    def op() -> None:
        req = codec.decode_request(payload, lean=True)
        body = req.body
        responses = [
            (name, [[index, 0, 1234, -1, 0, None, ()] for index, _ in parts])
            for name, parts in body["topic_data"]
        ]
        answer: dict[str, Any] = {"responses": responses, "throttle_time_ms": 0}
        if "topic_ids" in body:
            answer["topic_ids"] = body["topic_ids"]
        codec.encode_response_chunks(0, version, req.correlation_id, answer, lean=True)

    return op


def produce_versions(number: int, repeat: int) -> None:
    print(f"{'Produce, decode req + encode resp (lean)':<40} {'µs':>8} {'vs v8':>6}")
    for partitions in (1, 100):
        base = 0.0
        for version in (8, 9, 12, 13):
            op = produce_lean_op(version, partitions)
            op()
            took = median_us(op, max(number // partitions, 50), repeat)
            base = base or took
            name = f"v{version}, {partitions} partition{'s' if partitions > 1 else ''}"
            print(f"{name:<40} {took:>8.2f} {took / base:>6.2f}")


def fetch_versions(number: int, repeat: int) -> None:
    print(f"{'Fetch body: decode req + encode resp':<40} {'generated µs':>13} {'now µs':>8} {'ratio':>6}")
    for partitions in (6, 100):
        for version in (11, 12, 13, 16):
            generated, current = fetch_body_ops(version, partitions)
            times = [median_us(op, max(number // partitions, 50), repeat) for op in (generated, current)]
            name = f"v{version}, {partitions} partitions"
            print(f"{name:<40} {times[0]:>13.2f} {times[1]:>8.2f} {times[1] / times[0]:>6.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--number", type=int, default=20000, help="ops per repeat")
    parser.add_argument("--repeat", type=int, default=7, help="repeats (median is reported)")
    parser.add_argument("--fetch-versions", action="store_true", help="Fetch v11 against v12+ instead")
    parser.add_argument(
        "--produce-versions", action="store_true", help="Produce v8 against v9+ on the broker's lean path"
    )
    args = parser.parse_args()
    if args.produce_versions:
        produce_versions(args.number, args.repeat)
        return
    if args.fetch_versions:
        fetch_versions(args.number, args.repeat)
        return
    print(f"{'case':<62} {'strom µs':>9} {'kafka-python µs':>16} {'speed-up':>9}")
    for name, make, version in CASES:
        ours, theirs = make(version)
        ours(), theirs()  # warm up: compile caches
        mine = median_us(ours, args.number, args.repeat)
        other = median_us(theirs, max(args.number // 4, 1), args.repeat)
        print(f"{name:<62} {mine:>9.2f} {other:>16.2f} {other / mine:>8.1f}x")


if __name__ == "__main__":
    main()
