"""`ShareGroupShard.hold`: an admin change of a share group's stored state checks the group empty and
keeps joins out until it ends (the decisions alone; the race over TCP is
tests/inprocess/test_share_admin_holds_joins.py)."""

from __future__ import annotations

from strom._util.clock import ManualClock
from strom.broker.coordinators.share_group_shard import ShareGroupConfig, ShareGroupShard, ShareHeartbeat
from strom.coordinator_runtime import ShardContext
from strom.coordinator_runtime.shard import TimerOperation
from strom.protocol.errors import ErrorCode


class Timers:
    """The shard's timers as a table (none fires here)."""

    def __init__(self) -> None:
        self.armed: dict[str, int] = {}

    def schedule(self, key: str, delay_ms: int, operation: TimerOperation) -> None:
        self.armed[key] = delay_ms

    def cancel(self, key: str) -> None:
        self.armed.pop(key, None)


def shard() -> ShareGroupShard:
    context = ShardContext("__consumer_offsets", 0, 0, ManualClock(), Timers())
    return ShareGroupShard(context, ShareGroupConfig(), lambda: {"t": 1})


def join(share: ShareGroupShard, member: str) -> ErrorCode:
    result = share.heartbeat(ShareHeartbeat("g", member, 0, ("t",)))
    for key, value in result.records:
        share.replay(key, value)  # as the runtime does once the write is durable
    return result.response.error


def test_a_group_with_members_is_not_held() -> None:
    share = shard()
    assert join(share, "m1") is ErrorCode.NONE
    assert share.hold("g", None).response is ErrorCode.NON_EMPTY_GROUP
    assert share.held == {}


def test_a_join_is_refused_while_held_and_admitted_once_every_hold_is_released() -> None:
    share = shard()
    assert share.hold("g", None).response is ErrorCode.NONE  # no group yet: held all the same
    assert share.hold("g", None).response is ErrorCode.NONE  # a second admin change at once
    assert join(share, "m1") is ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert "g" not in share.groups
    share.release("g")
    assert join(share, "m1") is ErrorCode.COORDINATOR_NOT_AVAILABLE  # one change still under way
    share.release("g")
    assert join(share, "m1") is ErrorCode.NONE
    assert share.groups["g"].group_epoch == 1


def test_the_callers_refusal_takes_no_hold_and_an_unload_drops_them() -> None:
    share = shard()
    assert share.hold("g", ErrorCode.GROUP_ID_NOT_FOUND).response is ErrorCode.GROUP_ID_NOT_FOUND
    assert share.held == {}
    assert share.hold("g", None).response is ErrorCode.NONE
    share.on_unloaded()
    assert share.held == {}
