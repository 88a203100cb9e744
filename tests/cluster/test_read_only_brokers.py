"""Read-only brokers with real processes and the official client: ZooKeeper, 3 bookies, 1 owner,
2 read-only brokers (``magnetar broker --read-only``).

Produce through the owner, consume through the read-only brokers (their service URL is the only
change in the application); every subscription type, acks of each kind, redelivery, seek, readers,
delayed delivery, partitioned topics and regex subscriptions; producers refused with the owner's
URL; one subscription served by one broker at a time; kill -9 of a read-only broker and of the
owner; a rollover and retention while a read-only cursor lags.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar.runtime.cluster import READ_ONLY_BROKER, LocalCluster, http_health
from tests.cluster.helpers import QUIET, SESSION_TIMEOUT_MS, client, wait_until

pytestmark = pytest.mark.integration

ENTRIES_PER_LEDGER = 20


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    # Small ledgers (rollovers) and frequent policy checks (trims) on the owner; deduplication off,
    # since its cursor snapshots only every 1,000 entries (as Pulsar's) and would hold back trims.
    # Every broker reads the same tiered store (a directory here, a bucket in production); the
    # owner deletes an offloaded ledger's bookie copy at once.
    base = tmp_path_factory.mktemp("ro")
    tiered = {"MAGNETAR_BROKER_OFFLOAD_DIRECTORY": str(base / "offload")}
    env = {"broker-0": {"MAGNETAR_BROKER_MAX_ENTRIES_PER_LEDGER": str(ENTRIES_PER_LEDGER),
                        "MAGNETAR_BROKER_POLICY_CHECK_INTERVAL_MS": "300", "MAGNETAR_BROKER_DEDUPLICATION": "false",
                        "MAGNETAR_BROKER_OFFLOAD_DELETION_LAG_MS": "0", **tiered},
           "ro-broker-0": tiered, "ro-broker-1": tiered}
    cluster = LocalCluster(base, bookies=3, brokers=1, read_only_brokers=2, autorecovery=False, env=env,
                           session_timeout_ms=SESSION_TIMEOUT_MS)
    # The owner advertises a listener named "readonly" at the first read-only broker: a client that
    # sets listener_name="readonly" is sent there by the owner's LOOKUP (Pulsar's advertisedListeners).
    owner, first_ro = cluster.processes["broker-0"], cluster.of_kind(READ_ONLY_BROKER)[0]
    owner.env["MAGNETAR_BROKER_ADVERTISED_LISTENERS"] = (
        f"internal:pulsar://127.0.0.1:{owner.port},readonly:pulsar://127.0.0.1:{first_ro.port}")
    try:
        cluster.start(timeout_s=90)
        yield cluster
    finally:
        cluster.stop()


def ro_url(cluster: LocalCluster, index: int | None = None) -> str:
    if index is None:
        url = cluster.read_only_service_url()
        assert url is not None
        return url
    return f"pulsar://127.0.0.1:{cluster.of_kind(READ_ONLY_BROKER)[index].port}"


def produce(cluster: LocalCluster, topic: str, values: list[bytes], **kwargs: object) -> list[pulsar.MessageId]:
    with_client = client(cluster.service_url())
    try:
        producer = with_client.create_producer(topic, batching_enabled=False, **kwargs)  # type: ignore[arg-type]
        return [producer.send(v) for v in values]
    finally:
        with_client.close()


def persisted(cluster: LocalCluster, topic: str, subscription: str, message: pulsar.Message) -> bool:
    """Whether the read-only broker serving ``subscription`` has persisted acks up to ``message``."""
    wanted = f"{message.message_id().ledger_id()}:{message.message_id().entry_id()}"
    local = topic.split("/")[-1]
    for broker in cluster.of_kind(READ_ONLY_BROKER):
        if not broker.alive():
            continue
        url = f"http://127.0.0.1:{broker.http_port}/admin/v2/persistent/public/default/{local}/internalStats"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                cursor = json.loads(response.read())["cursors"].get(subscription)
        except OSError:
            continue
        if cursor is not None and cursor.get("persistedMarkDeletePosition") == wanted:
            return True
    return False


def receive_all(consumer: pulsar.Consumer, count: int, timeout_ms: int = 30_000) -> list[pulsar.Message]:
    return [consumer.receive(timeout_ms) for _ in range(count)]


def test_every_subscription_type_reads_exactly_what_the_owner_stored(cluster: LocalCluster) -> None:
    topic = "persistent://public/default/ro-types"
    values = [f"m{i}".encode() for i in range(40)]
    keys = [f"k{i % 4}" for i in range(40)]
    owner = client(cluster.service_url())
    producer = owner.create_producer(topic, batching_enabled=False)
    ro = client(ro_url(cluster))
    try:
        kinds = (pulsar.ConsumerType.Exclusive, pulsar.ConsumerType.Failover, pulsar.ConsumerType.Shared,
                 pulsar.ConsumerType.KeyShared)
        # The subscriptions exist before the messages (retention 0: what no subscription still
        # needs is deleted), and each holds back the owner's trimming of what it has not consumed.
        consumers = {kind: ro.subscribe(topic, f"sub-{kind}", consumer_type=kind,
                                        initial_position=pulsar.InitialPosition.Earliest) for kind in kinds}
        for value, key in zip(values, keys, strict=True):
            producer.send(value, partition_key=key)
        for kind, consumer in consumers.items():
            got = receive_all(consumer, len(values))
            for message in got:
                consumer.acknowledge(message)
            data = [m.data() for m in got]
            if kind in (pulsar.ConsumerType.Exclusive, pulsar.ConsumerType.Failover):
                assert data == values  # in order
            else:
                assert sorted(data) == sorted(values)
                for key in set(keys):  # per key order (one consumer: every key in order)
                    assert [d for d, m in zip(data, got, strict=True) if m.partition_key() == key] == \
                        [v for v, k in zip(values, keys, strict=True) if k == key]
            with pytest.raises(pulsar.Timeout):
                consumer.receive(300)  # exactly those: nothing more
            consumer.close()
        # Fresh entries reach a read-only subscription while it is connected.
        live = ro.subscribe(topic, "live", initial_position=pulsar.InitialPosition.Latest)
        producer.send(b"fresh")
        assert live.receive(30_000).data() == b"fresh"
        live.close()
        # They came through the owner's position feed (a metric of the read-only broker).
        fed = []
        for broker in cluster.of_kind(READ_ONLY_BROKER):
            with urllib.request.urlopen(f"http://127.0.0.1:{broker.http_port}/metrics", timeout=10) as response:
                fed += [line for line in response.read().decode().splitlines()
                        if line.startswith("magnetar_read_only_feed_positions_total") and "ro-types" in line]
        assert fed and max(float(line.rsplit(" ", 1)[1]) for line in fed) > 0
    finally:
        ro.close()
        owner.close()


def test_acks_redelivery_seek_readers_and_delayed_delivery(cluster: LocalCluster) -> None:
    topic = "persistent://public/default/ro-acks"
    owner = client(cluster.service_url())
    batched = owner.create_producer(topic, batching_enabled=True, batching_max_messages=5,
                                    batching_max_publish_delay_ms=50)
    for i in range(10):
        batched.send_async(f"b{i}".encode(), None)
    batched.flush()
    ro = client(ro_url(cluster, 0))
    try:
        consumer = ro.subscribe(topic, "acks", consumer_type=pulsar.ConsumerType.Shared,
                                initial_position=pulsar.InitialPosition.Earliest,
                                negative_ack_redelivery_delay_ms=100, batch_index_ack_enabled=True)
        got = receive_all(consumer, 10)
        assert [m.data() for m in got] == [f"b{i}".encode() for i in range(10)]
        for message in got[:3]:  # batch-index acks inside the first batch
            consumer.acknowledge(message)
        consumer.negative_acknowledge(got[3])  # redelivered
        for message in got[4:]:
            consumer.acknowledge(message)
        assert consumer.receive(30_000).data() == b"b3"
        consumer.close()
        # The persisted state: a reconnect (to the other read-only broker) gets only b3 again.
        other = client(ro_url(cluster, 1))
        again = other.subscribe(topic, "acks", consumer_type=pulsar.ConsumerType.Shared,
                                batch_index_ack_enabled=True)
        assert again.receive(30_000).data() == b"b3"
        with pytest.raises(pulsar.Timeout):
            again.receive(500)
        # Seek back to the start, then a reader from the earliest message.
        again.seek(pulsar.MessageId.earliest)
        assert again.receive(30_000).data() == b"b0"
        again.close()
        reader = other.create_reader(topic, pulsar.MessageId.earliest)
        assert [reader.read_next(30_000).data() for _ in range(10)] == [f"b{i}".encode() for i in range(10)]
        reader.close()
        other.close()
        # Delayed delivery on a shared read-only subscription.
        delayed = ro.subscribe(topic, "delayed", consumer_type=pulsar.ConsumerType.Shared)
        plain = owner.create_producer(topic, batching_enabled=False)
        sent_at = time.monotonic()
        plain.send(b"later", deliver_after=__import__("datetime").timedelta(milliseconds=1500))
        plain.send(b"now")
        assert delayed.receive(30_000).data() == b"now"
        message = delayed.receive(30_000)
        assert message.data() == b"later" and time.monotonic() - sent_at >= 1.4
        delayed.close()
    finally:
        ro.close()
        owner.close()


def test_partitioned_topics_and_regex_subscriptions(cluster: LocalCluster) -> None:
    for index in range(3):  # the owner takes the partitions' bundles (LOOKUP) before the admin call
        produce(cluster, f"persistent://public/default/ro-parts-partition-{index}", [])
    request = urllib.request.Request(
        f"{cluster.http_url()}/admin/v2/persistent/public/default/ro-parts/partitions", data=b"3", method="PUT",
        headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=10).close()
    topic = "persistent://public/default/ro-parts"
    values = [f"p{i}".encode() for i in range(30)]
    produce(cluster, topic, values)
    produce(cluster, "persistent://public/default/ro-regex-a", [b"ra"])
    produce(cluster, "persistent://public/default/ro-regex-b", [b"rb"])
    ro = client(ro_url(cluster))
    try:
        consumer = ro.subscribe(topic, "parts", initial_position=pulsar.InitialPosition.Earliest)
        assert sorted(m.data() for m in receive_all(consumer, 30)) == sorted(values)
        consumer.close()
        pattern = ro.subscribe(re.compile("persistent://public/default/ro-regex-.*"), "rx",
                               initial_position=pulsar.InitialPosition.Earliest)
        assert sorted(m.data() for m in receive_all(pattern, 2)) == [b"ra", b"rb"]
        pattern.close()
    finally:
        ro.close()


def test_a_listener_name_on_the_owners_url_reaches_a_read_only_broker(cluster: LocalCluster) -> None:
    """No code change but the client's listener_name: the owner's LOOKUP answers with the URL of
    its "readonly" listener, a read-only broker, which then serves the subscription."""
    topic = "persistent://public/default/ro-listener"
    produce(cluster, topic, [])  # the owner creates the topic
    reading = pulsar.Client(cluster.service_url(), listener_name="readonly", operation_timeout_seconds=30,
                            logger=QUIET)
    try:
        consumer = reading.subscribe(topic, "via-listener", initial_position=pulsar.InitialPosition.Earliest)
        produce(cluster, topic, [b"hello"])
        assert consumer.receive(30_000).data() == b"hello"
        served_by = owner_stats(cluster, topic)["subscriptions"]["via-listener"]["readOnlyBroker"]
        assert served_by == ro_url(cluster, 0)
        with pytest.raises(pulsar.NotAllowedError):  # producers through that listener: refused
            reading.create_producer(topic)
    finally:
        reading.close()


def test_read_compacted_follows_the_owners_compactions(cluster: LocalCluster) -> None:
    topic = "persistent://public/default/ro-compacted"
    ro = client(ro_url(cluster, 0))
    owner = client(cluster.service_url())
    base = f"{cluster.http_url()}/admin/v2/persistent/public/default/ro-compacted/compaction"

    def compact() -> None:
        urllib.request.urlopen(urllib.request.Request(base, method="PUT"), timeout=10).close()

        def done() -> bool:
            with urllib.request.urlopen(base, timeout=10) as response:
                return bool(json.loads(response.read())["status"] == "SUCCESS")

        wait_until(done, 30, "the owner's compaction")

    try:
        producer = owner.create_producer(topic, batching_enabled=False)
        holder = ro.subscribe(topic, "holder", initial_position=pulsar.InitialPosition.Earliest)  # keeps data
        for i in range(12):
            producer.send(f"v{i}".encode(), partition_key=f"k{i % 3}")
        compact()  # after the read-only broker loaded the topic
        reader = ro.subscribe(topic, "compacted", is_read_compacted=True,
                              initial_position=pulsar.InitialPosition.Earliest)
        latest = {m.partition_key(): m.data() for m in receive_all(reader, 3)}
        assert latest == {"k0": b"v9", "k1": b"v10", "k2": b"v11"}  # one per key: the compacted view
        reader.close()
        holder.close()
    finally:
        ro.close()
        owner.close()


def test_producers_are_refused_with_the_owners_url_and_one_subscription_has_one_broker(
        cluster: LocalCluster) -> None:
    topic = "persistent://public/default/ro-refuse"
    produce(cluster, topic, [b"x"])
    first, second = client(ro_url(cluster, 0)), client(ro_url(cluster, 1))
    try:
        with pytest.raises(pulsar.NotAllowedError):
            first.create_producer(topic)
        consumer = first.subscribe(topic, "busy", initial_position=pulsar.InitialPosition.Earliest)
        with pytest.raises(pulsar.ConsumerBusy):
            second.subscribe(topic, "busy")
        consumer.close()
        assert second.subscribe(topic, "busy").receive(30_000).data() == b"x"  # moved: resumes
        health = http_health(cluster.of_kind(READ_ONLY_BROKER)[0].http_port or 0)
        assert health is not None and health.get("readOnly") is True
        # The owner's topic stats list the read-only subscriptions and who serves them.
        stats = owner_stats(cluster, topic)
        assert stats["subscriptions"]["busy"]["readOnlyBroker"] == ro_url(cluster, 1)
        # The refused producer left nothing behind (no deduplication cursor holding back trims).
        assert set(stats["subscriptions"]) == {"busy"}
    finally:
        first.close()
        second.close()


def test_rollover_and_retention_while_a_read_only_cursor_lags(cluster: LocalCluster) -> None:
    topic = "persistent://public/default/ro-retention"
    ro = client(ro_url(cluster, 0))
    owner = client(cluster.service_url())
    try:
        producer = owner.create_producer(topic, batching_enabled=False)  # the owner creates the topic
        with pytest.raises(pulsar.TopicNotFound):  # a read-only broker never creates one
            ro.subscribe("persistent://public/default/ro-never-created", "x")
        lagging = ro.subscribe(topic, "lagging", initial_position=pulsar.InitialPosition.Earliest)
        fast = owner.subscribe(topic, "fast", initial_position=pulsar.InitialPosition.Earliest)
        values = [f"r{i}".encode() for i in range(3 * ENTRIES_PER_LEDGER + 5)]  # three rollovers
        for value in values:
            producer.send(value)
        for _ in values:
            fast.acknowledge(fast.receive(30_000))
        first_ledger = ledgers(cluster, topic)[0]
        first_half = receive_all(lagging, ENTRIES_PER_LEDGER + 2)
        for message in first_half:
            lagging.acknowledge(message)
        wait_until(lambda: persisted(cluster, topic, "lagging", first_half[-1]), 15, "the lagging cursor persisted")
        # The owner trims consumed ledgers on its policy checks (retention 0 by default): the
        # first ledger goes, the ones the read-only cursor has not consumed stay.
        wait_until(lambda: ledgers(cluster, topic)[0] != first_ledger, 15, "the owner trimmed the first ledger")
        kept = ledgers(cluster, topic)
        assert len(kept) >= 3  # rolled over three times; only what both cursors consumed went
        rest = receive_all(lagging, len(values) - len(first_half))
        assert [m.data() for m in first_half + rest] == values
    finally:
        ro.close()
        owner.close()


def owner_stats(cluster: LocalCluster, topic: str) -> dict[str, Any]:
    local = topic.split("/")[-1]
    with urllib.request.urlopen(f"{cluster.http_url()}/admin/v2/persistent/public/default/{local}/stats",
                                timeout=10) as response:
        result: dict[str, Any] = json.loads(response.read())
        return result


def ledgers(cluster: LocalCluster, topic: str) -> list[int]:
    local = topic.split("/")[-1]
    with urllib.request.urlopen(f"{cluster.http_url()}/admin/v2/persistent/public/default/{local}/internalStats",
                                timeout=10) as response:
        return [ledger["ledgerId"] for ledger in json.loads(response.read())["ledgers"]]


def http_json(method: str, url: str) -> Any:
    request = urllib.request.Request(url, method=method, data=b"" if method == "PUT" else None)
    with urllib.request.urlopen(request, timeout=10) as response:
        raw = response.read()
    return json.loads(raw) if raw else None


def test_a_read_only_broker_reads_offloaded_ledgers_whose_bookie_copy_is_gone(cluster: LocalCluster) -> None:
    topic = "persistent://public/default/ro-offloaded"
    admin = f"{cluster.http_url()}/admin/v2/persistent/public/default/ro-offloaded"
    owner, first = client(cluster.service_url()), client(ro_url(cluster, 0))
    cold = client(ro_url(cluster, 1))
    try:
        producer = owner.create_producer(topic, batching_enabled=False)
        # A read-only subscription that has consumed nothing: the owner keeps every ledger.
        holder = first.subscribe(topic, "holder", initial_position=pulsar.InitialPosition.Earliest)
        values = [f"o{i}".encode() for i in range(3 * ENTRIES_PER_LEDGER + 5)]  # three sealed ledgers
        for value in values:
            producer.send(value)
        http_json("PUT", f"{admin}/offload")
        wait_until(lambda: http_json("GET", f"{admin}/offload")["status"] != "RUNNING", 60, "the offload to end")
        assert http_json("GET", f"{admin}/offload")["status"] == "SUCCESS"
        listed = http_json("GET", f"{admin}/internalStats")["ledgers"]
        assert len(listed) >= 4
        assert all(ledger["offloaded"] and ledger["bookieCopyDeleted"] for ledger in listed[:-1]), listed
        # The second read-only broker never loaded the topic: the sealed ledgers can come only from
        # the tiered store. A reader and a new subscription from the start get every message, in order.
        reader = cold.create_reader(topic, pulsar.MessageId.earliest)
        assert [reader.read_next(30_000).data() for _ in values] == values
        late = cold.subscribe(topic, "late", initial_position=pulsar.InitialPosition.Earliest)
        assert [m.data() for m in receive_all(late, len(values))] == values
        assert [m.data() for m in receive_all(holder, len(values))] == values
    finally:
        cold.close()
        first.close()
        owner.close()


def takeovers(cluster: LocalCluster, topic: str) -> float:
    """``magnetar_read_only_subscription_takeovers_total`` of ``topic`` over the live read-only brokers."""
    total = 0.0
    for broker in cluster.of_kind(READ_ONLY_BROKER):
        if not broker.alive():
            continue
        with urllib.request.urlopen(f"http://127.0.0.1:{broker.http_port}/metrics", timeout=10) as response:
            for line in response.read().decode().splitlines():
                if line.startswith("magnetar_read_only_subscription_takeovers_total") and f'"{topic}"' in line:
                    total += float(line.rsplit(" ", 1)[1])
    return total


def test_kill_a_read_only_broker_then_the_owner(cluster: LocalCluster) -> None:
    topic = "persistent://public/default/ro-kill"
    owner = client(cluster.service_url())
    ro = client(ro_url(cluster))  # both read-only brokers: the client moves to the live one
    try:
        producer = owner.create_producer(topic, batching_enabled=False)
        consumer = ro.subscribe(topic, "k", initial_position=pulsar.InitialPosition.Earliest)
        for i in range(20):
            producer.send(f"a{i}".encode())
        got = receive_all(consumer, 20)
        consumer.acknowledge_cumulative(got[-1])
        wait_until(lambda: persisted(cluster, topic, "k", got[-1]), 15, "acknowledged progress persisted")
        holder = owner_stats(cluster, topic)["subscriptions"]["k"]["readOnlyBroker"]
        serving = [b for b in cluster.of_kind(READ_ONLY_BROKER) if holder.endswith(f":{b.port}")]
        assert len(serving) == 1
        killed_at = time.monotonic()
        serving[0].kill()
        for i in range(20):
            producer.send(f"b{i}".encode())
        after = [consumer.receive(30_000)]
        failover_s = time.monotonic() - killed_at
        after += [consumer.receive(30_000) for _ in range(19)]
        assert [m.data() for m in after] == [f"b{i}".encode() for i in range(20)]  # no acknowledged message again
        # The other broker took the subscription over at once (the holder's port refused), not
        # after the dead broker's metadata session expired.
        assert takeovers(cluster, topic) >= 1
        print(f"\nread-only failover after kill -9: first message {failover_s * 1000:.0f} ms after the kill "
              f"(metadata session timeout {SESSION_TIMEOUT_MS} ms)")
        # Kill -9 the owner: it restarts, recovers the topic; read-only consumers keep going.
        cluster.processes["broker-0"].restart()
        serving[0].start()
        for i in range(10):
            producer.send(f"c{i}".encode())
        assert [consumer.receive(30_000).data() for _ in range(10)] == [f"c{i}".encode() for i in range(10)]
    finally:
        ro.close()
        owner.close()


def test_status_lists_read_only_brokers(cluster: LocalCluster) -> None:
    rows = {s.name: s for s in cluster.status()}
    assert rows["ro-broker-0"].detail.startswith("read-only") or not rows["ro-broker-0"].alive
    assert Path(cluster.base_dir).exists()
