"""Topic names as the client sends them, and partition routing.

* ``full_topic_name``: ``my-topic`` -> ``persistent://public/default/my-topic``;
  ``tenant/ns/t`` -> ``persistent://tenant/ns/t``; fully qualified names pass through. Any other
  slash count in a short name is invalid (the official client's rule).
* ``partition_name(topic, i)``: ``<topic>-partition-<i>``.
* Key routing uses Murmur3-32 (seed 0, sign bit cleared) modulo the partition count: the
  official C++/Python client's ``Murmur3_32Hash`` scheme. Note the official Python client's
  *default* scheme is the C++ ``BoostHash``, which is platform dependent, so a keyed message is
  not guaranteed to land on the same partition as with the official client unless that client
  is configured for Murmur3; within Magnetar the mapping is stable and deterministic.
"""

from __future__ import annotations

import struct

from magnetar.base.errors import InvalidArgumentError
from magnetar.base.limits import TOPIC_NAME_BYTES_MAX

DOMAINS = ("persistent://", "non-persistent://")
PARTITION_SUFFIX = "-partition-"
_U32 = struct.Struct("<I")


def full_topic_name(topic: str) -> str:
    if not topic or len(topic.encode()) > TOPIC_NAME_BYTES_MAX:
        raise InvalidArgumentError(f"invalid topic name {topic!r}")
    if topic.startswith(DOMAINS):
        rest = topic.split("://", 1)[1]
        if rest.count("/") < 2:
            raise InvalidArgumentError(f"invalid topic name {topic!r}: expected domain://tenant/namespace/topic")
        return topic
    slashes = topic.count("/")
    if slashes == 0:
        return f"persistent://public/default/{topic}"
    if slashes == 2:
        return f"persistent://{topic}"
    raise InvalidArgumentError(f"invalid short topic name {topic!r}: use 'topic' or 'tenant/namespace/topic'")


def partition_name(topic: str, index: int) -> str:
    return f"{topic}{PARTITION_SUFFIX}{index}"


def partition_index(topic: str) -> int:
    """The partition index of ``...-partition-<i>`` names, -1 for any other name."""
    head, sep, tail = topic.rpartition(PARTITION_SUFFIX)
    if sep and head and tail.isdigit():
        return int(tail)
    return -1


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3 x86 32-bit (Austin Appleby's reference), as an unsigned 32-bit integer."""
    c1, c2 = 0xCC9E2D51, 0x1B873593
    h1 = seed & 0xFFFFFFFF
    length = len(data)
    rounded = length - (length % 4)
    for offset in range(0, rounded, 4):
        (k1,) = _U32.unpack_from(data, offset)
        k1 = (k1 * c1) & 0xFFFFFFFF
        k1 = ((k1 << 15) | (k1 >> 17)) & 0xFFFFFFFF
        k1 = (k1 * c2) & 0xFFFFFFFF
        h1 ^= k1
        h1 = ((h1 << 13) | (h1 >> 19)) & 0xFFFFFFFF
        h1 = (h1 * 5 + 0xE6546B64) & 0xFFFFFFFF
    k1 = 0
    tail = length & 3
    if tail == 3:
        k1 ^= data[rounded + 2] << 16
    if tail >= 2:
        k1 ^= data[rounded + 1] << 8
    if tail >= 1:
        k1 ^= data[rounded]
        k1 = (k1 * c1) & 0xFFFFFFFF
        k1 = ((k1 << 15) | (k1 >> 17)) & 0xFFFFFFFF
        k1 = (k1 * c2) & 0xFFFFFFFF
        h1 ^= k1
    h1 ^= length
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & 0xFFFFFFFF
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & 0xFFFFFFFF
    h1 ^= h1 >> 16
    return h1


def key_partition(key: str | bytes, partitions: int) -> int:
    """The partition a keyed message goes to: ``(murmur3_32(key) & 0x7fffffff) % partitions``."""
    if partitions <= 0:
        raise InvalidArgumentError(f"partitions must be positive, got {partitions}")
    raw = key.encode() if isinstance(key, str) else key
    return (murmur3_32(raw) & 0x7FFFFFFF) % partitions
