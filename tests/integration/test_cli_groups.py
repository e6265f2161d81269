"""`strom groups` and `strom consume --group` against a real broker.

These drive the broker's group coordinator (FindCoordinator, JoinGroup ..., ListGroups, DescribeGroups,
OffsetFetch, OffsetCommit, DeleteGroups) through the CLI.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from strom.protocol.api import ApiKey

from .kip848_clients import join_body
from .rawclient import RawClient

Strom = Callable[..., subprocess.CompletedProcess[bytes]]
STROM = [sys.executable, "-m", "strom.cli.main"]


@pytest.fixture
def strom(strom_broker: str) -> Strom:
    def run(*args: str, stdin: bytes = b"", check: bool = True) -> subprocess.CompletedProcess[bytes]:
        result = subprocess.run(
            [*STROM, "--bootstrap-server", strom_broker, *args],
            input=stdin,
            capture_output=True,
            timeout=120,
            check=False,
        )
        if check:
            assert result.returncode == 0, result.stderr.decode()
        return result

    return run


def committed(strom: Strom, group: str) -> dict[int, tuple[str, str, str]]:
    """partition -> (CURRENT-OFFSET, LOG-END-OFFSET, LAG) from `strom groups describe`."""
    lines = strom("groups", "describe", group).stdout.decode().splitlines()
    assert lines[0].startswith(f"Group {group}: type classic, state ")
    assert lines[1].split()[:5] == ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"]
    return {int(cols[1]): (cols[2], cols[3], cols[4]) for cols in (line.split() for line in lines[2:])}


def test_group_consume_describe_reset_delete(strom: Strom) -> None:
    topic, group = f"cli-grp-{uuid.uuid4().hex[:8]}", f"cli-g-{uuid.uuid4().hex[:8]}"
    strom("topics", "create", topic, "--partitions", "2")
    strom("produce", topic, "--partition", "0", stdin=b"a\nb\nc\nd\n")
    strom("produce", topic, "--partition", "1", stdin=b"e\nf\n")

    first = strom(
        "consume", topic, "--group", group, "--from-beginning", "--max-messages", "6", "--timeout-s", "60"
    )
    assert sorted(first.stdout.splitlines()) == [b"a", b"b", b"c", b"d", b"e", b"f"]
    assert group in strom("groups", "list").stdout.decode().splitlines()
    assert committed(strom, group) == {0: ("4", "4", "0"), 1: ("2", "2", "0")}
    typed = strom("groups", "list", "--type", "--state").stdout.decode().splitlines()
    assert typed[0].split() == ["GROUP", "TYPE", "STATE"] and [group, "CLASSIC", "EMPTY"] in [
        line.split() for line in typed
    ]

    dry = strom("groups", "reset-offsets", group, "--topic", topic, "--to-earliest").stdout.decode()
    assert "dry run" in dry
    assert committed(strom, group) == {0: ("4", "4", "0"), 1: ("2", "2", "0")}

    strom("groups", "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute")
    assert committed(strom, group) == {0: ("0", "4", "4"), 1: ("0", "2", "2")}
    again = strom("consume", topic, "--group", group, "--max-messages", "6", "--timeout-s", "60")
    assert sorted(again.stdout.splitlines()) == [b"a", b"b", b"c", b"d", b"e", b"f"]

    # Out-of-range targets are clamped to the log, as kafka-consumer-groups does.
    strom(
        "groups",
        "reset-offsets",
        group,
        "--topic",
        topic,
        "--to-offset",
        "100",
        "--partition",
        "0",
        "--execute",
    )
    strom(
        "groups",
        "reset-offsets",
        group,
        "--topic",
        topic,
        "--to-offset",
        "1",
        "--partition",
        "1",
        "--execute",
    )
    assert committed(strom, group) == {0: ("4", "4", "0"), 1: ("1", "2", "1")}
    strom(
        "groups",
        "reset-offsets",
        group,
        "--topic",
        topic,
        "--to-datetime",
        "2999-01-01T00:00:00Z",
        "--execute",
    )
    assert committed(strom, group) == {0: ("4", "4", "0"), 1: ("2", "2", "0")}

    assert strom("groups", "delete", group).stdout == f"Deleted group {group}.\n".encode()
    assert group not in strom("groups", "list").stdout.decode().splitlines()


def test_unknown_group_delete_is_one_line(strom: Strom) -> None:
    result = strom("groups", "delete", f"cli-none-{uuid.uuid4().hex[:8]}", check=False)
    assert result.returncode == 1
    assert result.stderr.decode().count("\n") == 1


def test_delete_offsets_of_an_unknown_group_fails_with_group_id_not_found(strom: Strom) -> None:
    topic, group = f"cli-do-{uuid.uuid4().hex[:8]}", f"cli-none-{uuid.uuid4().hex[:8]}"
    strom("topics", "create", topic, "--partitions", "2")
    result = strom("groups", "delete-offsets", group, "--topic", topic, check=False)
    assert result.returncode == 1
    expected = f"strom: error: cannot delete the offsets of share group {group!r}: GROUP_ID_NOT_FOUND\n"
    assert result.stderr.decode() == expected
    assert not result.stdout


def test_active_member_is_described_and_blocks_reset(strom: Strom, strom_broker: str, tmp_path: Path) -> None:
    topic, group = f"cli-act-{uuid.uuid4().hex[:8]}", f"cli-g-{uuid.uuid4().hex[:8]}"
    strom("topics", "create", topic, "--partitions", "2")
    strom("produce", topic, stdin=b"x\n")
    # stderr goes to a file: an unread pipe could fill and block the member, and the file explains a hang.
    member_err = tmp_path / "member.stderr"
    with open(member_err, "wb") as err:
        member = subprocess.Popen(
            [
                *STROM,
                "--bootstrap-server",
                strom_broker,
                "-v",
                "consume",
                topic,
                "--group",
                group,
                "--from-beginning",
            ],
            stdout=subprocess.PIPE,
            stderr=err,
        )
    try:
        assert member.stdout is not None
        assert member.stdout.readline() == b"x\n"  # joined, assigned, fetched
        lines = strom("groups", "describe", group).stdout.decode().splitlines()
        assert "1 member(s)" in lines[0]
        owners = {line.split()[5] for line in lines[2:]}
        assert len(owners) == 1
        assert owners != {"-"}
        refused = strom(
            "groups", "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute", check=False
        )
        assert refused.returncode == 1
        assert "active members" in refused.stderr.decode()
    finally:
        member.send_signal(signal.SIGINT)
        try:
            status = member.wait(timeout=60)
        except subprocess.TimeoutExpired:
            member.kill()
            member.wait(10)
            tail = member_err.read_bytes()[-4000:].decode(errors="replace")
            pytest.fail(f"the group member did not stop within 60 s of SIGINT; its stderr ends:\n{tail}")
    assert status == 0
    assert "0 member(s)" in strom("groups", "describe", group).stdout.decode().splitlines()[0]


def test_describe_unknown_group_is_one_line(strom: Strom) -> None:
    result = strom("groups", "describe", f"cli-none-{uuid.uuid4().hex[:8]}", check=False)
    assert result.returncode == 1
    assert result.stderr.decode().endswith("does not exist\n")


def test_a_consumer_group_is_listed_and_described_with_its_type(strom: Strom, strom_broker: str) -> None:
    """A KIP-848 member joined over the wire (ConsumerGroupHeartbeat): `groups list --type --state` and
    `groups describe` name the group's type and its state."""
    topic, group = f"cli-kip848-{uuid.uuid4().hex[:8]}", f"cli-c-{uuid.uuid4().hex[:8]}"
    strom("topics", "create", topic, "--partitions", "2")
    with RawClient(strom_broker) as raw:
        body = join_body(group, "member-1", [topic])
        deadline = time.monotonic() + 30
        while (resp := raw.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, body))["error_code"] != 0:
            assert time.monotonic() < deadline, resp  # the first group request creates the offsets topic
            time.sleep(0.1)
        listed = [
            line.split() for line in strom("groups", "list", "--type", "--state").stdout.decode().splitlines()
        ]
        assert [group, "CONSUMER", "STABLE"] in listed
        described = strom("groups", "describe", group).stdout.decode().splitlines()
        assert described[0].startswith(
            f"Group {group}: type consumer, state STABLE, 1 member(s), assignor uniform"
        )
        owners = {line.split()[1]: line.split()[5] for line in described[2:]}
        assert owners == {"0": "member-1", "1": "member-1"}
        assert raw.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, {**body, "member_epoch": -1})["error_code"] == 0


def test_a_reconciling_consumer_group_is_listed_and_described_with_its_state(
    strom: Strom, strom_broker: str
) -> None:
    """A second KIP-848 member joins: the first must revoke a partition for it, and until it heartbeats
    again the group is RECONCILING, a state confluent-kafka's admin client reads as UNKNOWN."""
    topic, group = f"cli-rec-{uuid.uuid4().hex[:8]}", f"cli-r-{uuid.uuid4().hex[:8]}"
    strom("topics", "create", topic, "--partitions", "2")
    with RawClient(strom_broker) as raw:
        first, second = join_body(group, "member-1", [topic]), join_body(group, "member-2", [topic])
        deadline = time.monotonic() + 30
        while (resp := raw.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, first))["error_code"] != 0:
            assert time.monotonic() < deadline, resp  # the first group request creates the offsets topic
            time.sleep(0.1)
        assert raw.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, second)["error_code"] == 0
        listed = [
            line.split() for line in strom("groups", "list", "--type", "--state").stdout.decode().splitlines()
        ]
        assert [group, "CONSUMER", "RECONCILING"] in listed
        described = strom("groups", "describe", group).stdout.decode().splitlines()
        assert described[0].startswith(f"Group {group}: type consumer, state RECONCILING, 2 member(s)")
        for body in (first, second):
            left = raw.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, {**body, "member_epoch": -1})
            assert left["error_code"] == 0
