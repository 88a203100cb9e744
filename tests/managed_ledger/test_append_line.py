"""The pipeline's queue and a ledger's adds in flight are lists read from a head index (``base.fifo.fifo_advance``,
compacted once half of it was taken): call order and positions hold through a backlog that does
not empty while it is worked off."""

from __future__ import annotations

from magnetar.base.rng import SeededRng
from magnetar.base.types import Position
from magnetar.ledger.config import LedgerClientConfig
from magnetar.ledger.manager import LedgerManager
from magnetar.ledger.placement import RandomPlacement
from magnetar.managed_ledger import ManagedLedgerFactory
from tests.managed_ledger.harness import TOPIC, config, make_world, until

APPENDS = 3000
WINDOW = 16


async def test_a_backlog_worked_off_in_runs_of_the_window_keeps_call_order_through_the_compaction() -> None:
    """3,000 appends in one run behind a ledger window of 16: the queue is taken from its head in
    runs of at most 16 and compacted half-way (1,500 taken of 3,000); every caller learns its
    position once, in call order, the positions consecutive, and the log holds the payloads in
    that order."""
    world = make_world()
    manager = LedgerManager(store=world.ledger_store, transport=world.transport, directory=world.directory,
                            placement=RandomPlacement(SeededRng(1)), clock=world.clock,
                            config=LedgerClientConfig(pending_adds_count_max=WINDOW))
    factory = ManagedLedgerFactory(manager=manager, store=await world.metadata.connect(), clock=world.clock,
                                   config=config(add_queue_count_max=APPENDS, max_entries_per_ledger=10 * APPENDS))
    ml = await factory.open(TOPIC)
    told: list[tuple[int, Position | None, BaseException | None]] = []

    def teller(index: int):  # type: ignore[no-untyped-def]
        return lambda position, error: told.append((index, position, error))

    ml.append_run([(b"m%d" % i, teller(i)) for i in range(APPENDS)])
    assert ml.pending_add_count == APPENDS
    await until(lambda: len(told) == APPENDS, rounds=200_000)
    assert [index for index, _, _ in told] == list(range(APPENDS))
    assert all(error is None for _, _, error in told)
    positions = [position for _, position, _ in told]
    assert positions[0] is not None and len({p.ledger_id for p in positions if p is not None}) == 1
    assert [p.entry_id for p in positions if p is not None] == list(range(APPENDS))
    entries = await ml.read_entries(Position(-1, -1), APPENDS)
    assert [e.payload for e in entries] == [b"m%d" % i for i in range(APPENDS)]
    assert ml.pending_add_count == 0
    await ml.close()
