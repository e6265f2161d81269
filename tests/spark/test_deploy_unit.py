"""Which Python runs Spark's Python workers: the pure choice and the import check on this host."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from strom.spark.deploy import (
    PythonChoice,
    PythonWorkerError,
    check_imports_strom,
    choose_python_exec,
    resolve_here,
)


def choose(env: str | None = None, conf: str | None = None, master: str = "local[2]") -> PythonChoice:
    return choose_python_exec(env_python=env, conf_python=conf, master=master, current_python="/venv/python")


def test_environment_variable_wins() -> None:
    assert choose(env="/opt/py", conf="/other", master="spark://h:7077") == PythonChoice(
        "/opt/py", "PYSPARK_PYTHON"
    )


def test_conf_is_used_when_no_environment_variable() -> None:
    assert choose(conf="./environment/bin/python", master="spark://h:7077") == PythonChoice(
        "./environment/bin/python", "spark.pyspark.python"
    )


@pytest.mark.parametrize("master", ["local", "local[2]", "local[*]", "local-cluster[1,1,512]", "LOCAL[1]"])
def test_local_master_uses_this_interpreter(master: str) -> None:
    assert choose(master=master) == PythonChoice("/venv/python", "sys.executable")


@pytest.mark.parametrize("master", ["spark://127.0.0.1:7077", "yarn", "k8s://https://h:6443"])
def test_cluster_master_without_a_setting_is_refused_naming_the_fix(master: str) -> None:
    with pytest.raises(PythonWorkerError) as raised:
        choose(master=master)
    message = str(raised.value)
    for fix in ("PYSPARK_PYTHON", "spark.pyspark.python", "spark.archives", master):
        assert fix in message


def test_resolve_here() -> None:
    assert resolve_here("/abs/python", "/work") == "/abs/python"
    assert resolve_here("./environment/bin/python", "/work") == "/work/environment/bin/python"
    assert resolve_here("sh", "/work") == resolve_here("sh", "/elsewhere")
    assert resolve_here("no-such-python-anywhere", "/work") is None


def test_this_interpreter_passes_the_check() -> None:
    check_imports_strom(PythonChoice(sys.executable, "sys.executable"))


def test_interpreter_without_strom_fails_naming_the_fix(tmp_path: Path) -> None:
    # A real interpreter that cannot see strom: isolated mode ignores PYTHONPATH, -S skips site-packages.
    bare = tmp_path / "python"
    bare.write_text(f'#!/bin/sh\nexec {sys.executable} -I -S "$@"\n')
    bare.chmod(0o755)
    with pytest.raises(PythonWorkerError) as raised:
        check_imports_strom(PythonChoice(str(bare), "spark.pyspark.python"))
    assert "No module named 'strom'" in str(raised.value)
    assert "PYSPARK_PYTHON" in str(raised.value)


def test_relative_archive_path_missing_on_the_driver_names_the_fix(tmp_path: Path) -> None:
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        with pytest.raises(PythonWorkerError) as raised:
            check_imports_strom(PythonChoice("./environment/bin/python", "spark.pyspark.python"))
    finally:
        os.chdir(cwd)
    assert "tar -xzf env.tar.gz -C environment" in str(raised.value)


def test_missing_absolute_path_is_refused() -> None:
    with pytest.raises(PythonWorkerError, match="does not exist on this host"):
        check_imports_strom(PythonChoice("/no/such/python", "PYSPARK_PYTHON"))
