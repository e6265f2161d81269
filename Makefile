# Strom developer entry points. `make run` and `make test` are the two commands in the README.
PY := .venv/bin/python
DATA ?= ./data

.PHONY: install install-test run test lint typecheck layers unit chaos sim eos-long spark-eos-kill tiered-acceptance bench demo clean

install:
	@scripts/install.sh run

install-test:
	@scripts/install.sh test

run: install
	$(PY) -m strom.cli.main serve --set log.dirs=$(DATA)

lint: install-test
	$(PY) -m ruff check src tests bench examples
	$(PY) -m ruff format --check src tests bench examples

typecheck: install-test
	$(PY) -m mypy

layers: install-test
	.venv/bin/lint-imports

# The whole suite: lint, types, layer rules, then every test (unit, integration, cluster, spark).
# The tests run on three pytest-xdist workers (tests/conftest.py: which tests share a worker, and why):
# about 20 minutes instead of 45 on two cores, since most of the time is spent waiting on servers.
# TEST_WORKERS=0 runs them in one process.
TEST_WORKERS ?= 3
test: install-test lint typecheck layers
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder tests

unit: install-test
	$(PY) -m pytest -q tests/unit

# The fault suite's long form (root: network namespaces, tmpfs): RUNS seeded runs of every fault class,
# then a table per class (docs/faults.md). `make test` runs the short form (RUNS=1) with everything else.
RUNS ?= 20
CHAOS_SEED ?= 8
chaos: install-test
	RUNS=$(RUNS) CHAOS_SEED=$(CHAOS_SEED) $(PY) -m pytest -m faults tests/faults -q

# The deterministic simulation's long form: SEEDS seeded runs of a simulated 3-broker cluster under
# faults, SIM_SECONDS of simulated time each, spread over both cores; a table per fault class
# (docs/faults.md). `make test` runs the short form (200 seeds of 20 s).
SEEDS ?= 1000
SIM_SECONDS ?= 120
SIM_START ?= 0
# Each seed's outcome is appended here and a run stopped part-way resumes from it (remove it to start over).
SIM_RESULTS ?= sim-results-$(SIM_SECONDS)s.jsonl
sim: install-test
	PYTHONHASHSEED=0 $(PY) -m strom.sim --seeds $(SEEDS) --start $(SIM_START) --duration $(SIM_SECONDS) \
		--results $(SIM_RESULTS) --revision "$$(git rev-parse --short HEAD 2>/dev/null)" \
		--trace-dir sim-traces

# Issue 13's exactly-once check, long form: a consume-transform-produce loop on a 3-broker cluster while
# the broker coordinating its transactions is killed with SIGKILL and restarted TXN_KILLS times
# (`make test` runs it with 2; docs/transactions.md has the last result).
TXN_KILLS ?= 20
eos-long: install-test
	TXN_KILLS=$(TXN_KILLS) $(PY) -m pytest -q -s tests/cluster/test_transactions_cluster.py -k while_the_coordinator

# The exactly-once Spark sink's long form: a streaming query's driver SIGKILLed at seeded random points
# and restarted from its checkpoint SPARK_KILLS times (`make test` runs 3); docs/transactions.md.
SPARK_KILLS ?= 10
SPARK_KILL_SEED ?= 13
spark-eos-kill: install-test
	STROM_EOS_KILL_RUNS=$(SPARK_KILLS) STROM_EOS_KILL_SEED=$(SPARK_KILL_SEED) $(PY) -m pytest -q -s \
		tests/spark/test_exactly_once_kill.py -k killed_and_restarted

# Tiered storage's acceptance run (issue 21) at full size: a 3-broker cluster with SeaweedFS, TIERED_MB
# megabytes produced, every leader killed once, a broker wiped, everything read back from offset 0 by
# confluent-kafka, kafka-python and the Spark source (`make test` runs the same test with 12 MB and
# without Spark; tests/spark/test_tiered_spark.py is the Spark source's short form); docs/tiered-storage.md.
TIERED_MB ?= 3000
tiered-acceptance: install-test
	STROM_TIERED_ACCEPTANCE_MB=$(TIERED_MB) STROM_TIERED_ACCEPTANCE_SPARK=1 $(PY) -m pytest -q -s \
		--timeout=3600 tests/cluster/test_tiered_acceptance.py

bench: install-test
	$(PY) bench/run.py

demo: install-test
	$(PY) examples/demo.py

clean:
	rm -rf .venv build dist src/*.egg-info
