"""Pipelined reads of ``BookieClient`` (``read_nowait``, ``checked_entry``, ``entry_views``) and the
``ResponseViewDecoder`` they use, over an in-memory connection to a scripted bookie (no sockets,
a manual clock). ``WireBookie``/``WireNetwork`` are shared with the connector's read-path tests."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

import pytest

from magnetar.base.errors import ChecksumMismatch, ClosedError, CorruptData, LimitExceeded, TimeoutError_
from magnetar.ledger.bookie_client import BookieClient, checked_entry
from magnetar.protocol.bookie import (
    AddResponse,
    Entry,
    FrameDecoder,
    Op,
    ReadLacResponse,
    ReadRequest,
    ReadResponse,
    Status,
    encode,
)
from magnetar.protocol.bookie.codec import (
    ENTRY_HEADER_BYTES,
    EntryView,
    ReadViewResponse,
    ResponseViewDecoder,
)
from tests.manual_clock import ManualClock, settle

# --- a bookie at the far end of an in-memory connection -----------------------------------------


@dataclass
class WireBookie:
    """Answers READ requests from ``entries``; what it receives is decoded by the real codec.

    ``corrupt``: entry ids answered with one payload byte flipped (the digest no longer holds);
    ``silent``: entry ids never answered; an entry it lacks is answered NO_SUCH_ENTRY;
    ``reverse``: the answers to one write come back in reverse order; ``chunk_bytes``: how much
    one ``read()`` of the client gets (small chunks split frames across reads).
    """

    entries: dict[tuple[int, int], Entry] = field(default_factory=dict)
    corrupt: set[int] = field(default_factory=set)
    silent: set[int] = field(default_factory=set)
    reverse: bool = False
    chunk_bytes: int = 1 << 20
    writes: int = 0
    asked: list[int] = field(default_factory=list)

    def answer(self, request: ReadRequest) -> bytes:
        self.asked.append(request.entry_id)
        if request.entry_id in self.silent:
            return b""
        entry = self.entries.get((request.ledger_id, request.entry_id))
        if entry is None:
            return encode(ReadResponse(request.request_id, Status.NO_SUCH_ENTRY, request.ledger_id,
                                       request.entry_id, -1))
        if request.entry_id in self.corrupt:
            raw = bytearray(entry.raw)
            raw[-1] ^= 0xFF
            entry = Entry(entry.ledger_id, entry.entry_id, entry.lac, entry.digest, bytes(raw))
        return encode(ReadResponse(request.request_id, Status.OK, request.ledger_id, request.entry_id, entry.lac,
                                   entry))


class WireConnection:
    """``Connection`` whose peer is a ``WireBookie``."""

    def __init__(self, bookie: WireBookie, peer: str = "127.0.0.1:3181") -> None:
        self.bookie = bookie
        self.peer = peer
        self._decoder = FrameDecoder()
        self._out = bytearray()
        self._ready = asyncio.Event()
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.closed:
            raise ClosedError("closed")
        self.bookie.writes += 1
        answers = [self.bookie.answer(m) for m in self._decoder.feed(bytes(data)) if isinstance(m, ReadRequest)]
        for answer in reversed(answers) if self.bookie.reverse else answers:
            self._out += answer
        self._ready.set()

    async def read(self, max_bytes: int) -> bytes:
        while not self._out and not self.closed:
            self._ready.clear()
            await self._ready.wait()
        if self.closed:
            return b""
        size = min(max_bytes, self.bookie.chunk_bytes, len(self._out))
        data = bytes(self._out[:size])
        del self._out[:size]
        return data

    async def drain(self) -> None:
        if self.closed:
            raise ClosedError("closed")

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True
        self._ready.set()


class WireNetwork:
    """``Network`` whose ``connect`` reaches the ``WireBookie`` of that address (others refuse)."""

    def __init__(self, bookies: dict[tuple[str, int], WireBookie]) -> None:
        self.bookies = bookies
        self.connections: list[WireConnection] = []

    async def connect(self, host: str, port: int) -> WireConnection:
        bookie = self.bookies.get((host, port))
        if bookie is None:
            raise ConnectionRefusedError(f"{host}:{port}")
        connection = WireConnection(bookie, f"{host}:{port}")
        self.connections.append(connection)
        return connection


def stored(ledger_id: int, count: int, size: int = 100) -> dict[tuple[int, int], Entry]:
    return {(ledger_id, e): Entry.build(ledger_id, e, e - 1, bytes([e % 251]) * size) for e in range(count)}


# --- read_nowait --------------------------------------------------------------------------------


def test_reads_go_out_in_one_write_and_answers_find_their_futures_in_any_order() -> None:
    bookie = WireBookie(stored(5, 50), reverse=True, chunk_bytes=61)  # frames split across reads

    async def main() -> list[Entry | EntryView | None]:
        client = BookieClient(WireConnection(bookie), ManualClock(), entry_views=True)
        try:
            futures = client.read_nowait(5, list(range(50)))
            assert bookie.writes == 1 and client.inflight_count == 50
            answers = [await f for f in futures]
            assert all(isinstance(a, ReadViewResponse) for a in answers)
            return [checked_entry(a, 5, e) for e, a in enumerate(answers)]  # type: ignore[arg-type]
        finally:
            await client.close()

    entries = asyncio.run(main())
    assert [e.entry_id for e in entries if e is not None] == list(range(50))
    for entry in entries:
        assert isinstance(entry, EntryView) and isinstance(entry.raw, memoryview)
        assert bytes(entry.raw) == bookie.entries[(5, entry.entry_id)].raw


def test_checked_entry_refuses_a_damaged_or_wrong_entry_and_passes_on_a_negative() -> None:
    bookie = WireBookie(stored(5, 4), corrupt={1})

    async def main() -> list[object]:
        client = BookieClient(WireConnection(bookie), ManualClock(), entry_views=True)
        try:
            good, damaged, _, _ = [await f for f in client.read_nowait(5, [0, 1, 2, 9])]
            (missing,) = [await f for f in client.read_nowait(5, [9])]
            outcomes: list[object] = [checked_entry(good, 5, 0)]  # type: ignore[arg-type]
            for answer, entry_id in ((damaged, 1), (good, 3)):  # corrupt digest; entry 0 asked as 3
                with pytest.raises(ChecksumMismatch):
                    checked_entry(answer, 5, entry_id)  # type: ignore[arg-type]
            outcomes.append(checked_entry(missing, 5, 9))  # type: ignore[arg-type]
            return outcomes
        finally:
            await client.close()

    good, missing = asyncio.run(main())
    assert isinstance(good, EntryView) and good.entry_id == 0  # control: the undamaged entry passes
    assert missing is None


def test_a_read_past_its_timeout_fails_and_a_late_answer_is_dropped() -> None:
    bookie = WireBookie(stored(5, 3), silent={1})
    clock = ManualClock()

    async def main() -> tuple[object, object, object]:
        client = BookieClient(WireConnection(bookie), clock, entry_views=True)
        try:
            first, silent, last = client.read_nowait(5, [0, 1, 2], timeout_ms=2_000)
            await settle()
            assert first.done() and last.done() and not silent.done()
            await clock.advance(1.9)
            assert not silent.done()  # negative control: not before its deadline
            await clock.advance(0.2)
            return first.result(), silent.exception(), client.inflight_count
        finally:
            await client.close()

    first, error, inflight = asyncio.run(main())
    assert isinstance(first, ReadViewResponse)
    assert isinstance(error, TimeoutError_) and inflight == 0


def test_read_nowait_past_the_inflight_bound_sends_nothing_and_a_closed_client_refuses() -> None:
    bookie = WireBookie(stored(5, 10), silent=set(range(10)))

    async def main() -> None:
        connection = WireConnection(bookie)
        client = BookieClient(connection, ManualClock(), inflight_count_max=8, entry_views=True)
        held = client.read_nowait(5, range(6))
        with pytest.raises(LimitExceeded):
            client.read_nowait(5, range(6, 9))
        assert bookie.writes == 1 and client.inflight_count == 6
        connection.closed = True  # a write that fails before the client noticed leaves nothing pending
        with pytest.raises(ClosedError):
            client.read_nowait(5, [6])
        assert client.inflight_count == 6
        connection.closed = False
        held += client.read_nowait(5, [6, 7])  # control: up to the bound is fine
        assert client.inflight_count == 8
        connection.close()  # the bookie went away: every outstanding read fails with ClosedError
        await settle()
        assert all(isinstance(f.exception(), ClosedError) for f in held)
        with pytest.raises(ClosedError):
            client.read_nowait(5, [0])
        await client.close()

    asyncio.run(main())


def test_a_view_client_still_answers_read_with_a_copied_entry() -> None:
    bookie = WireBookie(stored(5, 2))

    async def main() -> ReadResponse:
        client = BookieClient(WireConnection(bookie), ManualClock(), entry_views=True)
        try:
            return await client.read(5, 1)
        finally:
            await client.close()

    response = asyncio.run(main())
    assert isinstance(response, ReadResponse) and isinstance(response.entry, Entry)
    assert response.entry == bookie.entries[(5, 1)] and isinstance(response.entry.raw, bytes)


# --- ResponseViewDecoder ------------------------------------------------------------------------


def _stream() -> tuple[bytes, list[object]]:
    entries = stored(3, 6, size=300)
    messages: list[object] = [ReadResponse(i + 1, Status.OK, 3, i, i - 1, entries[(3, i)]) for i in range(6)]
    messages.insert(2, AddResponse(40, Status.OK, 3, 9))
    messages.insert(4, ReadResponse(41, Status.NO_SUCH_ENTRY, 3, 7, 5, None, Op.READ_LAST_ENTRY))
    messages.append(ReadLacResponse(42, Status.OK, 3, 5))
    return b"".join(encode(m) for m in messages), messages  # type: ignore[arg-type]


def _plain(message: object) -> object:
    return message.copied() if isinstance(message, ReadViewResponse) else message


def test_view_decoder_gives_the_frame_decoders_messages_at_every_split() -> None:
    data, messages = _stream()
    assert FrameDecoder().feed(data) == messages
    rng = random.Random(9)
    cuts_list = [[at] for at in range(1, len(data))] + [sorted(rng.sample(range(1, len(data)), 12)) for _ in range(50)]
    for cuts in cuts_list:
        decoder = ResponseViewDecoder()
        got: list[object] = []
        for start, end in zip([0, *cuts], [*cuts, len(data)], strict=True):
            got.extend(decoder.feed(data[start:end]))
        assert [_plain(m) for m in got] == messages, cuts
        assert decoder.buffered_bytes == 0


def test_view_decoder_copies_no_whole_frame_and_a_split_one_once() -> None:
    data, _ = _stream()
    whole = ResponseViewDecoder().feed(data)
    views = [m.entry for m in whole if isinstance(m, ReadViewResponse) and m.entry is not None]
    assert len(views) == 6 and all(v.raw.obj is data for v in views)  # views into the fed bytes
    assert all(v.raw.readonly for v in views)
    decoder = ResponseViewDecoder()
    first = encode(ReadResponse(1, Status.OK, 3, 0, -1, stored(3, 1, size=300)[(3, 0)]))
    assert decoder.feed(first[:2]) == [] and decoder.feed(first[2:100]) == []  # the length itself split
    (split,) = decoder.feed(first[100:])
    assert isinstance(split, ReadViewResponse) and split.entry is not None
    buffer = split.entry.raw.obj
    assert isinstance(buffer, bytearray) and len(buffer) == len(first)  # one buffer of the frame's size
    assert split.entry.raw.readonly and split.entry.digest_ok()
    assert bytes(split.entry.payload) == bytes(buffer[-300:])
    assert split.entry.payload_bytes == 300 and len(split.entry.raw) == 300 + ENTRY_HEADER_BYTES


def test_view_decoder_refuses_malformed_frames_and_stays_broken() -> None:
    data, _ = _stream()
    decoder = ResponseViewDecoder(max_frame_bytes=100)
    with pytest.raises(LimitExceeded):
        decoder.feed(data)  # the first frame claims more than 100 bytes
    with pytest.raises(CorruptData):
        decoder.feed(encode(ReadLacResponse(1, Status.OK, 3, 5)))
    bad = bytearray(encode(ReadResponse(1, Status.OK, 3, 0, -1, stored(3, 1)[(3, 0)])))
    bad[-105] ^= 0xFF  # the low byte of the entry's payload length: it no longer matches
    with pytest.raises(CorruptData):
        ResponseViewDecoder().feed(bytes(bad))
    ResponseViewDecoder().feed(data)  # control: the undamaged stream decodes
