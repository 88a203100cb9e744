"""What one connection's session queues between two flushes (receipts of a journal group,
dispatched messages, replies) leaves in ONE socket write, in order (issue 22: one ``send``
system call per frame was 16% of the broker loop's GIL-held time at 2,000 msg/s).

* a connection with ``writelines`` (TCP: one ``writev``) gets one call with every frame;
* one without it (the simulated network, where a write is one delivery) keeps one ``write``
  per frame, so seeded simulations keep their schedules;
* dispatched MESSAGE frames and receipts queued in one pass share that write, in queue order;
* back-pressure holds: above the transport's high-water mark nothing is written directly, the
  writer task drains instead; a write that crosses it reports the backlog.

A receipt with nothing to batch it with (no other SEND of the connection unanswered, no consumer
on it: a synchronous producer's) is written at once, not after the rest of the loop pass (issue
22, latency isolation); with another SEND unanswered, a consumer, or no ``writelines``, it waits
for the pass's flush as before.

Negative control: the receipts of a *later* flush are a second write (what is coalesced is one
flush's worth, not everything forever), and the frames decode back in the order queued.
"""

from __future__ import annotations

import asyncio
import struct
from types import SimpleNamespace

from magnetar import sim
from magnetar.base.types import EARLIEST
from magnetar.broker import BrokerConfig, Consumer, MemoryLogStore, SubType
from magnetar.broker.service import BrokerService
from magnetar.broker.subscription import Subscription
from magnetar.metadata import MemoryMetadataServer
from magnetar.node.broker import BrokerServer, _ConnectionLoop
from magnetar.protocol.pulsar import State, encode_command, pb
from magnetar.protocol.pulsar.frames import Buffer, FrameDecoder, decode_frame
from magnetar.sim import SimClock


class _Conn:
    """A connection that records its writes; ``writelines`` only when ``vectored``."""

    peer = "127.0.0.1:9"

    def __init__(self, vectored: bool) -> None:
        self.calls: list[tuple[str, list[bytes]]] = []
        self.writing_paused = False
        self.pause_after_write = False
        self.closed = False
        self.wrote: asyncio.Future[None] | None = None
        if vectored:
            self.writelines = self._writelines

    def _record(self, kind: str, parts: list[bytes]) -> None:
        self.calls.append((kind, parts))
        if self.pause_after_write:
            self.writing_paused = True
        if self.wrote is not None and not self.wrote.done():
            self.wrote.set_result(None)

    def write(self, data: Buffer) -> None:
        self._record("write", [bytes(data)])

    def _writelines(self, parts: list[Buffer]) -> None:
        self._record("writelines", [bytes(p) for p in parts])

    async def drain(self) -> None:
        return None

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


def _sequence_ids(parts: list[bytes]) -> list[int]:
    decoder = FrameDecoder()
    decoder.feed(b"".join(parts))
    ids: list[int] = []
    while (view := decoder.next_frame_bytes()) is not None:
        frame = decoder.decoded(decode_frame, view)
        assert frame.command.type == pb.BaseCommand.SEND_RECEIPT
        ids.append(frame.command.send_receipt.sequence_id)
    return ids


def _command_types(parts: list[bytes]) -> list[int]:
    """The command type of each frame in ``parts`` joined (the MESSAGE payloads are not parsed)."""
    decoder = FrameDecoder()
    decoder.feed(b"".join(parts))
    types: list[int] = []
    while (view := decoder.next_frame_bytes()) is not None:
        (command_size,) = struct.unpack_from(">I", view, 4)
        types.append(pb.BaseCommand.FromString(bytes(view[8:8 + command_size])).type)
    return types


async def _connected(conn: _Conn) -> tuple[_ConnectionLoop, BrokerService]:
    clock = SimClock()
    store = await MemoryMetadataServer(clock).connect()
    service = BrokerService(BrokerConfig(), MemoryLogStore(), store, clock=clock)
    server = BrokerServer(service, network=None, clock=clock)  # type: ignore[arg-type]
    loop = _ConnectionLoop(server, conn)  # type: ignore[arg-type]
    body = pb.CommandConnect(client_version="test", protocol_version=20)
    for event in loop.protocol.receive_data(encode_command(pb.BaseCommand(type=pb.BaseCommand.CONNECT,
                                                                          connect=body)), loop._now_ms()):
        await loop.session.handle(event)
    assert loop.protocol.state is State.CONNECTED
    loop.protocol.data_to_send()  # CONNECTED (queued, or written at once: nothing to batch it
    conn.calls.clear()  # with on a fresh connection): not what these tests count
    return loop, service


def _answer_sends(loop: _ConnectionLoop, ids: range) -> None:
    """A journal group's completions for SENDs ``ids`` of this connection (unanswered until now):
    as the producer does, each SEND counts as answered, then its receipt is queued (waking the
    writer)."""
    session = loop.session
    session._pending_sends += len(ids)
    for sequence_id in ids:
        session._send_answered()
        session.send_receipt(1, sequence_id, 7, sequence_id, None)


async def _receipts_flushed(loop: _ConnectionLoop, conn: _Conn, ids: range) -> None:
    """Queue a receipt per id as a journal group's completions do, then wait (bounded, virtual
    time) for the flush the wake-ups scheduled."""
    conn.wrote = asyncio.get_running_loop().create_future()
    _answer_sends(loop, ids)
    await asyncio.wait_for(conn.wrote, timeout=5)


def _run_flushes(vectored: bool) -> list[tuple[str, list[bytes]]]:
    async def main() -> list[tuple[str, list[bytes]]]:
        conn = _Conn(vectored)
        loop, service = await _connected(conn)
        await _receipts_flushed(loop, conn, range(0, 5))
        await _receipts_flushed(loop, conn, range(5, 8))
        await service.close()
        return conn.calls

    return sim.run(main(), steps_max=100_000)


def test_the_receipts_of_one_flush_leave_in_one_writelines_call_in_order() -> None:
    calls = _run_flushes(vectored=True)
    assert [kind for kind, _ in calls] == ["writelines", "writelines"]  # one per flush, not per receipt
    assert _sequence_ids(calls[0][1]) == [0, 1, 2, 3, 4]
    assert len(calls[0][1]) >= 5  # frames handed over as they are (no join) ...
    assert _sequence_ids(calls[1][1]) == [5, 6, 7]  # ... and a later flush is a later write


def test_without_writelines_each_frame_stays_one_write_in_order() -> None:
    calls = _run_flushes(vectored=False)
    assert {kind for kind, _ in calls} == {"write"}
    assert _sequence_ids([part for _, parts in calls for part in parts]) == list(range(8))
    assert len(calls) >= 8  # not joined: the simulated network sees the same writes as before


def test_above_the_high_water_mark_the_flush_leaves_the_frames_to_the_writer_task() -> None:
    async def main() -> tuple[int, bool, int]:
        conn = _Conn(vectored=True)
        loop, service = await _connected(conn)
        conn.writing_paused = True
        _answer_sends(loop, range(3))
        loop._write_soon()  # as the scheduled flush would
        queued = loop.protocol.outbound_bytes
        handed_to_writer = loop._output.is_set()
        await service.close()
        return len(conn.calls), handed_to_writer, queued

    writes, handed_to_writer, queued = sim.run(main(), steps_max=100_000)
    assert writes == 0 and handed_to_writer and queued > 0  # nothing written past the mark, nothing lost


def test_a_flush_that_crosses_the_high_water_mark_reports_the_backlog() -> None:
    async def main() -> tuple[int, int, bool]:
        conn = _Conn(vectored=True)
        loop, service = await _connected(conn)
        conn.pause_after_write = True  # the transport's buffer goes above its mark with this write
        _answer_sends(loop, range(3))
        loop._write_soon()  # as the scheduled flush would
        backlog = loop.session.outbound_bytes()
        result = (len(conn.calls), backlog, loop._drain_wanted)
        await service.close()
        return result

    writes, backlog, drain_wanted = sim.run(main(), steps_max=100_000)
    assert writes == 1 and backlog > 0 and drain_wanted


def test_dispatched_messages_and_receipts_of_one_pass_share_the_write_in_queue_order() -> None:
    async def main() -> list[tuple[str, list[bytes]]]:
        conn = _Conn(vectored=True)
        loop, service = await _connected(conn)
        conn.wrote = asyncio.get_running_loop().create_future()
        loop.session.consumers[5] = (SimpleNamespace(), SimpleNamespace(dispatcher=None))  # type: ignore[assignment]
        _answer_sends(loop, range(0, 1))
        for entry_id in range(2):  # a dispatcher's messages to a consumer on the same connection
            loop.session.send_message(5, 7, entry_id, -1, b"stored entry", 0, ())
        _answer_sends(loop, range(1, 2))
        await asyncio.wait_for(conn.wrote, timeout=5)
        await service.close()
        return conn.calls

    calls = sim.run(main(), steps_max=100_000)
    assert len(calls) == 1
    receipt, message = pb.BaseCommand.SEND_RECEIPT, pb.BaseCommand.MESSAGE
    assert _command_types(calls[0][1]) == [receipt, message, message, receipt]


async def _writes_after_the_pass(conn: _Conn, loop: _ConnectionLoop, service: BrokerService) -> int:
    """The writes once the loop pass that flushes ran; then the connection's service is closed."""
    assert conn.wrote is not None  # armed by the caller before its first answer
    await asyncio.wait_for(conn.wrote, timeout=5)
    writes = len(conn.calls)
    loop.session.consumers.clear()
    await service.close()
    return writes


def _lone_receipt(vectored: bool, *, other_pending: int = 0, consumer: bool = False) -> tuple[int, int]:
    """A producer's one SEND answered (beside ``other_pending`` unanswered ones, with or without
    a consumer on the connection): (writes right after its receipt was queued, writes once the
    loop pass ran)."""

    async def main() -> tuple[int, int]:
        conn = _Conn(vectored)
        loop, service = await _connected(conn)
        if consumer:
            loop.session.consumers[5] = (SimpleNamespace(), SimpleNamespace(dispatcher=None))  # type: ignore[assignment]
        loop.session._pending_sends += other_pending
        conn.wrote = asyncio.get_running_loop().create_future()
        _answer_sends(loop, range(0, 1))
        at_once = len(conn.calls)
        return at_once, await _writes_after_the_pass(conn, loop, service)

    return sim.run(main(), steps_max=100_000)


def test_a_receipt_with_nothing_to_batch_it_with_is_written_at_once() -> None:
    assert _lone_receipt(vectored=True) == (1, 1)


def test_negative_control_a_receipt_beside_unanswered_sends_waits_for_the_pass_flush() -> None:
    assert _lone_receipt(vectored=True, other_pending=3) == (0, 1)


def test_a_receipt_on_a_connection_with_a_consumer_waits_for_the_pass_flush() -> None:
    assert _lone_receipt(vectored=True, consumer=True) == (0, 1)


def test_without_writelines_a_lone_receipt_keeps_the_pass_flush() -> None:
    assert _lone_receipt(vectored=False) == (0, 1)  # the simulated network's schedule is unchanged


def _answered_with_consumer(*, answering: bool, other_pending: int = 0) -> tuple[list[int], int]:
    """SENDs read on a connection that also has a consumer (``answering``: as a read that left
    them unanswered sets it); their adds complete in one pass: each add's MESSAGE is queued first
    (the dispatcher's send at add), then its receipt. (The command types written right after the
    last receipt was queued, the writes once the loop pass ran.)"""

    async def main() -> tuple[list[int], int]:
        conn = _Conn(vectored=True)
        loop, service = await _connected(conn)
        # Real objects: the write made from this call runs ``notify_writable`` over them (a
        # compiled session checks their types).
        log = await MemoryLogStore().open_log("persistent://public/default/t", create=True)
        cursor = await log.open_cursor("s", durable=True, initial_mark_delete=EARLIEST)
        subscription = Subscription("s", log, cursor, BrokerConfig(), -1, lambda _s: None)
        loop.session.consumers[5] = (Consumer(5, "c", SubType.EXCLUSIVE, loop.session), subscription)
        loop.session._pending_sends += other_pending
        loop._answering = answering
        conn.wrote = asyncio.get_running_loop().create_future()
        session = loop.session
        session._pending_sends += 2
        for sequence_id in range(2):
            session.send_message(5, 7, sequence_id, -1, b"stored entry", 0, ())
            session._send_answered()
            session.send_receipt(1, sequence_id, 7, sequence_id, None)
        at_once = [t for _, parts in conn.calls for t in _command_types(parts)]
        return at_once, await _writes_after_the_pass(conn, loop, service)

    return sim.run(main(), steps_max=100_000)


def test_the_last_receipt_of_the_sends_read_goes_at_once_with_the_messages_queued_before_it() -> None:
    at_once, writes = _answered_with_consumer(answering=True)
    receipt, message = pb.BaseCommand.SEND_RECEIPT, pb.BaseCommand.MESSAGE
    assert at_once == [message, receipt, message, receipt]  # written in the pass, in queue order
    assert writes == 1  # one write for all of it; the pass's flush finds nothing left


def test_negative_control_without_sends_read_or_beside_unanswered_ones_the_pass_flush_writes() -> None:
    # A consumer's connection without SENDs read (a dispatcher task's messages) keeps one write
    # per pass; so does one whose other SENDs are still unanswered.
    assert _answered_with_consumer(answering=False) == ([], 1)
    assert _answered_with_consumer(answering=True, other_pending=3) == ([], 1)


def test_a_wake_with_nothing_queued_schedules_no_flush_over_tcp() -> None:
    """A receive's SENDs handed over (one unanswered, its receipt to come, nothing queued): the
    wake-up schedules no flush callback, so the loop runs no pass that finds nothing to write
    (issue 22, the per-run work at a modest rate). Controls: with a frame queued it is scheduled;
    without ``writelines`` (the simulated network) it is scheduled as before (seeded schedules)."""

    async def main(vectored: bool, queued: bool) -> bool:
        conn = _Conn(vectored)
        loop, service = await _connected(conn)
        loop.session._pending_sends = 2  # SENDs in flight: nothing is written at once
        if queued:
            loop.session.send_receipt(1, 0, 7, 0, None)  # wakes the writer itself
        loop._wake_writer()
        scheduled = loop._write_soon_scheduled
        await service.close()
        return scheduled

    assert sim.run(main(vectored=True, queued=False), steps_max=100_000) is False
    assert sim.run(main(vectored=True, queued=True), steps_max=100_000) is True
    assert sim.run(main(vectored=False, queued=False), steps_max=100_000) is True
