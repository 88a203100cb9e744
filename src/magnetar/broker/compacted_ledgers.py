"""Where compacted ledgers live: the ``CompactedLedgers`` port and its two implementations.

A compacted ledger is a ledger of its own (not part of the topic's ledger list) holding the
messages that survived a compaction, in log order. Each of its entries is one stored entry of the
topic, prefixed with the position it had in the topic (``encode_compacted``: ledger id and entry
id, 8 bytes each, big-endian), so consumers reading it see the original message ids and ack
against the topic's cursor (Pulsar stores a ``RawMessage`` with its id the same way).

* ``BookieCompactedLedgers``: real ledgers through the ledger client, with the topic's ensemble,
  write quorum and ack quorum; deleting one deletes its metadata (bookies collect the entries).
* ``MemoryCompactedLedgers``: the in-memory reference, kept by a ``MemoryLogStore`` so that it
  outlives brokers as that store's topics do.

Contract: ``create`` returns a writer whose ``add`` calls are stored in call order with entry ids
0, 1, 2, ...; ``close`` makes the ledger readable in full and returns the number of entries.
``open`` of a ledger that does not exist raises ``NotFoundError``.
"""

from __future__ import annotations

import struct
from collections.abc import Awaitable
from typing import Protocol

from magnetar.base.errors import NotFoundError
from magnetar.base.invariant import invariant
from magnetar.base.types import Position
from magnetar.ledger.handle import LedgerHandle
from magnetar.ledger.manager import LedgerManager
from magnetar.ledger.reader import READ_BATCH_COUNT_MAX, LedgerReader

_POSITION = struct.Struct(">qq")

#: Adds in flight while a compaction writes its ledger (each waits for the ack quorum).
COMPACTED_WRITE_WINDOW_COUNT_MAX = 256


def encode_compacted(position: Position, data: bytes) -> bytes:
    return _POSITION.pack(position.ledger_id, position.entry_id) + data


def decode_compacted(raw: bytes) -> tuple[Position, bytes]:
    ledger_id, entry_id = _POSITION.unpack_from(raw, 0)
    return Position(ledger_id, entry_id), raw[_POSITION.size:]


class CompactedWriter(Protocol):
    @property
    def ledger_id(self) -> int: ...

    async def add(self, data: bytes) -> None:
        """Queue one entry; returns when it may be followed (errors surface here or in ``close``)."""

    async def close(self) -> int:
        """Wait for every add, seal the ledger; returns the number of entries."""

    async def abandon(self) -> None:
        """Give up on a ledger that will never be recorded: delete it (best effort)."""


class CompactedReader(Protocol):
    @property
    def entries_count(self) -> int: ...

    async def read(self, first: int, last: int) -> list[bytes]:
        """Entries ``first..last`` inclusive."""


class CompactedLedgers(Protocol):
    async def create(self) -> CompactedWriter: ...

    async def open(self, ledger_id: int) -> CompactedReader: ...

    async def delete(self, ledger_id: int) -> None: ...


# --- bookies -------------------------------------------------------------------------------------


class _BookieWriter:
    def __init__(self, handle: LedgerHandle, manager: LedgerManager) -> None:
        self._handle = handle
        self._manager = manager
        self._in_flight: list[Awaitable[int]] = []

    @property
    def ledger_id(self) -> int:
        return self._handle.ledger_id

    async def add(self, data: bytes) -> None:
        if not self._handle.has_room():  # backpressure: an explicit wait on the one add path
            await self._handle.wait_for_room()
        self._in_flight.append(self._handle.append(data))
        if len(self._in_flight) >= COMPACTED_WRITE_WINDOW_COUNT_MAX:
            await self._drain()

    async def _drain(self) -> None:
        in_flight, self._in_flight = self._in_flight, []
        for added in in_flight:
            await added

    async def close(self) -> int:
        await self._drain()
        metadata = await self._handle.close()
        return metadata.last_entry_id + 1

    async def abandon(self) -> None:
        try:
            await self._drain()
        except Exception:  # the ledger is being thrown away: its adds no longer matter
            pass
        try:
            await self._manager.delete_ledger(self._handle.ledger_id)
        except Exception:  # an orphan ledger only wastes space
            pass


class _BookieReader:
    def __init__(self, reader: LedgerReader) -> None:
        self._reader = reader

    @property
    def entries_count(self) -> int:
        return self._reader.last_add_confirmed + 1

    async def read(self, first: int, last: int) -> list[bytes]:
        out: list[bytes] = []
        while first <= last:
            stop = min(last, first + READ_BATCH_COUNT_MAX - 1)
            out.extend(bytes(e.payload) for e in await self._reader.read_entries(first, stop))
            first = stop + 1
        return out


class BookieCompactedLedgers:
    def __init__(self, manager: LedgerManager, ensemble_size: int, write_quorum_size: int,
                 ack_quorum_size: int) -> None:
        self._manager = manager
        self._quorum = (ensemble_size, write_quorum_size, ack_quorum_size)

    async def create(self) -> CompactedWriter:
        handle = await self._manager.create_ledger(*self._quorum, custom=(("component", "compacted-topic"),))
        return _BookieWriter(handle, self._manager)

    async def open(self, ledger_id: int) -> CompactedReader:
        return _BookieReader(await self._manager.open_ledger(ledger_id))

    async def delete(self, ledger_id: int) -> None:
        await self._manager.delete_ledger(ledger_id)


# --- memory --------------------------------------------------------------------------------------


class _MemoryWriter:
    def __init__(self, ledgers: MemoryCompactedLedgers, ledger_id: int) -> None:
        self._ledgers = ledgers
        self._id = ledger_id
        self._entries: list[bytes] = []

    @property
    def ledger_id(self) -> int:
        return self._id

    async def add(self, data: bytes) -> None:
        self._entries.append(bytes(data))

    async def close(self) -> int:
        self._ledgers.sealed[self._id] = tuple(self._entries)
        return len(self._entries)

    async def abandon(self) -> None:
        self._ledgers.sealed.pop(self._id, None)


class _MemoryReader:
    def __init__(self, entries: tuple[bytes, ...]) -> None:
        self._entries = entries

    @property
    def entries_count(self) -> int:
        return len(self._entries)

    async def read(self, first: int, last: int) -> list[bytes]:
        invariant(first >= 0 and last < len(self._entries), f"compacted read {first}..{last} out of range")
        return list(self._entries[first:last + 1])


class MemoryCompactedLedgers:
    """Sealed compacted ledgers by id; ids come from ``allocate_id`` (shared with the log store)."""

    def __init__(self, allocate_id: _IdAllocator) -> None:
        self._allocate_id = allocate_id
        self.sealed: dict[int, tuple[bytes, ...]] = {}

    async def create(self) -> CompactedWriter:
        return _MemoryWriter(self, self._allocate_id())

    async def open(self, ledger_id: int) -> CompactedReader:
        found = self.sealed.get(ledger_id)
        if found is None:
            raise NotFoundError(f"compacted ledger {ledger_id} does not exist")
        return _MemoryReader(found)

    async def delete(self, ledger_id: int) -> None:
        self.sealed.pop(ledger_id, None)


class _IdAllocator(Protocol):
    def __call__(self) -> int: ...
