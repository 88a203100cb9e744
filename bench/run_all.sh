#!/usr/bin/env bash
# `make bench`: runs every benchmark under bench/ in turn. Each reports ratios against a
# baseline it measures in the same run (min/median/max over repeats); its output is kept in
# bench/results/NAME.txt. Takes minutes; never part of `make test`.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
mkdir -p bench/results
status=0
for script in bench/*.py; do
  [ -e "$script" ] || continue
  echo "=== $script"
  if ! "$PY" "$script" 2>&1 | tee "bench/results/$(basename "$script" .py).txt"; then
    echo "benchmark $script failed" >&2
    status=1
  fi
done
# The side-by-side table (issues 10 and 22: Magnetar pure and compiled beside the peers, the --blast
# ingest against the disk's fsync'd bandwidth, issue 22's targets met/missed): installs the peers
# (and perf, for instructions per message) from Debian packages first.
echo "=== bench/peers/run.py"
bash bench/peers/install.sh
if ! "$PY" bench/peers/run.py 2>&1 | tee bench/results/peers.txt; then
  echo "benchmark bench/peers/run.py failed" >&2
  status=1
fi
# Instructions and context switches per message, in a run of their own: attached counters inflate
# the server CPU that the run above reports (bench/peers/run.py's docstring).
echo "=== bench/peers/run.py --perf-events instructions,context-switches"
if ! "$PY" bench/peers/run.py --repeats 1 --phases publish --blast-seconds 0 --sync-seconds 0 \
    --perf-events instructions,context-switches --out bench/results/peers_counted 2>&1 \
    | tee bench/results/peers_counted.txt; then
  echo "benchmark bench/peers/run.py --perf-events failed" >&2
  status=1
fi
exit $status
