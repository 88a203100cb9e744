"""Real ZooKeeper + 3 bookies + 2 brokers (processes) with the official client: redirects, takeover
after kill -9 of the owner, and a paused (zombie) owner that must not take writes for moved topics."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from magnetar.runtime.cluster import http_health
from tests.cluster.helpers import (
    SESSION_TIMEOUT_MS,
    Outcomes,
    client,
    ledger_states,
    owner_of,
    read_all,
    running_cluster,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def test_either_broker_url_works_and_kill_9_of_the_owner_loses_no_acknowledged_message(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as cluster:
        topic = "persistent://public/default/failover"
        outcomes = Outcomes()
        # Through each broker's own URL: one of them is not the owner and redirects the client.
        for index in (0, 1):
            c = client(cluster.broker_url(index))
            producer = c.create_producer(topic, batching_enabled=False)
            for i in range(5):
                value = f"direct-{index}-{i}".encode()
                outcomes.acked[value] = str(producer.send(value))
            c.close()
        owner = owner_of(cluster, topic)
        assert owner is not None
        survivor = 1 - owner
        assert http_health(cluster.processes[f"broker-{survivor}"].http_port or 0)["topics"] == 0  # type: ignore[index]

        c = client(cluster.service_url())
        producer = c.create_producer(topic, batching_enabled=False, send_timeout_millis=60_000)
        for i in range(20):
            outcomes.send_async(producer, f"before-{i}".encode())
        outcomes.wait(30, 30)
        first_ledger = ledger_states(cluster, topic)[-1][0]

        cluster.processes[f"broker-{owner}"].kill(signal.SIGKILL)
        killed_at = time.monotonic()
        for i in range(30):
            outcomes.send_async(producer, f"after-{i}".encode())
        outcomes.wait(60, 90)
        takeover_s = time.monotonic() - killed_at
        c.close()

        assert outcomes.failed == {}, outcomes.failed
        assert owner_of(cluster, topic) == survivor
        stored = read_all(cluster.broker_url(survivor), topic)
        missing = {v: i for v, i in outcomes.acked.items() if stored.get(v) != i}
        assert missing == {}, f"acknowledged but not stored (or at another id): {missing}"
        assert len(stored) == len(outcomes.acked) == 60
        states = dict(ledger_states(cluster, topic))
        assert states[first_ledger] == "CLOSED"  # the dead owner's ledger was fenced and closed by recovery
        assert max(states) > first_ledger  # the new owner writes a ledger of its own
        print(f"takeover after kill -9: all 30 sends acked {takeover_s:.1f} s after the kill "
              f"(session timeout {SESSION_TIMEOUT_MS} ms)")


def test_a_paused_owner_whose_session_expired_does_not_take_writes_for_moved_topics(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as cluster:
        topic = "persistent://public/default/zombie"
        c1 = client(cluster.service_url())
        p1 = c1.create_producer(topic, batching_enabled=False, send_timeout_millis=60_000,
                                producer_name="zombie-writer")
        outcomes = Outcomes()
        for i in range(10):
            outcomes.send_async(p1, f"p1-before-{i}".encode())
        outcomes.wait(10, 30)
        owner = owner_of(cluster, topic)
        assert owner is not None
        survivor = 1 - owner
        zombie = cluster.processes[f"broker-{owner}"]
        zombie_ledger = ledger_states(cluster, topic)[-1][0]

        zombie.pause()
        try:
            # Sent while the owner is frozen: they wait in its socket until it runs again.
            for i in range(10):
                outcomes.send_async(p1, f"p1-paused-{i}".encode())
            time.sleep(SESSION_TIMEOUT_MS / 1000 + 2)  # let ZooKeeper expire the frozen owner's session
            c2 = client(cluster.broker_url(survivor))
            p2 = c2.create_producer(topic, batching_enabled=False, send_timeout_millis=60_000)
            for i in range(10):
                outcomes.acked[f"p2-{i}".encode()] = str(p2.send(f"p2-{i}".encode()))
            assert owner_of(cluster, topic) == survivor
        finally:
            zombie.resume()
        outcomes.wait(30, 90)
        c2.close()
        c1.close()

        # The zombie noticed: it stopped serving and restarted itself on a new session.
        wait_until(lambda: (http_health(zombie.http_port or 0) or {}).get("generation", 0) >= 2, 30,
                   "the zombie broker to start a new generation")
        assert owner_of(cluster, topic) == survivor
        stored = read_all(cluster.broker_url(survivor), topic)
        missing = {v: i for v, i in outcomes.acked.items() if stored.get(v) != i}
        assert missing == {}, f"acknowledged but not stored (or at another id): {missing}"
        states = dict(ledger_states(cluster, topic))
        assert states[zombie_ledger] == "CLOSED"
        # Nothing was written to the zombie's ledger beyond what the new owner recovered.
        zombie_ids = [i for i in stored.values() if i.startswith(f"({zombie_ledger},")]
        assert all(v in outcomes.acked or v in outcomes.failed for v in stored)
        # The zombie's ledger holds exactly what was acknowledged before the pause: the sends it
        # found in its socket after SIGCONT were refused (fenced, or producer closed) and resent.
        assert sorted(v for v, i in stored.items() if i in zombie_ids) == sorted(
            f"p1-before-{i}".encode() for i in range(10))
        log = zombie.log_path.read_text(errors="replace")
        assert "metadata session lost" in log
        print(f"zombie: {len(outcomes.acked)} acked, {len(outcomes.failed)} failed, "
              f"{len(zombie_ids)} stored in the zombie's ledger {zombie_ledger}")
