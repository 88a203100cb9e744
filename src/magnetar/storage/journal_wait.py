"""Whether the journal waits for more adds before it writes a group, and how long (issue 22).

BookKeeper's journal waits up to ``journalMaxGroupWaitMSec`` before it writes a group, so the adds
that arrive meanwhile share one write, one sync, one thread hand-off and one reply write. That
pays when other adds do arrive within the wait (a steady stream from one or many producers) and
costs the whole wait otherwise: a lone synchronous producer sends its next add only after the
previous acknowledgement, so every one of its adds would wait the bound and gain nothing.

The policy, in the journal's ``Clock`` (virtual in simulation, so a run stays a function of its
seed), with ``bound_ns`` = ``journal_group_wait_ms_max``:

* **Arrivals**: the gap before each add, and an EWMA (weight 1/``GAP_EWMA_WEIGHT_INVERSE``) of
  the gaps, each capped at ``IDLE_GAP_BOUNDS`` bounds. A group waits only while the average is
  below the bound (another add is then likely to arrive within it) and its latest add did not
  follow an idle spell (a gap of ``IDLE_GAP_BOUNDS`` bounds or more): a lone add after idle goes
  at once, while a stream that arrives in small bursts (a paced client's timer) still groups.
* **Probing**: the arrival times alone cannot tell a steady stream from a synchronous producer
  whose round trip is shorter than the bound (from the journal both look the same until one
  waits). A fruitless wait (no add arrived during it: below) makes the next ``SKIPS_MIN``
  groups go at once, the next fruitless one
  ``SKIPS_GROWTH`` times as many, up to ``SKIPS_MAX``; a wait that gained an add, or an add that
  arrives while another is queued or in flight (other producers at work) at least
  ``BURST_GAP_NS`` after the previous add, ends that back-off. Adds closer together are one
  burst a caller handed over in one go (a ledger's window of adds, one receive's run): they say
  nothing about adds still to come.
* **Bounded**: the head add's age counts against the bound, so no add waits longer than it, and
  one that already waited it (a busy disk, a high rate, a backlog) goes at once.
* **Ended by arrivals**: a wait ends as soon as it gained what the arrivals promise within the
  bound (``gained_enough``: ``bound / average gap - 1`` adds, rounded, at least one), not only by its
  timer. At 2,000 adds/s with a 1 ms bound the group goes at its second add, ~0.5 ms after its
  head, instead of at the timer: the timer's own slack (the event loop's timers count whole
  milliseconds and fire on the loop's cached time, so a 1 ms timer took 1-2 ms, and the group then
  started one pass later) was paid by every group, for adds that a steady stream had already
  brought. At higher rates the group still gathers about as many adds as the bound brings.
  **Only while the queued bytes are small** (at most ``EARLY_END_BYTES_MAX``, a modest rate of
  small adds): a group of large entries (a batching producer's, ~100 KiB each) keeps the whole
  wait, since ending it early there made smaller groups of large entries, more syncs for the same
  bytes and 3-10% less batched ingest (docs/performance.md, sessions 14 and 15), while what it
  gains (a fraction of a millisecond) is small beside such an entry's own write.

A wait is fruitless when no add arrived during it (the journal counts its queue before and after):
the adds a caller hands over together in one pass (a ledger's window) are all that comes until
their acks, however many they are.

Invariant: ``wait_ns`` returns a value in ``[0, bound_ns]``, and 0 whenever ``bound_ns`` is 0.
"""

from __future__ import annotations

from magnetar.base.invariant import invariant

GAP_EWMA_WEIGHT_INVERSE = 4
IDLE_GAP_BOUNDS = 4
#: Groups that go at once after a fruitless wait: first this many, then ``SKIPS_GROWTH`` times
#: more after each fruitless wait, at most ``SKIPS_MAX`` (a synchronous producer then pays the
#: wait on about one add in that many, well below its p99).
SKIPS_MIN = 4
SKIPS_GROWTH = 4
SKIPS_MAX = 256
#: Adds closer together than this are one burst (handed over in one loop pass): such an add
#: arriving while others are pending does not end a back-off.
BURST_GAP_NS = 50_000
#: A wait ends early (``gained_enough``) only while the queue holds at most this many bytes.
#: Measured where the check runs (docs/performance.md, "Session 15 (issue 22): the journal's
#: group wait by bytes ..."): e2e at 2,000 msg/s of 1 KiB queues 2.2 KiB (max 12 KiB); a heavy
#: unbatched producer's run of 32 adds ~35 KiB; the batched blast (100 KiB entries) 300 KiB to
#: 2 MiB. The bound lets the first two end early and keeps the whole wait for the third.
EARLY_END_BYTES_MAX = 128 * 1024


class GroupWaitPolicy:
    """How long the next group waits for more adds; fed every arrival and every wait's outcome."""

    __slots__ = ("_backoff", "_bound_ns", "_cap_ns", "_gap_avg_ns", "_last_arrival_ns", "_last_gap_ns", "_skips")

    def __init__(self, bound_ns: int) -> None:
        invariant(bound_ns >= 0, "the group wait bound is not negative")
        self._bound_ns = bound_ns
        self._cap_ns = IDLE_GAP_BOUNDS * bound_ns
        # No arrivals yet: the first add reads as one after an idle spell (it goes at once), and
        # the average starts from nothing, so a stream that follows it groups from its second add.
        self._gap_avg_ns = 0
        self._last_gap_ns = self._cap_ns
        self._last_arrival_ns: int | None = None
        self._skips = 0  # groups left that go at once after a fruitless wait
        self._backoff = SKIPS_MIN  # the skips the next fruitless wait sets

    @property
    def bound_ns(self) -> int:
        return self._bound_ns

    def arrived(self, now_ns: int, others_pending: bool) -> None:
        """An add arrived at ``now_ns``; ``others_pending``: another was queued or in flight."""
        last = self._last_arrival_ns
        self._last_arrival_ns = now_ns
        gap = self._cap_ns if last is None else min(now_ns - last, self._cap_ns)
        self._last_gap_ns = gap
        self._gap_avg_ns += (gap - self._gap_avg_ns) // GAP_EWMA_WEIGHT_INVERSE
        if others_pending and last is not None and now_ns - last >= BURST_GAP_NS:
            self._skips = 0
            self._backoff = SKIPS_MIN

    def wait_ns(self, now_ns: int, head_arrived_ns: int) -> int:
        """How long to wait before writing the group whose oldest add arrived at ``head_arrived_ns``
        (0: write it now)."""
        bound = self._bound_ns
        if bound == 0 or self._gap_avg_ns >= bound or self._last_gap_ns >= self._cap_ns:
            return 0
        if self._skips:
            self._skips -= 1
            return 0
        return max(0, bound - (now_ns - head_arrived_ns))

    def gained_enough(self, gained: int, queued_bytes: int) -> bool:
        """During a wait, ``gained`` adds arrived since it began and ``queued_bytes`` are queued:
        whether the group goes now. The average gap says how many adds the whole bound would bring
        (``bound / gap``, rounded, the head among them); once the others are here, waiting on gains
        nothing the arrivals promised. Never above ``EARLY_END_BYTES_MAX`` queued: large entries
        keep the whole wait (the group then ends by its timer or at ``journal_group_bytes_max``)."""
        if queued_bytes > EARLY_END_BYTES_MAX:
            return False
        gap = self._gap_avg_ns
        expected = (self._bound_ns + gap // 2) // gap - 1 if gap > 0 else 1
        return gained >= max(1, expected)

    def waited(self, gained: bool) -> None:
        """A wait ended; ``gained``: an add arrived during it."""
        if gained:
            self._backoff = SKIPS_MIN
            return
        self._skips = self._backoff
        self._backoff = min(SKIPS_GROWTH * self._backoff, SKIPS_MAX)
