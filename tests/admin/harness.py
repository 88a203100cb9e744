"""An in-process broker with its admin app, driven without sockets.

``AdminWorld`` is a ``BrokerService`` over the in-memory log store and the in-memory metadata
store, with a ``ManualClock`` (policy checks run when the test says), the admin app built as the
broker serves it, and ``call`` to send one HTTP request straight to the ASGI app. ``producer`` and
``subscribe`` attach fake clients through the broker's own classes, as a session would.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from magnetar.admin import AdminContext, build_admin_app
from magnetar.base.types import EARLIEST, TopicName
from magnetar.broker import BrokerConfig, MemoryLogStore
from magnetar.broker.consumer import Consumer, SubType
from magnetar.broker.log import LogStore
from magnetar.broker.managed_log import ManagedLogStore
from magnetar.broker.producer import AccessMode, Producer
from magnetar.broker.service import BrokerService
from magnetar.broker.subscription import Subscription
from magnetar.catalog.resources import ClusterData
from magnetar.managed_ledger.config import ManagedLedgerConfig
from magnetar.metadata.memory import MemoryMetadataServer
from magnetar.protocol.pulsar import headers_and_payload, pb
from magnetar.runtime.security import CredentialFiles
from tests.broker.fakes import FakeChannel
from tests.manual_clock import ManualClock, settle


@dataclass
class Reply:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


async def asgi_call(app: Any, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
                    query: str = "", headers: dict[str, str] | None = None) -> Reply:
    payload = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
    sent = False
    out: dict[str, Any] = {"status": 0, "body": b"", "headers": {}}
    request_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    request_headers += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": payload, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            out["status"] = message["status"]
            out["headers"] = {k.decode(): v.decode() for k, v in message.get("headers", [])}
        elif message["type"] == "http.response.body":
            out["body"] += message.get("body", b"")

    from urllib.parse import unquote

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
             "scheme": "http", "path": unquote(path), "raw_path": path.encode(), "root_path": "",
             "query_string": query.encode(), "headers": request_headers, "server": ("127.0.0.1", 8080),
             "client": ("127.0.0.1", 1)}
    await app(scope, receive, send)
    return Reply(out["status"], out["body"], out["headers"])


def message(payload: bytes = b"x", *, publish_time: int = 0, sequence_id: int = 0) -> bytes:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=sequence_id, publish_time=publish_time)
    return headers_and_payload(metadata, payload)


class AdminWorld:
    def __init__(self, config: BrokerConfig | None = None, log_store: LogStore | None = None) -> None:
        self.clock = ManualClock()
        self.config = config or BrokerConfig()
        self.log_store: LogStore = log_store or MemoryLogStore()
        self.service: BrokerService
        self.app: Any = None
        self._ids = 0

    async def start(self, metadata: Any = None) -> AdminWorld:
        if metadata is None:
            self.metadata_server = MemoryMetadataServer(self.clock)
            metadata = await self.metadata_server.connect()
        self.metadata = metadata
        self.service = BrokerService(self.config, self.log_store, metadata, clock=self.clock)
        # The runtime's own wiring: an authenticator when config.authentication_enabled, else None.
        self.service.authenticator = CredentialFiles(self.config, self.clock).authenticator
        assert self.service.resources is not None
        await self.service.resources.bootstrap(self.config.cluster_name, ClusterData(service_url="http://x"))
        self.app = build_admin_app(AdminContext(self.service, self.config.cluster_name))
        return self

    async def close(self) -> None:
        await self.service.close()

    async def call(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Reply:
        return await asgi_call(self.app, method, path, body, **kwargs)

    async def ok(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        reply = await self.call(method, path, body, **kwargs)
        assert reply.status in (200, 204), (method, path, reply.status, reply.body)
        return reply.json()

    @staticmethod
    def topic_path(topic: str) -> str:
        name = TopicName.parse(topic)
        return f"/persistent/{name.namespace}/{quote(name.local_name, safe='')}"

    # --- fake clients --------------------------------------------------------------------------

    async def producer(self, topic: str, name: str | None = None) -> tuple[Producer, FakeChannel]:
        loaded = await self.service.get_topic(TopicName.parse(topic), create=True)
        await loaded.dedup.ready()
        channel = FakeChannel()
        self._ids += 1
        producer = Producer(loaded, self._ids, name or f"p{self._ids}", channel, AccessMode.SHARED, 1000)
        loaded.add_producer(producer, 0, lambda _p, _r: None)
        return producer, channel

    async def publish(self, topic: str, count: int, *, size: int = 10, publish_time: int | None = None) -> None:
        loaded = await self.service.get_topic(TopicName.parse(topic), create=True)
        for i in range(count):
            when = self.clock.now_ms() if publish_time is None else publish_time
            await loaded.publish(message(b"x" * size, publish_time=when, sequence_id=i))

    async def subscribe(self, topic: str, subscription: str,
                        sub_type: SubType = SubType.SHARED) -> tuple[Consumer, Subscription, FakeChannel]:
        loaded = await self.service.get_topic(TopicName.parse(topic), create=True)
        sub = await loaded.subscription(subscription, durable=True, initial_mark_delete=EARLIEST)
        channel = FakeChannel()
        self._ids += 1
        consumer = Consumer(self._ids, f"c{self._ids}", sub_type, channel)
        sub.add_consumer(consumer)
        return consumer, sub, channel

    async def check(self) -> None:
        await self.service.check_policies()
        await settle()


def run_world(body: Callable[[AdminWorld], Awaitable[None]], config: BrokerConfig | None = None) -> None:
    """Run ``body`` against a fresh started world, closed afterwards."""

    async def main() -> None:
        world = await AdminWorld(config).start()
        try:
            await body(world)
        finally:
            await world.close()

    asyncio.run(main())


async def managed_broker(world: Any, ml_config: ManagedLedgerConfig, config: BrokerConfig | None = None) -> BrokerService:
    """A ``BrokerService`` over managed ledgers on ``world``'s fake bookies and metadata (a
    ``tests.managed_ledger.harness`` world, virtual time), bootstrapped as ``standalone``."""
    factory = await world.broker(ml_config)
    store = await world.metadata.connect()
    service = BrokerService(config if config is not None else BrokerConfig(deduplication=False),
                            ManagedLogStore(factory, store), store, clock=world.clock)
    assert service.resources is not None
    await service.resources.bootstrap("standalone", ClusterData())
    return service
