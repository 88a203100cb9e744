"""When ``runtime.disk``'s ``append_and_sync_then`` writes and syncs on the event loop's own
thread instead of handing the write to a writer thread (split from ``runtime.disk``): the bounds
and ``InlinePace``, the decision per write and the recent inline syncs' average it rests on."""

from __future__ import annotations

from magnetar import faults

#: ``append_and_sync_then`` runs its write and sync on the event loop's own thread (no hand-off
#: to a writer thread) only for a write of at most this many bytes, ...
INLINE_WRITE_BYTES_MAX = 64 * 1024
#: ... while the recent synced writes on the loop's thread took at most this long on average (the
#: loop stalls for the whole sync: a slow disk's writes go to the threads, as at high rates) ...
INLINE_SYNC_NS_MAX = 250_000
#: ... and while they did not, one write in ``probe gap`` eligible ones still runs inline, to see
#: whether the disk is fast again: the gap starts at 1, or at one write per ``INLINE_SYNC_NS_MAX``
#: the slow write took (session 19), and doubles after every slow probe, up to this many writes (at
#: 2,000 groups/s about a tenth of a second), and is 1 again after a fast one.
INLINE_PROBE_GAP_MAX = 256


class InlinePace:
    """When a group's write and sync run inline, on the event loop's thread (one process-wide
    instance, used on the loop thread only). At a modest rate a journal group is one record: in a
    writer thread it costs a wake of that thread and a wake of the loop for the completion
    (besides the loop's wake for the request), ~27 us of CPU each on the bench VM
    (``bench/wake_cost.py``), against a sync of 40-250 us the loop then waits out itself. Inline
    only while no other ``append_and_sync_then`` is in flight (its completion not yet run: a
    higher rate's next group overlaps the previous one's sync on a writer thread, as before;
    a closed loop's lost completions keep it at the threads), the write is small, no zeros are
    being written to the file (``preallocate``), the recent
    synced writes were fast (``INLINE_SYNC_NS_MAX``, a moving average of 1/8), and neither fault
    point of the write is armed: an armed point may hold the write (a hang), which must hold that
    write, not the event loop. The same ``_write_job`` runs either way and passes the same
    points; only its thread differs.

    The average is of the inline writes only (session 17): a writer thread's own timing of the
    same write also holds its wait for the GIL once the system call returned (measured in one
    standalone at 2,000 msg/s, alternating the two paths: p50 344 us on a thread, 222 us inline),
    so fed with the threads' timings the average stayed above the bound once it got there, and
    every later group paid the hand-off (the lead's profile at the session start: the writes on
    the threads at 2,000 msg/s). While the average is above the bound, a probe (one write in
    ``probe_gap``, the gap doubling after each slow probe up to ``INLINE_PROBE_GAP_MAX``) runs
    inline; a fast probe ends the slow spell at once (the average becomes its time): this VM's
    slow syncs come in spells (a slow sync followed by another 72% of the time)."""

    __slots__ = ("inline_count", "pending", "probe_gap", "probe_in", "probes_count", "sync_ns")

    def __init__(self) -> None:
        self.pending = 0  # writes started whose completion the loop has not run yet
        self.sync_ns = 0  # moving average (1/8) of an inline write and sync's duration
        self.inline_count = 0  # writes run inline so far
        self.probe_gap = 1  # while the average is above the bound: one eligible write in this many goes inline
        self.probe_in = 0  # eligible writes until the next probe
        self.probes_count = 0  # inline writes made as probes so far

    def inline_ok(self, total: int, plain: bool, torn_point: str, unsynced_point: str) -> bool:
        """Whether the write starting now runs inline (counted as pending either way)."""
        self.pending += 1
        if (self.pending > 1 or not plain or total > INLINE_WRITE_BYTES_MAX
                or (torn_point and faults.tears(torn_point)) or (unsynced_point and faults.tears(unsynced_point))):
            return False
        if self.sync_ns > INLINE_SYNC_NS_MAX:
            if self.probe_in > 0:
                self.probe_in -= 1
                return False
            self.probes_count += 1
        self.inline_count += 1
        return True

    def finished(self, took_ns: int, inline: bool) -> None:
        """A write's completion: ``took_ns`` from its start to its sync's return on its thread."""
        self.pending -= 1
        if not inline:
            return  # a writer thread's timing includes its wait for the GIL (class docstring)
        slow = self.sync_ns > INLINE_SYNC_NS_MAX
        if slow and took_ns <= INLINE_SYNC_NS_MAX:
            self.sync_ns, self.probe_gap = took_ns, 1  # a fast probe: the slow spell is over
            return
        self.sync_ns += (took_ns - self.sync_ns) >> 3
        if self.sync_ns > INLINE_SYNC_NS_MAX:
            # A slow probe: wait twice as long for the next one. And at least one write per bound
            # the sync took (a 20 ms sync: 80 writes, ~40 ms at 2,000 groups/s): the loop stood
            # still for the whole sync, and in a slow spell the next one is slow too (session 17:
            # 72% of the time); probing again after one write held the loop once more per probe,
            # each stall ~40-100 messages at 2,000 msg/s, the e2e tail (session 19).
            gap = 2 * self.probe_gap if slow else self.probe_gap
            self.probe_gap = min(max(gap, took_ns // INLINE_SYNC_NS_MAX), INLINE_PROBE_GAP_MAX)
            self.probe_in = self.probe_gap
