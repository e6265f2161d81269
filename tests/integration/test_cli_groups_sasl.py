"""``strom groups`` over SASL listeners: the share-group requests the CLI sends itself
(strom.console.wire) log in with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 over SASL_PLAINTEXT and
SASL_SSL, from the same ``--command-config`` properties the confluent-kafka commands take, so a share
group lists as SHARE with its state and is described with its start offset and lag (not UNKNOWN). A
wrong password is one error line naming the broker that refused it."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from strom.testing.broker_process import BrokerProcess
from tests.integration.certs import Pki
from tests.integration.kip848_clients import wait_until
from tests.integration.secure_clients import Security, librdkafka_settings
from tests.integration.share_clients import ShareConsumerProcess
from tests.integration.strom_cli import STROM
from tests.integration.test_sasl import (
    _security,
    pki,  # noqa: F401  (the module's certificates)
    sasl_broker,  # noqa: F401  (the module's broker: PLAIN users alice, SCRAM user carol)
)
from tests.integration.test_share_group_configs import set_group_config
from tests.integration.test_share_groups import make_topic, produce

TOTAL = 30


def run_strom(broker: BrokerProcess, sec: Security, *args: str) -> subprocess.CompletedProcess[str]:
    config = [arg for k, v in librdkafka_settings(sec).items() for arg in ("--command-config", f"{k}={v}")]
    bootstrap = broker.listeners[sec.protocol]
    return subprocess.run(
        [*STROM, "--bootstrap-server", bootstrap, "--request-timeout-s", "30", *config, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def share_group(
    sasl_broker: BrokerProcess,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, str]]:
    """(topic, group): a share group whose one member accepted every record and stays in the group."""
    topic, group = "sasl-share", "sasl-share-g"
    make_topic(sasl_broker.bootstrap, topic)
    assert set_group_config(sasl_broker.bootstrap, group, "share.auto.offset.reset", "earliest") == 0
    produce(sasl_broker.bootstrap, topic, [f"v{i}" for i in range(TOTAL)])
    consumer = ShareConsumerProcess(
        tmp_path_factory.mktemp("consumer"),
        "member",
        {"bootstrap": sasl_broker.bootstrap, "topics": [topic], "group": group},
    )
    try:
        assert wait_until(lambda: set(consumer.offsets()) >= set(range(TOTAL)), 90), consumer.snapshot()[-3:]
        yield topic, group
    finally:
        consumer.kill()


@pytest.mark.parametrize(
    ("protocol", "mechanism"),
    [("SASL_PLAINTEXT", "PLAIN"), ("SASL_SSL", "SCRAM-SHA-256"), ("SASL_PLAINTEXT", "SCRAM-SHA-512")],
)
def test_share_group_listed_and_described_over_sasl(
    sasl_broker: BrokerProcess,  # noqa: F811
    pki: Pki,  # noqa: F811
    share_group: tuple[str, str],
    protocol: str,
    mechanism: str,
) -> None:
    topic, group = share_group
    sec = _security(protocol, mechanism, pki)
    listed = run_strom(sasl_broker, sec, "groups", "list", "--type", "--state")
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line.split()[1:] for line in listed.stdout.splitlines()}
    assert rows[group] == ["SHARE", "STABLE"], listed.stdout

    def described() -> list[list[str]]:
        # The implicit acknowledgement of the last poll reaches the broker with the next poll.
        answer = run_strom(sasl_broker, sec, "groups", "describe", group)
        assert answer.returncode == 0, answer.stderr
        lines = answer.stdout.splitlines()
        assert lines[0].startswith(f"Group {group}: type share"), lines
        return [line.split()[:5] for line in lines[2:]]

    assert wait_until(lambda: described() == [[topic, "0", str(TOTAL), "0", "1"]], 30), described()


def test_a_wrong_password_is_one_line(
    sasl_broker: BrokerProcess,  # noqa: F811
    pki: Pki,  # noqa: F811
    share_group: tuple[str, str],
) -> None:
    _, group = share_group
    refused = run_strom(
        sasl_broker, _security("SASL_SSL", "SCRAM-SHA-512", pki, "wrong"), "groups", "describe", group
    )
    assert refused.returncode == 1
    (line,) = refused.stderr.splitlines()
    assert line.startswith("strom: error: SASL authentication refused by 127.0.0.1:"), line
    assert "wrong" not in line.split("refused by", 1)[1]
