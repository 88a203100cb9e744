#!/usr/bin/env bash
# Starts, checks and stops a private ZooKeeper for tests and benchmarks.
#
#   scripts/zookeeper.sh start  [DIR]   start a standalone server on 127.0.0.1 and a free port
#   scripts/zookeeper.sh status [DIR]   exit 0 if it answers "imok" to ruok
#   scripts/zookeeper.sh stop   [DIR]   stop it by the PID in DIR/zookeeper.pid
#
# DIR (default: $MAGNETAR_ZK_DIR, else .zookeeper in the repository) holds zoo.cfg, the data
# directory, the log, "zookeeper.pid" and "port". `start` prints "zk://127.0.0.1:PORT" once the
# server answers ruok, or fails loudly with the server log's tail within the deadline.
# Uses Debian's `zookeeper` package (scripts/install-system-deps.sh installs it and a JRE).
set -euo pipefail

cmd=${1:-}
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=${2:-${MAGNETAR_ZK_DIR:-$repo/.zookeeper}}
pidfile=$dir/zookeeper.pid
start_deadline_s=${MAGNETAR_ZK_START_DEADLINE_S:-60}
stop_deadline_s=10

ruok() {  # ruok PORT -> prints the reply ("imok" when healthy)
    python3 - "$1" <<'PY'
import socket, sys
try:
    with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1) as s:
        s.sendall(b"ruok")
        s.shutdown(socket.SHUT_WR)
        print(s.recv(16).decode(errors="replace"))
except OSError:
    print("")
PY
}

alive() { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }

case "$cmd" in
start)
    [ -f /usr/share/java/zookeeper.jar ] || bash "$repo/scripts/install-system-deps.sh"
    if alive; then echo "zookeeper already running (pid $(cat "$pidfile"))" >&2; exit 1; fi
    mkdir -p "$dir/data"
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    # tickTime 500 ms lets tests use session timeouts down to 1 s (ZooKeeper's minimum is 2 ticks).
    cat > "$dir/zoo.cfg" <<CFG
tickTime=500
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
maxClientCnxns=0
minSessionTimeout=1000
maxSessionTimeout=60000
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat
CFG
    cat > "$dir/log4j.properties" <<'CFG'
log4j.rootLogger=WARN, FILE
log4j.appender.FILE=org.apache.log4j.FileAppender
log4j.appender.FILE.File=${zookeeper.log.file}
log4j.appender.FILE.layout=org.apache.log4j.PatternLayout
log4j.appender.FILE.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{1} - %m%n
CFG
    echo "$port" > "$dir/port"
    cp_jars="$dir:/usr/share/java/zookeeper.jar"
    nohup java -Xmx256m -Dzookeeper.log.file="$dir/zookeeper.log" -Dlog4j.configuration="file:$dir/log4j.properties" \
        -Dzookeeper.jmx.log4j.disable=true -cp "$cp_jars" \
        org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg" > "$dir/stdout.log" 2>&1 < /dev/null &
    echo $! > "$pidfile"
    deadline=$(( $(date +%s) + start_deadline_s ))
    while [ "$(ruok "$port")" != "imok" ]; do
        if ! alive || [ "$(date +%s)" -ge "$deadline" ]; then
            echo "zookeeper failed to start on 127.0.0.1:$port; log tail:" >&2
            tail -n 30 "$dir/stdout.log" "$dir/zookeeper.log" >&2 2>/dev/null || true
            "$0" stop "$dir" >/dev/null 2>&1 || true
            exit 1
        fi
        sleep 0.2  # polling a server's health with a deadline, not waiting a fixed time
    done
    echo "zk://127.0.0.1:$port"
    ;;
status)
    alive && [ "$(ruok "$(cat "$dir/port")")" = "imok" ] && echo "running pid=$(cat "$pidfile") port=$(cat "$dir/port")"
    ;;
stop)
    if [ -f "$pidfile" ]; then
        pid=$(cat "$pidfile")
        kill "$pid" 2>/dev/null || true
        deadline=$(( $(date +%s) + stop_deadline_s ))
        while kill -0 "$pid" 2>/dev/null && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
        rm -f "$pidfile"
    fi
    ;;
*)
    echo "usage: $0 start|status|stop [DIR]" >&2
    exit 2
    ;;
esac
