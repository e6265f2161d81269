"""An admin change of an empty share group's stored state (KIP-932) and a member joining meanwhile.

DeleteGroups and DeleteShareGroupOffsets check that the group has no members, then wait for the share
coordinators to delete the share-partition states. Here the share coordinator's deletion is held (the
persister's call waits for the test) while a ShareGroupHeartbeat joins: the join is answered
COORDINATOR_NOT_AVAILABLE (the client retries), the deletion completes, and a join after it makes a
member of what the deletion left (after DeleteGroups, a fresh group at epoch 1, its state gone), never a
member attached to state deleted under it. One real broker in the test's loop, raw requests over TCP.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from strom.coordinator.share.state import ShareState, StateKey
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from tests.inprocess.harness import WAIT_S, InProcessBroker, PipelinedClient

TOPIC, GROUP = "t", "g"
T = TypeVar("T")


def held(call: Callable[..., Awaitable[T]], entered: asyncio.Event, release: asyncio.Event) -> Any:
    """``call`` that, once entered, waits for the test's release before it runs."""

    async def waiting(*args: Any) -> T:
        entered.set()
        await asyncio.wait_for(release.wait(), 3 * WAIT_S)
        return await call(*args)

    return waiting


async def until(attempt: Callable[[], Awaitable[bool]], what: str) -> None:
    """Retry ``attempt`` until it succeeds, within a generous real-time bound."""
    deadline = asyncio.get_running_loop().time() + 4 * WAIT_S
    while not await attempt():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def heartbeat(client: PipelinedClient, epoch: int, member: str = "") -> dict[str, Any]:
    body = {
        "group_id": GROUP,
        "member_id": member,
        "member_epoch": epoch,
        "rack_id": None,
        "subscribed_topic_names": [TOPIC] if epoch == 0 else None,
    }
    return await client.request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, body)


async def empty_group_with_state(node: InProcessBroker, client: PipelinedClient) -> StateKey:
    """A share group whose one member joined and left (kept Empty), and a stored state of its
    share-partition (start offset 7) at its share coordinator."""
    node.broker.topics.create_topic(TOPIC, 1, 1, {})
    joined: dict[str, Any] = {}

    async def join() -> bool:
        joined.update(await heartbeat(client, 0))
        return joined["error_code"] == ErrorCode.NONE

    # __consumer_offsets is created on first use: COORDINATOR_NOT_AVAILABLE meanwhile.
    await until(join, "the first member's join")
    left = await heartbeat(client, -1, joined["member_id"])
    assert left["error_code"] == ErrorCode.NONE, left
    state = node.broker.share_state
    key = StateKey(GROUP, node.broker.metadata.topics[TOPIC].topic_id, 0)
    state.request_topic()

    async def stored() -> bool:  # once the topic exists and its partition is led and loaded here
        return await state.write(key, ShareState(1, 0, 7)) is ErrorCode.NONE

    await until(stored, "the stored share-partition state")
    assert (await state.read(key, 0))[1] == ShareState(1, 0, 7)
    return key


async def join_during(
    node: InProcessBroker,
    client: PipelinedClient,
    joiner: PipelinedClient,
    step: str,
    api: ApiKey,
    version: int,
    body: Any,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The admin request ``api`` on an empty group with a stored state, with the persister's ``step``
    (its deletion) held while ``joiner`` joins: (the join's answer meanwhile, the admin's answer, a
    join's answer after it). Checks that the state is gone."""
    key = await empty_group_with_state(node, client)
    persister = node.broker.share_persister
    entered, release = asyncio.Event(), asyncio.Event()
    setattr(persister, step, held(getattr(persister, step), entered, release))
    deleting = asyncio.create_task(client.request(api, version, body))
    await asyncio.wait_for(entered.wait(), WAIT_S)  # checked empty; the state not deleted yet
    during = await heartbeat(joiner, 0)
    release.set()
    answer = await deleting
    assert (await node.broker.share_state.read(key, 0)) == (ErrorCode.NONE, None)
    return during, answer, await heartbeat(joiner, 0)


def admin_race(step: str, api: ApiKey, version: int, body: Any, tmp_path: Path) -> tuple[Any, Any, Any]:
    async def main() -> tuple[Any, Any, Any]:
        async with InProcessBroker(tmp_path, **{"share.coordinator.state.topic.num.partitions": "1"}) as node:
            client, joiner = await node.client(), await node.client()
            try:
                return await join_during(node, client, joiner, step, api, version, body)
            finally:
                await client.close()
                await joiner.close()

    return asyncio.run(main())


def test_a_join_during_delete_groups_waits_for_it_and_joins_a_fresh_group(tmp_path: Path) -> None:
    body = {"groups_names": [GROUP]}
    during, answer, after = admin_race("delete_group", ApiKey.DELETE_GROUPS, 2, body, tmp_path)
    assert during["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE, during
    assert [r["error_code"] for r in answer["results"]] == [ErrorCode.NONE], answer
    # The deleted group's epochs are gone: the join after it makes a fresh group.
    assert (after["error_code"], after["member_epoch"]) == (ErrorCode.NONE, 1), after


def test_a_join_during_delete_share_group_offsets_waits_for_it(tmp_path: Path) -> None:
    body = {"group_id": GROUP, "topics": [{"topic_name": TOPIC}]}
    during, answer, after = admin_race("delete", ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, body, tmp_path)
    assert during["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE, during
    assert answer["error_code"] == ErrorCode.NONE, answer
    assert [t["error_code"] for t in answer["responses"]] == [ErrorCode.NONE], answer
    # The group is kept (epoch 2 after its member left): the join after it is at its next epoch.
    assert (after["error_code"], after["member_epoch"]) == (ErrorCode.NONE, 3), after
