"""Latency isolation in the journal (issue 22): a lone record (a synchronous producer's add: the
only one of its ledger queued, none in flight or unanswered) beside a busy ledger's stream does
not pay the group wait that gathers the stream's adds; the stream's own adds still wait, a lone
ledger's paced stream still groups, and nothing is answered before the sync covering it.
On the simulated loop and disk (virtual time: sync latency 200 us, group wait bound 1 ms)."""

from __future__ import annotations

import dataclasses

from magnetar.sim import SimDisk, SimDiskConfig, run
from magnetar.storage.journal import Journal, add_record, journal_path
from tests.storage.harness import CONFIG, KEY, Parts, entry

MS = 1_000_000
HEAVY, LIGHT = 2, 1
STEP_S = 0.00001  # 10 virtual microseconds


@dataclasses.dataclass
class Outcome:
    latency_ns: int  # of the record submitted beside the stream's add
    durable: bool  # its bytes were synced when it was answered
    lone_skips: int
    waits: int


def _scenario(beside_ledger: int, beside_busy: bool) -> Outcome:
    """A steady stream of ``HEAVY`` adds (one every 100 us); once warm, at a moment when the
    journal task is free to start a group (a group in flight, nothing queued, no wait running),
    one more ``HEAVY`` add and an add of ``beside_ledger`` are submitted in the same pass. With
    ``beside_busy``, ``beside_ledger`` has another add queued just before (so it is not lone)."""

    async def scenario() -> Outcome:
        disk = SimDisk(SimDiskConfig(sync_latency_us_min=200, sync_latency_us_max=200))
        parts = Parts(dataclasses.replace(CONFIG, journal_group_wait_ms_max=1), disk=disk)
        journal = await parts.start()
        answered: list[int] = []
        result: dict[str, int | bool] = {}

        def submit(ledger: int, entry_id: int, probe: bool = False) -> None:
            raw = entry(ledger, entry_id).raw
            submitted_ns = parts.clock.monotonic_ns()

            def done(error: BaseException | None) -> None:
                assert error is None
                answered.append(ledger)
                if probe:
                    file = parts.disk.open(journal_path(journal._file_id), create=False)
                    at = file.read_at(0, file.size()).find(raw)
                    result["durable"] = at >= 0 and file.durable_size() >= at + len(raw)
                    result["latency"] = parts.clock.monotonic_ns() - submitted_ns

            journal.submit(add_record(KEY, raw), done)

        heavy_id = 0
        for _ in range(30):  # warm: the policy sees a steady stream and waits for it
            await parts.clock.sleep(0.0001)  # virtual time (simulated clock/loop): no real wait
            heavy_id += 1
            submit(HEAVY, heavy_id)
        for _ in range(1000):  # bounded: the moment comes within a group's wait and sync
            if journal._inflight and not journal._queue and not journal._grouping:
                break
            await parts.clock.sleep(STEP_S)  # virtual time (simulated clock/loop): no real wait
        assert journal._inflight and not journal._queue and not journal._grouping
        waits_before = journal.waits_count
        heavy_id += 1
        submit(HEAVY, heavy_id)
        if beside_busy:
            submit(beside_ledger, 1000)
        submit(beside_ledger, 1001, probe=True)
        total = heavy_id + (2 if beside_busy else 1)
        for _ in range(2000):  # bounded: every add is answered within a few groups
            if len(answered) >= total:
                break
            await parts.clock.sleep(STEP_S)  # virtual time (simulated clock/loop): no real wait
        await journal.stop()
        return Outcome(int(result["latency"]), bool(result["durable"]), journal.lone_skips_count,
                       journal.waits_count - waits_before)

    return run(scenario())


def test_a_lone_record_beside_a_busy_stream_skips_the_group_wait() -> None:
    outcome = _scenario(LIGHT, beside_busy=False)
    assert outcome.durable
    assert outcome.lone_skips == 1
    # No wait: the group goes now, behind the one in flight (one sync each), well under the bound.
    assert outcome.latency_ns < MS // 2


def test_control_a_second_add_of_the_busy_ledger_waits() -> None:
    # Negative control: the same moment, the add beside the stream's is the stream's own.
    outcome = _scenario(HEAVY, beside_busy=False)
    assert outcome.durable
    assert outcome.lone_skips == 0 and outcome.waits >= 1
    assert outcome.latency_ns >= MS // 2


def test_control_a_ledger_with_two_adds_queued_is_not_lone() -> None:
    # Negative control: the light ledger has another add queued: its adds wait like the stream's.
    outcome = _scenario(LIGHT, beside_busy=True)
    assert outcome.durable
    assert outcome.lone_skips == 0 and outcome.waits >= 1
    assert outcome.latency_ns >= MS // 2


def test_a_paced_stream_of_one_ledger_still_groups() -> None:
    # Alone, one add at a time (none in flight when the next arrives), no busy ledger beside it:
    # the wait gathers the stream's adds as before, nothing is skipped.
    async def scenario() -> tuple[int, int, int]:
        disk = SimDisk(SimDiskConfig(sync_latency_us_min=200, sync_latency_us_max=200))
        parts = Parts(dataclasses.replace(CONFIG, journal_group_wait_ms_max=1), disk=disk)
        journal: Journal = await parts.start()
        answered: list[int] = []
        before = journal.groups_count
        for entry_id in range(1, 25):
            await parts.clock.sleep(0.00025)  # virtual time (simulated clock/loop): no real wait
            journal.submit(add_record(KEY, entry(LIGHT, entry_id).raw), lambda error: answered.append(1))
        for _ in range(1000):  # bounded
            if len(answered) >= 24:
                break
            await parts.clock.sleep(STEP_S)  # virtual time (simulated clock/loop): no real wait
        outcome = (journal.groups_count - before, journal.waits_count, journal.lone_skips_count)
        await journal.stop()
        return outcome

    groups, waits, skips = run(scenario())
    assert skips == 0 and waits >= 5 and groups <= 8
