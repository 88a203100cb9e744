#!/usr/bin/env bash
# Installs the peers of bench/peers/run.py from Debian's archive when missing: rabbitmq-server,
# nats-server, redis-server, linux-perf (perf stat), and their Python clients into the venv (the `bench` extra).
# No service is started: while installing, a policy-rc.d that refuses every start is in place
# (the benchmark starts each peer itself on 127.0.0.1 with a private data dir, and stops it by
# PID). Idempotent; a peer that cannot be installed is reported and skipped, never fatal.
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
need=()
[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || need+=(rabbitmq-server)
command -v nats-server >/dev/null 2>&1 || need+=(nats-server)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
# perf: instructions per message of the server (where the machine's PMU counts them).
command -v perf >/dev/null 2>&1 || need+=(linux-perf)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  export DEBIAN_FRONTEND=noninteractive
  policy=/usr/sbin/policy-rc.d
  placed=
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null && $SUDO chmod +x "$policy" && placed=1
  fi
  echo "installing peers: ${need[*]}" >&2
  $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null
  for package in "${need[@]}"; do
    $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "$package" >/dev/null \
      || echo "peer $package could not be installed here" >&2
  done
  [ -n "$placed" ] && $SUDO rm -f "$policy"
fi
"$PY" -m pip install -q --disable-pip-version-check -e '.[bench]' || echo "bench extra could not be installed" >&2
exit 0
