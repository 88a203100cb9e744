"""The per-entry work of a checkpoint's flush, in one compiled pass per chunk.

A bookie's checkpoint flushes every entry of its write cache's frozen half: the entry log frames
each one (a ``u32`` length, then the entry: ``frame_entries``) and the index gets one location
row per entry (``index_rows``). Each of a standalone's bookies does this for every entry it
stores, so with three bookies (write quorum 3) the event loop does it three times per message
(docs/performance.md, "Session 15 (issue 22): the remote bookies' path"). Written as plain loops
over plain types so mypyc compiles them (``magnetar._compiled``): no Python-level call or tuple
per entry beyond the rows themselves.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from magnetar.base.io import Bytes
from magnetar.storage.index import ENTRY_KEY, LOCATION

_LEN = struct.Struct(">I")
#: The ``u32`` length before each entry in an entry log.
RECORD_HEADER_BYTES = _LEN.size


def frame_entries(raws: Sequence[bytes], at: int, parts: list[Bytes]) -> list[int]:
    """Append each of ``raws``, framed (length, entry), to ``parts`` for a write starting at
    file offset ``at``; returns each entry's offset (past its length)."""
    offsets: list[int] = []
    pack = _LEN.pack
    for raw in raws:
        size = len(raw)
        parts.append(pack(size))
        parts.append(raw)
        at += RECORD_HEADER_BYTES
        offsets.append(at)
        at += size
    return offsets


def chunk_raws(chunk: Sequence[tuple[int, int, bytes]]) -> list[bytes]:
    """The entries of ``chunk`` (``(ledger, entry, raw)``), in order."""
    return [raw for _, _, raw in chunk]


def index_rows(
    chunk: Sequence[tuple[int, int, bytes]],
    log_id: int,
    offsets: Sequence[int],
    keys: list[bytes],
    values: list[bytes],
    log_ledgers: set[int],
) -> None:
    """The index rows of ``chunk`` (``(ledger, entry, raw)`` in order) written to log ``log_id``
    at ``offsets``: a key (``index.entry_key``) and a location (``index.location_value``) per
    entry appended to ``keys`` and ``values``, and each ledger added to ``log_ledgers`` (the
    log's ledger set; the chunk is sorted, so once per run of one ledger)."""
    if len(chunk) != len(offsets):
        raise ValueError(f"{len(chunk)} entries but {len(offsets)} offsets")
    key_pack = ENTRY_KEY.pack
    location_pack = LOCATION.pack
    last_ledger = -1
    for i in range(len(chunk)):
        ledger_id, entry_id, raw = chunk[i]
        keys.append(key_pack(b"E", ledger_id, entry_id))
        values.append(location_pack(log_id, offsets[i], len(raw)))
        if ledger_id != last_ledger:
            last_ledger = ledger_id
            log_ledgers.add(ledger_id)
