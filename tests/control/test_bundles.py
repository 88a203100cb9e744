"""Bundle hashing and ranges (``control.bundles``): Pulsar's layout, split, stored form."""

from __future__ import annotations

import zlib

import pytest

from magnetar.base.errors import InvalidArgumentError
from magnetar.base.types import TopicName
from magnetar.control.bundles import FULL_UPPER, BundleRange, NamespaceBundles, topic_hash


def test_default_bundles_are_pulsars_four_equal_ranges() -> None:
    bundles = NamespaceBundles.equal("public/default", 4)
    assert [b.name for b in bundles.ranges] == [
        "0x00000000_0x40000000", "0x40000000_0x80000000", "0x80000000_0xc0000000", "0xc0000000_0xffffffff"]


def test_topic_hash_is_crc32_of_the_full_name_and_every_hash_has_one_bundle() -> None:
    name = TopicName.parse("my-topic")
    assert topic_hash(name) == zlib.crc32(b"persistent://public/default/my-topic")
    bundles = NamespaceBundles.equal("public/default", 4)
    for value in (0, 0x3FFF_FFFF, 0x4000_0000, 0xBFFF_FFFF, FULL_UPPER - 1, FULL_UPPER):
        assert sum(b.contains(value) for b in bundles.ranges) == 1
    assert bundles.ranges[-1].contains(FULL_UPPER)
    assert bundles.find(name).contains(topic_hash(name))


def test_partitions_hash_on_their_own_names() -> None:
    bundles = NamespaceBundles.equal("public/default", 4)
    found = {bundles.find(TopicName.parse(f"t-partition-{i}")) for i in range(16)}
    assert len(found) > 1  # partitions spread over bundles


def test_split_halves_a_range_and_keeps_the_rest() -> None:
    bundles = NamespaceBundles.equal("public/default", 4)
    first = bundles.ranges[0]
    split = bundles.split(first)
    assert [b.name for b in split.ranges[:3]] == [
        "0x00000000_0x20000000", "0x20000000_0x40000000", "0x40000000_0x80000000"]
    assert len(split.ranges) == 5
    with pytest.raises(InvalidArgumentError):
        split.split(first)  # no longer a bundle


def test_stored_form_round_trips_and_names_parse() -> None:
    bundles = NamespaceBundles.equal("t/ns", 4).split(BundleRange.parse("0xc0000000_0xffffffff"))
    assert NamespaceBundles.decode("t/ns", bundles.encode()) == bundles
    assert BundleRange.parse("0x40000000_0x80000000") == BundleRange(0x4000_0000, 0x8000_0000)
    for bad in ("0x1", "zz_0x2", "0x80000000_0x40000000", "0x0_0x1ffffffff"):
        with pytest.raises(InvalidArgumentError):
            BundleRange.parse(bad)
    with pytest.raises(InvalidArgumentError):
        NamespaceBundles("t/ns", (0, 5, 5, FULL_UPPER))
