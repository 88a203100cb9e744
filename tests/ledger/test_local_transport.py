"""``LocalFirstTransport`` (standalone's direct calls into its own bookies) answers every
operation as the bookie protocol over TCP does: the same script runs against one real bookie
both ways (one ledger each) and the outcomes must be equal."""

from __future__ import annotations

import asyncio
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from magnetar.base.types import BookieId
from magnetar.ledger.bookie_transport import BookieClientTransport, settle_future
from magnetar.node.ledger import LocalFirstTransport
from magnetar.protocol.bookie import ENTRY_HEADER_BYTES, EncodedEntry, Status
from magnetar.runtime.bookie import RunningBookie, start_bookie
from magnetar.runtime.clock import SystemClock
from magnetar.runtime.metadata import open_metadata_store
from magnetar.runtime.network import TcpNetwork
from magnetar.storage import BookieConfig
from tests.manual_clock import settle

KEY = b"key"


#: Loop passes a test gives the transport's waiting task to act (no time passes in a pass).
PASSES = 20


async def _until(condition: Any, passes: int = PASSES) -> None:
    """Loop passes until ``condition()`` holds, failing after ``passes`` of them (no time passes)."""
    for _ in range(passes):
        if condition():
            return
        await settle(1)
    assert condition(), f"not within {passes} loop passes"


def _entry(ledger: int, entry_id: int, lac: int) -> EncodedEntry:
    return EncodedEntry.build(ledger, entry_id, lac, f"entry {entry_id};".encode() * 50)


async def _outcome(call: Any) -> object:
    """What a call gave: its value, or its error's type and status name."""
    try:
        value = await call
    except Exception as error:  # the outcome compared
        return ("error", type(error).__name__)
    if isinstance(value, EncodedEntry):
        return ("entry", value.entry_id, bytes(value.raw)[ENTRY_HEADER_BYTES:])  # the header names the ledger
    return ("value", value)


async def _script(transport: Any, bookie: BookieId, ledger: int) -> list[object]:
    """Adds (one by one and pipelined), reads, a wrong key, an explicit LAC, a fence."""
    results: list[object] = []
    for i in range(5):
        results.append(await _outcome(transport.add(bookie, _entry(ledger, i, i - 1), recovery=False,
                                                     master_key=KEY)))
    adds = [transport.add(bookie, _entry(ledger, i, i - 1), recovery=False, master_key=KEY) for i in range(5, 10)]
    for add in adds:  # started together (pipelined), answered each
        results.append(await _outcome(add))
    results.append(await _outcome(transport.add(bookie, _entry(ledger, 10, 9), recovery=False,
                                                 master_key=b"wrong")))
    results.append(await _outcome(transport.read(bookie, ledger, 7, fence=False, master_key=KEY)))
    results.append(await _outcome(transport.read(bookie, ledger, 99, fence=False, master_key=KEY)))
    results.append(await _outcome(transport.read_last_entry(bookie, ledger, fence=False, master_key=KEY)))
    results.append(await _outcome(transport.read_last_entry(bookie, ledger + 1000, fence=False,
                                                            master_key=KEY)))
    results.append(await _outcome(transport.write_lac(bookie, ledger, 9, master_key=KEY)))
    results.append(await _outcome(transport.write_lac(bookie, ledger, 9, master_key=b"wrong")))
    results.append(await _outcome(transport.read_last_entry(bookie, ledger, fence=True, master_key=KEY)))
    results.append(await _outcome(transport.add(bookie, _entry(ledger, 10, 9), recovery=False,
                                                 master_key=KEY)))  # fenced now
    results.append(await _outcome(transport.add(bookie, _entry(ledger, 10, 9), recovery=True,
                                                 master_key=KEY)))  # recovery adds pass a fence
    return results


async def _with_bookie(tmp_path: Path, body: Any) -> None:
    store = await open_metadata_store("memory:")
    config = BookieConfig(host="127.0.0.1", port=0, data_dir=str(tmp_path / "bookie"), gc_interval_ms=0,
                          disk_free_bytes_min=0)
    running: RunningBookie = await start_bookie(config, store=store, clock=SystemClock(), network=TcpNetwork())
    try:
        await body(running, BookieId.parse(running.bookie_id))
    finally:
        await running.stop()
        await store.close()


def test_local_calls_answer_as_the_bookie_protocol_does(tmp_path: Path) -> None:
    async def body(running: RunningBookie, bookie: BookieId) -> None:
        tcp = BookieClientTransport(TcpNetwork(), SystemClock())
        local = LocalFirstTransport({bookie: running.bookie}, BookieClientTransport(TcpNetwork(), SystemClock()))
        try:
            over_tcp = await _script(tcp, bookie, 1)
            direct = await _script(local, bookie, 2)
        finally:
            await tcp.close()
            await local.close()
        assert over_tcp[:10] == [("value", None)] * 10  # it did work
        assert ("error", "FencedError") in over_tcp and ("error", "NoSuchEntryError") in over_tcp
        assert direct == over_tcp
        assert running.bookie.read_entry(2, 10).status is Status.OK  # the recovery add is stored

    asyncio.run(_with_bookie(tmp_path, body))


def test_a_bookie_not_in_this_process_is_reached_over_the_network(tmp_path: Path) -> None:
    """Only the bookies given are called directly (the control: the same bookie, not given,
    answers over TCP: its server sees the connection)."""
    async def body(running: RunningBookie, bookie: BookieId) -> None:
        other = BookieId("127.0.0.1", 1)
        transport = LocalFirstTransport({other: running.bookie}, BookieClientTransport(TcpNetwork(), SystemClock()))
        try:
            await transport.add(bookie, _entry(3, 0, -1), recovery=False, master_key=KEY)
            assert len(running.server._connections) == 1
            await transport.add(other, _entry(4, 0, -1), recovery=False, master_key=KEY)
            assert len(running.server._connections) == 1  # no new connection for the local one
        finally:
            await transport.close()
        assert running.bookie.read_entry(4, 0).status is Status.OK

    asyncio.run(_with_bookie(tmp_path, body))


def test_a_full_bookie_makes_the_writer_wait_instead_of_piling_up(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    async def body(running: RunningBookie, bookie: BookieId) -> None:
        transport = LocalFirstTransport({bookie: running.bookie}, BookieClientTransport(TcpNetwork(), SystemClock()))
        running.bookie.checkpointer.room.clear()  # the write cache is full: the bookie needs backpressure
        assert running.bookie.needs_backpressure()
        try:
            add = transport.add(bookie, _entry(5, 0, -1), recovery=False, master_key=KEY)
            await settle(PASSES)  # the waiting task runs and waits for room
            assert not add.done() and running.bookie.read_entry(5, 0).status is not Status.OK  # it waits
            running.bookie.checkpointer.room.set()  # room again
            await asyncio.wait_for(add, 10)
            assert running.bookie.read_entry(5, 0).status is Status.OK
        finally:
            await transport.close()

    asyncio.run(_with_bookie(tmp_path, body))


def test_an_entry_read_as_a_view_of_a_mapped_log_reaches_the_broker_as_bytes() -> None:
    """The storage core may answer with a view of an entry log mapped into memory; the local
    transport copies it, since the broker keeps entries (its cache). Control: the core's answer
    is a view."""
    from magnetar.node.ledger import _read_local
    from magnetar.storage.bookie import ReadResult

    stored = _entry(3, 0, -1)
    view = memoryview(stored.raw)

    class Core:
        def read_entry_or_last(self, ledger_id: int, entry_id: int | None) -> ReadResult:
            return ReadResult(Status.OK, 0, -1, view)

    response = asyncio.run(_read_local(Core(), BookieId("127.0.0.1", 1), "read", 3, 0, False, b""))  # type: ignore[arg-type]
    assert response.entry is not None
    assert type(response.entry.raw) is bytes and response.entry.raw == stored.raw
    assert isinstance(Core().read_entry_or_last(3, 0).raw, memoryview)


class _RunCore:
    """A storage core that records the runs handed to it and answers them when told."""

    def __init__(self) -> None:
        self.runs: list[tuple[list[EncodedEntry], Any]] = []
        self.calls: list[int] = []  # runs per ``add_entries_runs`` call
        self.room = asyncio.Event()
        self.room.set()

    def needs_backpressure(self) -> bool:
        return not self.room.is_set()

    async def wait_for_room(self) -> None:
        await self.room.wait()

    def add_entries_runs(self, runs: Any) -> None:
        self.calls.append(len(runs))
        for entries, _key, _recovery, on_done in runs:
            self.runs.append((list(entries), on_done))
            if entries[0].entry_id == 666:  # refused at once, while the run is handed over
                on_done(range(len(entries)), Status.FENCED)


def _transport(core: _RunCore) -> tuple[LocalFirstTransport, BookieId]:
    bookie = BookieId("127.0.0.1", 1)
    return LocalFirstTransport({bookie: core}, BookieClientTransport(TcpNetwork(), SystemClock())), bookie  # type: ignore[dict-item]


def test_a_run_is_one_call_into_the_bookie_and_its_answer_one_call_per_entry() -> None:
    async def body() -> None:
        core = _RunCore()
        transport, bookie = _transport(core)
        replies: list[tuple[int, object]] = []
        run = [_entry(8, i, i - 1) for i in range(6)]
        transport.add_run(bookie, run, recovery=False, master_key=KEY, on_reply=lambda i, e: replies.append((i, e)))
        assert len(core.runs) == 1 and core.runs[0][0] == run
        assert replies == []
        core.runs[0][1]([0, 1, 2, 3, 4, 5], Status.OK)  # the journal group's fsync returned
        assert replies == [(i, None) for i in range(6)]
        await transport.close()

    asyncio.run(body())


def test_the_runs_of_one_loop_pass_for_many_ledgers_reach_the_bookie_in_one_call() -> None:
    async def body() -> None:
        core = _RunCore()
        transport, bookie = _transport(core)
        replies: list[tuple[int, int]] = []

        def on_reply(ledger: int, index: int, _error: BaseException | None) -> None:
            replies.append((ledger, index))

        for round_ in range(2):  # a receive's SENDs for 4 topics, twice: 8 runs of one entry
            for ledger in range(4):
                transport.add_run(bookie, [_entry(ledger, round_, round_ - 1)], recovery=False, master_key=KEY,
                                  on_reply=partial(on_reply, ledger))
        assert core.calls == [1]  # the pass's first run at once (its journal look is scheduled)
        await _until(lambda: len(core.calls) == 2)
        assert core.calls == [1, 7] and transport.gathered_runs_count == 7  # the rest in one call
        order = [(entries[0].ledger_id, entries[0].entry_id) for entries, _ in core.runs]
        for ledger in range(4):  # per ledger in call order
            assert [e for lid, e in order if lid == ledger] == [0, 1]
        core.runs[5][1]([0], Status.OK)  # answers stay per run
        assert replies == [(1, 0)]
        await transport.close()

    asyncio.run(body())


def test_a_bookie_named_by_another_equal_instance_is_the_local_one_and_two_local_bookies_stay_apart() -> None:
    """The transport finds a local bookie by identity first, then by equality (no ``BookieId``
    hash per run): an ensemble whose ``BookieId`` is another instance equal to the local one
    reaches the local core, gathered with the pass's runs for it; a second local bookie gets
    its own call. (Negative control, run: a lookup by identity alone sends the equal instance's
    run to the network transport, and this test fails on ``core.calls``.)"""
    async def body() -> None:
        core, other = _RunCore(), _RunCore()
        bookie, second = BookieId("127.0.0.1", 1), BookieId("127.0.0.1", 2)
        transport = LocalFirstTransport({bookie: core, second: other},  # type: ignore[dict-item]
                                        BookieClientTransport(TcpNetwork(), SystemClock()))
        equal = BookieId("127.0.0.1", 1)
        assert equal == bookie and equal is not bookie
        transport.add_run(equal, [_entry(1, 0, -1)], recovery=False, master_key=KEY, on_reply=lambda i, e: None)
        transport.add_run(bookie, [_entry(2, 0, -1)], recovery=False, master_key=KEY, on_reply=lambda i, e: None)
        transport.add_run(BookieId("127.0.0.1", 1), [_entry(3, 0, -1)], recovery=False, master_key=KEY,
                          on_reply=lambda i, e: None)
        transport.add_run(second, [_entry(4, 0, -1)], recovery=False, master_key=KEY, on_reply=lambda i, e: None)
        await _until(lambda: len(core.calls) == 2)
        assert core.calls == [1, 2] and [entries[0].ledger_id for entries, _ in core.runs] == [1, 2, 3]
        assert other.calls == [1] and other.runs[0][0][0].ledger_id == 4
        await transport.close()

    asyncio.run(body())


def test_the_local_slot_remembers_the_equal_instance_a_run_named_and_then_finds_it_by_identity() -> None:
    """The ensembles name the local bookie by another instance (parsed from its registration):
    after the first run the slot keeps it, so later runs find their bookie by identity, without
    ``BookieId.__eq__`` per run (~450 cycles per message at 10,000 topics); the slot's own
    bookie and a third equal instance still reach the same core. (Negative control, run: without
    the slot remembering the instance, the ``seen`` assertion fails.)"""
    async def body() -> None:
        core = _RunCore()
        bookie = BookieId("127.0.0.1", 1)
        transport = LocalFirstTransport({bookie: core},  # type: ignore[dict-item]
                                        BookieClientTransport(TcpNetwork(), SystemClock()))
        equal = BookieId("127.0.0.1", 1)
        for ledger, named in enumerate((equal, equal, bookie, BookieId("127.0.0.1", 1)), start=1):
            transport.add_run(named, [_entry(ledger, 0, -1)], recovery=False, master_key=KEY,
                              on_reply=lambda i, e: None)
            if ledger == 2:
                assert transport._slots[0].seen is equal  # the lookup's state
        await _until(lambda: len(core.calls) == 2)
        assert [entries[0].ledger_id for entries, _ in core.runs] == [1, 2, 3, 4]
        await transport.close()

    asyncio.run(body())


def test_closing_answers_the_runs_gathered_and_not_yet_handed_over() -> None:
    async def body() -> None:
        core = _RunCore()
        transport, bookie = _transport(core)
        replies: list[tuple[int, str]] = []

        def on_reply(ledger: int, _index: int, error: BaseException | None) -> None:
            replies.append((ledger, type(error).__name__))

        for ledger in range(3):
            transport.add_run(bookie, [_entry(ledger, 0, -1)], recovery=False, master_key=KEY,
                              on_reply=partial(on_reply, ledger))
        await transport.close()
        assert core.calls == [1]  # the gathered two never reach the bookie ...
        assert replies == [(1, "BookieUnavailableError"), (2, "BookieUnavailableError")]  # ... and are answered
        await settle(PASSES)
        assert core.calls == [1]

    asyncio.run(body())


def test_a_refusal_during_the_hand_over_is_answered_in_a_later_loop_pass() -> None:
    async def body() -> None:
        core = _RunCore()
        transport, bookie = _transport(core)
        replies: list[tuple[int, str]] = []
        transport.add_run(bookie, [_entry(8, 666, -1), _entry(8, 667, -1)], recovery=False, master_key=KEY,
                          on_reply=lambda i, e: replies.append((i, type(e).__name__)))
        assert replies == []  # never from inside the caller's own add_run
        await _until(lambda: len(replies) == 2)  # answered from a later loop pass
        assert replies == [(0, "FencedError"), (1, "FencedError")]
        await transport.close()

    asyncio.run(body())


def test_runs_wait_whole_and_in_order_while_the_bookie_is_full_and_closing_answers_them() -> None:
    async def body() -> None:
        core = _RunCore()
        transport, bookie = _transport(core)
        core.room.clear()
        replies: list[tuple[int, int, str]] = []
        closed = asyncio.get_running_loop().create_future()

        def on_reply(run_no: int, index: int, error: BaseException | None) -> None:
            replies.append((run_no, index, type(error).__name__))
            if len(replies) == 2 and not closed.done():
                closed.set_result(None)

        for run_no in range(2):
            transport.add_run(bookie, [_entry(9, run_no * 3 + i, -1) for i in range(3)], recovery=False,
                              master_key=KEY, on_reply=partial(on_reply, run_no))
        await settle(PASSES)  # the waiting task runs and waits for room
        assert core.runs == []  # both wait
        core.room.set()
        await _until(lambda: len(core.runs) == 2)
        assert [[e.entry_id for e in entries] for entries, _ in core.runs] == [[0, 1, 2], [3, 4, 5]]
        core.room.clear()
        transport.add_run(bookie, [_entry(9, 6, -1), _entry(9, 7, -1)], recovery=False, master_key=KEY,
                          on_reply=partial(on_reply, 2))
        await settle(1)  # the run starts waiting before the transport closes
        await transport.close()  # the waiting run is answered, every entry of it
        await asyncio.wait_for(closed, 10)
        assert replies == [(2, 0, "BookieUnavailableError"), (2, 1, "BookieUnavailableError")]

    asyncio.run(body())


def test_a_run_to_a_real_bookie_stores_every_accepted_entry_and_refuses_a_damaged_one(tmp_path: Path) -> None:
    async def body(running: RunningBookie, bookie: BookieId) -> None:
        transport = LocalFirstTransport({bookie: running.bookie}, BookieClientTransport(TcpNetwork(), SystemClock()))
        run = [_entry(11, i, i - 1) for i in range(8)]
        bad = run[3]
        run[3] = EncodedEntry(bad.ledger_id, bad.entry_id, bad.lac, bad.digest ^ 1, bad.raw)
        done = asyncio.get_running_loop().create_future()
        replies: dict[int, str] = {}

        def on_reply(index: int, error: BaseException | None) -> None:
            replies[index] = "ok" if error is None else type(error).__name__
            if len(replies) == len(run) and not done.done():
                done.set_result(None)

        try:
            transport.add_run(bookie, run, recovery=False, master_key=KEY, on_reply=on_reply)
            await asyncio.wait_for(done, 10)
        finally:
            await transport.close()
        assert replies == {i: ("BookieUnavailableError" if i == 3 else "ok") for i in range(8)}
        assert [running.bookie.read_entry(11, i).status for i in range(8)] == [
            Status.NO_SUCH_ENTRY if i == 3 else Status.OK for i in range(8)]

    asyncio.run(_with_bookie(tmp_path, body))


def test_steady_adds_to_a_local_bookie_look_the_running_loop_up_once(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """One add at a time to a local bookie (the steady path at a modest rate: a run per loop
    pass, a journal group per add, written and synced through ``LocalFile.append_and_sync_then``)
    looks the running loop up through its ``LoopRef``s, not ``asyncio.get_running_loop``, which
    makes a ``getpid`` system call per lookup (~2 per message at a steady 2,000 msg/s before,
    docs/performance.md, session 21). The group wait is off (its timer is the clock's, not this
    path's). Negative controls (run): ``add_run`` scheduling its ``_flush`` through
    ``asyncio.get_running_loop()`` again (42 lookups for 40 adds), or ``append_and_sync_then``
    writing inline with it (39), fail this."""
    adds = 40
    lookups: list[int] = []
    real_lookup = asyncio.get_running_loop

    def counted_lookup() -> asyncio.AbstractEventLoop:
        lookups.append(1)
        return real_lookup()

    async def body() -> None:
        store = await open_metadata_store("memory:")
        config = BookieConfig(host="127.0.0.1", port=0, data_dir=str(tmp_path / "bookie"), gc_interval_ms=0,
                              disk_free_bytes_min=0, journal_group_wait_ms_max=0)
        running = await start_bookie(config, store=store, clock=SystemClock(), network=TcpNetwork())
        bookie = BookieId.parse(running.bookie_id)
        transport = LocalFirstTransport({bookie: running.bookie}, BookieClientTransport(TcpNetwork(), SystemClock()))
        loop = real_lookup()
        try:
            for entry_id in range(adds + 1):
                if entry_id == 1:  # the first add looked the loop up once per object: count from here
                    monkeypatch.setattr(asyncio, "get_running_loop", counted_lookup)
                stored = loop.create_future()
                transport.add_run(bookie, (_entry(21, entry_id, entry_id - 1),), recovery=False, master_key=KEY,
                                  on_reply=partial(_settle_one, stored))
                assert await asyncio.wait_for(stored, 10) is None
            journal = running.bookie._journal
            assert journal is not None and journal.groups_count >= adds  # a group per add: the path measured
        finally:
            monkeypatch.undo()
            await transport.close()
            await running.stop()
            await store.close()

    asyncio.run(body())
    # The bookie's background work (a checkpoint, the journal's preallocated zeros) may look it up
    # now and then (2 in one run of 40 adds on the loaded bench VM); a lookup per add is the bug.
    assert len(lookups) <= adds // 8, f"{len(lookups)} lookups for {adds} adds"


def _settle_one(future: asyncio.Future[None], _index: int, error: BaseException | None) -> None:
    settle_future(future, error)
