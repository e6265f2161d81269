"""A power outage of the whole cluster (beyond Kafka's promise, never in the fault mix): what the flush
policy alone keeps, and the bug an outage found."""

from __future__ import annotations

import asyncio

import pytest

from strom.broker.coordinators.group_service import OFFSETS_TOPIC, GroupService
from strom.protocol.errors import ErrorCode
from strom.sim.loop import START_S
from strom.sim.run import run_seed

FLUSHED = {"log.flush.interval.messages": "1"}  # every append fsynced before it is acknowledged


def test_a_power_outage_loses_acknowledged_records_unless_every_append_is_flushed() -> None:
    """Every machine losing power at once is beyond Kafka's promise: with the default flush policy the
    acknowledged records no disk had synced are gone; with ``log.flush.interval.messages=1`` every
    append is fsynced before it is acknowledged and none is lost."""
    default = []
    for seed in range(12):  # the first seed whose outage hits acknowledged records not yet synced
        default.append(run_seed(seed, 30.0, ("outage",)))
        if default[-1].findings.lost:
            break
    assert default[-1].findings.lost, [r.findings.summary() for r in default]
    flushed = [run_seed(seed, 30.0, ("outage",), settings=FLUSHED) for seed in range(1, 4)]
    assert all(r.findings.acked > 100 for r in flushed)
    # Each run's power went out while the producers ran, and came back (else it judged nothing).
    assert all(any(line.endswith(" every broker restarted") for line in r.trace) for r in flushed)
    assert [r.findings.summary() for r in flushed if not r.ok] == []


def test_a_restarted_broker_does_not_answer_group_offsets_before_it_knows_the_cluster(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Seed 0 of a flushed power outage found it: every broker restarted within the session timeout,
    so none was registered or sent the cluster's view for seconds; the committer's OffsetFetch to
    the old coordinator's address was answered from an empty group (committed offset -1, no error),
    because a broker that did not know ``__consumer_offsets`` took it for not created yet. A consumer
    would have reset its position. Such a broker now answers NOT_COORDINATOR.

    The seed must still reach that moment (a change to the simulation's schedule can move it away):
    every group request's coordinator check is watched, and one after the outage must have met a
    broker that neither knew the offsets topic nor listed itself, and been refused."""
    met: list[tuple[float, int, ErrorCode | None]] = []
    real = GroupService.coordinator_error

    def watched(service: GroupService, group_id: str) -> ErrorCode | None:
        answer = real(service, group_id)
        view = service._metadata
        if OFFSETS_TOPIC not in view.topics and service._node_id not in view.brokers:
            met.append((asyncio.get_running_loop().time() - START_S, service._node_id, answer))
        return answer

    monkeypatch.setattr(GroupService, "coordinator_error", watched)
    result = run_seed(0, 30.0, ("outage",), settings=FLUSHED)
    first_outage = min(f.at_s for f in result.faults if f.kind == "outage")
    assert [m for m in met if m[0] > first_outage], f"seed 0 no longer reaches the scenario: {met}"
    assert all(answer is ErrorCode.NOT_COORDINATOR for _, _, answer in met), met
    assert result.findings.acked > 100
    assert result.ok, result.findings.examples()
