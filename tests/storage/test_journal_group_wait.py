"""Group commit with ``journal_group_wait_ms_max`` (issue 22, a modest steady rate): adds that
arrive within the wait share one group (one write, one sync), no group waits longer than the
bound, callbacks run in submission order, and none before the sync that covers its record.
On the simulated loop and disk (virtual time: sync latency 200 us)."""

from __future__ import annotations

import dataclasses

import pytest

from magnetar.faults import breaks
from magnetar.sim import run
from magnetar.storage.journal import Journal, add_record, journal_path
from tests.storage.harness import CONFIG, KEY, Parts, entry

SYNC_NS = 200_000  # SimDiskConfig's sync latency without an rng


class Acks:
    """Submits adds to a journal; records, per ack, its order, its time and whether the bytes of
    its record were durable (on the simulated disk) when it ran."""

    def __init__(self, parts: Parts, journal: Journal) -> None:
        self.parts, self.journal = parts, journal
        self.order: list[int] = []
        self.acked_ns: dict[int, int] = {}
        self.submitted_ns: dict[int, int] = {}
        self.durable: dict[int, bool] = {}

    def submit(self, entry_id: int) -> None:
        raw = entry(1, entry_id).raw
        self.submitted_ns[entry_id] = self.parts.clock.monotonic_ns()

        def done(error: BaseException | None) -> None:
            assert error is None
            self.order.append(entry_id)
            self.acked_ns[entry_id] = self.parts.clock.monotonic_ns()
            file = self.parts.disk.open(journal_path(self.journal._file_id), create=False)
            at = file.read_at(0, file.size()).find(raw)
            self.durable[entry_id] = at >= 0 and file.durable_size() >= at + len(raw)

        self.journal.submit(add_record(KEY, raw), done)

    async def settle(self, count: int) -> None:
        while len(self.order) < count:
            await self.parts.clock.sleep(0.0001)  # virtual time (simulated clock/loop): no real wait


def _scenario(wait_ms: int, gaps_us: list[int]) -> tuple[Acks, int]:
    """Adds ``1..len(gaps_us)``, each after its gap (virtual microseconds); the acks and the
    number of groups written."""

    async def scenario() -> tuple[Acks, int]:
        parts = Parts(dataclasses.replace(CONFIG, journal_group_wait_ms_max=wait_ms))
        journal = await parts.start()
        acks = Acks(parts, journal)
        before = journal.groups_count
        for entry_id, gap_us in enumerate(gaps_us, start=1):
            await parts.clock.sleep(gap_us / 1_000_000)  # virtual time (simulated clock/loop): no real wait
            acks.submit(entry_id)
        await acks.settle(len(gaps_us))
        groups = journal.groups_count - before
        await journal.stop()
        return acks, groups

    return run(scenario())


def test_adds_within_the_wait_share_one_group_and_sync() -> None:
    # One add every 250 us with a 1 ms wait: about four adds per group.
    acks, groups = _scenario(1, [250] * 12)
    assert acks.order == list(range(1, 13))
    assert all(acks.durable.values())
    assert groups <= 4


def test_without_a_wait_each_spaced_add_is_its_own_group() -> None:
    # Control: the same arrivals with no wait, spaced wider than a sync: one group per add.
    acks, groups = _scenario(0, [250] * 12)
    assert acks.order == list(range(1, 13))
    assert all(acks.durable.values())
    assert groups == 12


@pytest.mark.parametrize("wait_ms", [1, 3])
def test_no_add_waits_longer_than_the_bound_plus_its_sync(wait_ms: int) -> None:
    gaps = [0, 100, 700, 2_900, 5_000, 10, 10, 4_000]
    acks, _ = _scenario(wait_ms, gaps)
    assert acks.order == list(range(1, len(gaps) + 1))
    for entry_id, submitted in acks.submitted_ns.items():
        # The bound, then its own sync; an add may also wait for one earlier group's sync.
        assert acks.acked_ns[entry_id] - submitted <= wait_ms * 1_000_000 + 2 * SYNC_NS
    # A lone add waits out the bound (nothing else came): the wait is real, not skipped.
    lone = len(gaps)
    assert acks.acked_ns[lone] - acks.submitted_ns[lone] >= wait_ms * 1_000_000


def test_an_ack_before_the_sync_is_caught() -> None:
    # Negative control: with the ack-before-fsync break on, the durability check fails.
    breaks.enable(breaks.Break.ACK_BEFORE_FSYNC)
    try:
        acks, _ = _scenario(1, [250] * 4)
    finally:
        breaks.disable_all()
    assert not all(acks.durable.values())
