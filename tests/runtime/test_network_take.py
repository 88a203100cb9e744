"""``_ConnectionProtocol.take``: received chunks handed out in slices of at most ``max_bytes``.

A chunk larger than the slice is taken from an offset (each byte copied once, into its slice)
instead of cutting off its rest as a new ``bytes`` per slice; the bytes, their order, the
``bytes`` type the read contract promises and the read-buffer accounting stay as they were.
"""

from __future__ import annotations

import random

from magnetar.base.limits import NETWORK_READ_BUFFER_BYTES_MAX
from magnetar.runtime.network import _ConnectionProtocol


class _Transport:
    """What ``_ConnectionProtocol`` uses of a transport while reading: its flow control, counted."""

    def __init__(self) -> None:
        self.paused = 0
        self.resumed = 0

    def pause_reading(self) -> None:
        self.paused += 1

    def resume_reading(self) -> None:
        self.resumed += 1

    def is_closing(self) -> bool:
        return False


def _protocol() -> tuple[_ConnectionProtocol, _Transport]:
    protocol = _ConnectionProtocol()
    transport = _Transport()
    protocol.transport = transport  # type: ignore[assignment]
    return protocol, transport


def _received(protocol: _ConnectionProtocol, chunks: list[bytes]) -> None:
    for chunk in chunks:
        protocol.data_received(chunk)


def _drain(protocol: _ConnectionProtocol, max_bytes: int) -> list[bytes]:
    taken = []
    while protocol.first is not None:
        taken.append(protocol.take(max_bytes))
    return taken


def test_a_large_chunk_is_taken_in_slices_in_order() -> None:
    protocol, _ = _protocol()
    chunk = bytes(range(256)) * 1024  # 256 KiB
    _received(protocol, [chunk])
    taken = _drain(protocol, 64 * 1024)
    assert [len(part) for part in taken] == [64 * 1024] * 4
    assert all(type(part) is bytes for part in taken)
    assert b"".join(taken) == chunk
    assert protocol.buffered_bytes == 0 and protocol.first_offset == 0


def test_a_chunk_that_fits_is_handed_out_as_is() -> None:
    protocol, _ = _protocol()
    chunk = b"x" * 1000
    _received(protocol, [chunk])
    assert protocol.take(64 * 1024) is chunk


def test_the_rest_of_a_sliced_chunk_joins_the_small_chunks_after_it() -> None:
    protocol, _ = _protocol()
    _received(protocol, [b"a" * 100, b"b" * 30, b"c" * 30])
    assert protocol.take(60) == b"a" * 60
    assert protocol.take(200) == b"a" * 40 + b"b" * 30 + b"c" * 30
    assert protocol.buffered_bytes == 0 and protocol.first is None and not protocol.chunks


def test_seeded_mixes_come_out_whole_and_bounded() -> None:
    rng = random.Random(22)
    for _ in range(200):
        protocol, _ = _protocol()
        max_bytes = rng.choice((13, 4096, 65_536))
        chunks = [rng.randbytes(rng.choice((1, 7, 100, 4096, 70_000, 262_144)) // (1 if max_bytes > 13 else 64) or 1) for _ in range(rng.randint(1, 8))]
        _received(protocol, chunks)
        taken = []
        extras = 3
        while protocol.first is not None:
            before = protocol.buffered_bytes
            part = protocol.take(max_bytes)
            assert 0 < len(part) <= max_bytes
            assert protocol.buffered_bytes == before - len(part)
            taken.append(part)
            if extras and rng.random() < 0.2:  # more arrives between reads
                extras -= 1
                extra = rng.randbytes(rng.randint(1, 5000))
                chunks.append(extra)
                _received(protocol, [extra])
        assert b"".join(taken) == b"".join(chunks)


def test_one_chunk_is_held_in_its_field_and_the_backlog_queues_behind_it() -> None:
    """A lone receive takes the field, not the queue; chunks arriving while it waits queue behind
    it in order, and taking the field hands its place to the oldest of them. Negative control: a
    ``data_received`` that overwrote a waiting ``first`` (or queued ahead of it) would lose or
    reorder bytes here."""
    protocol, _ = _protocol()
    protocol.data_received(b"one")
    assert protocol.first == b"one" and not protocol.chunks
    assert protocol.take(2) == b"on"
    protocol.data_received(b"two")
    protocol.data_received(b"three")
    assert protocol.first == b"one" and list(protocol.chunks) == [b"two", b"three"]
    assert protocol.take(1) == b"e"
    assert protocol.first == b"two" and list(protocol.chunks) == [b"three"]
    assert protocol.take(100) == b"twothree"
    assert protocol.first is None and not protocol.chunks and protocol.buffered_bytes == 0


def test_reading_pauses_above_the_buffer_bound_and_resumes_below_half() -> None:
    """The read buffer's bound is as it was with the queue: paused once more than
    ``NETWORK_READ_BUFFER_BYTES_MAX`` is buffered (chunks in the field and the queue count
    alike), resumed once at most half of it is left."""
    protocol, transport = _protocol()
    chunk = b"z" * (NETWORK_READ_BUFFER_BYTES_MAX // 4)
    _received(protocol, [chunk] * 4)
    assert transport.paused == 0 and not protocol.reading_paused
    protocol.data_received(b"!")
    assert transport.paused == 1 and protocol.reading_paused
    protocol.take(len(chunk))
    protocol.take(len(chunk))
    assert transport.resumed == 0  # half of the bound and one byte left
    protocol.take(len(chunk))
    assert transport.resumed == 1 and not protocol.reading_paused
    assert b"".join(_drain(protocol, len(chunk))) == chunk + b"!"
