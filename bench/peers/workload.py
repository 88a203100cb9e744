"""The same two workloads against every peer, with its fastest Python client on uvloop:

* durable publish: ``senders`` coroutines, each sending groups of ``group`` messages and waiting
  until every message of the group is durably acknowledged (RabbitMQ: publisher confirm of a
  quorum queue; NATS: JetStream PubAck; Redis: XADD reply after the AOF fsync), for ``seconds``;
  "unbatched" is groups of 1 with up to ``window`` messages in flight, "batched" is the client's
  batching (Redis: a pipeline of ``group`` XADDs; RabbitMQ and NATS have no batch in their
  protocols, so their group only saves client work);
* end-to-end latency: one consumer, one producer paced at ``rate`` messages/s (at most ``window``
  sends in flight; a send that waits for room still carries the time it was due); each payload
  carries its send time (``magnetar.cli.perf.STAMP``), the consumer records receive - send in the
  same HdrHistogram as ``magnetar perf`` (``magnetar.cli.perf.Latency``).
Every loop is bounded by ``seconds``.

``publish_clients`` runs the durable publish from N client processes at once (spawned, each with
its own connection and the same workload, started together), for ``run.py --clients N``.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import queue
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from magnetar.cli.perf import STAMP, Latency

MIB = 1024 * 1024
#: After a paced run, the consumer gets this long to receive the rest.
DRAIN_S = 10.0
#: A client process gets this long to start and connect (RabbitMQ may still be booting).
CLIENT_START_S = 90.0


class Driver(Protocol):
    """One peer's client: durable sends and a consumer."""

    max_senders: int

    async def open(self) -> None: ...
    async def send(self, payloads: list[bytes]) -> None: ...
    async def consume(self, on_payload: Callable[[bytes], None]) -> None: ...
    async def close(self) -> None: ...


async def durable_publish(driver: Driver, size: int, seconds: float, window: int, group: int,
                          on_phase: Callable[[str], None] | None = None) -> dict[str, float]:
    """``on_phase("start")``/``("end")`` around the measured phase (the server's CPU is read there)."""
    payload = os.urandom(size)
    senders = max(1, min(driver.max_senders, window // group))
    acked = [0]
    deadline = time.perf_counter() + seconds

    async def sender() -> None:
        batch = [payload] * group
        while time.perf_counter() < deadline:
            await driver.send(batch)
            acked[0] += group

    if on_phase is not None:
        on_phase("start")
    start, cpu0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(sender() for _ in range(senders)))
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu0
    if on_phase is not None:
        on_phase("end")
    return {"msgs_s": acked[0] / elapsed, "mb_s": acked[0] * size / MIB / elapsed, "senders": senders,
            "acked": acked[0], "elapsed_s": elapsed, "client_cpu_s": cpu}


async def paced_e2e(driver: Driver, size: int, seconds: float, rate: float,
                    window: int = 1000) -> dict[str, float]:
    latency = Latency()
    received = [0]

    def on_payload(data: bytes) -> None:
        latency.record((time.time_ns() - STAMP.unpack_from(data)[0]) // 1000)
        received[0] += 1

    await driver.consume(on_payload)
    body = bytearray(os.urandom(size))
    pending: set[asyncio.Task[None]] = set()
    room = asyncio.Semaphore(window)  # sends in flight; a peer that falls behind makes the sender wait
    sent = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        ahead = start + sent / rate - time.perf_counter()
        if ahead > 0:
            await asyncio.sleep(ahead)
        STAMP.pack_into(body, 0, time.time_ns())  # stamped before waiting for room: waits count as latency
        payload = bytes(body)
        await room.acquire()
        task = asyncio.ensure_future(driver.send([payload]))
        pending.add(task)
        task.add_done_callback(pending.discard)
        task.add_done_callback(lambda _t: room.release())
        sent += 1
    if pending:
        await asyncio.wait(pending, timeout=DRAIN_S)
    drain_deadline = time.perf_counter() + DRAIN_S
    while received[0] < sent and time.perf_counter() < drain_deadline:
        await asyncio.sleep(0.01)
    summary = Latency.summary(latency.total)
    return {"sent": sent, "received": received[0], "rate_achieved_s": sent / seconds,
            "p50_ms": summary["p50"], "p99_ms": summary["p99"], "max_ms": summary["max"]}


class RabbitDriver:
    """aio-pika on a confirm channel; a durable quorum queue per run, published via the default exchange."""

    max_senders = 1_000_000

    def __init__(self, port: int, queue: str) -> None:
        self.port = port
        self.queue_name = queue
        self.connection: Any = None

    async def open(self) -> None:
        import aio_pika

        deadline = time.monotonic() + 60
        while True:  # the listener opens before the node has finished booting
            try:
                self.connection = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{self.port}/")
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)
        self.channel = await self.connection.channel(publisher_confirms=True)
        await self.channel.declare_queue(self.queue_name, durable=True, arguments={"x-queue-type": "quorum"})
        self.exchange = self.channel.default_exchange
        self._message = aio_pika.Message
        self._persistent = aio_pika.DeliveryMode.PERSISTENT

    async def send(self, payloads: list[bytes]) -> None:
        await asyncio.gather(*(self.exchange.publish(self._message(p, delivery_mode=self._persistent),
                                                     routing_key=self.queue_name) for p in payloads))

    async def consume(self, on_payload: Callable[[bytes], None]) -> None:
        channel = await self.connection.channel()
        await channel.set_qos(prefetch_count=1000)
        queue = await channel.declare_queue(self.queue_name, durable=True, arguments={"x-queue-type": "quorum"})

        async def on_message(message: Any) -> None:
            on_payload(message.body)
            await message.ack()

        await queue.consume(on_message)

    async def close(self) -> None:
        if self.connection is not None:
            await self.connection.close()


class NatsDriver:
    """nats-py: a JetStream file stream per run; ``publish_async`` with the acks awaited per group."""

    max_senders = 1_000_000

    def __init__(self, port: int, stream: str) -> None:
        self.port = port
        self.stream = stream
        self.subject = f"{stream}.msgs"
        self.nc: Any = None

    async def open(self) -> None:
        import nats
        from nats.js.api import StorageType

        self.nc = await nats.connect(f"nats://127.0.0.1:{self.port}", pending_size=64 * MIB)
        self.js = self.nc.jetstream(publish_async_max_pending=100_000)
        await self.js.add_stream(name=self.stream, subjects=[self.subject], storage=StorageType.FILE)

    async def send(self, payloads: list[bytes]) -> None:
        futures = [await self.js.publish_async(self.subject, p) for p in payloads]
        await asyncio.gather(*futures)

    async def consume(self, on_payload: Callable[[bytes], None]) -> None:
        async def on_message(message: Any) -> None:
            on_payload(message.data)
            await message.ack()

        await self.js.subscribe(self.subject, cb=on_message, manual_ack=True, deliver_policy=_deliver_new())

    async def close(self) -> None:
        if self.nc is not None:
            await self.nc.drain()


def _deliver_new() -> Any:
    from nats.js.api import DeliverPolicy

    return DeliverPolicy.NEW


class RedisDriver:
    """redis-py asyncio: XADD to a stream; a group is one pipeline (one round trip, one fsync)."""

    max_senders = 64  # one connection per sender; the window is reached with pipelines

    def __init__(self, port: int, stream: str) -> None:
        self.port = port
        self.stream = stream
        self.client: Any = None
        self.reader: asyncio.Task[None] | None = None
        self.stopping = False

    async def open(self) -> None:
        import redis.asyncio as redis

        # A blocking pool: a send waits for a free connection instead of failing.
        pool = redis.BlockingConnectionPool(host="127.0.0.1", port=self.port, max_connections=self.max_senders + 2,
                                            timeout=60)
        self.client = redis.Redis(connection_pool=pool)

    async def send(self, payloads: list[bytes]) -> None:
        if len(payloads) == 1:
            await self.client.xadd(self.stream, {b"d": payloads[0]})
            return
        pipe = self.client.pipeline(transaction=False)
        for payload in payloads:
            pipe.xadd(self.stream, {b"d": payload})
        await pipe.execute()

    async def consume(self, on_payload: Callable[[bytes], None]) -> None:
        last = [b"$"]

        async def read_loop() -> None:
            while not self.stopping:  # XREAD blocks at most 100 ms: the loop sees the flag
                found = await self.client.xread({self.stream: last[0]}, block=100, count=1000)
                for _stream, entries in found or []:
                    for entry_id, fields in entries:
                        on_payload(fields[b"d"])
                        last[0] = entry_id

        self.reader = asyncio.ensure_future(read_loop())
        await asyncio.sleep(0.2)  # XREAD with "$" must be in place before the first XADD

    async def close(self) -> None:
        self.stopping = True
        if self.reader is not None:
            # Cancelling redis-py in the middle of a blocking read can hang: let it see the flag.
            done, _ = await asyncio.wait({self.reader}, timeout=5)
            if not done:
                self.reader.cancel()
            elif not self.reader.cancelled():
                self.reader.exception()
        if self.client is not None:
            await asyncio.wait_for(self.client.aclose(), 10)


DRIVERS: dict[str, Callable[[int, str], Driver]] = {
    "rabbitmq": RabbitDriver, "nats": NatsDriver, "redis": RedisDriver,
}


def run_uvloop(factory: Callable[[], Awaitable[Any]], bound_s: float) -> Any:
    """The peer clients run on uvloop, as Magnetar's servers do; a client that hangs fails the
    scenario after ``bound_s`` (``TimeoutError``) instead of the whole run."""
    import uvloop

    async def main() -> Any:
        return await asyncio.wait_for(factory(), bound_s)

    return uvloop.run(main())


def _publish_client(name: str, port: int, stream: str, size: int, seconds: float, window: int, group: int,
                    index: int, reports: Any, go: Any, bound_s: float) -> None:
    """One client process of ``publish_clients``: connect, report ready, wait for ``go``, publish."""
    async def main() -> dict[str, float]:
        driver = DRIVERS[name](port, stream)
        await driver.open()
        try:
            reports.put(("ready", index, None))
            deadline = time.monotonic() + CLIENT_START_S
            while not go.is_set():
                if time.monotonic() > deadline:
                    raise TimeoutError("no start signal")
                await asyncio.sleep(0.005)
            return await durable_publish(driver, size, seconds, window, group)
        finally:
            await driver.close()

    try:
        reports.put(("result", index, run_uvloop(main, bound_s)))
    except BaseException as exc:  # the parent fails the scenario with it
        reports.put(("error", index, f"{type(exc).__name__}: {exc}"))


def publish_clients(name: str, port: int, stream: str, size: int, seconds: float, window: int, group: int,
                    clients: int, bound_s: float, on_phase: Callable[[str], None] | None = None) -> dict[str, float]:
    """``durable_publish`` from ``clients`` spawned processes on the same stream, started together;
    acks summed over the longest client's measured time. Every process is stopped by the end
    (terminated, then killed, if it outlives ``bound_s``)."""
    context = multiprocessing.get_context("spawn")
    reports = context.Queue()
    go = context.Event()
    processes = [context.Process(target=_publish_client, daemon=True, name=f"peer-client-{i}",
                                 args=(name, port, stream, size, seconds, window, group, i, reports, go, bound_s))
                 for i in range(clients)]
    ready: set[int] = set()
    results: dict[int, dict[str, float]] = {}
    errors: list[str] = []
    deadline = time.monotonic() + CLIENT_START_S + bound_s

    def collect(until: Callable[[], bool]) -> None:
        while not until() and not errors and time.monotonic() < deadline:
            try:
                kind, index, data = reports.get(timeout=0.1)
            except queue.Empty:
                continue
            if kind == "ready":
                ready.add(index)
            elif kind == "result":
                results[index] = data
            else:
                errors.append(f"client {index}: {data}")

    try:
        for process in processes:
            process.start()
        collect(lambda: len(ready) == clients)
        if len(ready) == clients and not errors:
            if on_phase is not None:
                on_phase("start")
            go.set()
            collect(lambda: len(results) == clients)
            if on_phase is not None:
                on_phase("end")
    finally:
        go.set()
        for process in processes:
            process.join(timeout=max(1.0, deadline - time.monotonic()))
        for stop in ("terminate", "kill"):
            for process in processes:
                if process.is_alive():
                    getattr(process, stop)()
                    process.join(timeout=10)
        reports.cancel_join_thread()
        reports.close()
    if errors or len(results) < clients:
        raise RuntimeError("; ".join(errors) or f"{clients - len(results)} client(s) reported no result in time")
    acked = sum(r["acked"] for r in results.values())
    elapsed = max(r["elapsed_s"] for r in results.values())
    return {"msgs_s": acked / elapsed, "mb_s": acked * size / MIB / elapsed, "acked": acked, "elapsed_s": elapsed,
            "senders": sum(r["senders"] for r in results.values()),
            "client_cpu_s": sum(r["client_cpu_s"] for r in results.values())}
