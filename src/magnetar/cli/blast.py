"""``magnetar perf produce --blast``: a load generator that is not the bottleneck (issue 22).

The official client spends ~20-40 us of CPU per unbatched message in this machine's Python
process, so ``perf produce`` measures the client as much as the broker. ``--blast`` speaks the
Pulsar protocol itself: per process one connection and one producer, SEND frames built from one
pre-encoded template (the two sequence-id fields written as fixed-width 10-byte varints, which
every protobuf decoder accepts, so a new frame is a copy, two patches and the CRC32C of
metadata + payload), pipelined up to ``--max-pending`` unacknowledged, written in runs of up to
64 frames. Receipts are counted as they come. Several processes (``--processes``) each blast
their own producer on the topic. The result is the broker's durable ingest rate (messages and
MB per second acknowledged) with its publish latency.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import struct
import time
from typing import Any

from magnetar.base.checksum import crc32c
from magnetar.protocol.pulsar.batch import encode_batch
from magnetar.protocol.pulsar.client_connection import ClientConfig, connect_command
from magnetar.protocol.pulsar.frames import FrameDecoder, encode_command, encode_payload_command, type_name
from magnetar.protocol.pulsar.generated import pulsar_api_pb2 as pb

T = pb.BaseCommand
_PLACEHOLDER = 2**63 + 12345  # encodes as a 10-byte varint: the template's sequence-id slots
_PRODUCER_PLACEHOLDER = 2**63 + 54321  # its producer-id slot
_RUN_FRAMES_MAX = 64
_MAGIC_CRC_BYTES = 6  # 0x0e01 + crc32c, before the metadata size


def wide_varint(value: int) -> bytes:
    """``value`` (< 2**64) as a 10-byte protobuf varint (continuation bits on the first nine)."""
    out = bytearray(10)
    for i in range(9):
        out[i] = ((value >> (7 * i)) & 0x7F) | 0x80
    out[9] = (value >> 63) & 0x01
    return bytes(out)


class SendTemplate:
    """SEND frames of ``payload`` under ``producer_name``, differing only in their sequence id and
    (for a connection holding many producers, ``blast_topics.py``) their producer id.

    With ``batch_count`` > 1 every frame is one batch of that many copies of ``payload`` (the
    broker stores it as one entry and counts ``batch_count`` messages).
    """

    def __init__(self, producer_id: int, producer_name: str, payload: bytes, *, batch_count: int = 1) -> None:
        if not 1 <= batch_count <= 10_000:
            raise ValueError("batch_count must be 1-10000")
        command = T(type=T.SEND, send=pb.CommandSend(producer_id=_PRODUCER_PLACEHOLDER, sequence_id=_PLACEHOLDER))
        metadata = pb.MessageMetadata(producer_name=producer_name, sequence_id=_PLACEHOLDER,
                                      publish_time=int(time.time() * 1000))
        if batch_count > 1:
            command.send.num_messages = batch_count
            metadata.num_messages_in_batch = batch_count
            payload = encode_batch([(pb.SingleMessageMetadata(), payload)] * batch_count)
        frame = encode_payload_command(command, metadata, payload)
        self._frame = frame
        self._slots = _slots(frame, wide_varint(_PLACEHOLDER), 2)
        self._producer_slot = _slots(frame, wide_varint(_PRODUCER_PLACEHOLDER), 1)[0]
        self.producer_id, self.batch_count = producer_id, batch_count
        command_size = struct.unpack_from(">I", frame, 4)[0]
        self._crc_at = 8 + command_size + 2  # after size, command size, command, magic
        self._checked_from = self._crc_at + 4

    def frame(self, sequence_id: int, producer_id: int | None = None) -> bytes:
        out = bytearray(self._frame)
        slot = wide_varint(sequence_id)
        for at in self._slots:
            out[at : at + 10] = slot
        at = self._producer_slot
        out[at : at + 10] = wide_varint(self.producer_id if producer_id is None else producer_id)
        crc = crc32c(memoryview(out)[self._checked_from :])
        struct.pack_into(">I", out, self._crc_at, crc)
        return bytes(out)


def _slots(frame: bytes, slot: bytes, count: int) -> list[int]:
    found: list[int] = []
    at = frame.find(slot)
    while at >= 0:
        found.append(at)
        at = frame.find(slot, at + 1)
    if len(found) != count:
        raise ValueError(f"the SEND template must hold exactly {count} such slot(s), found {len(found)}")
    return found


async def _expect(reader: asyncio.StreamReader, decoder: FrameDecoder, wanted: int) -> pb.BaseCommand:
    while True:
        frame = decoder.next_frame()
        if frame is not None:
            if frame.command.type == wanted:
                return frame.command
            if frame.command.type in (T.ERROR, T.SEND_ERROR):
                raise RuntimeError(f"broker answered {type_name(frame.command.type)}: {frame.command}")
            continue  # PING and the like during the handshake
        data = await reader.read(65536)
        if not data:
            raise ConnectionError("the broker closed the connection")
        decoder.feed(data)


class _Blaster:
    """One connection and one producer; ``sent``/``acked``/``failed`` and the latencies."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, window: int) -> None:
        self.reader, self.writer, self.window = reader, writer, window
        self.decoder = FrameDecoder()
        self.sent = self.acked = self.failed = 0
        self.sent_at: dict[int, float] = {}
        self.latencies: list[float] = []
        self.room = asyncio.Event()
        self.done = asyncio.Event()

    async def handshake(self, topic: str, name: str) -> None:
        self.writer.write(encode_command(connect_command(ClientConfig())))
        await _expect(self.reader, self.decoder, T.CONNECTED)
        self.writer.write(encode_command(T(type=T.PRODUCER, producer=pb.CommandProducer(
            topic=topic, producer_id=1, request_id=1, producer_name=name))))
        await _expect(self.reader, self.decoder, T.PRODUCER_SUCCESS)

    def outstanding(self) -> int:
        return self.sent - self.acked - self.failed

    async def receive(self) -> None:
        while not (self.done.is_set() and self.outstanding() <= 0):
            data = await self.reader.read(262144)
            if not data:
                return
            self.decoder.feed(data)
            now = time.perf_counter()
            while (frame := self.decoder.next_frame()) is not None:
                kind = frame.command.type
                if kind == T.SEND_RECEIPT:
                    self.acked += 1
                    self.latencies.append(now - self.sent_at.pop(frame.command.send_receipt.sequence_id, now))
                elif kind == T.SEND_ERROR:
                    self.failed += 1
                    self.sent_at.pop(frame.command.send_error.sequence_id, None)
                elif kind == T.PING:
                    self.writer.write(encode_command(T(type=T.PONG, pong=pb.CommandPong())))
            if self.outstanding() < self.window:
                self.room.set()

    async def send_until(self, template: SendTemplate, deadline: float, receiver: asyncio.Task[None]) -> None:
        while time.perf_counter() < deadline and not receiver.done():
            free = self.window - self.outstanding()
            if free <= 0:
                self.room.clear()
                await self.room.wait()
                continue
            first = self.sent
            run = [template.frame(first + i) for i in range(min(free, _RUN_FRAMES_MAX))]
            now = time.perf_counter()
            for i in range(len(run)):
                self.sent_at[first + i] = now
            self.sent += len(run)
            self.writer.writelines(run)
            await self.writer.drain()

    def percentile_ms(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


async def blast_one(host: str, port: int, topic: str, size: int, seconds: float, window: int,
                    name: str, batch: int = 1) -> dict[str, Any]:
    """One connection, one producer: SENDs pipelined up to ``window`` for ``seconds``; with ``batch``
    > 1 each SEND is one batch of that many messages (``window`` counts SENDs)."""
    reader, writer = await asyncio.open_connection(host, port)
    blaster = _Blaster(reader, writer, window)
    try:
        await blaster.handshake(topic, name)
        template = SendTemplate(1, name, os.urandom(size), batch_count=batch)
        start, cpu0 = time.perf_counter(), time.process_time()
        receiver = asyncio.get_running_loop().create_task(blaster.receive())
        await blaster.send_until(template, start + seconds, receiver)
        elapsed = time.perf_counter() - start
        blaster.done.set()
        if blaster.outstanding() <= 0:  # nothing more to read: the receiver may wait in read()
            receiver.cancel()
        try:
            await asyncio.wait_for(receiver, timeout=30)
        except (TimeoutError, asyncio.CancelledError):
            receiver.cancel()
        cpu = time.process_time() - cpu0
    finally:
        writer.close()
    return {"sent": blaster.sent * batch, "acked": blaster.acked * batch, "failed": blaster.failed * batch,
            "elapsed_s": elapsed,
            "client_cpu_s": cpu, "p50_ms": blaster.percentile_ms(0.5), "p99_ms": blaster.percentile_ms(0.99)}


def _worker(args: tuple[str, int, str, int, float, int, str, int]) -> dict[str, Any]:
    return asyncio.run(blast_one(*args))


def run_blast(service_url: str, topic: str, *, size: int, seconds: float, window: int, processes: int,
              batch: int = 1) -> dict[str, Any]:
    """Blast ``topic`` from ``processes`` processes; the merged result (rates over the slowest).
    Counts are messages (a batched SEND of ``batch`` counts ``batch``); ``client_cpu_s`` per
    process and ``client_cpu_pct_max`` (the busiest process's CPU in % of one core over its
    measured time) tell whether the generator, rather than the broker, was the limit."""
    if not service_url.startswith("pulsar://"):
        raise ValueError("--blast speaks plain pulsar:// only (no TLS, no authentication)")
    host, _, port_text = service_url[len("pulsar://"):].rstrip("/").rpartition(":")
    if (not (1 <= processes <= 64) or not (1 <= window <= 100_000) or size < 1 or seconds <= 0
            or not 1 <= batch <= 10_000):
        raise ValueError("--blast needs 1-64 processes, a window of 1-100000, size >= 1, duration > 0, "
                         "a batch of 1-10000")
    jobs = [(host, int(port_text), topic, size, seconds, window, f"blast-{os.getpid()}-{i}", batch)
            for i in range(processes)]
    if processes == 1:
        results = [_worker(jobs[0])]
    else:
        with multiprocessing.get_context("spawn").Pool(processes) as pool:
            results = pool.map(_worker, jobs)
    elapsed = max(r["elapsed_s"] for r in results)
    acked = sum(r["acked"] for r in results)
    return {"mode": "blast", "processes": processes, "window": window, "batch": batch, "size": size,
            "elapsed_s": elapsed,
            "sent": sum(r["sent"] for r in results), "acked": acked,
            "failed": sum(r["failed"] for r in results), "msgs_s": acked / elapsed,
            "mb_s": acked * size / 1024 / 1024 / elapsed,
            "client_cpu_us_per_msg": 1e6 * sum(r["client_cpu_s"] for r in results) / max(1, acked),
            "client_cpu_s": [r["client_cpu_s"] for r in results],
            "client_cpu_pct_max": max(100 * r["client_cpu_s"] / max(r["elapsed_s"], 1e-9) for r in results),
            "p50_ms": max(r["p50_ms"] for r in results), "p99_ms": max(r["p99_ms"] for r in results)}
