"""Writer, reader and ledger-manager behaviour over the in-memory fake transport."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.base.errors import ClosedError, FencedError, InvalidArgumentError, NotFoundError
from magnetar.ledger.errors import NotEnoughBookiesError
from magnetar.ledger.handle import WriterState
from magnetar.ledger.ledger_metadata import LedgerMetadata, LedgerState
from magnetar.ledger.quorum import write_set
from tests.ledger.checkers import check_ledger, payloads
from tests.ledger.fakes import make_cluster
from tests.manual_clock import settle


async def test_add_close_and_read_back() -> None:
    cluster = make_cluster(5)
    manager = cluster.manager()
    handle = await manager.create_ledger(3, 2, 2)
    ids = [await handle.add_entry(f"m{i}".encode()) for i in range(10)]
    assert ids == list(range(10)) and handle.last_add_confirmed == 9
    closed = await handle.close()
    assert closed.state is LedgerState.CLOSED and closed.last_entry_id == 9
    reader = await manager.open_ledger(handle.ledger_id)
    entries = await reader.read_entries(0, 9)
    assert [e.payload for e in entries] == [f"m{i}".encode() for i in range(10)]
    # Striping: each entry is on exactly its write set.
    for i in range(10):
        holders = {b for b, fake in cluster.bookies.items() if fake.has(handle.ledger_id, i)}
        ensemble = closed.ensemble_for(i)
        assert holders == {ensemble[j] for j in write_set(i, 3, 2)}
    assert await manager.list_ledgers() == [handle.ledger_id]
    await manager.delete_ledger(handle.ledger_id)
    assert await manager.list_ledgers() == []
    with pytest.raises(NotFoundError):
        await manager.open_ledger(handle.ledger_id)


async def test_creation_refuses_bad_quorums_and_too_few_bookies() -> None:
    manager = make_cluster(3).manager()
    with pytest.raises(InvalidArgumentError):
        await manager.create_ledger(2, 3, 2)
    with pytest.raises(InvalidArgumentError):
        await manager.create_ledger(3, 2, 3)
    with pytest.raises(NotEnoughBookiesError):
        await manager.create_ledger(5, 3, 2)


async def test_ids_grow() -> None:
    manager = make_cluster(3).manager()
    ids = [(await manager.create_ledger(3, 3, 2)).ledger_id for _ in range(4)]
    assert ids == sorted(ids) and len(set(ids)) == 4


async def test_acks_in_entry_order_when_replies_arrive_out_of_order() -> None:
    cluster = make_cluster(3)
    handle = await cluster.manager().create_ledger(3, 3, 2)
    ensemble = handle.ensemble
    holds = [cluster.transport.rule(b, "add", 0, "hold_reply") for b in ensemble]
    first = asyncio.ensure_future(handle.add_entry(b"a"))
    second = asyncio.ensure_future(handle.add_entry(b"b"))
    await settle()
    assert not first.done() and not second.done()  # entry 1 has its quorum but entry 0 not yet
    assert handle.last_add_confirmed == -1 and handle.pending_count == 2
    holds[0].release()
    await settle()
    assert not first.done()  # one ack is below Qa=2
    holds[1].release()
    await settle()
    assert first.result() == 0 and second.result() == 1 and handle.last_add_confirmed == 1
    holds[2].release()


async def test_ack_quorum_counting() -> None:
    cluster = make_cluster(3)
    handle = await cluster.manager().create_ledger(3, 3, 2)
    _a, b, c = handle.ensemble
    slow_b = cluster.transport.rule(b, "add", None, "hold_before")
    assert await handle.add_entry(b"x") == 0  # a and c suffice
    slow_c = cluster.transport.rule(c, "add", None, "hold_before")
    task = asyncio.ensure_future(handle.add_entry(b"y"))
    await settle()
    assert not task.done()  # only a answered
    slow_c.release()
    await settle()
    assert task.result() == 1
    slow_b.release()
    await settle()


async def test_entries_carry_the_lac() -> None:
    cluster = make_cluster(3)
    handle = await cluster.manager().create_ledger(3, 3, 3)
    for i in range(3):
        await handle.add_entry(b"p%d" % i)
    fake = cluster.bookie(handle.ensemble[0])
    assert [fake.has(handle.ledger_id, i).lac for i in range(3)] == [-1, 0, 1]  # type: ignore[union-attr]


async def test_ensemble_change_replaces_a_failed_bookie() -> None:
    cluster = make_cluster(5)
    manager = cluster.manager()
    handle = await manager.create_ledger(3, 3, 2)
    for i in range(3):
        await handle.add_entry(b"before%d" % i)
    victim = handle.ensemble[1]
    cluster.bookie(victim).alive = False
    cluster.directory.remove(victim)
    for i in range(3, 8):
        assert await handle.add_entry(b"after%d" % i) == i
    meta = handle.metadata
    assert len(meta.fragments) == 2 and meta.fragments[1].first_entry_id == 3
    assert victim not in meta.fragments[1].ensemble and len(set(meta.fragments[1].ensemble)) == 3
    stored = await manager.store.read(handle.ledger_id)
    assert stored.metadata == meta
    await handle.close()
    reader = await manager.open_ledger(handle.ledger_id)
    got = payloads(await reader.read_entries(0, 7))
    assert got[2] == b"before2" and got[7] == b"after7"


async def test_in_flight_entries_are_resent_to_the_replacement() -> None:
    cluster = make_cluster(4)
    handle = await cluster.manager().create_ledger(3, 3, 3)
    original = handle.ensemble
    victim = original[2]
    cluster.transport.rule(victim, "add", 0, "fail")
    assert await handle.add_entry(b"e0") == 0  # needs all 3: only possible after replacement
    replacement = next(b for b in handle.ensemble if b not in original)
    assert cluster.bookie(replacement).has(handle.ledger_id, 0) is not None
    # Nothing was acknowledged yet, so the change replaced fragment 0 instead of adding one.
    assert len(handle.metadata.fragments) == 1 and victim not in handle.metadata.fragments[0].ensemble


async def test_no_replacement_fails_the_handle() -> None:
    cluster = make_cluster(3)
    handle = await cluster.manager().create_ledger(3, 3, 2)
    cluster.bookie(handle.ensemble[0]).alive = False
    with pytest.raises(NotEnoughBookiesError):
        await handle.add_entry(b"x")
    assert handle.state is WriterState.FAILED


async def test_backpressure_bounds_pending_adds() -> None:
    from magnetar.ledger.config import LedgerClientConfig

    cluster = make_cluster(3, LedgerClientConfig(pending_adds_count_max=2))
    handle = await cluster.manager().create_ledger(3, 3, 3)
    hold = cluster.transport.rule(handle.ensemble[0], "add", None, "hold_before")
    tasks = [asyncio.ensure_future(handle.add_entry(b"%d" % i)) for i in range(5)]
    await settle()
    assert handle.pending_count == 2 and handle.last_add_pushed == 1
    hold.release()
    await settle(500)
    assert [t.result() for t in tasks] == [0, 1, 2, 3, 4]


async def test_fencing_rejects_the_old_writer() -> None:
    cluster = make_cluster(3)
    manager = cluster.manager()
    handle = await manager.create_ledger(3, 3, 2)
    acked = {await handle.add_entry(b"v%d" % i): b"v%d" % i for i in range(4)}
    closed = await manager.recover_ledger(handle.ledger_id)
    assert closed.last_entry_id == 3
    with pytest.raises(FencedError):
        await handle.add_entry(b"late")
    with pytest.raises(FencedError):
        await handle.close()
    reader = await manager.open_ledger(handle.ledger_id)
    reading = payloads(await reader.read_entries(0, closed.last_entry_id))
    assert check_ledger(handle.ledger_id, acked, closed, [reading], cluster.bookies.values()) == []


async def test_writer_close_after_concurrent_metadata_change_and_closed_handle() -> None:
    cluster = make_cluster(3)
    manager = cluster.manager()
    handle = await manager.create_ledger(3, 3, 2)
    await handle.add_entry(b"a")
    # Someone else bumps the version (e.g. re-replication of nothing): close re-reads and retries.
    current = await manager.store.read(handle.ledger_id)
    await manager.store.cas(current, current.metadata)
    closed = await handle.close()
    assert closed.last_entry_id == 0
    assert await handle.close() == closed
    with pytest.raises(ClosedError):
        await handle.add_entry(b"b")


async def test_reader_without_recovery_reads_up_to_lac_and_speculates() -> None:
    cluster = make_cluster(3)
    manager = cluster.manager()
    handle = await manager.create_ledger(3, 2, 2)
    for i in range(5):
        await handle.add_entry(b"r%d" % i)
    reader = await manager.open_ledger_no_recovery(handle.ledger_id)
    assert reader.last_add_confirmed == -1
    assert await reader.read_lac() == 3  # entry 4 carries LAC 3; entry 4 itself is not yet confirmed
    with pytest.raises(InvalidArgumentError):
        await reader.read_entry(4)
    assert handle.state is WriterState.OPEN  # reading did not fence
    assert await handle.add_entry(b"r5") == 5
    # Entry 1's primary hangs: after the speculative timeout the next bookie answers.
    primary = handle.ensemble[write_set(1, 3, 2)[0]]
    hang = cluster.transport.rule(primary, "read", 1, "hold_before")
    task = asyncio.ensure_future(reader.read_entry(1))
    await settle()
    assert not task.done()
    await cluster.clock.advance(0.2)
    assert task.result().payload == b"r1"
    hang.release()
    # Explicit LAC makes the last entry readable on an idle ledger.
    await handle.send_explicit_lac()
    assert await reader.read_lac() == 5
    assert (await reader.read_entry(5)).payload == b"r5"


async def test_metadata_record_round_trip_and_forward_only() -> None:
    from magnetar.base.invariant import InvariantViolationError

    cluster = make_cluster(3)
    handle = await cluster.manager().create_ledger(3, 3, 2)
    meta = handle.metadata
    assert LedgerMetadata.decode(meta.encode()) == meta
    closed = meta.to_recovery().to_closed(4)
    assert LedgerMetadata.decode(closed.encode()) == closed
    with pytest.raises(InvariantViolationError):
        closed.to_recovery()
    with pytest.raises(InvariantViolationError):
        meta.to_recovery()._moved(LedgerState.OPEN)


async def test_a_run_goes_to_each_bookie_in_one_transport_call() -> None:
    """``append_run``: each bookie gets the entries of its write sets in one ``add_run``, in
    entry order; callers are told in entry order. Control: one ``append_then`` per add is one
    call per add and bookie."""
    cluster = make_cluster(3)
    handle = await cluster.manager().create_ledger(3, 2, 2)
    told: list[int | None] = []

    def on_done(entry_id: int | None, error: BaseException | None) -> None:
        assert error is None
        told.append(entry_id)

    handle.append_run([(b"r%d" % i, on_done) for i in range(6)])
    expected = {bookie: [e for e in range(6) if slot in write_set(e, 3, 2)]
                for slot, bookie in enumerate(handle.ensemble)}
    assert sorted(cluster.transport.runs) == sorted(expected.items())
    await settle(50)
    assert told == list(range(6)) and handle.last_add_confirmed == 5
    cluster.transport.runs.clear()
    for i in range(6, 9):
        handle.append_then(b"s%d" % i, on_done)
    assert len(cluster.transport.runs) == 6 and all(len(ids) == 1 for _, ids in cluster.transport.runs)
    await settle(50)
    assert told == list(range(9))


async def test_a_run_that_does_not_fit_is_refused_whole() -> None:
    from magnetar.base.errors import LimitExceededError
    from magnetar.ledger.config import LedgerClientConfig

    cluster = make_cluster(3, LedgerClientConfig(pending_adds_count_max=3))
    handle = await cluster.manager().create_ledger(3, 3, 2)
    assert handle.room() == 3
    with pytest.raises(LimitExceededError):
        handle.append_run([(b"%d" % i, lambda _e, _x: None) for i in range(4)])
    assert handle.pending_count == 0 and handle.last_add_pushed == -1 and cluster.transport.runs == []


async def test_an_ack_from_a_replaced_bookie_does_not_count() -> None:
    """Entry 0 needs all 3 bookies. The third stores it but its reply is held; it then fails
    entry 1 and is replaced. Its late OK for entry 0 must not count (the slot now holds another
    bookie): entry 0 completes only once the replacement stored it."""
    cluster = make_cluster(4)
    handle = await cluster.manager().create_ledger(3, 3, 3)
    original = handle.ensemble
    victim = original[2]
    spare = next(b for b in cluster.bookies if b not in original)
    late = cluster.transport.rule(victim, "add", 0, "hold_reply")
    cluster.transport.rule(victim, "add", 1, "fail")
    slow_spare = cluster.transport.rule(spare, "add", 0, "hold_before")
    first = asyncio.ensure_future(handle.add_entry(b"e0"))
    second = asyncio.ensure_future(handle.add_entry(b"e1"))
    await settle(100)
    assert handle.ensemble == (original[0], original[1], spare)
    late.release()  # the replaced bookie's OK for entry 0 arrives now
    await settle(100)
    assert not first.done() and handle.last_add_confirmed == -1
    slow_spare.release()
    await settle(100)
    assert first.result() == 0 and second.result() == 1
