"""``BlockingBookieReads`` against a scripted bookie on a real loopback socket (``SocketBookie``:
the real codec on both sides, answers from a ``WireBookie``), and the READ-answer head decoder it
uses. ``WireBookie`` and ``SocketBookie`` are shared with the connector's read-path tests."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from magnetar.base.errors import (
    ChecksumMismatchError,
    ClosedError,
    CorruptDataError,
    InvalidArgumentError,
    OperationTimeoutError,
)
from magnetar.base.limits import SPARK_BOOKIE_READ_BUFFER_BYTES
from magnetar.ledger.bookie_client import checked_entry
from magnetar.protocol.bookie import AddResponse, EncodedEntry, FrameDecoder, ReadRequest, Status, encode
from magnetar.protocol.bookie.codec import (
    READ_RESPONSE_HEAD_BYTES,
    EncodedEntryView,
    ReadResponse,
    ReadViewResponse,
    decode_read_response_head,
)
from magnetar.runtime.bookie_reads import BlockingBookieReads


@dataclass
class WireBookie:
    """Answers READ requests from ``entries`` (the frames it is sent, decoded by the real codec).

    ``corrupt``: entry ids answered with one payload byte flipped (the digest no longer holds);
    ``silent``: entry ids never answered; an entry it lacks is answered NO_SUCH_ENTRY;
    ``reverse``: the answers to one chunk of requests come back in reverse order; ``asked``: the
    entry ids asked for, in order.
    """

    entries: dict[tuple[int, int], EncodedEntry] = field(default_factory=dict)
    corrupt: set[int] = field(default_factory=set)
    silent: set[int] = field(default_factory=set)
    reverse: bool = False
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
            entry = EncodedEntry(entry.ledger_id, entry.entry_id, entry.lac, entry.digest, bytes(raw))
        return encode(ReadResponse(request.request_id, Status.OK, request.ledger_id, request.entry_id, entry.lac,
                                   entry))


def stored(ledger_id: int, count: int, size: int = 100) -> dict[tuple[int, int], EncodedEntry]:
    return {(ledger_id, e): EncodedEntry.build(ledger_id, e, e - 1, bytes([e % 251]) * size) for e in range(count)}


class SocketBookie:
    """A ``WireBookie`` behind a listening socket on 127.0.0.1 (one thread per connection): each
    chunk received is decoded with the real ``FrameDecoder`` and its READs answered at once
    (reversed with ``reverse``), ``extra`` bytes appended after the answers to the first chunk.
    ``requests_per_chunk``: how many READs each chunk received held."""

    def __init__(self, bookie: WireBookie, *, extra: bytes = b"") -> None:
        self.bookie = bookie
        self.extra = extra
        self.requests_per_chunk: list[int] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._threads: list[threading.Thread] = []
        self._conns: list[socket.socket] = []
        self._stop = False
        accept = threading.Thread(target=self._accept, daemon=True)
        accept.start()
        self._threads.append(accept)

    def _accept(self) -> None:
        while not self._stop:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self._conns.append(conn)
            serve = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            serve.start()
            self._threads.append(serve)

    def _serve(self, conn: socket.socket) -> None:
        decoder = FrameDecoder()
        extra = self.extra
        try:
            while True:
                data = conn.recv(1 << 16)
                if not data:
                    return
                requests = [m for m in decoder.feed(data) if isinstance(m, ReadRequest)]
                self.requests_per_chunk.append(len(requests))
                answers = [self.bookie.answer(m) for m in requests]
                out = b"".join(reversed(answers) if self.bookie.reverse else answers) + extra
                extra = b""
                conn.sendall(out)
        except OSError:
            return

    def close(self) -> None:
        self._stop = True
        # Closing a socket does not wake a thread blocked in accept() on it (Linux); shutting it
        # down does (accept fails with EINVAL), so the accept thread ends at once.
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        for conn in self._conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()
        for thread in self._threads:
            thread.join(timeout=5)


@pytest.fixture
def serve() -> Iterator[list[SocketBookie]]:
    started: list[SocketBookie] = []
    yield started
    for bookie in started:
        bookie.close()


def start(started: list[SocketBookie], bookie: WireBookie, **kwargs: bytes) -> SocketBookie:
    server = SocketBookie(bookie, **kwargs)
    started.append(server)
    return server


def connect(server: SocketBookie, timeout_s: float = 5.0) -> BlockingBookieReads:
    return BlockingBookieReads.connect("127.0.0.1", server.port, timeout_s=timeout_s)


def test_reads_go_out_in_one_write_and_come_back_checked_in_order(serve: list[SocketBookie]) -> None:
    entries = stored(5, 60, size=3000)
    server = start(serve, WireBookie(entries))
    reads = connect(server)
    request_ids = reads.send_reads(5, list(range(60)))
    got = []
    for entry_id, request_id in enumerate(request_ids):
        answer = reads.answer(request_id)
        entry = checked_entry(answer, 5, entry_id)
        assert entry is not None and entry.digest_ok()
        got.append(bytes(entry.raw))
    assert got == [entries[(5, e)].raw for e in range(60)]
    assert server.requests_per_chunk == [60]  # one write, answered in one go
    reads.close()


def test_answers_before_their_turn_are_kept_as_copies(serve: list[SocketBookie]) -> None:
    """The bookie answers a write's reads in reverse: each answer is found by its request id; the
    ones that came early are copies (the buffer is reused for the next entry received)."""
    entries = stored(5, 20, size=500)
    reads = connect(start(serve, WireBookie(entries, reverse=True)))
    request_ids = reads.send_reads(5, list(range(20)))
    answers = [reads.answer(r) for r in request_ids]
    assert [bytes(checked_entry(a, 5, e).raw) for e, a in enumerate(answers)] == [  # type: ignore[union-attr]
        entries[(5, e)].raw for e in range(20)]
    assert isinstance(answers[0], ReadViewResponse)  # asked first, received last: in the connection's buffer
    assert all(isinstance(a, ReadResponse) for a in answers[1:])  # received while waiting for it: copies
    with pytest.raises(InvalidArgumentError):
        reads.answer(request_ids[0])  # answered already
    reads.close()


def test_an_entry_is_a_view_until_the_next_answer_and_a_larger_one_gets_a_new_buffer(
        serve: list[SocketBookie]) -> None:
    small = EncodedEntry.build(5, 0, -1, b"a" * 100)
    large = EncodedEntry.build(5, 1, 0, b"b" * (SPARK_BOOKIE_READ_BUFFER_BYTES + 1000))
    after = EncodedEntry.build(5, 2, 1, b"c" * 100)
    reads = connect(start(serve, WireBookie({(5, 0): small, (5, 1): large, (5, 2): after})))
    r0, r1, r2 = reads.send_reads(5, [0, 1, 2])
    first = reads.answer(r0).entry
    assert first is not None and bytes(first.raw) == small.raw
    second = reads.answer(r1).entry  # larger than the buffer: received into a new one
    assert second is not None and bytes(second.raw) == large.raw
    assert bytes(first.raw) == small.raw  # ...so the first view still holds its entry
    third = reads.answer(r2).entry
    assert third is not None and bytes(third.raw) == after.raw
    assert bytes(second.raw[: len(after.raw)]) == after.raw  # the buffer was reused: valid until the next answer
    reads.close()


def test_damaged_and_missing_entries_are_answers_and_the_connection_goes_on(serve: list[SocketBookie]) -> None:
    bookie = WireBookie(stored(5, 6))
    bookie.corrupt.add(2)
    del bookie.entries[(5, 3)]
    reads = connect(start(serve, bookie))
    request_ids = reads.send_reads(5, list(range(6)))
    outcomes = []
    for entry_id, request_id in enumerate(request_ids):
        answer = reads.answer(request_id)
        try:
            outcomes.append("ok" if checked_entry(answer, 5, entry_id) is not None else answer.status.name)
        except ChecksumMismatchError:
            outcomes.append("damaged")
    assert outcomes == ["ok", "ok", "damaged", "NO_SUCH_ENTRY", "ok", "ok"]
    assert reads.closed is None
    (again,) = reads.send_reads(5, [0])
    answer = reads.answer(again)
    with pytest.raises(ChecksumMismatchError):
        checked_entry(answer, 5, 1)  # entry 0 where 1 was asked for
    entry = checked_entry(answer, 5, 0)  # control: as the entry asked for, it passes
    assert isinstance(entry, EncodedEntryView) and entry.entry_id == 0
    reads.close()


def test_no_answer_within_the_timeout_fails_and_closes_the_connection(serve: list[SocketBookie]) -> None:
    bookie = WireBookie(stored(5, 4))
    bookie.silent.add(1)
    reads = connect(start(serve, bookie), timeout_s=0.2)
    request_ids = reads.send_reads(5, [0, 1, 2, 3])
    assert reads.answer(request_ids[0]).status is Status.OK
    started = time.monotonic()
    with pytest.raises(OperationTimeoutError):
        reads.answer(request_ids[1])  # entry 2's answer came (stored early); 1's never does
    assert time.monotonic() - started >= 0.19
    assert reads.closed is not None
    with pytest.raises(ClosedError):
        reads.answer(request_ids[3])


def test_a_frame_that_is_no_read_answer_or_answers_nothing_asked_breaks_the_connection(
        serve: list[SocketBookie]) -> None:
    entries = stored(5, 2)
    not_a_read = encode(AddResponse(1, Status.OK, 5, 0)) + b"\0" * READ_RESPONSE_HEAD_BYTES
    for extra in (not_a_read, encode(ReadResponse(99, Status.OK, 5, 0, -1, entries[(5, 0)]))):
        reads = connect(start(serve, WireBookie(dict(entries), silent={1}), extra=extra))
        first, second = reads.send_reads(5, [0, 1])
        assert checked_entry(reads.answer(first), 5, 0) is not None
        with pytest.raises(CorruptDataError):
            reads.answer(second)
        assert reads.closed is not None


def test_a_refused_connection_is_a_closed_error() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # nothing listens there now
    with pytest.raises(ClosedError):
        BlockingBookieReads.connect("127.0.0.1", port, timeout_s=1.0)


def test_the_head_decoder_checks_op_length_and_has_entry() -> None:
    entry = EncodedEntry.build(5, 0, -1, b"x" * 10)
    frame = encode(ReadResponse(7, Status.OK, 5, 0, -1, entry))
    answer, entry_bytes = decode_read_response_head(frame[:READ_RESPONSE_HEAD_BYTES])
    assert (answer.request_id, answer.status, answer.ledger_id, answer.entry_id, entry_bytes) == (
        7, Status.OK, 5, 0, len(entry.raw))
    empty = encode(ReadResponse(8, Status.NO_SUCH_ENTRY, 5, 1, -1))
    assert decode_read_response_head(empty)[1] == 0
    lying = bytearray(empty)
    lying[READ_RESPONSE_HEAD_BYTES - 1] = 1  # has_entry, but no entry bytes follow
    for bad in (bytes(lying), encode(AddResponse(1, Status.OK, 5, 0)).ljust(READ_RESPONSE_HEAD_BYTES, b"\0")):
        with pytest.raises(CorruptDataError):
            decode_read_response_head(bad)
