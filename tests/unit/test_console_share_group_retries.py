"""`strom groups` asks a share group's coordinator again while it answers a coordinator error (loading,
moved, not known yet), within the command's timeout; a final answer ends the asking at once."""

from __future__ import annotations

from typing import Any

import pytest

from strom.console import share_groups
from strom.console.errors import ConsoleError
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode


class ScriptedCoordinator:
    """Answers ShareGroupDescribe with the next code of ``codes`` (the last one for ever after)."""

    def __init__(self, codes: list[ErrorCode], timeout_s: float = 5.0) -> None:
        self.codes = codes
        self.calls = 0
        self.timeout_s = timeout_s

    def coordinator(self, group_id: str) -> tuple[str, int]:
        return ("127.0.0.1", 9092)

    def call(self, address: tuple[str, int], api_key: ApiKey, version: int, body: Any) -> Any:
        assert api_key == ApiKey.SHARE_GROUP_DESCRIBE
        code = self.codes[min(self.calls, len(self.codes) - 1)]
        self.calls += 1
        return {"groups": [{"group_id": body["group_ids"][0], "error_code": int(code), "members": []}]}


def test_a_loading_coordinator_is_asked_again_until_it_answers() -> None:
    wire = ScriptedCoordinator(
        [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR, ErrorCode.NONE]
    )
    described = share_groups.share_description(wire, "workers")  # type: ignore[arg-type]
    assert described is not None and described["group_id"] == "workers"
    assert wire.calls == 3


def test_an_unknown_group_is_no_share_group_after_one_answer() -> None:
    wire = ScriptedCoordinator([ErrorCode.GROUP_ID_NOT_FOUND])
    assert share_groups.share_description(wire, "nobody") is None  # type: ignore[arg-type]
    assert wire.calls == 1


def test_a_coordinator_loading_past_the_timeout_fails_the_command_and_says_why() -> None:
    wire = ScriptedCoordinator([ErrorCode.COORDINATOR_LOAD_IN_PROGRESS], timeout_s=0.5)
    with pytest.raises(ConsoleError, match="COORDINATOR_LOAD_IN_PROGRESS"):
        share_groups.share_description(wire, "workers")  # type: ignore[arg-type]
    assert 2 <= wire.calls <= 5
