"""KIP-447: TxnOffsetCommit's group metadata checked against the group (GroupCoordinator.txn_commit_error)."""

from __future__ import annotations

from test_group_coordinator import Harness

from strom.protocol.errors import ErrorCode

E = ErrorCode


def test_no_group_metadata_is_unchecked() -> None:
    h = Harness()
    assert h.coord.txn_commit_error("unknown-group", -1, "", None) is E.NONE
    h.form_group(1)
    assert h.coord.txn_commit_error("g", -1, "", None) is E.NONE


def test_members_generations_and_static_instances() -> None:
    h = Harness()
    (member,) = h.form_group(1)
    gen, mid = member.generation_id, member.member_id
    assert h.coord.txn_commit_error("g", gen, mid, None) is E.NONE
    assert h.coord.txn_commit_error("g", gen + 1, mid, None) is E.ILLEGAL_GENERATION
    assert h.coord.txn_commit_error("g", gen, "nobody", None) is E.UNKNOWN_MEMBER_ID
    assert h.coord.txn_commit_error("g", gen, "", None) is E.NONE  # generation alone: current
    assert h.coord.txn_commit_error("g", gen - 1, "", None) is E.ILLEGAL_GENERATION


def test_a_fenced_static_incarnation() -> None:
    h = Harness()
    pending = h.join(instance="i-1")
    h.settle([pending])
    (joined,) = pending
    h.sync(joined.member_id, joined.generation_id, {joined.member_id: b"a"}, instance="i-1")
    gen = joined.generation_id
    assert h.coord.txn_commit_error("g", gen, joined.member_id, "i-1") is E.NONE
    assert h.coord.txn_commit_error("g", gen, "older-member-id", "i-1") is E.FENCED_INSTANCE_ID


def test_a_group_that_does_not_exist_yet() -> None:
    h = Harness()
    assert h.coord.txn_commit_error("new", 0, "", None) is E.NONE  # created Empty at generation 0
    assert h.coord.txn_commit_error("new", 3, "", None) is E.ILLEGAL_GENERATION
    assert h.coord.txn_commit_error("new", 0, "m", None) is E.UNKNOWN_MEMBER_ID
