"""Recovery owns every read it fans out: no "Task exception was never retrieved".

A recovery read asks the whole write set at once. When the bookie holding the only copy and the
bookies answering "no such entry" reply in the same ``asyncio.wait`` batch, recovery returns on
the copy; the other answers of that batch must still be retrieved, or asyncio reports each lost
``NoSuchEntryError`` when the task is collected (seen at the end of tests/broker + tests/control).
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from magnetar.ledger import recovery
from tests.ledger.fakes import make_cluster
from tests.manual_clock import settle

_TAIL = 12  # unacknowledged entries, each on one bookie of three: a batch with 2 negatives each


async def _unretrieved_during_recovery() -> list[str]:
    """Recover a ledger whose tail entries reached one bookie; the "never retrieved" reports."""
    loop = asyncio.get_running_loop()
    reports: list[str] = []

    def handler(_loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if "never retrieved" in str(context.get("message", "")):
            reports.append(repr(context.get("exception")))

    loop.set_exception_handler(handler)
    cluster = make_cluster(3)
    manager = cluster.manager()
    handle = await manager.create_ledger(3, 3, 2)
    for i in range(3):
        await handle.add_entry(b"a%d" % i)
    b0, b1, b2 = handle.ensemble
    for bookie in (b1, b2):
        cluster.transport.rule(bookie, "add", None, "hold_before")  # the tail reaches b0 only
    writers = [asyncio.ensure_future(handle.add_entry(b"t%d" % i)) for i in range(_TAIL)]
    await settle()
    assert all(cluster.bookie(b0).has(handle.ledger_id, 3 + i) is not None for i in range(_TAIL))
    closed = await manager.recover_ledger(handle.ledger_id)
    assert closed.last_entry_id == 2 + _TAIL  # semantics unchanged: one valid copy keeps an entry
    for bookie in (b0, b1, b2):
        assert cluster.bookie(bookie).has(handle.ledger_id, 2 + _TAIL) is not None
    for writer in writers:
        writer.cancel()
    await asyncio.gather(*writers, return_exceptions=True)
    gc.collect()  # an exception's traceback holds a cycle: collect the finished read tasks now
    loop.set_exception_handler(None)
    return reports


async def test_recovery_retrieves_the_negative_answers_it_does_not_need() -> None:
    assert await _unretrieved_during_recovery() == []


async def test_negative_control_without_consuming_the_batch_asyncio_reports_lost_exceptions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(recovery, "_own_reads", lambda tasks: None)  # the old code path
    reports = await _unretrieved_during_recovery()
    assert reports, "the checker must see the unretrieved NoSuchEntryError of the old code"
    assert all("NoSuchEntryError" in r for r in reports), reports
