"""A lone record beside a busy ledger gets a journal group of its own beside the full slots
(``storage.journal_express``, issue 22 latency isolation), and its answer runs in the loop pass
its group's answers join (``ReplyLanes.run_lone``). Durability and order stay those of any group:
answered only once every earlier group synced, per-ledger order in the file, replay unchanged.
On the simulated loop and disk (virtual time); each behaviour has a control with the lever off."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pytest

from magnetar import faults
from magnetar.base.errors import ClosedError
from magnetar.base.io import Bytes
from magnetar.base.rng import SeededRng
from magnetar.sim import SimDisk, SimDiskConfig, run
from magnetar.storage.journal import (
    KIND_ADD,
    Journal,
    JournalPosition,
    add_record,
    add_record_from,
    add_record_prefix,
    journal_path,
    replay,
)
from magnetar.storage.journal_express import LedgerLoad
from magnetar.storage.journal_replies import NO_LEDGER, GroupReplies, ReplyLanes
from tests.storage.harness import CONFIG, KEY, Parts, entry

HEAVY, LIGHT, OTHER = 7, 9, 11  # ledger ids
SYNC_US = 200


def _run_parts(raws: Iterable[bytes]) -> list[Bytes]:
    """The parts of one ``submit_run``: each entry's add-record framing, then the entry."""
    prefix, prefix_crc = add_record_prefix(KEY)
    parts: list[Bytes] = []
    for raw in raws:
        parts += [add_record_from(prefix, prefix_crc, raw), raw]
    return parts


@pytest.fixture(autouse=True)
def _clean() -> Any:
    faults.disarm_all()
    yield
    faults.disarm_all()


class Trace:
    """Submits adds and records, per answer, the virtual time from its submit, whether its bytes
    were durable, and which groups had their sync completion seen by then (every group is
    watched through the journal file's ``append_and_sync_then``)."""

    def __init__(self, parts: Parts, journal: Journal) -> None:
        self.parts, self.journal = parts, journal
        self.latency_us: dict[tuple[int, int], float] = {}
        self.durable: dict[tuple[int, int], bool] = {}
        self.order: list[tuple[int, int]] = []
        self.group_offsets: list[int] = []  # start offset of each group, in start order
        self.synced_offsets: set[int] = set()
        self.record_offset: dict[tuple[int, int], int] = {}
        self.unsynced_earlier: dict[tuple[int, int], int] = {}  # answer -> earlier groups not synced
        file = journal._file
        assert file is not None
        journal._file = _Watched(file, self)

    def now_us(self) -> float:
        return self.parts.clock.monotonic_ns() / 1000

    def submit(self, ledger: int, entry_id: int) -> None:
        raw = entry(ledger, entry_id).raw
        start = self.now_us()

        def done(error: BaseException | None) -> None:
            assert error is None
            key = (ledger, entry_id)
            self.latency_us[key] = self.now_us() - start
            self.order.append(key)
            file = self.parts.disk.open(journal_path(self.journal._file_id), create=False)
            at = file.read_at(0, file.size()).find(raw)
            self.record_offset[key] = at
            self.durable[key] = at >= 0 and file.durable_size() >= at + len(raw)
            self.unsynced_earlier[key] = sum(1 for o in self.group_offsets if o < at and o not in self.synced_offsets)

        self.journal.submit(add_record(KEY, raw), done)

    async def settle(self, count: int) -> None:
        for _ in range(100_000):
            if len(self.order) >= count:
                return
            await self.parts.clock.sleep(0.00005)  # virtual time (simulated clock/loop): no real wait
        raise AssertionError(f"{len(self.order)} of {count} answered")


class _Watched:
    """The journal's file, with every group's start offset and sync completion noted."""

    def __init__(self, file: Any, trace: Trace) -> None:
        self._file, self._trace = file, trace

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)

    def append_and_sync_then(self, parts: Sequence[Bytes], done: Callable[[BaseException | None], None],
                             **kw: str) -> int:
        holder: list[int] = []
        trace = self._trace

        def seen(error: BaseException | None) -> None:
            trace.synced_offsets.add(holder[0])
            done(error)

        offset = int(self._file.append_and_sync_then(parts, seen, **kw))
        holder.append(offset)
        trace.group_offsets.append(offset)
        return offset


def _parts(rng_seed: int | None = None, **changes: Any) -> Parts:
    if rng_seed is None:
        disk = SimDisk(SimDiskConfig(sync_latency_us_min=SYNC_US, sync_latency_us_max=SYNC_US))
    else:
        disk = SimDisk(SimDiskConfig(sync_latency_us_min=100, sync_latency_us_max=2000), rng=SeededRng(rng_seed))
    return Parts(dataclasses.replace(CONFIG, journal_group_wait_ms_max=0, **changes), disk=disk)


def _beside_full_slots(express_max: int | None = None, lone_replies: bool = True, rng_seed: int | None = None,
                       light_adds: int = 1) -> tuple[Trace, Journal]:
    """Two heavy groups in flight (both ordinary slots taken), more heavy adds queued behind
    them, then ``light_adds`` adds of the light ledger; the heavy ledger keeps adding."""

    async def scenario() -> tuple[Trace, Journal]:
        parts = _parts(rng_seed)
        journal = await parts.start()
        if express_max is not None:
            journal.express_groups_max = express_max
        journal.lone_replies = lone_replies
        trace = Trace(parts, journal)
        heavy = 0
        for _ in range(2):  # one group per loop pass: both slots taken
            for _ in range(10):
                trace.submit(HEAVY, heavy)
                heavy += 1
            await parts.clock.sleep(0)
        assert len(journal._inflight) == 2
        for _ in range(10):  # queued behind the full slots
            trace.submit(HEAVY, heavy)
            heavy += 1
        for light in range(light_adds):
            trace.submit(LIGHT, light)
        for _ in range(6):  # the busy ledger goes on adding while the light add waits
            await parts.clock.sleep(SYNC_US / 4 / 1e6)
            for _ in range(10):
                trace.submit(HEAVY, heavy)
                heavy += 1
        await trace.settle(heavy + light_adds)
        await journal.stop()
        return trace, journal

    return run(scenario())


def test_a_lone_add_beside_full_slots_is_answered_within_about_one_sync() -> None:
    trace, journal = _beside_full_slots()
    assert journal.express_groups_count == 1
    # Its group went out beside the two heavy ones: answered once they and it synced, not after
    # a third sync (the first heavy group's, then a group of its own behind the second).
    assert trace.latency_us[(LIGHT, 0)] < 1.5 * SYNC_US
    assert trace.durable[(LIGHT, 0)] and trace.unsynced_earlier[(LIGHT, 0)] == 0
    heavy = [e for ledger, e in trace.order if ledger == HEAVY]
    assert heavy == sorted(heavy)
    assert all(trace.durable.values()) and not any(trace.unsynced_earlier.values())


def test_control_without_the_express_slot_the_lone_add_waits_for_two_syncs() -> None:
    trace, journal = _beside_full_slots(express_max=0)
    assert journal.express_groups_count == 0
    assert trace.latency_us[(LIGHT, 0)] >= 2 * SYNC_US  # the first check above fails this way
    assert all(trace.durable.values())


def test_a_ledger_with_two_adds_queued_is_not_lone() -> None:
    # The light ledger's second add is queued behind its first: neither may pass the other, and
    # the first alone is lone only until the second arrives (both are then ordinary records).
    trace, journal = _beside_full_slots(light_adds=2)
    assert journal.express_groups_count == 0
    light = [key for key in trace.order if key[0] == LIGHT]
    assert light == [(LIGHT, 0), (LIGHT, 1)]
    assert trace.record_offset[(LIGHT, 0)] < trace.record_offset[(LIGHT, 1)]


def test_a_busy_ledger_alone_never_takes_the_express_slot() -> None:
    async def scenario() -> int:
        parts = _parts()
        journal = await parts.start()
        trace = Trace(parts, journal)
        for round_ in range(20):
            for entry_id in range(round_ * 10, round_ * 10 + 10):
                trace.submit(HEAVY, entry_id)
            await parts.clock.sleep(SYNC_US / 3 / 1e6)
        await trace.settle(200)
        await journal.stop()
        return journal.express_groups_count

    assert run(scenario()) == 0


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_with_random_sync_times_no_answer_runs_before_an_earlier_group_synced(seed: int) -> None:
    # Sync times of 0.1-2 ms: an express group's sync often returns before the heavy groups'
    # ahead of it; it is still answered only after theirs (a crash tearing an earlier group
    # would make replay stop before it), and replay finds every ledger's records in order.
    trace, journal = _beside_full_slots(rng_seed=seed)
    assert not any(trace.unsynced_earlier.values())
    assert all(trace.durable.values())
    assert journal.express_groups_count == 1


def test_replay_after_express_groups_has_each_ledger_in_submission_order() -> None:
    async def scenario() -> dict[int, list[int]]:
        parts = _parts()
        journal = await parts.start()
        trace = Trace(parts, journal)
        heavy = light = 0
        for round_ in range(18):
            for _ in range(10):
                trace.submit(HEAVY, heavy)
                heavy += 1
            await parts.clock.sleep(0)  # one loop pass: the round's group starts if a slot is free
            if round_ % 3 == 2:  # both slots taken, one round queued: a synchronous producer's add
                trace.submit(LIGHT, light)
                light += 1
                for _ in range(1000):
                    if (LIGHT, light - 1) in trace.latency_us:
                        break
                    await parts.clock.sleep(0.00005)  # virtual time (simulated clock/loop)
        await trace.settle(heavy + light)
        groups = journal.express_groups_count
        await journal.stop()
        replayed = await replay(parts.disk, JournalPosition(0, 0))
        by_ledger: dict[int, list[int]] = {}
        for _, record in replayed.records:
            assert record.kind == KIND_ADD
            ledger = int.from_bytes(record.entry_raw[:8], "big")
            by_ledger.setdefault(ledger, []).append(int.from_bytes(record.entry_raw[8:16], "big"))
        assert groups == 6
        return by_ledger

    by_ledger = run(scenario())
    assert by_ledger[HEAVY] == list(range(180))
    assert by_ledger[LIGHT] == list(range(6))


def _beside_a_mixed_run(how: str) -> tuple[list[tuple[int, int]], int]:
    """A run of the heavy ledger that also holds an add of the light ledger, queued behind the
    full slots (submitted ``how``: naming its other ledgers, without its ledger, or claiming one
    ledger), then the light ledger's next add. The answers' order and the express groups."""

    async def scenario() -> tuple[list[tuple[int, int]], int]:
        parts = _parts()
        journal = await parts.start()
        trace = Trace(parts, journal)
        for entry_id in range(20):
            trace.submit(HEAVY, entry_id)
            if entry_id == 9:
                await parts.clock.sleep(0)
        await parts.clock.sleep(0)
        mixed = _run_parts([entry(HEAVY, 20).raw, entry(LIGHT, 0).raw, entry(HEAVY, 21).raw])
        answered: list[int] = []
        size = sum(len(p) for p in mixed)
        if how == "others":
            journal.submit_run(mixed, size, lambda error: answered.append(1), HEAVY, {LIGHT})
        elif how == "no ledger":
            journal.submit_run(mixed, size, lambda error: answered.append(1))
        else:
            journal.submit_run(mixed, size, lambda error: answered.append(1), HEAVY)
        trace.submit(LIGHT, 1)
        await trace.settle(21)
        await journal.stop()
        return trace.order, journal.express_groups_count

    return run(scenario())


@pytest.mark.parametrize("how", ["others", "no ledger"])
def test_a_lone_add_never_passes_a_queued_mixed_run_holding_its_ledger(how: str) -> None:
    # Named by its submitter (``Bookie`` knows each entry's ledger), or unknown (a run submitted
    # without its ledger blocks every express group while queued): the light add is not lone.
    order, groups = _beside_a_mixed_run(how)
    assert groups == 0
    assert (LIGHT, 1) in order


def test_control_a_mixed_run_claimed_as_one_ledgers_lets_the_light_add_pass() -> None:
    # Control for the test above: the same run submitted as the heavy ledger's alone; the light
    # add is then lone and takes the express slot, ahead of the queued record of its ledger.
    _order, groups = _beside_a_mixed_run("one ledger")
    assert groups == 1


def test_runs_of_several_ledgers_are_one_submission_answered_per_lane() -> None:
    # ``submit_runs``: a heavy ledger's run of 32 and two light ledgers' adds handed over in one
    # call are one arrival for the group wait, share one group, and each run is answered in its
    # own lane (the light ones first) after the group's sync, with every byte durable.
    async def scenario() -> tuple[list[str], int, int, list[bool]]:
        parts = _parts()
        journal = await parts.start()
        events: list[str] = []
        durable: list[bool] = []
        raws = {"heavy": [entry(HEAVY, i).raw for i in range(32)], "light": [entry(LIGHT, 0).raw],
                "other": [entry(OTHER, 0).raw]}

        def done(name: str, error: BaseException | None) -> None:
            assert error is None
            events.append(name)
            file = parts.disk.open(journal_path(journal._file_id), create=False)
            data = file.read_at(0, file.size())
            durable.extend(file.durable_size() >= data.find(raw) + len(raw) for raw in raws[name])

        arrivals = journal._arrivals
        runs = []
        for name, ledger in (("heavy", HEAVY), ("light", LIGHT), ("other", OTHER)):
            run_parts = _run_parts(raws[name])
            runs.append((run_parts, sum(len(p) for p in run_parts), functools.partial(done, name), ledger,
                         len(raws[name]), frozenset[int]()))
        journal.submit_runs(runs)
        gained = journal._arrivals - arrivals
        for _ in range(1000):
            if len(events) == 3:
                break
            await parts.clock.sleep(0.00005)  # virtual time (simulated clock/loop)
        groups = journal.groups_count
        await journal.stop()
        return events, groups, gained, durable

    events, groups, arrivals, durable = run(scenario())
    assert events == ["light", "other", "heavy"]
    assert groups == 1 and arrivals == 1
    assert len(durable) == 34 and all(durable)


def test_runs_submitted_to_a_stopped_journal_are_each_refused() -> None:
    async def scenario() -> list[BaseException | None]:
        parts = _parts()
        journal = await parts.start()
        await journal.stop()
        errors: list[BaseException | None] = []
        run_parts = _run_parts([entry(HEAVY, 0).raw])
        journal.submit_runs([(run_parts, sum(len(p) for p in run_parts), errors.append, HEAVY, 1, frozenset[int]()),
                             (run_parts, sum(len(p) for p in run_parts), errors.append, LIGHT, 1, frozenset[int]())])
        return errors

    errors = run(scenario())
    assert len(errors) == 2 and all(isinstance(error, ClosedError) for error in errors)


def test_ledger_load_counts_queued_and_in_flight_items_and_mixed_runs() -> None:
    load = LedgerLoad()
    assert load.queued(LIGHT) and load.lone_due and load.is_lone(LIGHT)
    assert not load.queued(LIGHT) and not load.is_lone(LIGHT)  # two of it: neither is lone
    load.left([(LIGHT, 1)])
    assert load.is_lone(LIGHT)
    assert not load.queued(NO_LEDGER) and not load.is_lone(NO_LEDGER)
    load.queued_mixed(1, {LIGHT})
    assert not load.is_lone(LIGHT) and load.is_mixed(1)
    load.taken(1)
    assert load.is_lone(LIGHT) and not load.mixed
    load.queued_mixed(2, None)  # unreadable: no express group while it is queued
    assert load.queued(OTHER) and not load.is_lone(OTHER)
    load.taken(2)
    assert load.is_lone(OTHER)
    load.clear()
    assert not load.is_lone(OTHER) and not load.mixed


def _slice_then_lone(lone_replies: bool) -> list[str]:
    """A heavy group of 100 adds and a light group of one in flight together, their syncs
    returning in the same loop pass: the heavy group's answers are sliced (32 per pass) and a
    slice is due when the light group's answers join. The events: answers, and a tick per loop
    pass from the first answer on (as socket reads would be)."""

    async def scenario() -> list[str]:
        parts = _parts()
        journal = await parts.start()
        journal.lone_replies = lone_replies
        events: list[str] = []

        def tick() -> None:
            if "light" not in events:
                events.append("tick")
                asyncio.get_running_loop().call_soon(tick)

        def heavy_done(error: BaseException | None) -> None:
            assert error is None
            if not events:
                asyncio.get_running_loop().call_soon(tick)
            events.append("heavy")

        def light_done(error: BaseException | None) -> None:
            assert error is None
            events.append("light")

        for entry_id in range(100):
            journal.submit(add_record(KEY, entry(HEAVY, entry_id).raw), heavy_done)
        await parts.clock.sleep(0)  # one loop pass: the heavy group starts
        journal.submit(add_record(KEY, entry(LIGHT, 0).raw), light_done)  # its own group, next pass
        for _ in range(100_000):
            if "light" in events and events.count("heavy") == 100:
                break
            await parts.clock.sleep(0.00005)  # virtual time (simulated clock/loop)
        assert journal.groups_count == 2
        await journal.stop()
        return events

    return run(scenario())


def test_a_lone_answer_runs_when_its_group_joins_even_while_a_slice_is_due() -> None:
    # The light add's group syncs while the heavy group's answers are still being sliced (the
    # heavy ledger answers in the slow disk's time anyway): it is answered from the completion
    # itself, before the slice that is due, with the lever; after that slice without it.
    lone = ReplyLanes()
    group = GroupReplies(3)
    ran: list[int] = []
    lone.add([lambda e: ran.append(1), lambda e: ran.append(2), lambda e: ran.append(3)],
             [(HEAVY, 1), (HEAVY, 1), (LIGHT, 1)], group)
    assert lone.lone_waiting
    assert lone.run_lone(32) == 1 and ran == [3] and group.unanswered == 2
    assert not lone.lone_waiting
    assert lone.run_lone(32) == 0  # the heavy lane holds two: it waits for ``run``
    # A lane of one run of many records is not a lone answer (it is sliced as usual).
    runs = ReplyLanes()
    runs.add([lambda e: ran.append(4)], [(HEAVY, 32)], GroupReplies(1))
    assert runs.run_lone(32) == 0


def _ticks_before_light(events: list[str]) -> int:
    return events[: events.index("light")].count("tick")


def test_the_journal_answers_a_lone_add_in_the_pass_its_sync_is_seen_and_the_control_a_pass_later() -> None:
    events = _slice_then_lone(lone_replies=True)
    assert events.count("heavy") == 100
    assert events.index("light") < 100  # while the heavy group's slices are still due
    assert _ticks_before_light(events) == 0  # in the pass its sync was seen
    control = _slice_then_lone(lone_replies=False)
    assert control.count("heavy") == 100
    assert _ticks_before_light(control) >= 1  # the slice due in the next pass


def test_a_busy_ledgers_run_counts_its_records_when_lanes_are_ordered() -> None:
    # One reply answering a run of 32 adds, then a light add's reply, in one group: the light
    # lane (1 record) goes first. Ordered by replies (1 each) the run went first, appearing first,
    # and took the whole slice: the light answer waited a loop pass (the session-14 trace).
    lanes = ReplyLanes()
    ran: list[str] = []
    lanes.add([lambda e: ran.append("run"), lambda e: ran.append("light")], [(HEAVY, 32), (LIGHT, 1)],
              GroupReplies(2))
    assert lanes.run(32) == 33
    assert ran == ["light", "run"]


def test_the_journal_answers_a_light_add_before_a_busy_run_in_its_group() -> None:
    async def scenario() -> list[str]:
        parts = _parts()
        journal = await parts.start()
        run_parts = _run_parts([entry(HEAVY, entry_id).raw for entry_id in range(32)])
        events: list[str] = []
        journal.submit_run(run_parts, sum(len(p) for p in run_parts), lambda e: events.append("run"), HEAVY)
        journal.submit(add_record(KEY, entry(LIGHT, 0).raw), lambda e: events.append("light"))
        for _ in range(1000):
            if len(events) == 2:
                break
            await parts.clock.sleep(0.00005)  # virtual time (simulated clock/loop)
        assert journal.groups_count == 1
        await journal.stop()
        return events

    assert run(scenario()) == ["light", "run"]


def _note(answers: list[int], run_id: int, error: BaseException | None) -> None:
    assert error is None
    answers.append(run_id)


def _behind_a_backlog(express_max: int | None) -> dict[int, float]:
    """One ordinary slot, groups of 16 KiB, a busy ledger's twelve runs of 8 KiB queued (six
    groups); then a light ledger's add (the express slot takes it) and, a pass later, another
    light ledger's add while the express slot is busy (the next express group takes it). Each
    light add's time to its answer, us."""

    async def scenario() -> dict[int, float]:
        parts = _parts(journal_group_bytes_max=16 * 1024, journal_groups_in_flight_max=1)
        journal = await parts.start()
        if express_max is not None:
            journal.express_groups_max = express_max
        answered: dict[int, float] = {}
        heavy_answers: list[int] = []
        for run_id in range(12):
            run_parts = _run_parts([entry(HEAVY, entry_id, b"h" * 960).raw
                                    for entry_id in range(run_id * 8, run_id * 8 + 8)])
            journal.submit_run(run_parts, sum(len(p) for p in run_parts),
                               functools.partial(_note, heavy_answers, run_id), HEAVY)
        await parts.clock.sleep(0)  # one loop pass: the first group starts

        def light(ledger: int) -> None:
            start = parts.clock.monotonic_ns()
            journal.submit(add_record(KEY, entry(ledger, 0).raw),
                           lambda e: answered.__setitem__(ledger, (parts.clock.monotonic_ns() - start) / 1000))

        light(LIGHT)
        await parts.clock.sleep(0)
        light(OTHER)
        for _ in range(100_000):
            if len(answered) == 2 and len(heavy_answers) == 12:
                break
            await parts.clock.sleep(0.00005)  # virtual time (simulated clock/loop)
        assert heavy_answers == list(range(12))
        await journal.stop()
        return answered

    return run(scenario())


def test_a_lone_add_rides_in_the_next_group_not_behind_a_busy_ledgers_backlog() -> None:
    answered = _behind_a_backlog(express_max=None)
    assert answered[LIGHT] < 1.5 * SYNC_US  # the express slot
    assert answered[OTHER] < 3 * SYNC_US  # the next express group, ahead of the backlog
    control = _behind_a_backlog(express_max=0)  # lone records in queue order: behind six groups
    assert control[LIGHT] >= 5 * SYNC_US and control[OTHER] >= 5 * SYNC_US


def test_a_run_of_several_records_is_not_lone_even_with_nothing_of_its_ledger_in_flight() -> None:
    # A partitioned heavy producer: each of its ledgers often has nothing in flight when its next
    # run of adds arrives. Such a run is not a light ledger's lone record: no express group.
    async def scenario() -> int:
        parts = _parts()
        journal = await parts.start()
        trace = Trace(parts, journal)
        heavy = 0
        for _ in range(2):  # both ordinary slots taken
            for _ in range(10):
                trace.submit(HEAVY, heavy)
                heavy += 1
            await parts.clock.sleep(0)
        run_parts = _run_parts([entry(OTHER, entry_id).raw for entry_id in range(8)])
        answered: list[int] = []
        journal.submit_run(run_parts, sum(len(p) for p in run_parts), lambda e: answered.append(1), OTHER)
        await trace.settle(heavy)
        for _ in range(1000):
            if answered:
                break
            await parts.clock.sleep(0.00005)  # virtual time (simulated clock/loop)
        await journal.stop()
        return journal.express_groups_count

    assert run(scenario()) == 0
    # Control: the same ledger's one record in that place takes the express slot.
    _trace, journal = _beside_full_slots()
    assert journal.express_groups_count == 1


STREAM_SYNC_US = 500


def _light_beside_a_stream(lone_goes_at_once: bool) -> tuple[list[float], Trace]:
    """A busy ledger's add every 100 us (virtual) with 1 ms group waits and 500 us syncs; a light
    ledger's add whenever one heavy group is in flight, nothing is queued and no wait runs (the
    moment a look would start a wait for the light add), every 3 ms. The light adds' latencies, us."""

    async def scenario() -> tuple[list[float], Trace]:
        parts = Parts(dataclasses.replace(CONFIG, journal_group_wait_ms_max=1),
                      disk=SimDisk(SimDiskConfig(sync_latency_us_min=STREAM_SYNC_US, sync_latency_us_max=STREAM_SYNC_US)))
        journal = await parts.start()
        journal.lone_goes_at_once = lone_goes_at_once
        trace = Trace(parts, journal)
        heavy = light = 0
        last_light = 0
        for step in range(400):
            trace.submit(HEAVY, heavy)
            heavy += 1
            for _ in range(10):
                await parts.clock.sleep(0.00001)  # virtual time (simulated clock/loop)
                now = parts.clock.monotonic_ns()
                if (step > 20 and light < 8 and now - last_light >= 3_000_000 and not journal._queue
                        and not journal._grouping and len(journal._inflight) == 1):
                    trace.submit(LIGHT, light)
                    light, last_light = light + 1, now
        await trace.settle(heavy + light)
        await journal.stop()
        return [trace.latency_us[(LIGHT, i)] for i in range(light)], trace

    return run(scenario())


def test_a_lone_add_beside_another_ledgers_group_in_flight_does_not_wait_for_its_adds() -> None:
    # The group wait would gather the busy ledger's adds (at 100 us apart it ends after ~9 of
    # them): the light add goes at once, in an express group (no ordinary slot taken from the
    # busy ledger), and is answered after its own sync.
    latencies, trace = _light_beside_a_stream(lone_goes_at_once=True)
    assert len(latencies) == 8 and trace.journal.express_groups_count >= 8
    assert max(latencies) <= STREAM_SYNC_US + 10  # its own sync, no wait
    assert all(trace.durable.values())
    assert [e for ledger, e in trace.order if ledger == HEAVY] == list(range(400))
    # Control: with the rule off the same light adds wait for the busy ledger's adds.
    control, control_trace = _light_beside_a_stream(lone_goes_at_once=False)
    assert min(control) >= STREAM_SYNC_US + 500 and control_trace.journal.express_groups_count == 0
