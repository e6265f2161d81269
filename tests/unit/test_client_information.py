"""What a connection keeps of its client for telemetry's selectors (strom.broker.client_telemetry): the
software of ApiVersions v3, kept only when Kafka would accept the names, and the selectors' values."""

from __future__ import annotations

import pytest

from strom.broker.client_telemetry import ClientInformation, ClientTelemetry


@pytest.mark.parametrize(
    ("name", "version", "kept"),
    [
        ("confluent-kafka-python", "2.16.0-rdkafka-2.16.0", True),
        ("apache-kafka-java", "4.1.0", True),
        ("-leading-dash", "1.0", False),
        ("trailing.", "1.0", False),
        ("spaces in it", "1.0", False),
        ("name", "", False),
        (None, "1.0", False),
    ],
)
def test_the_software_is_kept_only_when_kafka_would(name: str | None, version: str, kept: bool) -> None:
    info = ClientInformation(source_port=40000)
    info.learn_software(name, version)
    expected = (name, version) if kept else ("unknown", "unknown")
    assert (info.software_name, info.software_version) == expected


def test_the_selectors_values_leave_out_what_is_not_known() -> None:
    info = ClientInformation(source_port=40001)
    info.learn_software("librdkafka", "2.16.0")
    assert ClientTelemetry.attributes("app", "127.0.0.1", info) == {
        "client_id": "app",
        "client_source_address": "127.0.0.1",
        "client_source_port": "40001",
        "client_software_name": "librdkafka",
        "client_software_version": "2.16.0",
    }
    assert ClientTelemetry.attributes(None, "10.0.0.1", None) == {
        "client_id": "",
        "client_source_address": "10.0.0.1",
        "client_software_name": "unknown",
        "client_software_version": "unknown",
    }
