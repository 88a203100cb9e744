# Magnetar: `make run` starts standalone, `make test` runs the whole suite. Both set up
# everything they need (a local virtual environment, and system packages through scripts/).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
RUN_STAMP := $(VENV)/.run-stamp
TEST_STAMP := $(VENV)/.test-stamp
DATA_DIR ?= data/standalone
RUN_ARGS ?=  # e.g. RUN_ARGS="--broker-port 0 --web-port 0 --bookie-port 0"
PIP := $(PY) -m pip --disable-pip-version-check

.PHONY: venv venv-run compile run test test-pure test-fast lint bench sim sim-suite sim-soak chaos system-deps clean

# Two stamps: `make run` installs only what a server needs (Magnetar and its runtime
# dependencies); the tests, lint and benchmarks add the dev and Spark extras (pyspark, pyarrow,
# pandas: most of a 1.2 GB environment). pip shows what it collects and installs as it goes.
$(VENV)/bin/python:
	@echo "creating $(VENV) ..."
	@$(PYTHON) -m venv $(VENV)

$(RUN_STAMP): pyproject.toml | $(VENV)/bin/python
	@echo "installing Magnetar and its runtime dependencies into $(VENV) (first run only) ..."
	$(PIP) install --progress-bar on -e .
	@touch $(RUN_STAMP)

$(TEST_STAMP): pyproject.toml | $(VENV)/bin/python
	@echo "installing Magnetar with the dev and Spark extras into $(VENV) (first run only; large) ..."
	@$(PIP) install -q --upgrade pip
	$(PIP) install --progress-bar on -e '.[dev,spark]'
	@touch $(TEST_STAMP) $(RUN_STAMP)

venv-run: $(RUN_STAMP)

venv: $(TEST_STAMP)

# The compiled hot path (docs/performance.md, "Session 9" and "Session 10"): mypyc compiles the
# per-message modules listed in src/magnetar/_compiled.py with the machine's C compiler into
# build/mypyc/ (about 2 CPU minutes, one C file per module on every core; redone only when one of
# those sources changed). It never fails: without mypyc (it ships
# with mypy, installed here if missing), a C compiler or Python's headers, or when the build fails,
# it prints one line and Magnetar runs pure Python. MAGNETAR_PURE_PYTHON=1 runs the .py modules
# even when a build exists; MAGNETAR_COMPILE=0 skips the build. The same script builds the
# journal's native writer (Cython, runtime/disk_cwriter.pyx, into build/cython/; session 22):
# without it the journal's writes go to Python's writer threads.
compile: venv-run
	@$(PY) -c "import mypyc" 2>/dev/null || $(PIP) install -q "mypy>=1.10" || echo "magnetar compile: could not install mypy"
	@$(PY) -c "import Cython" 2>/dev/null || $(PIP) install -q "cython>=3.0" || echo "magnetar compile: could not install cython"
	@$(PY) scripts/build_compiled.py

# The pure-Python fallback runs these tests too (the unit tests of the layers that
# are compiled), after the whole suite ran on the compiled modules.
PURE_TESTS ?= tests/base tests/faults tests/protocol tests/storage tests/ledger tests/managed_ledger tests/broker tests/node tests/runtime tests/control tests/tooling/test_compiled_mode.py

system-deps:
	@bash scripts/install-system-deps.sh

run: venv-run compile
	$(VENV)/bin/magnetar standalone --data-dir $(DATA_DIR) $(RUN_ARGS)

# The suite runs on TEST_JOBS pytest-xdist workers (tests/README.md): a module's tests stay on one
# worker (--dist loadscope), so a module-scoped standalone, cluster or Spark session starts once;
# modules go out in the order tests/conftest.py gives (long ones first), not by their test count.
# TEST_JOBS=0 runs in one process. The slowest tests are listed at the end: one that grew shows
# in CI's log.
TEST_JOBS ?= 2
PYTEST_RUN := -n $(TEST_JOBS) --dist loadscope --no-loadscope-reorder --durations=15

test: venv system-deps compile
	MAGNETAR_EXPECT_MODE=$$(test -f build/mypyc/manifest.json && echo compiled || echo pure) $(PY) -m pytest $(PYTEST_RUN)
	$(MAKE) --no-print-directory test-pure

test-pure: venv
	MAGNETAR_PURE_PYTHON=1 MAGNETAR_EXPECT_MODE=pure $(PY) -m pytest $(PYTEST_RUN) -m "not integration" $(PURE_TESTS)

test-fast: venv
	$(PY) -m pytest $(PYTEST_RUN) -m "not integration"

lint: venv
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy src/magnetar
	$(VENV)/bin/lint-imports

# The benchmarks; bench/peers/run.py runs Magnetar pure and compiled beside the peers (issue 22's
# targets in one table), so the compiled build is made first.
bench: venv system-deps compile
	@bash bench/run_all.sh

sim: venv-run
	$(VENV)/bin/magnetar sim --seed 1

# The simulation tests with every seed the suite covers: `make test` checks a window of 40 of the
# 200 cluster seeds, rotating daily (tests/sim/test_cluster.py, docs/testing.md); this runs all 200.
sim-suite: venv
	MAGNETAR_SIM_SEEDS=200 MAGNETAR_SIM_SEED_FIRST=1 $(PY) -m pytest tests/sim

# The whole-stack simulation on many seeds (docs/simulation.md): metadata store, 4 bookies,
# 2 brokers and our client under crashes at fault points, kills, power cuts, partitions, clock
# jumps and zombie owners. One line per failed seed, then the totals (seeds, violations, faults
# injected, node crashes, ledgers recovered), wall time and rate; exit status 1 on any violation.
# SOAK_SEEDS=1-20000 for more; SOAK_JOBS worker processes (seeds are independent worlds).
SOAK_SEEDS ?= 1-10000
SOAK_OPS ?= 6
SOAK_TIME_LIMIT_S ?= 0
SOAK_JOBS ?= 2
sim-soak: venv-run
	PYTHONHASHSEED=0 $(VENV)/bin/magnetar sim --scenario cluster --seeds $(SOAK_SEEDS) --ops $(SOAK_OPS) --time-limit-s $(SOAK_TIME_LIMIT_S) --jobs $(SOAK_JOBS)

# The long chaos runs (docs/chaos-report.md): the seed's matrix and 100 random fault injections
# on ZooKeeper + 3 bookies + 2 brokers, (E,Qw,Qa) = (3,3,2). Exit status 1 on any violation.
CHAOS_OUT ?= chaos-out
chaos: venv system-deps
	$(VENV)/bin/magnetar chaos --scenario seed-matrix --target cluster --seed 1 --send-interval-s 0.01 --out $(CHAOS_OUT)/seed-matrix
	$(VENV)/bin/magnetar chaos --scenario random --injections 100 --target cluster --seed 1 --send-interval-s 0.01 --out $(CHAOS_OUT)/random

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .mypy_cache .ruff_cache
