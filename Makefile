# Magnetar: `make run` starts standalone, `make test` runs the whole suite. Both set up
# everything they need (a local virtual environment, and system packages through scripts/).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
DATA_DIR ?= data/standalone

.PHONY: venv run test test-fast lint bench sim chaos system-deps clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev,spark]'
	@touch $(STAMP)

venv: $(STAMP)

system-deps:
	@bash scripts/install-system-deps.sh

run: venv
	$(VENV)/bin/magnetar standalone --data-dir $(DATA_DIR)

test: venv system-deps
	$(PY) -m pytest

test-fast: venv
	$(PY) -m pytest -m "not integration"

lint: venv
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy src/magnetar
	$(VENV)/bin/lint-imports

bench: venv system-deps
	@bash bench/run_all.sh

sim: venv
	$(VENV)/bin/magnetar sim --seed 1

# The long chaos runs (docs/chaos-report.md): the seed's matrix and 100 random fault injections
# on ZooKeeper + 3 bookies + 2 brokers, (E,Qw,Qa) = (3,3,2). Exit status 1 on any violation.
CHAOS_OUT ?= chaos-out
chaos: venv system-deps
	$(VENV)/bin/magnetar chaos --scenario seed-matrix --target cluster --seed 1 --send-interval-s 0.01 --out $(CHAOS_OUT)/seed-matrix
	$(VENV)/bin/magnetar chaos --scenario random --injections 100 --target cluster --seed 1 --send-interval-s 0.01 --out $(CHAOS_OUT)/random

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .mypy_cache .ruff_cache
