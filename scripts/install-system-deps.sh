#!/usr/bin/env bash
# Installs the system packages Magnetar's tests and benchmarks use, from Debian's archive,
# only when they are missing: ZooKeeper (for the zk:// metadata store), a Java runtime
# (ZooKeeper and Spark need one) and Chromium (the web console's browser tests drive it with
# Playwright through its executable path: Playwright downloads no browser). Idempotent; safe to
# run on every `make test`.
set -euo pipefail
need=()
[ -f /usr/share/zookeeper/bin/zkServer.sh ] || need+=(zookeeper)
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
[ -x /usr/bin/chromium ] || need+=(chromium fonts-dejavu-core)
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
echo "installing system packages: ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# Other installers may hold the dpkg lock for a while (parallel CI steps): wait, do not fail.
$SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null
$SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${need[@]}" >/dev/null
