"""Topic names, partition routing (Murmur3-32) and message ids."""

from __future__ import annotations

import pytest

from magnetar.base.errors import InvalidArgumentError
from magnetar.base.rng import SeededRng
from magnetar.client import EARLIEST, LATEST, MessageId, full_topic_name, key_partition, murmur3_32
from magnetar.client._util import Backoff
from magnetar.client.consumer import ack_set_contains, ack_set_words
from magnetar.client.topic import partition_index, partition_name


def test_short_names_are_qualified_like_the_official_client() -> None:
    assert full_topic_name("t") == "persistent://public/default/t"
    assert full_topic_name("ten/ns/t") == "persistent://ten/ns/t"
    assert full_topic_name("non-persistent://a/b/c/d") == "non-persistent://a/b/c/d"
    for bad in ("a/b", "a/b/c/d", "", "persistent://a"):
        with pytest.raises(InvalidArgumentError):
            full_topic_name(bad)


def test_partition_names_round_trip() -> None:
    name = partition_name("persistent://public/default/t", 7)
    assert name == "persistent://public/default/t-partition-7"
    assert partition_index(name) == 7
    assert partition_index("persistent://public/default/t") == -1


def test_murmur3_reference_vectors() -> None:
    # Published MurmurHash3_x86_32 test vectors (seed 0 unless given).
    assert murmur3_32(b"") == 0
    assert murmur3_32(b"", seed=1) == 0x514E28B7
    assert murmur3_32(b"hello") == 0x248BFA47
    assert murmur3_32(b"The quick brown fox jumps over the lazy dog") == 0x2E4FF723
    assert murmur3_32(b"\x00\x00\x00\x00") == 0x2362F9DE
    assert murmur3_32(b"aaaa", seed=0x9747B28C) == 0x5A97808A
    assert murmur3_32(b"abc", seed=0x9747B28C) == 0xC84A62DD


def test_key_partition_is_stable_and_in_range() -> None:
    counts = [0, 0, 0, 0]
    for i in range(1000):
        part = key_partition(f"key-{i}", 4)
        assert part == key_partition(f"key-{i}".encode(), 4)
        counts[part] += 1
    assert all(150 < c < 350 for c in counts)
    with pytest.raises(InvalidArgumentError):
        key_partition("k", 0)


def test_message_id_order_wire_form_and_sentinels() -> None:
    assert MessageId(1, 2) < MessageId(1, 3) < MessageId(2, 0)
    assert MessageId(1, 2, 0) < MessageId(1, 2, 1)
    assert EARLIEST < MessageId(0, 0) < LATEST
    wire = EARLIEST.to_pb()
    assert wire.ledgerId == wire.entryId == 0xFFFF_FFFF_FFFF_FFFF
    assert LATEST.to_pb().ledgerId == 0x7FFF_FFFF_FFFF_FFFF
    assert MessageId.from_pb(wire) == EARLIEST
    batched = MessageId(5, 6, 2, 3, 4)
    assert MessageId.deserialize(batched.serialize()) == batched
    assert str(batched) == "5:6:3:2"


def test_ack_set_bits_mean_still_unacked() -> None:
    words = ack_set_words([1, 2], 3)
    assert words == [0b110]
    assert [ack_set_contains(words, i) for i in range(3)] == [False, True, True]
    wide = ack_set_words([63, 64], 70)
    assert wide[0] < 0 and wide[1] == 1  # bit 63 makes the first signed word negative
    assert ack_set_contains(wide, 63) and ack_set_contains(wide, 64) and not ack_set_contains(wide, 0)


def test_backoff_doubles_with_jitter_up_to_the_cap() -> None:
    backoff = Backoff(SeededRng(3), initial_ms=100, max_ms=800)
    delays = [backoff.next_s() for _ in range(6)]
    for delay, base in zip(delays, [0.1, 0.2, 0.4, 0.8, 0.8, 0.8], strict=True):
        assert base * 0.9 <= delay <= base * 1.1
    backoff.reset()
    assert backoff.next_s() <= 0.11
