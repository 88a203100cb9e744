"""The order in which the journal answers the records of its synced groups (issue 22, isolation).

Every record of a synced group is durable at once, so any order of its answers is correct; not
every order is fair. A group holds whatever was queued while the previous one was written: with a
large ledger window, say 500 adds of one busy ledger and one add of a synchronous producer's
ledger. Each answer runs the writer's completion path up to the client's receipt (20-40 us), so
answered in submission order in one loop callback, the light add waits behind the heavy ones'
answers (10-20 ms) and no socket is read meanwhile.

``ReplyLanes`` holds the answers still to run, one lane per ledger:

* **Per-ledger order**: a lane is answered oldest first, and a group's answers join their lanes
  in submission order after every earlier group's, so one ledger's records are answered in the
  order they were submitted (the ledger handle completes its adds in entry order: answering a
  later add first would only park it).
* **Shortest lane first** across ledgers, in records (a run's one reply counts its records; ties:
  the lane that appeared first): the light ledger's one answer runs before the busy ledger's
  hundreds, wherever it sat in the group, also when those are one run's single reply (counted
  in replies, a busy ledger's run of 32 adds tied with the light add and, appearing first in the
  group, took the whole slice: the light answer waited a loop pass, ~1 ms under load).
* **Slices**: ``run(budget)`` answers about ``budget`` records (a run's one reply counts all its
  records, and a slice runs at least one reply); the journal runs one slice per
  loop pass (``JOURNAL_REPLY_SLICE_COUNT``), so between two slices the loop reads the sockets and
  writes the receipts the slice produced.
* **A lone answer at once**: while a slice is due in a later pass (a busy ledger's answers
  left over), the journal still runs the lanes that hold a single answer when a group's answers
  join (``run_lone``: a light ledger's add, in the pass its sync completion is seen, instead of
  one pass later behind the slice's reads and writes).
* **Groups counted**: each group's ``GroupReplies.unanswered`` counts its answers that have not
  run; the journal passes a group's ``bookie.after_reply`` gate once it is zero, oldest first.

Every lane is bounded by what the journal queue admits (``journal_queue_bytes_max``); a lane
that stays longest waits only for shorter lanes, which each ledger's window bounds.
"""

from __future__ import annotations

import collections
import struct
from collections.abc import Callable, Sequence
from typing import Final

from magnetar.base.invariant import invariant
from magnetar.base.io import Bytes

#: What a record's submitter gets: ``None`` once the record is durable, or the error.
Reply = Callable[[BaseException | None], None]
#: The lane of records that name no ledger (the journal's stop marker, or a group whose framing
#: could not be read): one more lane, answered in submission order like the others.
NO_LEDGER: Final = -1
#: The journal's record framing (``storage.journal``: u32 body length, u32 CRC) and a ledger id.
_RECORD_HEADER = struct.Struct(">II")
_LEDGER = struct.Struct(">Q")


def queued_lane(item: bytes | tuple[bytes, bytes] | list[Bytes]) -> tuple[int, int]:
    """A queued item's reply lane and weight: the ledger of its (first) record, read from its
    framing (the ledger id after the master key of an ADD, i.e. its entry's first field, a FENCE
    or a LAC; ``NO_LEDGER`` for the stop marker or a record that names none), and how many
    records its one callback answers. A run (``submit_run``: framing + prefix, then the entry, per
    record) is one item: its first record's ledger stands for the run (a run is one ledger's
    adds), its weight is its records."""
    weight = 1
    first: Bytes
    second: Bytes
    if isinstance(item, tuple):
        first, second = item
    elif isinstance(item, list):
        first, second = (item[0], item[1]) if len(item) >= 2 else (item[0] if item else b"", b"")
        weight = max(1, len(item) // 2)
    else:
        first, second = item, b""
    header = _RECORD_HEADER.size
    if len(first) < header + 2:
        return NO_LEDGER, weight
    body_len = _RECORD_HEADER.unpack_from(first)[0]
    rest_at = header + 2 + first[header + 1]  # after kind, key length and the key
    if len(first) - header == body_len:  # a whole record: the ledger follows the key
        whole = len(first) >= rest_at + _LEDGER.size
        return (int(_LEDGER.unpack_from(first, rest_at)[0]) if whole else NO_LEDGER), weight
    return (int(_LEDGER.unpack_from(second)[0]) if len(second) >= _LEDGER.size else NO_LEDGER), weight


class GroupReplies:
    """One synced group's answers that have not run yet. A plain class, not a dataclass: one per
    journal group, and compiled (mypyc) a dataclass's generated ``__init__`` runs interpreted
    (session 17)."""

    __slots__ = ("unanswered",)

    def __init__(self, unanswered: int) -> None:
        self.unanswered = unanswered


class ReplyLanes:
    """Answers of synced groups waiting to run, one lane (FIFO) per ledger, with each lane's
    records counted beside it (``_counts``, kept on every add and answer). A slice's
    shortest-first order is sorted once by those counts and kept (``_order``, from ``_next``)
    until the next ``add``: between two adds the lanes only shrink, and the lane a slice left
    half-answered stays the shortest. At 100,000 topics a group's records sit in as many lanes
    as records; sorting every lane, each walked for its length, for every slice of 32 answers
    made the answers' cost grow with the group's size (docs/performance.md, session 16)."""

    __slots__ = ("_counts", "_lanes", "_next", "_order", "lone_waiting")

    def __init__(self) -> None:
        self._lanes: dict[int, collections.deque[tuple[Reply, GroupReplies, int]]] = {}
        self._counts: dict[int, int] = {}  # a lane's records (the weights of its replies)
        self._order: list[int] | None = None  # the lanes shortest first, None after an ``add``
        self._next = 0  # where the next slice starts in ``_order``
        self.lone_waiting = False  # an ``add`` made a lane of one answer since ``run_lone`` ran

    def __bool__(self) -> bool:
        return bool(self._lanes)

    def add(self, replies: Sequence[Reply], lanes_of: Sequence[tuple[int, int]], group: GroupReplies) -> None:
        """Queue a synced group's ``replies`` (in submission order), each in its ledger's lane
        with its weight (the records it answers: a run's one reply answers all of the run's)."""
        lanes = self._lanes
        counts = self._counts
        made = 0
        count = len(replies)
        invariant(len(lanes_of) == count, "a reply lane per reply")
        # An index loop, not ``zip(..., strict=True)``: compiled, a ``zip`` with a keyword is a
        # generic call of the builtin and a generic iteration per group (session 23).
        for index in range(count):
            reply = replies[index]
            ledger, weight = lanes_of[index]
            lane = lanes.get(ledger)
            if lane is None:
                lane = lanes[ledger] = collections.deque()
                counts[ledger] = weight
                made += 1
            else:
                counts[ledger] += weight
            lane.append((reply, group, weight))
        self._order = None
        if made:
            self.lone_waiting = True

    def records(self, ledger: int) -> int:
        """A lane's records (the weights of its replies; 0 for no lane)."""
        return self._counts.get(ledger, 0)

    def run(self, budget: int) -> int:
        """Answer (``None``) up to ``budget`` records (at least one reply), the shortest lane
        first (ties: the lane that appeared first); how many records ran. An answer may queue
        more (a later group synced meanwhile): they run from the next call."""
        lanes = self._lanes
        counts = self._counts
        order = self._order
        if order is None:
            # One lane (a lone add's group, one ledger's run): its own order, no sort and no key
            # method bound per slice (session 23).
            order = self._order = list(lanes) if len(lanes) == 1 else sorted(lanes, key=counts.__getitem__)
            self._next = 0
        at = self._next
        ran = 0
        while at < len(order) and ran < budget:
            ledger = order[at]
            lane = lanes.get(ledger)
            if lane is None:  # answered by ``run_lone``, or emptied by ``run_all`` from an answer
                at += 1
                continue
            while lane and ran < budget:
                reply, group, weight = lane.popleft()
                group.unanswered -= 1
                ran += weight
                counts[ledger] -= weight
                reply(None)
            if not lane:
                at += 1
                if lanes.get(ledger) is lane:
                    del lanes[ledger]
                    del counts[ledger]
        if self._order is order:
            self._next = at
        return ran

    def run_lone(self, budget: int) -> int:
        """Answer the lanes that hold one reply of one record (a light ledger's add; oldest lane
        first), at most ``budget`` of them; how many ran. Each is its ledger's oldest answer, so
        per-ledger order holds; a longer lane waits for the next ``run``. A lane of one record is
        one reply (every reply answers at least one record)."""
        self.lone_waiting = False
        lanes = self._lanes
        lone = [ledger for ledger, records in self._counts.items() if records == 1][:budget]
        for ledger in lone:
            lane = lanes.get(ledger)
            if lane is None or len(lane) != 1:
                continue  # emptied by ``run_all`` from inside an answer (the journal failed)
            reply, group, _ = lane.popleft()
            del lanes[ledger]
            del self._counts[ledger]
            group.unanswered -= 1
            reply(None)
        return len(lone)

    def run_all(self) -> int:
        """Answer every queued record now (the journal stops or failed: they are durable)."""
        ran = 0
        while self._lanes:
            ran += self.run(1 << 62)
        return ran
