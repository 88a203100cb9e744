#!/usr/bin/env bash
# `make bench`: runs every benchmark under bench/ in turn. Each reports ratios against a
# baseline it measures in the same run (min/median/max over repeats) and appends its JSON
# result to bench/results/. Takes minutes; never part of `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
mkdir -p bench/results
status=0
for script in bench/*.py; do
  [ -e "$script" ] || continue
  echo "=== $script"
  if ! "$PY" "$script" --json-out "bench/results/$(basename "$script" .py).json"; then
    echo "benchmark $script failed" >&2
    status=1
  fi
done
exit $status
