"""``read_bytes_after``: the broker reads whole chunks only while a connection's frames are large.

A batched producer's 100 KiB frames come a few per 256 KiB chunk: reading the chunk whole costs
no slice copy and its decode holds the loop for a few frames. Small frames (an unbatched
producer's 1 KiB SENDs) keep the 64 KiB slice that bounds one receive's decode work.
"""

from __future__ import annotations

from magnetar.base.limits import BROKER_READ_SLICE_BYTES, PULSAR_READ_CHUNK_BYTES
from magnetar.node.broker import BROKER_LARGE_FRAME_BYTES_MIN, read_bytes_after


def test_small_frames_keep_the_slice() -> None:
    assert read_bytes_after(BROKER_READ_SLICE_BYTES, 60) == BROKER_READ_SLICE_BYTES  # unbatched 1 KiB SENDs
    assert read_bytes_after(1_100, 1) == BROKER_READ_SLICE_BYTES  # a synchronous producer's one SEND
    assert read_bytes_after(100, 0) == BROKER_READ_SLICE_BYTES  # the start of a frame


def test_large_frames_read_whole_chunks() -> None:
    assert read_bytes_after(PULSAR_READ_CHUNK_BYTES, 2) == PULSAR_READ_CHUNK_BYTES  # 100 KiB batches
    assert read_bytes_after(BROKER_READ_SLICE_BYTES, 0) == PULSAR_READ_CHUNK_BYTES  # inside a large frame
    assert read_bytes_after(BROKER_LARGE_FRAME_BYTES_MIN * 3, 3) == PULSAR_READ_CHUNK_BYTES


def test_a_chunk_read_whole_holds_at_most_one_turn_of_frames() -> None:
    # The threshold: whatever a whole chunk holds after a "large" verdict, its frames average at
    # least the minimum, so a chunk has at most one fair turn's worth of SENDs.
    assert PULSAR_READ_CHUNK_BYTES // BROKER_LARGE_FRAME_BYTES_MIN <= 16
    assert read_bytes_after(BROKER_LARGE_FRAME_BYTES_MIN * 3 - 1, 3) == BROKER_READ_SLICE_BYTES
