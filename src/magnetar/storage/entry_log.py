"""Entry logs: append-only files holding entries flushed, sorted, from the write cache.

File ``entrylogs/<log_id:020d>.log`` starts with ``b"MGL1" + u64 log_id``; then records of
``u32 length`` + the entry in its wire form (which carries its own digest). The index maps each
(ledger, entry) to (log, offset of the entry, length). Each ``append_many`` is followed by zero
bytes up to the file's ``write_alignment_bytes`` (so the next one is written past the page cache
in production); padding is dead space that no index entry points into. A bookie always starts a fresh log after
a restart, so a log torn by a crash is never appended to; its unindexed tail is dead bytes.
Invariant: an offset is put into the index only after the log was synced past it.
"""

from __future__ import annotations

import collections
import struct
from collections.abc import Sequence

from magnetar.base.errors import CorruptDataError
from magnetar.base.io import Bytes, Disk, DiskFile
from magnetar.storage.flush_rows import frame_entries

LOG_DIR = "entrylogs"
LOG_MAGIC = b"MGL1"
_HEADER = struct.Struct(">4sQ")
_LEN = struct.Struct(">I")
OPEN_LOGS_COUNT_MAX = 64  # read handles kept open at once (least recently used closed first)


_ZEROS = bytes(64 * 1024)


def _zeros(count: int) -> Bytes:
    return memoryview(_ZEROS)[:count] if count <= len(_ZEROS) else bytes(count)


def log_path(log_id: int) -> str:
    return f"{LOG_DIR}/{log_id:020d}.log"


def log_ids(disk: Disk) -> list[int]:
    ids = []
    for name in disk.listdir(LOG_DIR):
        stem, dot, ext = name.partition(".")
        if dot and ext == "log" and stem.isdigit():
            ids.append(int(stem))
    return sorted(ids)


class EntryLogger:
    def __init__(self, disk: Disk, log_bytes_max: int) -> None:
        self._disk = disk
        self._log_bytes_max = log_bytes_max
        self._current: DiskFile | None = None
        self.current_log_id = -1
        self._readers: collections.OrderedDict[int, DiskFile] = collections.OrderedDict()

    async def start(self) -> None:
        self._disk.makedirs(LOG_DIR)
        existing = log_ids(self._disk)
        await self._open(existing[-1] + 1 if existing else 1)

    async def _open(self, log_id: int) -> None:
        if self._current is not None:
            await self._current.sync()
            self._current.close()
        file = self._disk.open(log_path(log_id), direct=True)
        file.truncate(0)
        file.append(_HEADER.pack(LOG_MAGIC, log_id))
        self._current, self.current_log_id = file, log_id
        await self._disk.sync_dir(LOG_DIR)

    async def append(self, raw: bytes) -> tuple[int, int]:
        """Write ``raw``; returns (log id, offset of the entry). Not durable until ``sync()``."""
        if self._current is None or self._current.size() >= self._log_bytes_max:
            await self._open(self.current_log_id + 1)
        assert self._current is not None
        offset = self._current.append(_LEN.pack(len(raw)) + raw)
        return self.current_log_id, offset + _LEN.size

    async def append_many(self, raws: list[bytes], *, sync: bool = False) -> list[tuple[int, int]]:
        """Write several entries with one ``append_parts`` (off the event loop, from the entries'
        own buffers); returns each (log id, offset). Durable once ``sync()`` returned, or when
        this returns if ``sync`` (one ``append_and_sync``)."""
        log_id, offsets = await self.append_chunk(raws, sync=sync)
        return [(log_id, offset) for offset in offsets]

    async def append_chunk(self, raws: Sequence[bytes], *, sync: bool = False) -> tuple[int, list[int]]:
        """``append_many`` as the checkpoint's flush uses it: the log id once and each entry's
        offset (``flush_rows.frame_entries``: no tuple per entry)."""
        if self._current is None or self._current.size() >= self._log_bytes_max:
            await self._open(self.current_log_id + 1)
        assert self._current is not None
        parts: list[Bytes] = []
        at = self._current.size()
        offsets = frame_entries(raws, at, parts)
        end = offsets[-1] + len(raws[-1]) if raws else at
        pad = -end % self._current.write_alignment_bytes
        if pad:
            parts.append(_zeros(pad))
        if sync:
            await self._current.append_and_sync(parts)
        else:
            await self._current.append_parts(parts)
        return self.current_log_id, offsets

    @property
    def write_alignment_bytes(self) -> int:
        """The current log's ``write_alignment_bytes`` (1 before the first log is open)."""
        return self._current.write_alignment_bytes if self._current is not None else 1

    async def sync(self) -> None:
        if self._current is not None:
            await self._current.sync()

    def _reader(self, log_id: int) -> DiskFile:
        if log_id == self.current_log_id and self._current is not None:
            return self._current
        file = self._readers.get(log_id)
        if file is None:
            file = self._disk.open(log_path(log_id), create=False)
            self._readers[log_id] = file
            if len(self._readers) > OPEN_LOGS_COUNT_MAX:
                _, oldest = self._readers.popitem(last=False)
                oldest.close()
        else:
            self._readers.move_to_end(log_id)
        return file

    def read(self, log_id: int, offset: int, length: int) -> bytes:
        data = self._reader(log_id).read_at(offset, length)
        if len(data) != length:
            raise CorruptDataError(f"entry log {log_id} is short at {offset}: {len(data)} of {length} bytes")
        return data

    def size_of(self, log_id: int) -> int:
        """Bytes in log ``log_id`` (records, padding and any dead tail)."""
        return self._reader(log_id).size()

    def view(self, log_id: int, offset: int, length: int) -> Bytes:
        """``read``, but a read-only view of the log mapped into memory where the disk can (no
        copy): for the read path, whose entries go to the socket and the read cache. A log is
        never truncated once indexed, so the view stays valid (also after ``remove``)."""
        data = self._reader(log_id).read_view(offset, length)
        if len(data) != length:
            raise CorruptDataError(f"entry log {log_id} is short at {offset}: {len(data)} of {length} bytes")
        return data

    def remove(self, log_id: int) -> None:
        file = self._readers.pop(log_id, None)
        if file is not None:
            file.close()
        self._disk.remove(log_path(log_id))

    def close(self) -> None:
        for file in self._readers.values():
            file.close()
        self._readers.clear()
        if self._current is not None:
            self._current.close()
            self._current = None
