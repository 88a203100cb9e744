"""``_ConnectionProtocol.take``: received chunks handed out in slices of at most ``max_bytes``.

A chunk larger than the slice is taken from an offset (each byte copied once, into its slice)
instead of cutting off its rest as a new ``bytes`` per slice; the bytes, their order, the
``bytes`` type the read contract promises and the read-buffer accounting stay as they were.
"""

from __future__ import annotations

import random

from magnetar.runtime.network import _ConnectionProtocol


def _received(protocol: _ConnectionProtocol, chunks: list[bytes]) -> None:
    for chunk in chunks:
        protocol.chunks.append(chunk)
        protocol.buffered_bytes += len(chunk)


def _drain(protocol: _ConnectionProtocol, max_bytes: int) -> list[bytes]:
    taken = []
    while protocol.chunks:
        taken.append(protocol.take(max_bytes))
    return taken


def test_a_large_chunk_is_taken_in_slices_in_order() -> None:
    protocol = _ConnectionProtocol()
    chunk = bytes(range(256)) * 1024  # 256 KiB
    _received(protocol, [chunk])
    taken = _drain(protocol, 64 * 1024)
    assert [len(part) for part in taken] == [64 * 1024] * 4
    assert all(type(part) is bytes for part in taken)
    assert b"".join(taken) == chunk
    assert protocol.buffered_bytes == 0 and protocol.first_offset == 0


def test_a_chunk_that_fits_is_handed_out_as_is() -> None:
    protocol = _ConnectionProtocol()
    chunk = b"x" * 1000
    _received(protocol, [chunk])
    assert protocol.take(64 * 1024) is chunk


def test_the_rest_of_a_sliced_chunk_joins_the_small_chunks_after_it() -> None:
    protocol = _ConnectionProtocol()
    _received(protocol, [b"a" * 100, b"b" * 30, b"c" * 30])
    assert protocol.take(60) == b"a" * 60
    assert protocol.take(200) == b"a" * 40 + b"b" * 30 + b"c" * 30
    assert protocol.buffered_bytes == 0 and not protocol.chunks


def test_seeded_mixes_come_out_whole_and_bounded() -> None:
    rng = random.Random(22)
    for _ in range(200):
        protocol = _ConnectionProtocol()
        max_bytes = rng.choice((13, 4096, 65_536))
        chunks = [rng.randbytes(rng.choice((1, 7, 100, 4096, 70_000, 262_144)) // (1 if max_bytes > 13 else 64) or 1) for _ in range(rng.randint(1, 8))]
        _received(protocol, chunks)
        taken = []
        extras = 3
        while protocol.chunks:
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
