"""Geo-replication between two real ``magnetar standalone`` processes (clusters A and B), with the
official ``pulsar`` client, linked the way a Pulsar user does it (admin REST calls only).

* produce in A, consume in B; both directions at once on one topic, no loops;
* ``replication_clusters`` / ``disable_replication`` on a message are honoured;
* kill -9 the standalone running the replicator mid-stream, restart it: B holds every message A
  stored exactly once (``magnetar.chaos.replication`` checker), and with the receiving side's
  replication dedup switched off (``MAGNETAR_BREAK=no-repl-dedup``, the negative control) the same
  experiment stores duplicates.
"""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from magnetar.chaos.replication import check_replication
from tests.integration.geo import (
    ACKS_IN_FLIGHT_S,
    RECEIVE_TIMEOUT_MS,
    Node,
    admin,
    cli_link,
    drain,
    link,
    make_nodes,
    produce,
    wait_for,
)
from tests.integration.geo import client as geo_client

pytestmark = pytest.mark.integration
pulsar = pytest.importorskip("pulsar")

@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Node]]:
    """Three standalones A, B, C, every one replicating ``public/default`` to the two others."""
    nodes = make_nodes(tmp_path_factory.mktemp("geo"), ["A", "B", "C"])
    try:
        for node in nodes:
            node.start()
        cli_link(nodes)
        yield nodes
    finally:
        for node in nodes:
            node.kill()


@pytest.fixture(scope="module")
def pair(mesh: list[Node]) -> list[Node]:
    return mesh[:2]


def test_full_mesh_of_three_every_message_once_in_every_cluster(mesh: list[Node]) -> None:
    """Each cluster produces into one topic at the same time; every cluster ends up with every
    message exactly once (``replicated_from`` stops entries travelling on: no loops)."""
    a = mesh[0]
    topic = "persistent://public/default/both-ways"
    sent = {node.name: [f"{node.name}-{i}" for i in range(300)] for node in mesh}
    with ThreadPoolExecutor(len(mesh)) as pool:
        acked = dict(zip(sent, pool.map(lambda n: produce(n.url, topic, sent[n.name]), mesh), strict=True))
    assert all(len(v) == 300 for v in acked.values())
    everything = {v for values in sent.values() for v in values}
    for node in mesh:
        stored = drain(node.url, topic, everything)
        assert sorted(stored) == sorted(everything), node.name
    stats = admin(a.web_port, "GET", "/persistent/public/default/both-ways/stats")
    replication = stats["replication"]["B"]
    assert replication["connected"] is True
    assert replication["replicationBacklog"] == 0
    assert replication["outboundConnection"] == "pulsar.repl.A-->B"


def test_message_replication_clusters_and_disable_replication(pair: list[Node]) -> None:
    a, b = pair
    topic = "persistent://public/default/narrowed"
    assert produce(a.url, topic, ["local-only"], disable_replication=True) == ["local-only"]
    assert produce(a.url, topic, ["only-a"], replication_clusters=["A"]) == ["only-a"]
    assert produce(a.url, topic, ["both"], replication_clusters=["A", "B"]) == ["both"]
    assert produce(a.url, topic, ["last"]) == ["last"]  # in order: once it is in B, the others were judged
    assert drain(b.url, topic, {"both", "last"}) == ["both", "last"]
    assert drain(a.url, topic, {"local-only", "only-a", "both", "last"}) == ["local-only", "only-a", "both", "last"]


def test_partitioned_topic_maps_partition_to_partition(pair: list[Node]) -> None:
    """A partitioned topic created in A only: B gets the same partitioned topic (from the
    replicators' producers) and each partition's messages."""
    a, b = pair
    admin(a.web_port, "PUT", "/persistent/public/default/parted/partitions", 3)
    values = [f"p-{i}" for i in range(60)]
    assert len(produce(a.url, "persistent://public/default/parted", values)) == 60
    wait_for(lambda: admin(b.web_port, "GET", "/persistent/public/default/parted/partitions")["partitions"] == 3,
             15, "B to learn the partitioned topic")
    client = geo_client(b.url)
    try:
        consumer = client.subscribe("persistent://public/default/parted", "s",
                                    initial_position=pulsar.InitialPosition.Earliest)
        got = {consumer.receive(RECEIVE_TIMEOUT_MS).data().decode() for _ in range(60)}
    finally:
        client.close()
    assert got == set(values)


def test_topic_level_replication_clusters_override_the_namespace(pair: list[Node]) -> None:
    a, b = pair
    topic = "persistent://public/default/kept-home"
    assert produce(a.url, topic, ["before"]) == ["before"]
    assert drain(b.url, topic, {"before"}) == ["before"]
    admin(a.web_port, "POST", "/persistent/public/default/kept-home/replication", ["A"])
    assert admin(a.web_port, "GET", "/persistent/public/default/kept-home/replication") == ["A"]
    assert produce(a.url, topic, ["after"]) == ["after"]
    assert drain(a.url, topic, {"before", "after"}) == ["before", "after"]
    assert drain(b.url, topic, {"before"}, settle_ms=2_000) == ["before"]
    stats = admin(a.web_port, "GET", "/persistent/public/default/kept-home/stats")
    assert stats["replication"] == {}


def _kill_mid_stream(tmp_path: Path, remote_env: dict[str, str], *, victim: str = "A") -> Any:
    """Produce 3,000 in A, kill -9 ``victim`` (A: the replicator's broker; B: the remote) while
    replication is under way, produce 1,000 more in A, restart the victim, compare."""
    a, b = make_nodes(tmp_path, ["A", "B"], {"B": remote_env})
    try:
        a.start()
        b.start()
        link([a, b])
        topic = "persistent://public/default/killed"
        first = [f"m-{i}" for i in range(3000)]
        acked = produce(a.url, topic, first)
        killed = a if victim == "A" else b
        killed.kill()  # SIGKILL while the replicator is still sending (and its cursor flushes lazily)
        if victim == "A":
            a.start()
        second = [f"m-{i}" for i in range(3000, 4000)]
        acked += produce(a.url, topic, second)  # with B down: the backlog grows in A
        if victim == "B":
            b.start()
        source = drain(a.url, topic, set(acked))
        remote = drain(b.url, topic, set(source))
        result = check_replication(acked, source, remote)
        print("kill -9 mid-stream:", result.summary())
        return result
    finally:
        a.kill()
        b.kill()


def test_kill9_replicating_standalone_loses_nothing_and_duplicates_nothing(tmp_path: Path) -> None:
    result = _kill_mid_stream(tmp_path, {})
    assert result.counts["acknowledged"] == 4000
    assert result.ok, result.summary()


def test_kill9_remote_cluster_then_restart_loses_nothing_and_duplicates_nothing(tmp_path: Path) -> None:
    result = _kill_mid_stream(tmp_path, {}, victim="B")
    assert result.counts["acknowledged"] == 4000
    assert result.ok, result.summary()


def test_negative_control_without_replication_dedup_duplicates_appear(tmp_path: Path) -> None:
    result = _kill_mid_stream(tmp_path, {"MAGNETAR_BREAK": "no-repl-dedup"})
    assert result.duplicated, result.summary()
    assert not result.lost, result.summary()


def _backlog(node: Node, topic: str, subscription: str) -> int | None:
    stats = admin(node.web_port, "GET", f"/persistent/public/default/{topic}/stats")
    found = stats["subscriptions"].get(subscription)
    return None if found is None else int(found["msgBacklog"])


def _converge(a: Node, b: Node, topic: str, subscription: str, backlog: int, timeout_s: float) -> float:
    """Seconds until the subscription's backlog is ``backlog`` in A and in B (what is left in each,
    from B's internal stats, is named when it never happens)."""
    def converged() -> bool:
        return _backlog(a, topic, subscription) == _backlog(b, topic, subscription) == backlog

    try:
        return wait_for(converged, timeout_s, f"backlog {backlog} in A and B")
    except AssertionError as error:
        internal = {n.name: admin(n.web_port, "GET", f"/persistent/public/default/{topic}/internalStats")
                    for n in (a, b)}
        left = {name: (_backlog(node, topic, subscription), internal[name]["cursors"].get(subscription),
                       internal[name].get("lastConfirmedEntry")) for name, node in (("A", a), ("B", b))}
        raise AssertionError(f"{error}: {left}") from None


def test_replicated_subscription_fails_over_with_exactly_the_unacknowledged(pair: list[Node]) -> None:
    """Consume in A acknowledging all but every tenth message, stop: within a bounded time the
    subscription's backlog is the same in B (convergence when idle, individual acks carried); a
    consumer failing over to B gets exactly the unacknowledged ones. Control: a subscription that
    did not ask for replication gets everything again in B."""
    a, b = pair
    topic = "replicated-sub"
    client_a = geo_client(a.url)
    client_b = geo_client(b.url)
    try:
        consumers = {name: client_a.subscribe(topic, name, consumer_type=pulsar.ConsumerType.Shared,
                                              initial_position=pulsar.InitialPosition.Earliest,
                                              replicate_subscription_state_enabled=flag)
                     for name, flag in (("replicated", True), ("local", False))}
        producer = client_a.create_producer(topic, batching_enabled=False)
        for i in range(100):
            producer.send(f"{i}".encode())
        holes = {i for i in range(100) if i % 10 == 3}
        for consumer in consumers.values():
            for _ in range(100):
                message = consumer.receive(RECEIVE_TIMEOUT_MS)
                if int(message.data()) not in holes:
                    consumer.acknowledge(message)
        converged_s = _converge(a, b, topic, "replicated", len(holes), 10)
        print(f"replicated subscription converged in {converged_s:.2f} s")
        assert converged_s <= 5
        for consumer in consumers.values():
            consumer.close()
        redelivered: dict[str, set[int]] = {}
        for name in ("replicated", "local"):
            consumer = client_b.subscribe(topic, name, consumer_type=pulsar.ConsumerType.Shared,
                                          initial_position=pulsar.InitialPosition.Earliest,
                                          replicate_subscription_state_enabled=name == "replicated")
            got = redelivered[name] = set()
            while True:
                try:
                    message = consumer.receive(2_000)
                except pulsar.Timeout:
                    break
                got.add(int(message.data()))
                consumer.acknowledge(message)
        assert redelivered["replicated"] == holes
        assert redelivered["local"] == set(range(100))  # the control: nothing carried over
    finally:
        client_a.close()
        client_b.close()


def test_replicated_subscription_carries_partial_batch_acknowledgements(pair: list[Node]) -> None:
    """Batches of 10 produced in A; a consumer with batch-index acks acknowledges all but two
    messages of each batch, then a last message produced after them. Once the backlog is the same
    in B (the update that carries the last acknowledgement carries the partial ones with it), a
    consumer failing over to B gets exactly the unacknowledged members of the batches."""
    a, b = pair
    topic = "replicated-batches"
    client_a, client_b = geo_client(a.url), geo_client(b.url)
    options: dict[str, Any] = {"consumer_type": pulsar.ConsumerType.Shared, "batch_index_ack_enabled": True,
                               "replicate_subscription_state_enabled": True}
    try:
        consumer = client_a.subscribe(topic, "batched", initial_position=pulsar.InitialPosition.Earliest, **options)
        producer = client_a.create_producer(topic, batching_enabled=True, batching_max_messages=10,
                                            batching_max_publish_delay_ms=60_000)
        for i in range(50):
            producer.send_async(f"{i}".encode(), None)
        producer.flush()  # five batches of ten
        holes = {i for i in range(50) if i % 10 in (2, 7)}
        for _ in range(50):
            message = consumer.receive(RECEIVE_TIMEOUT_MS)
            if int(message.data()) not in holes:
                consumer.acknowledge(message)
        producer.send(b"last")
        consumer.acknowledge(consumer.receive(RECEIVE_TIMEOUT_MS))
        converged_s = _converge(a, b, topic, "batched", 5, 10)  # five batches, each acknowledged in part
        print(f"partial batch acknowledgements carried in {converged_s:.2f} s")
        consumer.close()
        failover = client_b.subscribe(topic, "batched", **options)
        got: list[int] = []
        while True:
            try:
                message = failover.receive(2_000)
            except pulsar.Timeout:
                break
            got.append(int(message.data()))
            failover.acknowledge(message)
        assert sorted(got) == sorted(holes)  # not carried, the five batches would come back whole
    finally:
        client_a.close()
        client_b.close()


def test_replicated_subscription_state_survives_a_restart_of_the_owner(tmp_path: Path) -> None:
    """Half of 100 messages acknowledged in A (every tenth held back) and carried to B; A is killed
    with SIGKILL and restarted (its replicators had read everything before). The consumer comes back
    to A, which redelivers what it had not persisted as acknowledged, and acknowledges all but
    every tenth: B converges to the same ten. The controller recovered the subscription, the
    origins of the entries and its snapshots from the topic (without that, the acknowledgements
    made after the restart would name entries it never saw, and B would keep them all)."""
    a, b = make_nodes(tmp_path, ["A", "B"])
    topic = "restarted-owner"
    holes = {i for i in range(100) if i % 10 == 3}
    options: dict[str, Any] = {"consumer_type": pulsar.ConsumerType.Shared,
                               "initial_position": pulsar.InitialPosition.Earliest,
                               "replicate_subscription_state_enabled": True}
    try:
        a.start()
        b.start()
        link([a, b])
        client = geo_client(a.url)
        try:
            producer = client.create_producer(f"persistent://public/default/{topic}", batching_enabled=False)
            for i in range(100):
                producer.send(f"{i}".encode())  # one entry each: backlogs count messages
        finally:
            client.close()
        _consume_acking(a, topic, options, lambda i: i < 50 and i not in holes, 100)
        _converge(a, b, topic, "restarted", 55, 15)  # 50..99 and the five holes below 50
        a.kill()
        a.start()
        _consume_acking(a, topic, options, lambda i: i not in holes, None)
        converged_s = _converge(a, b, topic, "restarted", len(holes), 15)
        print(f"after the owner's restart, converged in {converged_s:.2f} s")
    finally:
        a.kill()
        b.kill()


def _consume_acking(node: Node, topic: str, options: dict[str, Any], ack: Callable[[int], bool],
                    count: int | None) -> None:
    """Receive ``count`` messages (None: until none comes for 3 s) on subscription ``restarted``,
    acknowledging those ``ack`` chooses."""
    client = geo_client(node.url)
    try:
        consumer = client.subscribe(f"persistent://public/default/{topic}", "restarted", **options)
        received = 0
        while count is None or received < count:
            try:
                message = consumer.receive(RECEIVE_TIMEOUT_MS if count is not None else 3_000)
            except pulsar.Timeout:
                assert count is None, f"only {received} of {count} messages came"
                return
            received += 1
            if ack(int(message.data())):
                consumer.acknowledge(message)
    finally:
        client.close()  # flushes the acknowledgements


def test_replicator_authenticates_to_the_remote_with_the_registered_token(tmp_path: Path) -> None:
    """B requires token authentication. Registered in A without credentials, A's replicator is
    refused (not connected, last error set, nothing arrives); once B's registration in A carries
    ``authenticationPlugin: token`` and the token, replication starts and B gets the message."""
    from magnetar.security.tokens import create_token

    secret = os.urandom(32)
    token = create_token("replicator", secret_key=secret)
    secure = {"MAGNETAR_BROKER_AUTHENTICATION_ENABLED": "true",
              "MAGNETAR_BROKER_AUTHENTICATION_PROVIDERS": "token",
              "MAGNETAR_BROKER_TOKEN_SECRET_KEY": "data:;base64," + base64.b64encode(secret).decode()}
    a, b = make_nodes(tmp_path, ["A", "B"], {"B": secure})
    try:
        a.start()
        b.start()
        admin(a.web_port, "PUT", "/clusters/B", {"serviceUrl": f"http://127.0.0.1:{b.web_port}",
                                                 "brokerServiceUrl": b.url})
        admin(b.web_port, "PUT", "/clusters/A", {"serviceUrl": f"http://127.0.0.1:{a.web_port}",
                                                 "brokerServiceUrl": a.url}, token=token)
        for node, auth in ((a, None), (b, token)):
            admin(node.web_port, "POST", "/tenants/public", {"allowedClusters": ["A", "B"]}, token=auth)
            admin(node.web_port, "POST", "/namespaces/public/default/replication", ["A", "B"], token=auth)
        assert produce(a.url, "persistent://public/default/secured", ["first"]) == ["first"]
        stats_path = "/persistent/public/default/secured/stats"
        wait_for(lambda: bool(admin(a.web_port, "GET", stats_path)["replication"].get("B", {}).get("lastError")),
                 30, "the refused replicator to report an error")
        refused = admin(a.web_port, "GET", stats_path)["replication"]["B"]
        assert refused["connected"] is False and refused["replicationBacklog"] == 1
        admin(a.web_port, "POST", "/clusters/B", {
            "serviceUrl": f"http://127.0.0.1:{b.web_port}", "brokerServiceUrl": b.url,
            "authenticationPlugin": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
            "authenticationParameters": f"token:{token}"})
        client = geo_client(b.url, authentication=pulsar.AuthenticationToken(token))
        try:
            reader = client.create_reader("persistent://public/default/secured", pulsar.MessageId.earliest)
            assert reader.read_next(90_000).data() == b"first"  # within the replicator's backoff
        finally:
            client.close()
        assert admin(a.web_port, "GET", stats_path)["replication"]["B"]["connected"] is True
    finally:
        a.kill()
        b.kill()


def test_replicated_subscription_failover_during_traffic_redelivers_no_less(pair: list[Node]) -> None:
    """Fail over while messages are still being produced and acknowledged (no idle time): B
    redelivers every message A did not acknowledge, plus at most what A acknowledged in the last
    moments before the switch (acknowledgements not yet carried); the count is reported."""
    a, b = pair
    topic = "replicated-busy"
    client_a = geo_client(a.url)
    client_b = geo_client(b.url)
    try:
        consumer = client_a.subscribe(topic, "busy", consumer_type=pulsar.ConsumerType.Shared,
                                      initial_position=pulsar.InitialPosition.Earliest,
                                      replicate_subscription_state_enabled=True)
        producer = client_a.create_producer(topic, batching_enabled=False)
        acked_at: dict[int, float] = {}
        for i in range(400):
            producer.send(f"{i}".encode())  # each send waits for its receipt: traffic over time
            if i % 2 == 1:  # consume as we go: one message per two sent
                message = consumer.receive(RECEIVE_TIMEOUT_MS)
                consumer.acknowledge(message)
                acked_at[int(message.data())] = time.monotonic()
        acked = set(acked_at)
        switched = time.monotonic()
        consumer.close()  # fail over now: no idle time for the subscription to converge
        failover = client_b.subscribe(topic, "busy", consumer_type=pulsar.ConsumerType.Shared,
                                      replicate_subscription_state_enabled=True)
        redelivered: set[int] = set()
        while len(redelivered - acked) < 400 - len(acked):
            message = failover.receive(RECEIVE_TIMEOUT_MS)
            redelivered.add(int(message.data()))
            failover.acknowledge(message)
        duplicates = redelivered & acked
        print(f"failover during traffic: {len(acked)} acknowledged in A, {len(redelivered - acked)} unacknowledged "
              f"redelivered in B, {len(duplicates)} acknowledged ones redelivered")
        assert set(range(400)) - acked <= redelivered  # nothing unacknowledged is lost
        recent = {v for v, at in acked_at.items() if at >= switched - ACKS_IN_FLIGHT_S}
        assert duplicates <= recent  # only acknowledgements of the last moments were not carried yet
    finally:
        client_a.close()
        client_b.close()
