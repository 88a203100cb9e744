"""Load reports: what each broker publishes so that others can pick the least-loaded one.

Every broker keeps one ephemeral node ``/loadbalance/brokers/{host:port}`` (its advertised
Pulsar address) holding JSON ``{"pulsarServiceUrl", "webServiceUrl", "bundles", "numBundles",
"topics", "connections", "msgRateIn", "msgRateOut"}`` (rates: messages published to and
dispatched from its loaded topics per second over the last report interval). It disappears with the broker's metadata
session, so a dead broker stops being chosen once its session expired. A node left by this
broker's previous session (same address, restarted before the session expired) is replaced.

The report also carries what the load balancer's leader (``control.leader``) decides from, in
Pulsar's ``LocalBrokerData`` names: ``cpu`` ``{"usage", "limit"}`` (percent of one core),
``msgThroughputIn``/``Out`` (bytes/s), ``numTopics``, ``numBundles``, ``numProducers``,
``numConsumers``, ``lastUpdate`` (ms) and ``lastStats``: per bundle ``{"msgRateIn", "msgRateOut",
"msgThroughputIn", "msgThroughputOut", "producerCount", "consumerCount", "topics"}``.

``least_loaded`` orders brokers by (bundles owned, topics loaded, connections, rate in, URL): the
bundle count is what a new assignment changes, and the owner republishes at once after each
change, so a burst of lookups spreads over the brokers instead of piling on one.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

from magnetar.base.errors import BadVersionError, InvalidArgumentError
from magnetar.control.balancer import BrokerLoad, BundleLoad
from magnetar.metadata.api import MetadataStore
from magnetar.metadata.errors import NoNodeError

LOAD_REPORTS_ROOT = "/loadbalance/brokers"


@dataclass(frozen=True, slots=True)
class BundleStats:
    """One owned bundle's figures (Pulsar's ``NamespaceBundleStats``)."""

    msg_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    msg_throughput_in: float = 0.0
    msg_throughput_out: float = 0.0
    producers: int = 0
    consumers: int = 0
    topics: int = 0

    def to_json(self) -> dict[str, float | int]:
        return {"msgRateIn": round(self.msg_rate_in, 3), "msgRateOut": round(self.msg_rate_out, 3),
                "msgThroughputIn": round(self.msg_throughput_in, 3),
                "msgThroughputOut": round(self.msg_throughput_out, 3),
                "producerCount": self.producers, "consumerCount": self.consumers, "topics": self.topics}

    @staticmethod
    def from_json(data: dict[str, object]) -> BundleStats:
        def num(key: str) -> float:
            value = data.get(key, 0)
            return float(value) if isinstance(value, int | float) else 0.0

        return BundleStats(num("msgRateIn"), num("msgRateOut"), num("msgThroughputIn"), num("msgThroughputOut"),
                           int(num("producerCount")), int(num("consumerCount")), int(num("topics")))

    def to_load(self, bundle: str) -> BundleLoad:
        return BundleLoad(bundle, self.topics, self.producers + self.consumers, self.msg_rate_in + self.msg_rate_out,
                          self.msg_throughput_in + self.msg_throughput_out)


@dataclass(frozen=True, slots=True)
class LoadReport:
    broker_id: str
    pulsar_service_url: str
    web_service_url: str
    bundles: tuple[str, ...] = ()
    topics: int = 0
    connections: int = 0
    msg_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    pulsar_service_url_tls: str | None = None  # Pulsar's pulsarServiceUrlTls, when the broker has TLS
    cpu_percent: float = 0.0
    msg_throughput_in: float = 0.0
    msg_throughput_out: float = 0.0
    last_update_ms: int = 0
    bundle_stats: tuple[tuple[str, BundleStats], ...] = ()

    def load_key(self) -> tuple[int, int, int, float, str]:
        return (len(self.bundles), self.topics, self.connections, self.msg_rate_in, self.pulsar_service_url)

    def broker_load(self) -> BrokerLoad:
        """What the balancer decides from: every owned bundle, with its figures (zeros if none)."""
        stats = dict(self.bundle_stats)
        return BrokerLoad(self.pulsar_service_url, self.cpu_percent,
                          tuple(stats.get(b, BundleStats()).to_load(b) for b in self.bundles))

    def to_json(self) -> dict[str, object]:
        stats = dict(self.bundle_stats)
        return {
            "pulsarServiceUrl": self.pulsar_service_url, "webServiceUrl": self.web_service_url,
            "bundles": list(self.bundles), "numBundles": len(self.bundles), "topics": self.topics,
            "numTopics": self.topics, "connections": self.connections,
            "msgRateIn": round(self.msg_rate_in, 3), "msgRateOut": round(self.msg_rate_out, 3),
            "pulsarServiceUrlTls": self.pulsar_service_url_tls,
            "msgThroughputIn": round(self.msg_throughput_in, 3), "msgThroughputOut": round(self.msg_throughput_out, 3),
            "cpu": {"usage": round(self.cpu_percent, 2), "limit": 100.0},
            "numProducers": sum(s.producers for s in stats.values()),
            "numConsumers": sum(s.consumers for s in stats.values()),
            "lastUpdate": self.last_update_ms,
            "lastStats": {bundle: s.to_json() for bundle, s in self.bundle_stats},
        }

    def encode(self) -> bytes:
        return json.dumps(self.to_json()).encode()

    @staticmethod
    def decode(broker_id: str, value: bytes) -> LoadReport:
        try:
            data = json.loads(value)
            cpu = data.get("cpu") or {}
            last_stats = data.get("lastStats") or {}
            return LoadReport(broker_id, str(data["pulsarServiceUrl"]), str(data["webServiceUrl"]),
                              tuple(str(b) for b in data.get("bundles", ())), int(data.get("topics", 0)),
                              int(data.get("connections", 0)), float(data.get("msgRateIn", 0.0)),
                              float(data.get("msgRateOut", 0.0)), data.get("pulsarServiceUrlTls") or None,
                              cpu_percent=float(cpu.get("usage", 0.0)),
                              msg_throughput_in=float(data.get("msgThroughputIn", 0.0)),
                              msg_throughput_out=float(data.get("msgThroughputOut", 0.0)),
                              last_update_ms=int(data.get("lastUpdate", 0)),
                              bundle_stats=tuple((str(b), BundleStats.from_json(s))
                                                 for b, s in sorted(last_stats.items()) if isinstance(s, dict)))
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise InvalidArgumentError(f"bad load report of {broker_id}: {error}") from None


def least_loaded(reports: Sequence[LoadReport]) -> LoadReport | None:
    return min(reports, key=LoadReport.load_key, default=None)


class LoadReports:
    """Publishes this broker's report and reads everyone's."""

    def __init__(self, store: MetadataStore, broker_id: str) -> None:
        self._store = store
        self.broker_id = broker_id
        self.path = f"{LOAD_REPORTS_ROOT}/{broker_id}"
        self._version: int | None = None
        self.last: LoadReport | None = None

    async def publish(self, report: LoadReport) -> None:
        value = report.encode()
        if self._version is not None:
            try:
                self._version = await self._store.put(self.path, value, self._version)
                self.last = report
                return
            except (BadVersionError, NoNodeError):
                self._version = None  # deleted or replaced behind our back: create it again
        try:
            await self._store.create(self.path, value, ephemeral=True)
        except BadVersionError:  # NodeExistsError: our previous session's node, not expired yet
            with contextlib.suppress(NoNodeError):
                await self._store.delete(self.path)
            await self._store.create(self.path, value, ephemeral=True)
        self._version = 0
        self.last = report

    async def all(self) -> list[LoadReport]:
        reports = []
        for child in await self._store.children(LOAD_REPORTS_ROOT):
            found = await self._store.get(f"{LOAD_REPORTS_ROOT}/{child}")
            if found is None:
                continue
            try:
                reports.append(LoadReport.decode(child, found.value))
            except InvalidArgumentError:
                continue  # a foreign or half-written node is no candidate
        return reports
