"""Namespace bundles: the hash ranges of topic names that brokers own (as in Pulsar).

A topic belongs to the bundle of its namespace whose range holds ``topic_hash(topic)``, the
CRC-32 of the full topic name (``persistent://tenant/ns/local``; each ``-partition-N`` hashes on
its own), as Pulsar's default ``hashFunc``. The ranges of a namespace split the space
``0x00000000``..``0xffffffff`` at its ``boundaries``: bundle i is ``[b[i], b[i+1])``, the last one
``[b[n-1], 0xffffffff]`` (upper bound included). A namespace starts with
``NAMESPACE_BUNDLES_COUNT_DEFAULT`` equal bundles; a split halves one range.

The boundaries are stored, as Pulsar's ``LocalPolicies``, at
``/admin/local-policies/{tenant}/{ns}`` as JSON ``{"bundles": {"boundaries": ["0x00000000", ...],
"numBundles": n}}``. Bundle names are Pulsar's ``0x00000000_0x40000000``.
"""

from __future__ import annotations

import itertools
import json
import zlib
from dataclasses import dataclass

from magnetar.base.errors import InvalidArgumentError, LimitExceededError
from magnetar.base.limits import NAMESPACE_BUNDLES_COUNT_MAX
from magnetar.base.types import TopicName

FULL_LOWER = 0x0000_0000
FULL_UPPER = 0xFFFF_FFFF
LOCAL_POLICIES_ROOT = "/admin/local-policies"


def topic_hash(topic: TopicName | str) -> int:
    """The 32-bit hash that places a topic in a bundle (CRC-32 of the full name)."""
    return zlib.crc32(str(topic).encode()) & 0xFFFF_FFFF


def local_policies_path(namespace: str) -> str:
    return f"{LOCAL_POLICIES_ROOT}/{namespace}"


@dataclass(frozen=True, order=True, slots=True)
class BundleRange:
    lower: int
    upper: int

    @property
    def name(self) -> str:
        return f"0x{self.lower:08x}_0x{self.upper:08x}"

    def contains(self, hash_value: int) -> bool:
        return self.lower <= hash_value < self.upper or (self.upper == FULL_UPPER and hash_value == FULL_UPPER)

    def halves(self) -> tuple[BundleRange, BundleRange]:
        if self.upper - self.lower < 2:
            raise InvalidArgumentError(f"bundle {self.name} is too small to split")
        middle = self.lower + (self.upper - self.lower) // 2
        return BundleRange(self.lower, middle), BundleRange(middle, self.upper)

    @staticmethod
    def parse(name: str) -> BundleRange:
        lower, sep, upper = name.partition("_")
        try:
            if not sep:
                raise ValueError(name)
            parsed = BundleRange(int(lower, 16), int(upper, 16))
        except ValueError:
            raise InvalidArgumentError(f"bundle must look like 0x00000000_0x40000000, got {name!r}") from None
        if not FULL_LOWER <= parsed.lower < parsed.upper <= FULL_UPPER:
            raise InvalidArgumentError(f"bundle {name!r} is not a range inside 0x00000000..0xffffffff")
        return parsed


@dataclass(frozen=True, slots=True)
class NamespaceBundles:
    """The bundles of one namespace: sorted boundaries from ``0x00000000`` to ``0xffffffff``."""

    namespace: str
    boundaries: tuple[int, ...]

    def __post_init__(self) -> None:
        b = self.boundaries
        if len(b) < 2 or b[0] != FULL_LOWER or b[-1] != FULL_UPPER or any(x >= y for x, y in itertools.pairwise(b)):
            raise InvalidArgumentError(f"bundle boundaries of {self.namespace} must rise from 0x0 to 0xffffffff")
        if len(b) - 1 > NAMESPACE_BUNDLES_COUNT_MAX:
            raise LimitExceededError("NAMESPACE_BUNDLES_COUNT_MAX", len(b) - 1, NAMESPACE_BUNDLES_COUNT_MAX)

    @staticmethod
    def equal(namespace: str, count: int) -> NamespaceBundles:
        """``count`` ranges of equal size (Pulsar's initial bundles)."""
        if not 1 <= count <= NAMESPACE_BUNDLES_COUNT_MAX:
            raise InvalidArgumentError(f"bundle count must be 1..{NAMESPACE_BUNDLES_COUNT_MAX}, got {count}")
        inner = tuple((FULL_UPPER + 1) * i // count for i in range(count))
        return NamespaceBundles(namespace, (*inner, FULL_UPPER))

    @property
    def ranges(self) -> list[BundleRange]:
        b = self.boundaries
        return [BundleRange(lower, upper) for lower, upper in itertools.pairwise(b)]

    def find(self, topic: TopicName | str) -> BundleRange:
        value = topic_hash(topic)
        for bundle in self.ranges:
            if bundle.contains(value):
                return bundle
        raise InvalidArgumentError(f"no bundle of {self.namespace} holds hash {value:#x}")  # boundaries cover all

    def split(self, bundle: BundleRange) -> NamespaceBundles:
        if bundle not in self.ranges:
            raise InvalidArgumentError(f"{bundle.name} is not a bundle of {self.namespace}")
        _, upper_half = bundle.halves()
        return NamespaceBundles(self.namespace, tuple(sorted((*self.boundaries, upper_half.lower))))

    def encode(self) -> bytes:
        return json.dumps({"bundles": {"boundaries": [f"0x{b:08x}" for b in self.boundaries],
                                       "numBundles": len(self.boundaries) - 1}}).encode()

    @staticmethod
    def decode(namespace: str, value: bytes) -> NamespaceBundles:
        try:
            boundaries = tuple(int(b, 16) for b in json.loads(value)["bundles"]["boundaries"])
        except (ValueError, KeyError, TypeError) as error:
            raise InvalidArgumentError(f"bad bundle data for {namespace}: {error}") from None
        return NamespaceBundles(namespace, boundaries)
