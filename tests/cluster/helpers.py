"""Helpers for the real-process cluster tests: a started ``LocalCluster``, who owns a topic,
producing with outcomes recorded, reading a topic back, ledger state from the metadata store."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pulsar

from magnetar.base.types import TopicName
from magnetar.control.bundles import BundleRange, NamespaceBundles, topic_hash
from magnetar.ledger.metadata_adapter import MetadataStoreAdapter
from magnetar.ledger.metadata_ops import LedgerMetadataStore
from magnetar.managed_ledger.factory import DEFAULT_ROOT
from magnetar.metadata.records import LedgerState, ManagedLedgerInfo, decode
from magnetar.runtime.cluster import LocalCluster, http_health
from magnetar.runtime.metadata import open_metadata_store

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
SESSION_TIMEOUT_MS = 4_000  # how long a dead or paused owner keeps its bundles in these tests


@contextmanager
def running_cluster(base: Path, **kwargs: object) -> Iterator[LocalCluster]:
    cluster = LocalCluster(base, session_timeout_ms=SESSION_TIMEOUT_MS, **kwargs)  # type: ignore[arg-type]
    try:
        cluster.start(timeout_s=60)
        yield cluster
    finally:
        cluster.stop()
        assert not any(p.alive() for p in cluster.processes.values())


def client(url: str) -> pulsar.Client:
    return pulsar.Client(url, operation_timeout_seconds=30, logger=QUIET)


def bundle_key(topic: str) -> str:
    name = TopicName.parse(topic)
    return f"{name.namespace}/{NamespaceBundles.equal(name.namespace, 4).find(name).name}"


def owner_of(cluster: LocalCluster, topic: str) -> int | None:
    """Index of the broker whose /health lists a bundle holding the topic (None: nobody does)."""
    name = TopicName.parse(topic)
    for index, broker in enumerate(cluster.of_kind("broker")):
        if not broker.alive():
            continue
        health = http_health(broker.http_port or 0) or {}
        for key in health.get("bundles", []):
            namespace, bundle = key.rsplit("/", 1)
            if namespace == name.namespace and BundleRange.parse(bundle).contains(topic_hash(name)):
                return index
    return None


def wait_until(predicate: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.1)  # polling real processes under a deadline
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


@dataclass
class Outcomes:
    """Every send's outcome: acked (value -> message id) or failed."""

    acked: dict[bytes, str] = field(default_factory=dict)
    failed: dict[bytes, str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _done: threading.Condition = field(init=False)

    def __post_init__(self) -> None:
        self._done = threading.Condition(self._lock)

    def send_async(self, producer: pulsar.Producer, value: bytes) -> None:
        def callback(result: pulsar.Result, msg_id: pulsar.MessageId) -> None:
            with self._done:
                if result == pulsar.Result.Ok:
                    self.acked[value] = str(msg_id)
                else:
                    self.failed[value] = str(result)
                self._done.notify_all()

        producer.send_async(value, callback)

    def wait(self, count: int, timeout_s: float, *, undecided_ok: bool = False) -> None:
        """Until ``count`` sends have an outcome; past ``timeout_s`` the rest stay unknown (an
        error unless ``undecided_ok``)."""
        with self._done:
            decided = self._done.wait_for(lambda: len(self.acked) + len(self.failed) >= count, timeout_s)
            if not decided and not undecided_ok:
                raise AssertionError(f"{len(self.acked)} acked + {len(self.failed)} failed of {count} "
                                     f"after {timeout_s} s")


def read_all(url: str, topic: str) -> dict[bytes, str]:
    """Every message stored in ``topic`` (value -> message id), read from the earliest."""
    c = client(url)
    try:
        reader = c.create_reader(topic, pulsar.MessageId.earliest)
        out: dict[bytes, str] = {}
        while reader.has_message_available():
            message = reader.read_next(timeout_millis=20_000)
            out[message.data()] = str(message.message_id())
        return out
    finally:
        c.close()


def ledger_states(cluster: LocalCluster, topic: str) -> list[tuple[int, str]]:
    """(ledger id, metadata state) of every ledger of the topic's managed ledger, oldest first."""

    async def read() -> list[tuple[int, str]]:
        store = await open_metadata_store(cluster.metadata_url)
        try:
            found = await store.get(f"{DEFAULT_ROOT}/{TopicName.parse(topic).persistence_path}")
            assert found is not None, f"no managed ledger for {topic}"
            info = decode(ManagedLedgerInfo, found.value)
            ledgers = LedgerMetadataStore(MetadataStoreAdapter(store))
            out = []
            for ledger in info.ledgers:
                metadata = (await ledgers.read(ledger.ledger_id)).metadata
                out.append((ledger.ledger_id, LedgerState(metadata.state).value))
            return out
        finally:
            await store.close()

    return asyncio.run(read())
