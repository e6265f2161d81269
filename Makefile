# Strom developer entry points. `make run` and `make test` are the two commands in the README.
PY := .venv/bin/python
DATA ?= ./data

.PHONY: install install-test run test lint typecheck layers unit chaos bench demo clean

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
test: install-test lint typecheck layers
	$(PY) -m pytest -q tests

unit: install-test
	$(PY) -m pytest -q tests/unit

# The fault suite's long form (root: network namespaces, tmpfs): RUNS seeded runs of every fault class,
# then a table per class (docs/faults.md). `make test` runs the short form (RUNS=1) with everything else.
RUNS ?= 20
CHAOS_SEED ?= 8
chaos: install-test
	RUNS=$(RUNS) CHAOS_SEED=$(CHAOS_SEED) $(PY) -m pytest -m faults tests/faults -q

bench: install-test
	$(PY) bench/run.py

demo: install-test
	$(PY) examples/demo.py

clean:
	rm -rf .venv build dist src/*.egg-info
