"""The issue's end-to-end case: a PySpark job (`python job.py`) on a standalone Spark cluster reads Avro,
Protobuf and JSON Schema topics into typed columns and writes them back, over SASL_SSL with Java-style
settings, and its lag shows in `strom groups describe`. confluent-kafka's serializers write the input
and its deserializers read the output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from strom.testing.broker_process import BrokerProcess
from tests.spark.kafka_helpers import consume_all, new_topic
from tests.spark.standalone import StandaloneCluster, start_cluster
from tests.spark.test_progress import describe
from tests.spark.test_security import pki, secure_broker, stores, truststore_options  # noqa: F401 (fixtures)
from tests.spark.test_typed_formats import CLICK_JSON_V1, click, message_class, produce_serialized

pytestmark = pytest.mark.spark

AVRO = {
    "type": "record",
    "name": "Click",
    "fields": [{"name": "user", "type": "string"}, {"name": "latency_ms", "type": "int"}],
}
JOB = """
import json
import sys

from pyspark.sql import SparkSession

import strom.spark

master, url, checkpoints = sys.argv[1], sys.argv[2], sys.argv[5]
options, jobs = json.loads(sys.argv[3]), json.loads(sys.argv[4])
spark = SparkSession.builder.master(master).config("spark.pyspark.python", sys.executable).getOrCreate()
strom.spark.register(spark)
ids = {}
for fmt, source, sink in jobs:
    stream = (spark.readStream.format("strom").options(**options)
              .option("subscribe", source).option("startingOffsets", "earliest")
              .option("valueFormat", fmt).option("schema.registry.url", url).load())
    query = (stream.select("value").writeStream.format("strom").options(**options)
             .option("topic", sink).option("valueFormat", fmt).option("valueSubject", f"{source}-value")
             .option("schema.registry.url", url).option("checkpointLocation", f"{checkpoints}/{fmt}")
             .trigger(availableNow=True).start())
    query.awaitTermination()
    ids[fmt] = query.id
print("RESULT " + json.dumps(ids))
spark.stop()
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    started = start_cluster(tmp_path_factory.mktemp("standalone-secure"))
    yield started
    started.stop()


def test_typed_formats_over_sasl_ssl_on_a_standalone_cluster_with_lag(
    cluster: StandaloneCluster,
    secure_broker: BrokerProcess,  # noqa: F811
    stores: tuple[Path, Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    plain, url = secure_broker.bootstrap, secure_broker.http_url
    assert url is not None
    # SASL listeners turn the HTTP side's logins on: the registry is reached as carol too.
    registry_login = "carol:carol-secret"
    client = SchemaRegistryClient({"url": url, "basic.auth.user.info": registry_login})
    topics = {
        fmt: (new_topic(plain, partitions=2), new_topic(plain, partitions=1))
        for fmt in ("avro", "protobuf", "json")
    }
    users = sorted(f"u{i}" for i in range(12))
    value = MessageField.VALUE
    avro_rows = [{"user": u, "latency_ms": i + 1} for i, u in enumerate(users)]
    produce_serialized(plain, topics["avro"][0], AvroSerializer(client, json.dumps(AVRO)), avro_rows, value)
    v1 = message_class(1)
    proto_rows = [click(v1, i) for i in range(12)]
    serializer = ProtobufSerializer(v1, client, {"use.deprecated.format": False})
    produce_serialized(plain, topics["protobuf"][0], serializer, proto_rows, value)
    json_rows = [{"user": u, "latency_ms": i + 1} for i, u in enumerate(users)]
    produce_serialized(
        plain, topics["json"][0], JSONSerializer(json.dumps(CLICK_JSON_V1), client), json_rows, value
    )

    truststore, _ = stores
    options = {
        "kafka.bootstrap.servers": secure_broker.listeners["SASL_SSL"],
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="carol" password="carol-secret";',
        **truststore_options(truststore),
        "schema.registry.basic.auth.user.info": registry_login,
    }
    jobs = [[fmt, source, sink] for fmt, (source, sink) in topics.items()]
    (tmp_path / "job.py").write_text(JOB)
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    args = [cluster.master_url, url, json.dumps(options), json.dumps(jobs), str(tmp_path / "ck")]
    done = subprocess.run(
        [sys.executable, "job.py", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=420,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    [result] = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    ids = json.loads(result.removeprefix("RESULT "))

    def written(fmt: str, deserializer: object) -> list[object]:
        sink = topics[fmt][1]
        context = SerializationContext(sink, value)
        return [deserializer(r["value"], context) for r in consume_all(plain, sink, 1)]  # type: ignore[operator]

    assert sorted(r["user"] for r in written("avro", AvroDeserializer(client))) == users  # type: ignore[index]
    protos = written("protobuf", ProtobufDeserializer(v1, {"use.deprecated.format": False}))
    assert sorted(m.user for m in protos) == users  # type: ignore[attr-defined]
    jsons = written("json", JSONDeserializer(None, schema_registry_client=client))
    assert sorted((r["user"], r["latency_ms"]) for r in jsons) == sorted(
        (u, i + 1) for i, u in enumerate(users)
    )  # type: ignore[index]
    # Each query's progress is its group's committed offsets: no lag left.
    for fmt, (source, _sink) in topics.items():
        lag = describe(plain, f"strom-spark-{ids[fmt]}")
        assert sum(end for _, end, _ in lag.values()) == 12 and all(
            behind == 0 for *_, behind in lag.values()
        ), (
            fmt,
            source,
            lag,
        )
