"""The checkpoint flush's per-entry pass (``storage.flush_rows``): the entry log's framing and
the index rows, checked against the formats the readers use (``index``, ``EntryLogger.read``)."""

from __future__ import annotations

import pytest

from magnetar.base.io import Bytes
from magnetar.storage.caches import WriteCache, pop_entries
from magnetar.storage.flush_rows import RECORD_HEADER_BYTES, chunk_raws, frame_entries, index_rows
from magnetar.storage.index import ENTRY_KEY, LOCATION, entry_key, location_value


def test_frame_entries_lengths_then_entries_and_offsets_past_each_length() -> None:
    raws = [b"a" * 3, b"", b"bcdefgh"]
    parts: list[Bytes] = [b"already"]
    offsets = frame_entries(raws, 100, parts)
    assert offsets == [104, 111, 115]
    joined = b"".join(bytes(part) for part in parts[1:])
    assert joined == b"\x00\x00\x00\x03aaa" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x07bcdefgh"
    for raw, offset in zip(raws, offsets, strict=True):  # each offset points at its entry
        at = offset - 100
        assert joined[at : at + len(raw)] == raw
        assert int.from_bytes(joined[at - RECORD_HEADER_BYTES : at], "big") == len(raw)
    assert frame_entries([], 7, parts) == [] and len(parts) == 7


def test_index_rows_are_the_index_keys_and_locations_and_note_each_ledger_once() -> None:
    chunk = [(1, 0, b"xx"), (1, 1, b"yyy"), (5, 9, b"z")]
    keys: list[bytes] = []
    values: list[bytes] = []
    ledgers: set[int] = {42}
    index_rows(chunk, 7, [10, 16, 23], keys, values, ledgers)
    assert keys == [entry_key(1, 0), entry_key(1, 1), entry_key(5, 9)]
    assert values == [location_value(7, 10, 2), location_value(7, 16, 3), location_value(7, 23, 1)]
    assert [ENTRY_KEY.unpack(key)[1:] for key in keys] == [(1, 0), (1, 1), (5, 9)]
    assert [LOCATION.unpack(value) for value in values][2] == (7, 23, 1)
    assert ledgers == {1, 5, 42}
    assert chunk_raws(chunk) == [b"xx", b"yyy", b"z"]


def test_index_rows_refuses_a_chunk_and_offsets_of_different_lengths() -> None:
    keys: list[bytes] = []
    with pytest.raises(ValueError, match="2 entries but 1 offsets"):
        index_rows([(1, 0, b"a"), (1, 1, b"b")], 1, [4], keys, [], set())


def test_pop_entries_frees_a_step_at_a_time_and_the_write_cache_keeps_its_counts() -> None:
    cache = WriteCache()
    for entry_id in range(5):
        cache.put(3, entry_id, b"e" * entry_id)
    cache.put(3, 4, b"new")  # replaced: counted once, with its new size
    assert (cache.count, cache.bytes) == (5, 0 + 1 + 2 + 3 + 3)
    entries = cache.ledgers[3]
    pop_entries(entries, 2)
    assert sorted(entries) == [0, 1, 2]
    pop_entries(entries, 10)
    assert entries == {}
