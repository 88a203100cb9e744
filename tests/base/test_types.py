from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.base import (
    EARLIEST,
    BookieId,
    InvalidArgumentError,
    InvariantViolationError,
    Position,
    SeededRng,
    TopicDomain,
    TopicName,
    crc32c,
    crc32c_update,
    invariant,
)

positions = st.builds(Position, st.integers(-1, 2**40), st.integers(-1, 2**40))


@given(positions, positions, positions)
def test_position_order_is_total_and_lexicographic(a: Position, b: Position, c: Position) -> None:
    assert (a < b) == ((a.ledger_id, a.entry_id) < (b.ledger_id, b.entry_id))
    assert sum([a < b, a == b, b < a]) == 1
    if a <= b and b <= c:
        assert a <= c
    assert a >= EARLIEST


def test_position_parse_and_next() -> None:
    assert Position.parse("12:7") == Position(12, 7)
    assert Position(3, 4).next() == Position(3, 5)
    assert str(Position(3, 4)) == "3:4"
    for bad in ("12", "a:b", ""):
        with pytest.raises(InvalidArgumentError):
            Position.parse(bad)
    with pytest.raises(InvalidArgumentError):
        Position(-2, 0)


def test_bookie_id() -> None:
    assert BookieId.parse("127.0.0.1:3181") == BookieId("127.0.0.1", 3181)
    assert str(BookieId("bk-1.local", 3181)) == "bk-1.local:3181"
    assert BookieId.parse("[::1]:3181").port == 3181
    for bad in ("nohost", "h:0", "h:70000", ":3181", "a b:1"):
        with pytest.raises(InvalidArgumentError):
            BookieId.parse(bad)


@pytest.mark.parametrize(
    ("text", "full", "namespace", "partition"),
    [
        ("my-topic", "persistent://public/default/my-topic", "public/default", -1),
        ("t1/ns1/orders", "persistent://t1/ns1/orders", "t1/ns1", -1),
        ("persistent://t1/ns1/orders-partition-3", "persistent://t1/ns1/orders-partition-3", "t1/ns1", 3),
        ("non-persistent://t/n/x", "non-persistent://t/n/x", "t/n", -1),
        ("persistent://t/cluster/ns/legacy", "persistent://t/cluster/ns/legacy", "t/cluster/ns", -1),
        ("a-partition-x", "persistent://public/default/a-partition-x", "public/default", -1),
    ],
)
def test_topic_name_forms(text: str, full: str, namespace: str, partition: int) -> None:
    name = TopicName.parse(text)
    assert str(name) == full
    assert name.namespace == namespace
    assert name.partition_index == partition
    assert TopicName.parse(str(name)) == name


def test_topic_partitions() -> None:
    base = TopicName.parse("t/n/orders")
    p2 = base.partition(2)
    assert str(p2) == "persistent://t/n/orders-partition-2"
    assert p2.partitioned_topic_name == base
    assert p2.partition(5).local_name == "orders-partition-5"
    assert base.domain is TopicDomain.PERSISTENT
    assert p2.persistence_path == "t/n/persistent/orders-partition-2"
    with pytest.raises(InvalidArgumentError):
        base.partition(-1)


@pytest.mark.parametrize("bad", ["", "kafka://a/b/c", "a/b", "t/n/", "t!/n/x", "t/n/ x", "x" * 2000, "a/b/c/d/e/f"])
def test_topic_name_rejects_bad_input(bad: str) -> None:
    with pytest.raises(InvalidArgumentError):
        TopicName.parse(bad)


def test_crc32c_known_vector() -> None:
    # RFC 3720 (iSCSI) test vector: 32 bytes of zeros.
    assert crc32c(bytes(32)) == 0x8A9136AA
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c_update(crc32c(b"1234"), b"56789") == crc32c(b"123456789")


def test_invariant() -> None:
    invariant(True, "fine")
    with pytest.raises(InvariantViolationError, match="broken"):
        invariant(False, "broken")


def test_seeded_rng_is_deterministic_and_forks_independently() -> None:
    a, b = SeededRng(7), SeededRng(7)
    assert [a.random() for _ in range(5)] == [b.random() for _ in range(5)]
    assert SeededRng(7).fork("disk").random() == SeededRng(7).fork("disk").random()
    assert SeededRng(7).fork("disk").random() != SeededRng(7).fork("net").random()
    assert SeededRng(7).random() != SeededRng(8).random()


def test_the_types_that_cross_process_boundaries_pickle_by_value() -> None:
    """Spark ships positions, bookie ids and topic names to its Python workers by pickle. Compiled
    (mypyc), a frozen dataclass refuses the field-by-field restore pickle would otherwise use
    (``FrozenInstanceError``), so each pickles through its constructor; this runs in both modes
    (``make test`` runs the suite compiled, ``make test-pure`` the pure modules)."""
    import pickle

    from magnetar.base.entry import Entry
    from magnetar.base.types import BookieId, Position, TopicName

    values = [Position(3, 7), Position(-1, -1), BookieId("127.0.0.1", 3181),
              TopicName.parse("persistent://t/ns/topic-partition-2"), TopicName.parse("t/c/ns/x"),
              Entry(Position(1, 2), b"payload")]
    for value in values:
        copy = pickle.loads(pickle.dumps(value))
        assert copy == value and type(copy) is type(value)


def test_value_types_compare_hash_and_print_as_values() -> None:
    """``Position``, ``BookieId`` and ``Entry`` are plain classes with hand-written comparisons
    (compiled, a frozen dataclass's generated methods run interpreted): equal values are equal,
    hash alike and find each other in dicts; another type is never equal and does not order."""
    from magnetar.base.entry import Entry

    a, b = Position(3, 4), Position(3, 4)
    assert a == b and a is not b and hash(a) == hash(b) and {a: 1}[b] == 1
    assert a != Position(3, 5) and (a != b) is False
    assert Position(2, 9) < a < Position(3, 5) < Position(4, -1) and a <= b and a >= b and not a > b
    assert repr(a) == "Position(ledger_id=3, entry_id=4)"
    assert (a == (3, 4)) is False
    with pytest.raises(TypeError):
        _ = a < (3, 5)  # type: ignore[operator]
    x, y = BookieId("h", 1), BookieId("h", 1)
    assert x == y and hash(x) == hash(y) and {x: 1}[y] == 1 and x != BookieId("h", 2)
    assert sorted([BookieId("h", 2), BookieId("a", 9), x]) == [BookieId("a", 9), x, BookieId("h", 2)]
    assert repr(x) == "BookieId(host='h', port=1)"
    with pytest.raises(InvalidArgumentError):
        BookieId("", 1)
    e = Entry(Position(1, 2), b"p")
    assert e == Entry(Position(1, 2), b"p") and e != Entry(Position(1, 3), b"p") and e != Entry(Position(1, 2), b"q")
    assert hash(e) == hash(Entry(Position(1, 2), b"p")) and (e.ledger_id, e.entry_id, e.payload_bytes) == (1, 2, 1)


def test_topic_names_hash_as_values() -> None:
    """Two parses of one name are equal, hash alike and find each other in a dict (the policy
    cache and the broker's topic tables are keyed by ``TopicName``); names differing in any part
    are different keys. A hash over anything ``__eq__`` does not compare (the object's identity,
    say) fails the first assertion."""
    texts = ["persistent://public/default/t", "non-persistent://public/default/t",
             "persistent://public/default/t-partition-1", "persistent://other/default/t",
             "persistent://public/other/t", "persistent://public/c1/default/t"]
    first = {TopicName.parse(text): text for text in texts}
    assert len(first) == len(texts)
    for text in texts:
        again = TopicName.parse(text)
        assert first[again] == text and hash(again) == hash(next(k for k in first if k == again))
