"""The long form's results file: each seed's outcome appended as it ends, a stopped run resumed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from strom.sim.__main__ import main, run_one


def _seeds(path: Path) -> list[int]:
    return [json.loads(line)["seed"] for line in path.read_text().splitlines()]


def test_a_run_resumes_from_its_results_file_and_tables_every_seed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PYTHONHASHSEED", "0")  # main re-executes itself otherwise
    results = tmp_path / "results.jsonl"
    common = ["--duration", "3", "--jobs", "1", "--results", str(results), "--revision", "abc123"]
    assert main(["--seeds", "2", *common]) == 0
    assert sorted(_seeds(results)) == [0, 1]
    first = json.loads(results.read_text().splitlines()[0])
    assert first["revision"] == "abc123" and first["duration_s"] == 3 and first["acked"] > 0
    # A run killed mid-write leaves a torn line: it is skipped, and its seed run again.
    with results.open("a") as f:
        f.write('{"seed": 2, "cla')
    capsys.readouterr()
    assert main(["--seeds", "3", *common]) == 0
    rows = [json.loads(x) for x in results.read_text().splitlines() if x.endswith("}")]
    assert sorted(r["seed"] for r in rows) == [0, 1, 2]
    out = capsys.readouterr().out
    assert "3 seeds, 0 failed" in out
    assert "seeds by revision" not in out  # one revision: nothing to say
    assert main(["--seeds", "4", *common[:-1], "def456"]) == 0
    assert "seeds by revision: abc123: 3, def456: 1" in capsys.readouterr().out
    assert "| crash | 1 |" in out and "| isolate | 1 |" in out and "| one_way | 1 |" in out


def test_a_results_file_of_another_duration_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    results = tmp_path / "results.jsonl"
    assert main(["--seeds", "1", "--duration", "3", "--jobs", "1", "--results", str(results)]) == 0
    with pytest.raises(SystemExit, match="not 4 s"):
        main(["--seeds", "1", "--duration", "4", "--jobs", "1", "--results", str(results)])


def test_a_seed_whose_run_raises_counts_as_an_error_and_keeps_its_traceback() -> None:
    outcome = run_one(7, "no-such-class", 3.0)  # the run raises (KeyError) before it starts
    assert outcome.counts["error"] == 1 and sum(outcome.counts.values()) == 1
    assert "KeyError" in outcome.examples[0] and outcome.trace[0].startswith("Traceback")
