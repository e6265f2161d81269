"""Which Python interpreter runs Spark's Python workers for the `strom` data source.

Theory of operation
-------------------
A Python data source runs in Python worker processes that Spark starts itself: one on the driver's host
that instantiates the `DataSource` and plans the read (`create_data_source`, `plan_data_source_read`),
and more on the executors that run `read()`/`write()`. Each worker unpickles `strom.spark` classes, so
its interpreter must have `strom` installed. Spark picks that interpreter from the function's
`pythonExec`, which PySpark fixes when the SparkContext starts: the `PYSPARK_PYTHON` environment variable,
else `python3` from the PATH. Two consequences, measured with pyspark 4.3:

* `python job.py` without `PYSPARK_PYTHON` runs the workers with whatever `python3` is first on the
  PATH, usually not the virtualenv that has `strom`: `ModuleNotFoundError: No module named 'strom'`.
* The `spark.pyspark.python` conf is only turned into `PYSPARK_PYTHON` by `spark-submit`; a session built
  in a plain Python process ignores it, on the driver-side worker and on the executors alike.

`register()` therefore sets the SparkContext's `pythonExec` before the data source is wrapped for the
JVM (the wrapper captures it), using `choose_python_exec`:

1. `PYSPARK_PYTHON` set: kept (the user chose).
2. else `spark.pyspark.python` set: used, as the conf promises.
3. else a `local` master: this interpreter (`sys.executable`), which evidently has `strom`.
4. else (a cluster): refused at once, naming the fix -- the executors' `python3` is unknown here.

The chosen interpreter is then checked on the driver's host, where the planning worker runs, by
importing `strom.spark` with it. A relative path such as `./environment/bin/python` (an environment
shipped with `spark.archives`) works on the executors, whose working directory holds the unpacked
archive, but the driver's JVM resolves it against its own working directory, not Spark's file directory
where it unpacked the archive (measured): there it must exist too, or `register()` says so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

DEFAULT_PYTHON = "python3"

_CLUSTER_FIX = (
    "Set spark.pyspark.python (or the PYSPARK_PYTHON environment variable) to a Python that has "
    "strom installed on every node, e.g. .config('spark.pyspark.python', sys.executable) when the "
    "nodes share this installation path, or ship this environment with "
    ".config('spark.archives', 'env.tar.gz#environment') and "
    ".config('spark.pyspark.python', './environment/bin/python') (see docs/spark.md, 'Deploying')."
)


class PythonWorkerError(RuntimeError):
    """Spark's Python workers would not be able to import `strom`."""


@dataclass(frozen=True)
class PythonChoice:
    """The interpreter for Spark's Python workers and where the choice came from."""

    python: str
    source: str  # "PYSPARK_PYTHON", "spark.pyspark.python" or "sys.executable"


def choose_python_exec(
    *, env_python: str | None, conf_python: str | None, master: str, current_python: str
) -> PythonChoice:
    """Pure decision of the interpreter that Spark's Python workers should run.

    Raises:
        PythonWorkerError: a cluster master and nothing says which Python the executors have.
    """
    if env_python:
        return PythonChoice(env_python, "PYSPARK_PYTHON")
    if conf_python:
        return PythonChoice(conf_python, "spark.pyspark.python")
    if master.strip().lower().startswith("local"):
        return PythonChoice(current_python, "sys.executable")
    raise PythonWorkerError(
        f"strom.spark.register: the master is {master}, and neither PYSPARK_PYTHON nor "
        f"spark.pyspark.python says which Python the executors run, so Spark would start '{DEFAULT_PYTHON}' "
        f"from their PATH, which may not have strom (ModuleNotFoundError: No module named 'strom'). "
        + _CLUSTER_FIX
    )


def resolve_here(python: str, cwd: str) -> str | None:
    """Where the driver's JVM finds `python`: absolute as is, a relative path against its working
    directory (Java resolves it there, not in Spark's file directory), a bare name on the PATH."""
    if os.path.isabs(python):
        return python
    if os.sep in python:
        return os.path.normpath(os.path.join(cwd, python))
    return shutil.which(python)


def check_imports_strom(choice: PythonChoice, timeout_s: float = 60.0) -> None:
    """Import `strom.spark` with the chosen interpreter on this host, as the planning worker will.

    Raises:
        PythonWorkerError: the interpreter is missing or cannot import `strom.spark`.
    """
    python = choice.python
    executable = resolve_here(python, os.getcwd())
    fix = (
        "Set PYSPARK_PYTHON (or spark.pyspark.python) to a Python that has strom installed "
        "(pip install 'strom[spark]'), e.g. the one running this job."
    )
    if not os.path.isabs(python) and os.sep in python:
        fix = (
            "The planning worker on the driver resolves a relative path against the driver's working "
            f"directory {os.getcwd()}, not where Spark unpacks spark.archives: unpack the same archive "
            "there too (e.g. mkdir environment && tar -xzf env.tar.gz -C environment), or give an "
            "absolute path that exists on every node."
        )
    if executable is None or not os.path.exists(executable):
        raise PythonWorkerError(
            f"strom.spark.register: Spark's Python workers would run {python!r} (from {choice.source}), "
            f"which does not exist on this host. {fix}"
        )
    result = subprocess.run(
        [executable, "-c", "import strom.spark"],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise PythonWorkerError(
            f"strom.spark.register: Spark's Python workers would run {python!r} (from {choice.source}), "
            f"which cannot import strom: {last}. {fix}"
        )
