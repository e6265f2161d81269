"""The shared prerequisite check: a skip outside CI, a failure under CI=true."""

from __future__ import annotations

import pytest
from tests.prerequisites import require, under_ci


def test_missing_prerequisite_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    assert under_ci()
    with pytest.raises(pytest.fail.Exception, match="prerequisite missing under CI: frobnicator"):
        require(False, "frobnicator")


@pytest.mark.parametrize("value", ["", "false", "0"])
def test_missing_prerequisite_skips_outside_ci(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CI", value)
    assert not under_ci()
    with pytest.raises(pytest.skip.Exception, match="frobnicator"):
        require(False, "frobnicator")


def test_present_prerequisite_passes_silently(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    require(True, "frobnicator")
