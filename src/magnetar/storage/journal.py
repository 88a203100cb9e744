"""The write-ahead journal with group commit: an add is acknowledged only after the fsync covering it.

Files: ``journal/<file_id:020d>.jnl``, each starting with ``b"MGJ1" + u64 file_id``, then records::

    u32 body_len   u32 crc32c(body)   body          (body_len >= 1)
    body = u8 kind, ...   kind 1 ADD:   u8 mk_len, mk, entry (the wire form, digest included)
                          kind 2 FENCE: u8 mk_len, mk, u64 ledger_id
                          kind 3 LAC:   u8 mk_len, mk, u64 ledger_id, i64 lac  (explicit LAC)
                          kind 4 PAD:   zeros (skipped by replay)
                          kind 5 ADD:   as kind 1, but the record's CRC covers the body only up
                                        to the end of the entry header: the entry's digest
                                        (CRC32C over its fields and payload, checked when the
                                        add arrived and again at replay) covers the payload, so
                                        an add's payload is checksummed once, not twice.
                                        Replay reads kind 1 records (older journals) as well.

A group is padded with a PAD record so it ends on a multiple of the file's
``write_alignment_bytes`` (production: 4096, so every later group is written past the page
cache; see ``runtime.disk``). Groups never rewrite bytes of an earlier group: a torn write can
only harm the group being written, never one already acknowledged.

The open file is preallocated (``Journal._preallocate``): written zeros ahead of the journal's
position, so a group's synced write changes no file metadata; never past
``journal_file_bytes_max``, so a file is all records once the next one starts. Replay ends a file
at a header of zeros (the end of its records, not a tear) and cuts the last file there; a
restart's journal starts a new file after it.

Group commit, one path: the journal's ``_look`` (a callback, scheduled once per event-loop pass
while there is work; no task) takes queued records (a group ends at
``journal_group_bytes_max``, or once the oldest record waited ``journal_group_wait_ms_max``:
``storage.journal_wait`` decides whether a group waits at all, from the arrivals),
passes ``bookie.before_journal_append``, then appends and syncs the group with one
``DiskFile.append_and_sync_then`` (the disk's writer thread in production, from the records' own
buffers: no joined copy), which passes ``bookie.journal.mid_write`` half-way through the group's
bytes and ``bookie.after_write_before_fsync`` between the write and the fsync. Its completion
passes the gate ``bookie.after_fsync_before_reply``; the group's answers then join the reply
lanes (``storage.journal_replies``: per ledger in submission order, the shortest lane first, at
most ``JOURNAL_REPLY_SLICE_COUNT`` per event-loop pass, so one busy ledger's hundreds of answers
neither delay another ledger's one nor keep the loop from reading sockets), and once all of them
ran, the group passes ``bookie.after_reply`` (each gate: ``faults.unarmed`` then its continuation
called natively, else ``faults.gate0``/``gate1``: held by a hang or delay). While the disk works, the event loop keeps accepting adds, which form the next
group. The same code runs whether a point is armed or not. A run of records (``submit_run``, the
bookie's ``add_entries``) is queued as one item: its records always share one group (and so
every fault point of that group), one callback answers them (in its ledger's lane), and it
counts as one arrival for ``journal_wait`` (a run is one burst, not a stream of adds that a wait
could gather); the runs of several ledgers that the bookie's ``add_entries_runs`` hands over
together (``submit_runs``) are one arrival too, each run its own item. The queue and these
submission calls are ``storage.journal_submit`` (``JournalSubmitter``, this class's base).

Up to ``journal_groups_in_flight_max`` groups are in flight at once (the next group's write
overlaps the previous group's fsync, as BookKeeper's force-write thread does), plus one of lone
records beside full slots or while another ledger is at work (``storage.journal_express``); they
complete in order. Invariants:
a callback runs with ``None`` only after the sync that covers its record returned and after its
group passed ``bookie.after_fsync_before_reply`` (so after every earlier group passed it), and after
every earlier record of its ledger's callback; groups pass each gate in order, and a held gate holds every later one (a held ``bookie.after_reply`` also every answer
not yet run); ``stop`` and a failure answer the records past their first gate (durable) before
they fail the rest. A file is synced (nothing in flight) before
the journal moves to the next one, so only the last file can have a torn tail. A crash may
leave a later group durable behind a torn earlier one: replay stops at the torn one, and the
later group was never acknowledged. ``replay`` stops cleanly at the first torn record
(short, bad length or bad CRC) in the last file and raises ``CorruptDataError`` for one earlier.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import struct
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Final

from magnetar import faults
from magnetar.base.checksum import crc32c, crc32c_update
from magnetar.base.clock import Clock
from magnetar.base.errors import ClosedError, CorruptDataError, LimitExceededError
from magnetar.base.invariant import invariant
from magnetar.base.io import Bytes, Disk, DiskFile
from magnetar.base.limits import (
    BOOKIE_JOURNAL_RECORD_BYTES_MAX,
    BOOKIE_MASTER_KEY_BYTES_MAX,
    DISK_DIRECT_ALIGNMENT_BYTES,
    JOURNAL_REPLY_SLICE_COUNT,
)
from magnetar.protocol.bookie import ENTRY_HEADER_BYTES, EncodedEntry
from magnetar.storage.config import BookieConfig
from magnetar.storage.journal_pad import KIND_PAD, pad_record, padding_for
from magnetar.storage.journal_replies import GroupReplies, ReplyLanes
from magnetar.storage.journal_submit import (
    Callback,
    Group,
    JournalStatus,
    JournalSubmitter,
)
from magnetar.storage.waits import watch_task

log = logging.getLogger(__name__)

JOURNAL_DIR = "journal"
FILE_MAGIC = b"MGJ1"
_FILE_HEADER = struct.Struct(">4sQ")
_RECORD_HEADER: Final = struct.Struct(">II")  # per ADD record (``add_record_from``)
_LEDGER = struct.Struct(">Q")
_LEDGER_LAC = struct.Struct(">Qq")
KIND_ADD = 1
KIND_FENCE = 2
KIND_LAC = 3
KIND_ADD_DIGESTED: Final = 5
_REPLAY_WINDOW_BYTES = 8 * 1024 * 1024
#: Preallocation (``DiskFile.preallocate``, where the disk has it): the open file holds written
#: zeros up to ``JOURNAL_PREALLOC_LEAD_BYTES`` past the journal's position, added
#: ``JOURNAL_PREALLOC_CHUNK_BYTES`` at a time off the loop, so a group's synced write
#: changes no file metadata (on ext4 an extending synced write also commits the filesystem's
#: journal; docs/performance.md, session 16). Not while the groups average more than
#: ``JOURNAL_PREALLOC_GROUP_BYTES_MAX``: zeros cost the disk as many bytes as the groups, and
#: a large group's sync is mostly its own bytes.
JOURNAL_PREALLOC_CHUNK_BYTES = 2 * 1024 * 1024
JOURNAL_PREALLOC_LEAD_BYTES = 4 * 1024 * 1024
JOURNAL_PREALLOC_GROUP_BYTES_MAX = 256 * 1024


_NEVER: Final = 1 << 62  # ``Journal._zeros_due`` once the open file gets no more zeros

def journal_path(file_id: int) -> str:
    return f"{JOURNAL_DIR}/{file_id:020d}.jnl"


def journal_file_ids(disk: Disk) -> list[int]:
    ids = []
    for name in disk.listdir(JOURNAL_DIR):
        stem, dot, ext = name.partition(".")
        if dot and ext == "jnl" and stem.isdigit():
            ids.append(int(stem))
    return sorted(ids)


def _frame(body: bytes) -> bytes:
    if len(body) > BOOKIE_JOURNAL_RECORD_BYTES_MAX:
        raise LimitExceededError("BOOKIE_JOURNAL_RECORD_BYTES_MAX", len(body), BOOKIE_JOURNAL_RECORD_BYTES_MAX)
    return _RECORD_HEADER.pack(len(body), crc32c(body)) + body


def add_record(master_key: bytes, entry_raw: bytes) -> tuple[bytes, bytes]:
    """An ADD record (kind 5) as (framing + kind + master key, entry), without concatenating
    them; its CRC covers the body up to the end of the entry header (the digest covers the rest)."""
    prefix, prefix_crc = add_record_prefix(master_key)
    return add_record_from(prefix, prefix_crc, entry_raw), entry_raw


def add_record_prefix(master_key: bytes) -> tuple[bytes, int]:
    """What every ADD record (kind 5) of one master key starts its body with, and that prefix's
    CRC32C: ``add_record_from`` then frames each entry of a run without computing them again."""
    invariant(len(master_key) <= BOOKIE_MASTER_KEY_BYTES_MAX, "master key too long for a journal record")
    prefix = bytes((KIND_ADD_DIGESTED, len(master_key))) + master_key
    return prefix, crc32c(prefix)


def add_record_from(prefix: bytes, prefix_crc: int, entry_raw: bytes) -> bytes:
    """The framing of one ADD record whose body is ``prefix`` (``add_record_prefix``) then
    ``entry_raw``: the record is this, then ``entry_raw`` (``add_record``'s two parts, joined
    by the group's write)."""
    invariant(len(entry_raw) >= ENTRY_HEADER_BYTES, "an ADD record needs a whole entry header")
    body_len = len(prefix) + len(entry_raw)
    if body_len > BOOKIE_JOURNAL_RECORD_BYTES_MAX:
        raise LimitExceededError("BOOKIE_JOURNAL_RECORD_BYTES_MAX", body_len, BOOKIE_JOURNAL_RECORD_BYTES_MAX)
    # A slice of ``bytes`` (compiled: one 32-byte copy) where a ``memoryview`` and its slice were
    # two generic calls and two objects per record (session 23).
    crc = crc32c_update(prefix_crc, entry_raw[:ENTRY_HEADER_BYTES])
    return _RECORD_HEADER.pack(body_len, crc) + prefix


def fence_record(ledger_id: int, master_key: bytes) -> bytes:
    invariant(len(master_key) <= BOOKIE_MASTER_KEY_BYTES_MAX, "master key too long for a journal record")
    return _frame(bytes((KIND_FENCE, len(master_key))) + master_key + _LEDGER.pack(ledger_id))


def lac_record(ledger_id: int, lac: int, master_key: bytes) -> bytes:
    invariant(len(master_key) <= BOOKIE_MASTER_KEY_BYTES_MAX, "master key too long for a journal record")
    return _frame(bytes((KIND_LAC, len(master_key))) + master_key + _LEDGER_LAC.pack(ledger_id, lac))


@dataclass(frozen=True, slots=True)
class JournalRecord:
    """A replayed record: ``entry_raw`` for ADD, ``ledger_id`` for FENCE, both ids for LAC."""

    kind: int
    master_key: bytes
    entry_raw: bytes = b""
    ledger_id: int = -1
    lac: int = -1


def parse_body(body: bytes) -> JournalRecord:
    kind = body[0]
    if kind == KIND_PAD:
        return JournalRecord(KIND_PAD, b"")
    if len(body) < 2 or 2 + body[1] > len(body):
        raise CorruptDataError("journal record ends inside its master key")
    master_key = body[2 : 2 + body[1]]
    rest = body[2 + body[1] :]
    if kind in (KIND_ADD, KIND_ADD_DIGESTED):
        return JournalRecord(KIND_ADD, master_key, entry_raw=rest)
    if kind == KIND_FENCE and len(rest) == _LEDGER.size:
        return JournalRecord(KIND_FENCE, master_key, ledger_id=_LEDGER.unpack(rest)[0])
    if kind == KIND_LAC and len(rest) == _LEDGER_LAC.size:
        ledger_id, lac = _LEDGER_LAC.unpack(rest)
        return JournalRecord(KIND_LAC, master_key, ledger_id=ledger_id, lac=lac)
    raise CorruptDataError(f"unknown journal record kind {kind} or bad length")


@dataclass(frozen=True, slots=True, order=True)
class JournalPosition:
    """A point in the journal: everything before it is covered by a checkpoint once marked."""

    file_id: int
    offset: int


@dataclass(frozen=True, slots=True)
class ReplayResult:
    records: list[tuple[JournalPosition, JournalRecord]]
    torn_at: JournalPosition | None  # where the torn tail starts (already truncated), if any


def _body_intact(body: bytes, crc: int) -> bool:
    """Whether a record body is what was written: its CRC over the whole body, or for a kind 5
    ADD over the body up to the end of the entry header plus the entry's own digest."""
    if body[0] != KIND_ADD_DIGESTED:
        return crc32c(body) == crc
    entry_at = 2 + body[1] if len(body) >= 2 else len(body) + 1
    if entry_at + ENTRY_HEADER_BYTES > len(body) or crc32c(memoryview(body)[: entry_at + ENTRY_HEADER_BYTES]) != crc:
        return False
    try:
        return EncodedEntry.parse(body[entry_at:]).digest_ok()
    except CorruptDataError:
        return False


def _records_in(file: DiskFile, start: int) -> Iterator[tuple[int, bytes | None]]:
    """(offset, body) for each valid record from ``start``; (offset, None) marks a torn tail,
    (offset, b"") the end of the records: a header of zeros (preallocated zeros, or a group
    none of whose bytes reached the disk before a crash)."""
    size = file.size()
    window = b""
    window_start = start
    offset = start
    while offset < size:
        rel = offset - window_start
        if rel + _RECORD_HEADER.size > len(window):
            window = file.read_at(offset, max(_REPLAY_WINDOW_BYTES, _RECORD_HEADER.size))
            window_start, rel = offset, 0
        if rel + _RECORD_HEADER.size > len(window):
            yield offset, None
            return
        body_len, crc = _RECORD_HEADER.unpack_from(window, rel)
        if body_len == 0 and crc == 0:
            yield offset, b""
            return
        if body_len == 0 or body_len > BOOKIE_JOURNAL_RECORD_BYTES_MAX:
            yield offset, None
            return
        end = rel + _RECORD_HEADER.size + body_len
        if end > len(window):
            window = file.read_at(offset, max(_REPLAY_WINDOW_BYTES, _RECORD_HEADER.size + body_len))
            window_start, rel = offset, 0
            end = _RECORD_HEADER.size + body_len
            if end > len(window):
                yield offset, None
                return
        body = window[rel + _RECORD_HEADER.size : end]
        if not _body_intact(body, crc):
            yield offset, None
            return
        yield offset, body
        offset += _RECORD_HEADER.size + body_len


async def _replay_file(
    file: DiskFile, file_id: int, start: int, last: bool, records: list[tuple[JournalPosition, JournalRecord]]
) -> JournalPosition | None:
    """Appends the file's records from ``start`` to ``records``; truncates a torn tail (returned)
    and the zeros after the last file's records (a preallocated file: the next one follows them)."""
    for offset, body in _records_in(file, start):
        if not body:
            if not last:  # the journal synced it (and cut its zeros, ``_rotate``) before the next file
                raise CorruptDataError(f"journal file {file_id} is torn at {offset} but is not the last one")
            file.truncate(offset)
            await file.sync()
            return None if body is not None else JournalPosition(file_id, offset)
        record = parse_body(body)
        if record.kind != KIND_PAD:
            records.append((JournalPosition(file_id, offset), record))
    return None


async def replay(disk: Disk, mark: JournalPosition) -> ReplayResult:
    """Every record at or after ``mark``; truncates (and syncs) a torn tail of the last file."""
    ids = [i for i in journal_file_ids(disk) if i >= mark.file_id]
    records: list[tuple[JournalPosition, JournalRecord]] = []
    torn: JournalPosition | None = None
    for index, file_id in enumerate(ids):
        last = index == len(ids) - 1
        file = disk.open(journal_path(file_id), create=False)
        try:
            header = file.read_at(0, _FILE_HEADER.size)
            if len(header) < _FILE_HEADER.size or _FILE_HEADER.unpack(header) != (FILE_MAGIC, file_id):
                if not last:
                    raise CorruptDataError(f"journal file {file_id} has a bad header but is not the last one")
                torn = JournalPosition(file_id, 0)
                file.truncate(0)
                await file.sync()
            else:
                start = mark.offset if file_id == mark.file_id else _FILE_HEADER.size
                torn = await _replay_file(file, file_id, max(start, _FILE_HEADER.size), last, records)
        finally:
            file.close()
        if torn is not None:  # only the last file can be torn
            break
    return ReplayResult(records, torn)


class Journal(JournalSubmitter):
    """Appends records in groups, one fsync per group, and calls back after the fsync
    (the queue and the submission calls: ``JournalSubmitter``)."""

    def __init__(self, disk: Disk, clock: Clock, config: BookieConfig, first_file_id: int) -> None:
        super().__init__(clock, config, self._look, self._start_lone)
        self._disk = disk
        self._file_bytes_max = config.journal_file_bytes_max  # a native int: read per look
        self._on_synced_then = self._on_synced  # bound once: each group's completion (``Group.__call__``)
        self._file_id = first_file_id
        self._file: DiskFile | None = None
        self._express_next = False  # the group past ``bookie.before_journal_append`` is an express one
        # Driven by callbacks, not a task (a future, a task step and a loop pass less per group):
        # ``_wake`` schedules one ``_look`` per loop pass; ``_appending`` while
        # ``bookie.before_journal_append`` holds a group.
        self._looking = False  # ``_look`` is on the stack
        self._appending = False
        self._rotation: asyncio.Task[None] | None = None
        # Answers of the groups past ``bookie.after_fsync_before_reply``, fairly ordered
        # (``journal_replies``), and those groups, oldest first, until ``bookie.after_reply``.
        self._lanes = ReplyLanes()
        self._replying: collections.deque[GroupReplies] = collections.deque()
        self.reply_slice_count = JOURNAL_REPLY_SLICE_COUNT  # answers run per loop pass
        self.lone_replies = True  # a lone answer runs in the pass its group's answers join (``_reply_lone``)
        self._answering = False  # a reply gate is in progress (held by a fault point, or inline)
        self._after_reply = False  # ... and it is ``bookie.after_reply``: no answer runs meanwhile
        self._answer_loop = False  # ``_answer_synced`` is on the stack (a gate passed inline)
        self._slicing = False  # ``_reply_slice`` is on the stack
        self._slice_due = False  # a ``_reply_slice`` is scheduled for the next loop pass
        # The open file's end as written so far (synced or not): ``position()`` makes a
        # ``JournalPosition`` of it when asked (once per checkpoint), not every group.
        self._written_offset = 0
        # Preallocation of the open file (``_preallocate``): zeros reach ``_zeroed_to`` once
        # ``_zeroing`` ends; the groups' bytes and count since the last decision.
        self._zeroing: asyncio.Task[None] | None = None
        self._zeroed_to = 0
        self._zeros_due = 0  # ``_written_offset`` from which the next decision is made
        self._recent_bytes = 0
        self._recent_groups = 0
        self.groups_count = 0
        self.syncs_count = 0
        self.express_groups_count = 0  # groups of lone records (``journal_express``)
        self.reply_slices_count = 0  # slices of answers deferred to a later loop pass

    def position(self) -> JournalPosition:
        """End of what has been written to the journal file so far (synced or not)."""
        return JournalPosition(self._file_id, self._written_offset)

    async def start(self) -> None:
        self._disk.makedirs(JOURNAL_DIR)
        await self._open_file(self._file_id)
        self._loop = asyncio.get_running_loop()
        self._transition(JournalStatus.RUNNING)
        self._wake()

    async def _open_file(self, file_id: int) -> None:
        await self._zeros_settled()  # the previous file's zeros are written before it is left
        file = self._disk.open(journal_path(file_id), direct=True)
        file.truncate(0)
        file.append(_FILE_HEADER.pack(FILE_MAGIC, file_id))
        await file.sync()
        await self._disk.sync_dir(JOURNAL_DIR)
        self._file, self._file_id = file, file_id
        self._written_offset = file.size()
        self._zeroed_to = self._zeros_due = 0
        self._preallocate()

    def _preallocate(self) -> None:
        """Keep the open file's written zeros ``JOURNAL_PREALLOC_LEAD_BYTES`` ahead of the
        journal's position (one ``preallocate`` of ``JOURNAL_PREALLOC_CHUNK_BYTES`` at a time,
        never past ``journal_file_bytes_max``, so a file is all records when the next one
        starts), while the groups are small (``JOURNAL_PREALLOC_GROUP_BYTES_MAX``)."""
        written = self._written_offset
        if self._zeroing is not None or written < self._zeros_due:
            return
        preallocate: Callable[[int], Awaitable[None]] | None = getattr(self._file, "preallocate", None)
        limit = self._config.journal_file_bytes_max
        limit -= limit % DISK_DIRECT_ALIGNMENT_BYTES
        if preallocate is None or self._zeroed_to >= limit:
            self._zeros_due = _NEVER
            return
        large = (self._recent_groups > 0
                 and self._recent_bytes > self._recent_groups * JOURNAL_PREALLOC_GROUP_BYTES_MAX)
        self._recent_bytes = self._recent_groups = 0
        if large:
            self._zeros_due = written + JOURNAL_PREALLOC_CHUNK_BYTES  # look again after as many bytes
            return
        end = min(limit, max(self._zeroed_to, written) + JOURNAL_PREALLOC_CHUNK_BYTES)
        self._zeroing = watch_task(asyncio.get_running_loop().create_task(
            self._zero(preallocate, end), name="bookie-journal-preallocate"), log)

    async def _zero(self, preallocate: Callable[[int], Awaitable[None]], end: int) -> None:
        try:
            await preallocate(end)
        except Exception as error:  # no zeros: the groups extend the file, as without them
            log.warning("journal preallocation to %d failed: %r", end, error)
            self._zeros_due = _NEVER  # not again in this file
            self._zeroing = None
            return
        except BaseException:  # cancelled, or the (simulated) node crashed: no more zeros
            self._zeroing = None
            raise
        self._zeroing = None
        self._zeroed_to = end
        self._zeros_due = max(self._zeros_due, end - JOURNAL_PREALLOC_LEAD_BYTES)
        if self.status is JournalStatus.RUNNING:
            self._preallocate()

    async def _zeros_settled(self) -> None:
        """No more zeros for the open file, and those in progress written (they must not land
        after the file is closed or replaced)."""
        self._zeros_due = _NEVER
        while (zeroing := self._zeroing) is not None:
            await asyncio.wait([zeroing])
            if self._zeroing is zeroing:  # cancelled before it ran: its body never cleared it
                self._zeroing = None

    def _rotation_due(self) -> bool:
        # ``_written_offset`` is the open file's size (only the journal appends to it): no call per look.
        return self._file is not None and self._written_offset >= self._file_bytes_max

    def _look(self) -> None:
        """Start groups in queue order, up to ``journal_groups_in_flight_max`` at once (each one
        write at its own reserved offset: the next group's write overlaps the previous one's
        fsync); completions answer them (``_on_synced``), strictly in order. A full file is
        rotated once nothing is in flight (the old file is then synced)."""
        self._look_due = False
        if self._grouping or self._appending or self._rotation is not None:
            return  # the timer, the held fault point or the new file looks again
        inflight = self._inflight
        waited, self._waited_due = self._waited_due, False
        self._looking = True
        try:
            while self.status is JournalStatus.RUNNING:
                rotation_due = self._rotation_due()
                if rotation_due and not inflight:
                    self._rotation = watch_task(asyncio.get_running_loop().create_task(
                        self._rotate(), name="bookie-journal-rotate"), log)
                    return
                if rotation_due or not self._queue:
                    return
                express = len(inflight) - self._express_inflight >= self._groups_in_flight_max
                if express and not (self._load.lone_due and self._express_inflight < self.express_groups_max):
                    return
                if not express and not waited and self._wait_for_group():
                    if not self._lone_beside_wait():
                        return
                    express = True  # its lone records go now, the others wait (``_lone_beside_wait``)
                waited = waited and express  # an express group leaves the ended wait to the next one
                self._express_next = express
                self._appending = True
                if faults.unarmed("bookie.before_journal_append"):
                    self._append(None)  # the gate's continuation, called natively (``faults.unarmed``)
                else:
                    faults.gate0("bookie.before_journal_append", self._append)
                if self._appending or self._grouping:
                    return  # held by its fault point (``_append`` carries on), or a wait runs
        finally:
            self._looking = False

    def _start_lone(self) -> None:
        """From a submission (``JournalSubmitter._lone_now``): an express group of the queued lone
        items starts now, past ``bookie.before_journal_append`` as every group, unless a group
        cannot start from this call (a look, a held gate, answers or a rotation in progress, or a
        rotation due): the look at the loop pass's end then takes them, as before."""
        if (self.status is not JournalStatus.RUNNING or self._looking or self._appending or self._answer_loop
                or self._slicing or self._rotation is not None or self._rotation_due()):
            return
        self._express_next = True
        self._appending = True
        if faults.unarmed("bookie.before_journal_append"):
            self._append(None)
        else:
            faults.gate0("bookie.before_journal_append", self._append)

    def _append(self, error: BaseException | None) -> None:
        """Past ``bookie.before_journal_append``: the next group starts."""
        self._appending = False
        if error is not None:
            self._fail(error)
            return
        if self.status is not JournalStatus.RUNNING or not self._queue:
            return
        express, self._express_next = self._express_next, False
        parts, callbacks, lanes, group_bytes = self._take_group(express)
        if callbacks:  # an express group finds none when the lone records went in an ordinary one
            self._start_group(parts, callbacks, lanes, group_bytes, express)
        if not self._looking:  # the point held the group: look for the next one
            self._wake()

    async def _rotate(self) -> None:
        failure: Exception | None = None
        try:
            await self._open_file(self._file_id + 1)  # nothing in flight: the old file is synced
        except Exception as exc:
            failure = exc
        self._rotation = None
        if failure is not None:
            self._fail(failure)
        else:
            self._wake()

    def _start_group(self, parts: list[Bytes], callbacks: list[Callback], lanes: list[tuple[int, int]],
                     group_bytes: int, express: bool) -> None:
        """Write and sync ``parts`` with one ``append_and_sync_then`` (the disk's writer thread in
        production, past the fault points of the write); ``_on_synced`` answers the group."""
        file = self._file
        invariant(file is not None, "journal has no open file")
        assert file is not None  # narrowing for the type checker; the invariant above holds
        alignment = file.write_alignment_bytes
        if alignment > 1:
            pad = padding_for(self._written_offset + group_bytes, alignment)
            if pad:
                parts.extend(pad_record(pad))
        group = Group(callbacks, lanes, express, self._on_synced_then)
        self._inflight.append(group)
        if express:
            self._express_inflight += 1
            self.express_groups_count += 1
        try:
            file.append_and_sync_then(parts, group,
                                      torn_point="bookie.journal.mid_write",
                                      unsynced_point="bookie.after_write_before_fsync")
        except Exception as error:  # not started (no writer thread, no buffer)
            self._fail(error)
            return
        self._written_offset = file.size()
        self._recent_bytes += group_bytes
        self._recent_groups += 1
        self._preallocate()

    def _on_synced(self, group: Group, error: BaseException | None) -> None:
        if group.answered:
            return  # failed or stopped meanwhile: its records were answered then
        if error is not None:
            self._fail(error)
            return
        group.synced = True
        self.groups_count += 1
        self.syncs_count += 1
        self._answer_synced()

    def _answer_synced(self) -> None:
        """Move the answers on, one gate at a time and each kind oldest group first: the
        ``bookie.after_reply`` gate of a group whose records were all answered, the
        ``bookie.after_fsync_before_reply`` gate of a synced group (its answers then join the
        reply lanes). A gate held by its fault point holds every later gate; a held
        ``bookie.after_reply`` also holds the answers. Then one slice of answers, unless one is
        already due this loop pass."""
        inflight, replying = self._inflight, self._replying
        self._answer_loop = True
        try:
            while not self._answering and self.status is JournalStatus.RUNNING:
                if replying and replying[0].unanswered == 0:
                    replying.popleft()
                    self._answering = self._after_reply = True
                    if faults.unarmed("bookie.after_reply"):
                        self._replied(None)
                    else:
                        faults.gate0("bookie.after_reply", self._replied)
                elif inflight and inflight[0].synced:
                    self._answering = True
                    if faults.unarmed("bookie.after_fsync_before_reply"):
                        self._reply(None, inflight[0])
                    else:
                        faults.gate1("bookie.after_fsync_before_reply", self._reply, inflight[0])
                else:
                    break
        finally:
            self._answer_loop = False
        if self._lanes and not (self._after_reply or self._slicing):
            if not self._slice_due:
                self._reply_slice()
            elif self._lanes.lone_waiting and self.lone_replies:
                self._reply_lone()
        if self._queue or self._rotation_due():  # else ``_look`` would find nothing to do
            self._wake()

    def _reply(self, error: BaseException | None, group: Group) -> None:
        """Past ``bookie.after_fsync_before_reply``: the group's answers join the reply lanes
        (``journal_replies``: per ledger in order, the shortest lane first, a slice per pass)."""
        if group.answered:
            return
        if error is not None:
            self._fail(error)
            return
        invariant(self._inflight[0] is group, "journal groups pass their reply gates in order")
        self._inflight.popleft()
        self._load.left(group.lanes)
        self._express_inflight -= group.express
        group.answered = True
        callbacks = group.callbacks
        replies = GroupReplies(len(callbacks))
        self._lanes.add(callbacks, group.lanes, replies)
        self._replying.append(replies)
        self._answering = False
        if not self._answer_loop:  # the gate held the group: carry on from here
            self._answer_synced()

    def _reply_slice(self) -> None:
        """Run up to ``reply_slice_count`` answers now; what is left runs from the next loop
        pass, after the reads and the receipt writes that are due (``call_soon`` is FIFO)."""
        self._slice_due = False
        if self._after_reply or self._slicing or self.status is not JournalStatus.RUNNING:
            return  # a held gate holds the answers; a failure or ``stop`` answered them
        self._slicing = True
        try:
            self._lanes.run(self.reply_slice_count)
        finally:
            self._slicing = False
        if self._lanes:
            self._slice_due = True
            self.reply_slices_count += 1
            asyncio.get_running_loop().call_soon(self._reply_slice)
        self._answer_synced()

    def _reply_lone(self) -> None:
        """While a slice of answers is due in a later pass: the lanes of one answer run now (a
        light ledger's add, ``ReplyLanes.run_lone``), in the pass its sync completion is seen."""
        self._slicing = True
        try:
            self._lanes.run_lone(self.reply_slice_count)
        finally:
            self._slicing = False

    def _replied(self, error: BaseException | None) -> None:
        if error is not None:
            self._fail(error)
            return
        self._answering = self._after_reply = False
        if not self._answer_loop:  # the gate held the reply: carry on with the next group
            self._answer_synced()

    def _answer_durable(self) -> None:
        """Answer every record past its group's ``bookie.after_fsync_before_reply`` gate now, in
        lane order: they are durable, whatever happens to the journal after them."""
        self._lanes.run_all()
        self._replying.clear()

    def _fail(self, error: BaseException) -> None:
        if self.status is not JournalStatus.RUNNING:
            return
        self._failure = error
        self._transition(JournalStatus.FAILED)
        self._answer_durable()
        self._fail_inflight(error)
        self._fail_queued(error)
        self._stop_driver()

    def _fail_inflight(self, error: BaseException) -> None:
        self._answering = self._after_reply = False
        self._express_inflight = 0
        self._load.clear()  # the journal ends: every queued record is failed next
        while self._inflight:
            group = self._inflight.popleft()
            group.answered = True
            for callback in group.callbacks:
                callback(error)

    def remove_files_before(self, file_id: int) -> int:
        """Delete journal files older than ``file_id`` (covered by a persisted checkpoint)."""
        removed = 0
        for old in journal_file_ids(self._disk):
            if old < file_id and old != self._file_id:
                self._disk.remove(journal_path(old))
                removed += 1
        return removed

    async def stop(self) -> None:
        """Let queued records reach the disk (their callers get an answer), then close."""
        if self.status is JournalStatus.STOPPED:
            return
        if self.status is JournalStatus.RUNNING and self._queue:
            await self._drain()
        if self.status is JournalStatus.RUNNING or self.status is JournalStatus.FAILED:
            self._transition(JournalStatus.STOPPED)
        self._stop_driver()
        rotation = self._rotation
        if rotation is not None:
            rotation.cancel()
            try:
                await rotation
            except asyncio.CancelledError:
                pass
        self._answer_durable()
        self._fail_inflight(ClosedError("journal stopped"))
        await self._zeros_settled()
        if self._file is not None:
            self._file.close()
            self._file = None
        self._fail_queued(ClosedError("journal stopped"))
