"""Which queued records the journal's next group takes, and a slot of its own for a lone record
beside a busy ledger (issue 22, latency isolation).

A synchronous producer's ledger has one add at a time; a busy ledger keeps the journal's
``journal_groups_in_flight_max`` groups in flight. With both slots taken, the light add used to
wait for the oldest group's sync to free a slot, then its group's write followed the other heavy
group's and its sync came after that one's: about three syncs in a row on one journal file
(docs/performance.md, "Session 13 (issue 22): isolation and ingest", the trace).

``LedgerLoad`` counts, per ledger, the items (``submit``: one record; ``submit_run``: one run)
queued or in a group in flight. An item is **lone** when it is one record (a run of one, or one
``submit``) and the only item of its ledger counted (nothing of its ledger queued before it,
nothing of it in flight): a synchronous producer's add, never a busy ledger's. One record only:
a partitioned heavy producer's ledgers (each with a share of the window) often have nothing in
flight when their next run of adds arrives; counted as lone, those runs took the express slot
as a third heavy one (measured: the light producer's loaded p50 1-2 ms worse with 4 heavy
partitions, docs/performance.md, session 14). While every ordinary slot is taken,
the journal starts one more group, an *express* group (at most ``EXPRESS_GROUPS_IN_FLIGHT_MAX``
in flight), holding only lone items (``take_lone``, at most ``EXPRESS_GROUP_BYTES_MAX``): its
write goes out beside the heavy groups' at once, so its sync is the heavy group's in flight or
the one right after, not two more. A lone item queued alone while another ledger is at work
also gets an express group, at once from its submission (``JournalSubmitter._lone_now``, session
20): the look at the loop pass's end took it with the busy ledger's adds read after it.

Durability and order are those of any group: an express group is written at the file's next
offset like any other, joins the groups in flight in start order and is answered only after
every earlier group synced and passed its gates (a crash that tears an earlier group makes
replay stop before the express one, whose records were then never acknowledged). Per-ledger
order holds: a lone item has no earlier item of its ledger still queued, so taking it ahead of
other ledgers' queued items puts it after every record of its ledger already written, and no
record of its ledger can be queued ahead of it. A run whose records are of several ledgers
(``submit_run`` from ``add_entries`` of a mixed run) is counted under its reply lane's ledger and,
while queued, under each of its other ledgers too (the caller names them: ``Bookie`` knows each
entry's ledger; a run submitted without them blocks every express group while queued), so no
lone record passes a queued record of its own ledger. The journal's stop marker (``NO_LEDGER``) is never lone.

Invariant: an item counted by ``queued`` stays counted until ``left`` is called for it (its group
left the in-flight groups, answered or failed) or ``clear``.
"""

from __future__ import annotations

import collections
from collections.abc import Set as AbstractSet

from magnetar.base.io import Bytes
from magnetar.storage.journal_replies import NO_LEDGER, Reply

#: Express groups in flight at once, beside the ordinary ``journal_groups_in_flight_max``.
EXPRESS_GROUPS_IN_FLIGHT_MAX = 1
#: Bytes of lone items one express group takes at most (at least one item): a lone item is one
#: add or one run of a light ledger, so this is a bound that keeps its write short, not a target.
EXPRESS_GROUP_BYTES_MAX = 256 * 1024
#: Queued items ``take_lone`` looks at, newest first: a lone item has just arrived.
EXPRESS_SCAN_ITEMS_MAX = 64

#: What the journal queues per submit: one record (whole, or as framing + prefix and entry), or
#: a run's records as one flat list of parts (``submit_run``), which always go into one group.
Queued = bytes | tuple[bytes, bytes] | list[Bytes]
#: A queued item: (record or run, bytes, callback, when queued, (reply lane, weight)).
QueueItem = tuple[Queued, int, Reply, int, tuple[int, int]]
#: A group taken from the queue: its bytes as parts to join, its callbacks, their lanes, its size.
Taken = tuple[list[Bytes], list[Reply], list[tuple[int, int]], int]


class LedgerLoad:
    """Items queued or in flight, per ledger (by reply lane), and whether a lone item arrived
    since the journal last looked for one."""

    __slots__ = ("_counts", "_in_mixed", "_mixed", "_unknown", "lone_due")

    def __init__(self) -> None:
        self._counts: dict[int, int] = {}
        self.lone_due = False
        # Queued mixed runs (by ``id`` of their parts list): their other ledgers, or None when
        # unreadable; those ledgers counted over all such runs; the unreadable runs queued.
        self._mixed: dict[int, AbstractSet[int] | None] = {}
        self._in_mixed: dict[int, int] = {}
        self._unknown = 0

    def queued(self, ledger: int, records: int = 1) -> bool:
        """An item of ``ledger`` (``records`` records) was queued; whether it is lone (one record,
        none of its ledger counted)."""
        if ledger == NO_LEDGER:
            return False
        counts = self._counts
        count = counts.get(ledger, 0)
        counts[ledger] = count + 1
        if count == 0 and records == 1:
            self.lone_due = True
            return True
        return False

    def queued_mixed(self, key: int, others: AbstractSet[int] | None) -> None:
        """The run queued under ``key`` (``id`` of its parts) also holds records of ``others``
        (None: unknown ledgers); ``taken(key)`` once it leaves the queue."""
        self._mixed[key] = others
        if others is None:
            self._unknown += 1
            return
        in_mixed = self._in_mixed
        for ledger in others:
            in_mixed[ledger] = in_mixed.get(ledger, 0) + 1

    def taken(self, key: int) -> None:
        """An item left the queue: if it was a mixed run, its other ledgers are no longer queued."""
        if key not in self._mixed:
            return
        others = self._mixed.pop(key)
        if others is None:
            self._unknown -= 1
            return
        in_mixed = self._in_mixed
        for ledger in others:
            count = in_mixed[ledger]
            if count <= 1:
                del in_mixed[ledger]
            else:
                in_mixed[ledger] = count - 1

    def is_lone(self, ledger: int) -> bool:
        return (ledger != NO_LEDGER and self._counts.get(ledger, 0) == 1 and not self._unknown
                and ledger not in self._in_mixed)

    def left(self, lanes: list[tuple[int, int]]) -> None:
        """The items of a group (their ``(ledger, weight)`` lanes) left the groups in flight."""
        counts = self._counts
        for ledger, _ in lanes:  # a list: compiled, no generic iterator per group (session 23)
            count = counts.get(ledger)
            if count is None:
                continue  # the stop marker, or counted before ``clear``
            if count <= 1:
                del counts[ledger]
            else:
                counts[ledger] = count - 1

    def clear(self) -> None:
        """The journal failed or stopped: nothing is queued or in flight any more."""
        self._counts.clear()
        self.lone_due = False
        self._mixed.clear()
        self._in_mixed.clear()
        self._unknown = 0

    def is_mixed(self, key: int) -> bool:
        return key in self._mixed

    @property
    def mixed(self) -> bool:
        """Whether a mixed run is queued (``taken`` then matters for the items leaving)."""
        return bool(self._mixed)


def take_group(queue: collections.deque[QueueItem], limit: int, load: LedgerLoad) -> Taken:
    """The next ordinary group from the head of ``queue`` (items ``(record or run, bytes,
    callback, when queued, lane)``): its bytes as parts to join, the callbacks, the lanes, its
    size. It ends before the item that would take it past ``limit`` bytes (at least one item)."""
    parts: list[Bytes] = []
    callbacks: list[Reply] = []
    lanes: list[tuple[int, int]] = []
    group_bytes = 0
    mixed = load.mixed
    while queue and (not callbacks or group_bytes + queue[0][1] <= limit):
        record, size, callback, _, lane = queue.popleft()
        if mixed:
            load.taken(id(record))
        parts = _add_parts(parts, record)
        callbacks.append(callback)
        lanes.append(lane)
        group_bytes += size
    return parts, callbacks, lanes, group_bytes


def has_lone(queue: collections.deque[QueueItem], load: LedgerLoad) -> bool:
    """Whether one of the newest ``EXPRESS_SCAN_ITEMS_MAX`` queued items is lone (a light
    ledger's one add, nothing else of its ledger queued or in flight)."""
    for scanned, item in enumerate(reversed(queue)):
        if scanned >= EXPRESS_SCAN_ITEMS_MAX:
            break
        record, _, _, _, lane = item
        if lane[1] == 1 and load.is_lone(lane[0]) and not load.is_mixed(id(record)):
            return True
    return False


def take_lone(queue: collections.deque[QueueItem], load: LedgerLoad,
              limit: int = EXPRESS_GROUP_BYTES_MAX) -> Taken:
    """An express group: the lone items among the newest ``EXPRESS_SCAN_ITEMS_MAX`` of ``queue``
    (in queue order, at most ``limit`` bytes, at least one item), taken out of it; the others
    stay in their order. Empty (no callbacks) when none is lone."""
    load.lone_due = False
    scanned: list[QueueItem] = []
    while queue and len(scanned) < EXPRESS_SCAN_ITEMS_MAX:
        scanned.append(queue.pop())
    scanned.reverse()
    parts: list[Bytes] = []
    callbacks: list[Reply] = []
    lanes: list[tuple[int, int]] = []
    group_bytes = 0
    for item in scanned:
        record, size, callback, _, lane = item
        if (lane[1] == 1 and load.is_lone(lane[0]) and not load.is_mixed(id(record))
                and (not callbacks or group_bytes + size <= limit)):
            parts = _add_parts(parts, record)
            callbacks.append(callback)
            lanes.append(lane)
            group_bytes += size
        else:
            queue.append(item)
    return parts, callbacks, lanes, group_bytes


def _add_parts(parts: list[Bytes], record: Queued) -> list[Bytes]:
    """``parts`` with ``record``'s parts after them; a run's own list when it comes first (the
    journal owns it once queued: no copy of its parts)."""
    if isinstance(record, bytes):
        parts.append(record)
    elif isinstance(record, list):
        if not parts:
            return record
        parts.extend(record)
    else:
        parts.extend(record)
    return parts
