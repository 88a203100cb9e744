"""``Bookie.add_entries``: a run of adds in one call (the local transport's ``add_run``). Every
entry gets the status ``add_entry`` would give it, exactly once; OK only after the journal fsync
covering it; the run's accepted records go to the journal as one part of one group."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from magnetar import faults
from magnetar.base.rng import SeededRng
from magnetar.protocol.bookie import EncodedEntry, Status
from magnetar.storage import BookieStatus

from .test_storage import KEY, SMALL, Node, entry, sim


class Answers:
    """What ``on_done(indexes, status)`` told, per index, and how many calls told it."""

    def __init__(self) -> None:
        self.by_index: dict[int, list[Status]] = {}
        self.calls = 0

    def __call__(self, indexes: Sequence[int], status: Status) -> None:
        self.calls += 1
        for index in indexes:
            self.by_index.setdefault(index, []).append(status)

    def statuses(self, count: int) -> list[Status | None]:
        """Each index's one answer (None: none yet); an index told twice fails the test."""
        for index, told in self.by_index.items():
            assert len(told) == 1, f"index {index} answered {told}"
        return [self.by_index[i][0] if i in self.by_index else None for i in range(count)]


def test_a_run_of_mixed_ledgers_is_one_journal_group_answered_after_its_fsync() -> None:
    async def scenario() -> None:
        node = Node()
        bookie = await node.boot()
        journal = bookie._journal
        assert journal is not None
        run = [entry(1, 0), entry(2, 0), entry(1, 1, lac=0), entry(2, 1, lac=0), entry(3, 0)]
        answers = Answers()
        before_groups = journal.groups_count
        bookie.add_entries(run, KEY, False, answers)
        assert answers.statuses(5) == [None] * 5  # nothing acknowledged before the fsync
        await bookie.add(entry(9, 0), KEY)  # a later add: answered after the run's group
        assert answers.statuses(5) == [Status.OK] * 5
        assert answers.calls == 1  # one answer for the whole run
        assert journal.groups_count - before_groups <= 2  # the run, then the later add at most
        for e in run:
            assert bookie.read_entry(e.ledger_id, e.entry_id).raw == e.raw
        assert bookie.read_lac(1) == (Status.OK, 0) and bookie.read_lac(2) == (Status.OK, 0)
        assert bookie.stats.adds_count == 6
        await bookie.stop()

    sim(scenario)


def test_a_refused_entry_is_answered_at_once_and_the_rest_of_the_run_goes_on() -> None:
    async def scenario() -> None:
        node = Node()
        bookie = await node.boot()
        assert await bookie.add(entry(7, 0), b"other key") is Status.OK  # ledger 7 has another key
        good = entry(1, 1)
        bad_digest = EncodedEntry(good.ledger_id, good.entry_id, good.lac, good.digest ^ 1, good.raw)
        too_large = EncodedEntry.build(1, 2, -1, b"x" * (SMALL.entry_bytes_max + 1))
        run = [entry(1, 0), bad_digest, too_large, entry(7, 1), entry(1, 3)]
        answers = Answers()
        bookie.add_entries(run, KEY, False, answers)
        # The refusals are told before the call returns, the accepted ones not yet.
        assert answers.statuses(5) == [None, Status.BAD_DIGEST, Status.TOO_LARGE, Status.UNAUTHORIZED, None]
        await bookie.add(entry(9, 0), KEY)
        assert answers.statuses(5) == [Status.OK, Status.BAD_DIGEST, Status.TOO_LARGE, Status.UNAUTHORIZED,
                                       Status.OK]
        assert bookie.read_entry(1, 0).status is Status.OK and bookie.read_entry(1, 3).status is Status.OK
        assert bookie.read_entry(1, 1).status is Status.NO_SUCH_ENTRY  # refused: not stored
        assert bookie.read_entry(7, 1).status is Status.NO_SUCH_ENTRY
        assert bookie.stats.add_rejects_count == 3
        await bookie.stop()

    sim(scenario)


def test_a_fenced_ledger_refuses_its_entries_of_a_run_unless_recovery() -> None:
    async def scenario() -> None:
        node = Node()
        bookie = await node.boot()
        assert await bookie.add(entry(5, 0), KEY) is Status.OK
        assert await bookie.fence(5, KEY) is Status.OK
        answers = Answers()
        bookie.add_entries([entry(5, 1), entry(6, 0), entry(5, 2)], KEY, False, answers)
        assert answers.statuses(3) == [Status.FENCED, None, Status.FENCED]
        recovery = Answers()
        bookie.add_entries([entry(5, 1), entry(5, 2)], KEY, True, recovery)  # recovery adds pass a fence
        await bookie.add(entry(9, 0), KEY)
        assert answers.statuses(3) == [Status.FENCED, Status.OK, Status.FENCED]
        assert recovery.statuses(2) == [Status.OK, Status.OK]
        # After a power cut the fence still holds, and the recovery adds are durable.
        node.power_cut()
        bookie = await node.boot()
        assert bookie.read_entry(5, 2).status is Status.OK
        again = Answers()
        bookie.add_entries([entry(5, 3)], KEY, False, again)
        assert again.statuses(1) == [Status.FENCED]
        await bookie.stop()

    sim(scenario)


def test_a_journal_failure_answers_every_accepted_entry_unavailable_and_fails_the_bookie() -> None:
    async def scenario() -> None:
        node = Node()
        bookie = await node.boot()
        answers = Answers()
        faults.arm("bookie.after_write_before_fsync", "error")
        try:
            bookie.add_entries([entry(1, 0), entry(1, 1), entry(1, 2)], KEY, False, answers)
            follow = await bookie.add(entry(2, 0), KEY)
        finally:
            faults.disarm_all()
        assert answers.statuses(3) == [Status.UNAVAILABLE] * 3
        assert follow is Status.UNAVAILABLE
        assert bookie.status is BookieStatus.FAILED
        later = Answers()
        bookie.add_entries([entry(1, 3)], KEY, False, later)  # a failed bookie refuses at once
        assert later.statuses(1) == [Status.UNAVAILABLE]
        await bookie.stop()

    sim(scenario)


def test_a_run_larger_than_a_group_is_split_and_every_entry_is_answered_once() -> None:
    config = dataclasses.replace(SMALL, journal_group_bytes_max=16 * 1024)

    async def scenario() -> None:
        node = Node(config)
        bookie = await node.boot()
        journal = bookie._journal
        assert journal is not None
        run = [entry(4, i, b"p" * 3000) for i in range(20)]  # ~60 KiB: 4 groups or more
        answers = Answers()
        before_groups = journal.groups_count
        bookie.add_entries(run, KEY, False, answers)
        # Another ledger's lone add may be answered before the run's last groups (the journal's
        # express slot, ``storage.journal_express``): wait for the run's answers themselves.
        await bookie.add(entry(9, 0), KEY)
        for _ in range(1000):
            if None not in answers.statuses(20):
                break
            await node.clock.sleep(0.001)  # virtual time (simulated clock): the next sync
        assert answers.statuses(20) == [Status.OK] * 20
        assert answers.calls >= 4
        assert journal.groups_count - before_groups >= 4  # no group holds much more than its bound
        await bookie.stop()

    sim(scenario)


def test_acknowledged_entries_of_a_run_survive_a_power_cut_an_unsynced_run_is_not_acknowledged() -> None:
    async def scenario() -> None:
        node = Node()
        bookie = await node.boot()
        acked = Answers()
        bookie.add_entries([entry(2, i) for i in range(10)], KEY, False, acked)
        await bookie.add(entry(9, 0), KEY)
        assert acked.statuses(10) == [Status.OK] * 10
        pending = Answers()
        bookie.add_entries([entry(2, i) for i in range(10, 20)], KEY, False, pending)  # queued, never synced
        node.power_cut()
        assert pending.statuses(10) == [None] * 10
        bookie = await node.boot()
        for i in range(10):
            assert bookie.read_entry(2, i).raw == entry(2, i).raw
        await bookie.stop()

    sim(scenario)


def test_each_entry_gets_the_status_add_entry_would_give_it() -> None:
    """A seeded mix of good, damaged, oversized, foreign-key and fenced-ledger entries, added as
    one run to one bookie and one by one to another (the same history): the same statuses, and
    the same entries stored. Control: the comparison notices a differing status."""
    rng = SeededRng(22)

    def one(i: int) -> tuple[EncodedEntry, bytes]:
        ledger = rng.randint(1, 4)
        kind = rng.randint(0, 9)
        e = entry(ledger, i)
        if kind == 0:
            return EncodedEntry(e.ledger_id, e.entry_id, e.lac, e.digest ^ 1, e.raw), KEY
        if kind == 1:
            return EncodedEntry.build(ledger, i, -1, b"x" * (SMALL.entry_bytes_max + 1)), KEY
        if kind == 2:
            return e, b"other key"
        return e, KEY

    mix = [one(i) for i in range(60)]

    async def scenario() -> None:
        singles, runs = Node(), Node()
        one_by_one, as_runs = await singles.boot(), await runs.boot()
        for bookie in (one_by_one, as_runs):  # every ledger exists with KEY; ledger 3 is fenced
            for ledger in range(1, 5):
                assert await bookie.add(entry(ledger, 1000), KEY) is Status.OK
            assert await bookie.fence(3, KEY) is Status.OK
        expected = [await one_by_one.add(e, key) for e, key in mix]
        got: list[Status | None] = []
        for key in (KEY, b"other key"):  # a run has one master key, as the ledger client sends
            indexes = [i for i, (_, k) in enumerate(mix) if k == key]
            answers = Answers()
            as_runs.add_entries([mix[i][0] for i in indexes], key, False, answers)
            await as_runs.add(entry(9, 0), KEY)
            got.extend(answers.statuses(len(indexes)))
            expected_of_key = [expected[i] for i in indexes]
            assert got[-len(indexes):] == expected_of_key
        assert {Status.FENCED, Status.BAD_DIGEST, Status.TOO_LARGE, Status.UNAUTHORIZED, Status.OK} <= set(expected)
        assert got != [Status.OK] * len(got)  # control: a status differs from a plain OK
        for e, _ in mix:
            assert as_runs.read_entry(e.ledger_id, e.entry_id).status is one_by_one.read_entry(
                e.ledger_id, e.entry_id).status
        await one_by_one.stop()
        await as_runs.stop()

    sim(scenario)


def test_a_bookie_not_writable_refuses_the_whole_run() -> None:
    async def scenario() -> None:
        node = Node()
        bookie = await node.boot()
        bookie.status = BookieStatus.READ_ONLY
        answers = Answers()
        bookie.add_entries([entry(1, 0), entry(1, 1)], KEY, False, answers)
        assert answers.statuses(2) == [Status.READ_ONLY, Status.READ_ONLY]
        bookie.status = BookieStatus.WRITABLE
        await bookie.stop()

    sim(scenario)


def test_several_runs_in_one_call_keep_their_own_answers_and_a_refused_run_harms_no_other() -> None:
    """``add_entries_runs`` (a local transport's runs of one loop pass, of many ledgers): each run
    is answered on its own, per ledger in order; a run with the wrong key is refused whole and the
    runs beside it (before and after) are stored and answered after the fsync."""
    async def scenario() -> None:
        node = Node()
        bookie = await node.boot()
        await bookie.add(entry(2, 0), KEY)  # ledger 2 belongs to KEY: a run with another key is refused
        first, refused, last, again = Answers(), Answers(), Answers(), Answers()
        bookie.add_entries_runs([
            ([entry(1, 0), entry(1, 1, lac=0)], KEY, False, first),
            ([entry(2, 1, lac=0)], b"wrong", False, refused),
            ([entry(3, 0)], KEY, False, last),
            ([entry(1, 2, lac=1)], KEY, False, again),  # ledger 1 again, behind its first run
        ])
        assert refused.statuses(1) == [Status.UNAUTHORIZED]  # at once
        assert first.statuses(2) == [None, None] and last.statuses(1) == [None]  # not before the fsync
        await bookie.add(entry(9, 0), KEY)  # a later add: answered after the runs' group
        assert first.statuses(2) == [Status.OK, Status.OK] and first.calls == 1
        assert last.statuses(1) == [Status.OK] and again.statuses(1) == [Status.OK]
        for ledger, entry_id in ((1, 0), (1, 1), (1, 2), (3, 0)):
            assert bookie.read_entry(ledger, entry_id).status is Status.OK
        assert bookie.read_entry(2, 1).status is Status.NO_SUCH_ENTRY
        assert bookie.stats.add_rejects_count == 1
        await bookie.stop()

    sim(scenario)


def test_the_journal_hears_each_runs_other_ledgers_from_the_bookie() -> None:
    """``add_entries_runs`` names each run's other ledgers to the journal (the journal no longer
    reads them back from the framing): while the runs are queued, a mixed run's other ledgers
    are counted (no lone add of theirs may pass it, ``journal_express``), a one-ledger run adds
    none; once written, none is left."""
    async def scenario() -> None:
        node = Node()
        bookie = await node.boot()
        journal = bookie._journal
        assert journal is not None
        mixed, alone = Answers(), Answers()
        bookie.add_entries_runs([
            ([entry(1, 0), entry(2, 0), entry(1, 1, lac=0), entry(3, 0)], KEY, False, mixed),
            ([entry(4, 0), entry(4, 1, lac=0)], KEY, False, alone),
        ])
        assert journal._load._in_mixed == {2: 1, 3: 1}
        await bookie.add(entry(9, 0), KEY)
        assert mixed.statuses(4) == [Status.OK] * 4 and alone.statuses(2) == [Status.OK] * 2
        assert journal._load._in_mixed == {} and not journal._load.mixed
        await bookie.stop()

    sim(scenario)


def test_runs_of_another_master_key_in_later_calls_are_journaled_with_their_own_key() -> None:
    """The bookie keeps the last master key's ADD record prefix between ``add_entries_runs`` calls
    (session 23: not made again per lone add). A later call's run of another key is framed with
    that key, and a call of the first key after it with the first key again: each ledger's
    journal records carry its own key (negative control: a prefix kept without checking its key
    frames ledger 2's record with ``key-a``)."""
    from magnetar.storage.journal import KIND_ADD, JournalPosition, replay

    async def scenario() -> None:
        node = Node()
        bookie = await node.boot()
        calls = ((1, b"key-a"), (2, b"key-b"), (3, b"key-a"), (4, b"key-a"))
        for ledger, key in calls:
            answers = Answers()
            bookie.add_entries_runs([([entry(ledger, 0)], key, False, answers)])
            await bookie.add(entry(9, ledger - 1, lac=ledger - 2), KEY)  # answered after that run's group
            assert answers.statuses(1) == [Status.OK]
        await bookie.stop()
        replayed = await replay(node.disk, JournalPosition(0, 0))
        keys = {EncodedEntry.parse(record.entry_raw).ledger_id: record.master_key
                for _, record in replayed.records if record.kind == KIND_ADD}
        assert keys == {1: b"key-a", 2: b"key-b", 3: b"key-a", 4: b"key-a", 9: KEY}

    sim(scenario)
