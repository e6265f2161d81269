"""`strom.coordinator.group_types`: which request a group of another type refuses."""

from __future__ import annotations

import pytest

from strom.coordinator.group_types import GroupType, Refusal, offsets_refusal, refusal
from strom.protocol.errors import ErrorCode

CLASSIC, CONSUMER, SHARE = GroupType.CLASSIC, GroupType.CONSUMER, GroupType.SHARE


@pytest.mark.parametrize("asked", list(GroupType))
def test_a_free_id_or_one_of_the_same_type_is_not_refused(asked: GroupType) -> None:
    assert refusal("g", asked, None) is None
    assert refusal("g", asked, asked) is None


def test_classic_and_consumer_groups_convert_instead_of_refusing() -> None:
    assert refusal("g", CLASSIC, CONSUMER) is None
    assert refusal("g", CONSUMER, CLASSIC) is None


def test_a_share_groups_id_refuses_classic_joins_and_consumer_heartbeats() -> None:
    assert refusal("g", CONSUMER, SHARE) == Refusal(
        ErrorCode.GROUP_ID_NOT_FOUND, "Group g is not a consumer group."
    )
    refused = refusal("g", CLASSIC, SHARE)
    assert refused is not None and refused.error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL


@pytest.mark.parametrize("holder", [CLASSIC, CONSUMER])
def test_a_classic_or_consumer_groups_id_refuses_share_heartbeats(holder: GroupType) -> None:
    assert refusal("g", SHARE, holder) == Refusal(
        ErrorCode.GROUP_ID_NOT_FOUND, "Group g is not a share group."
    )


def test_committed_offsets_are_refused_only_for_a_share_groups_id() -> None:
    not_consumer = Refusal(ErrorCode.GROUP_ID_NOT_FOUND, "Group g is not a consumer group.")
    assert offsets_refusal("g", SHARE) == not_consumer
    assert [offsets_refusal("g", holder) for holder in (None, CLASSIC, CONSUMER)] == [None, None, None]
