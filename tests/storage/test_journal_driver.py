"""The journal's callback driver (session 13 of issue 22): ``bookie.before_journal_append`` is a
gate on the group's way to the disk. Held, no group is written until it is released, and the
held group is then written and answered; armed with ``error``, the journal fails and answers its
queued records with the error (the driver is not a task that could die and leave them waiting)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from magnetar import faults
from magnetar.faults.points import InjectedFaultError
from magnetar.protocol.bookie import EncodedEntry
from magnetar.runtime.disk import LocalDisk
from magnetar.sim import SimClock
from magnetar.storage.config import BookieConfig
from magnetar.storage.journal import Journal, add_record
from magnetar.storage.journal_submit import JournalStatus
from tests.manual_clock import settle

POINT = "bookie.before_journal_append"


def _record(i: int) -> tuple[bytes, bytes]:
    return add_record(b"k", EncodedEntry.build(3, i, i - 1, bytes([i % 256]) * 300).raw)


async def _until(condition: Callable[[], bool], what: str) -> None:
    """Loop passes until ``condition()`` holds, bounded (no time passes)."""
    for _ in range(10_000):
        if condition():
            return
        await settle(1)
    raise AssertionError(f"never: {what}")


def test_a_held_append_point_holds_the_group_until_released(tmp_path: Path) -> None:
    async def scenario() -> None:
        journal = Journal(LocalDisk(str(tmp_path)), SimClock(), BookieConfig(), first_file_id=1)
        await journal.start()
        faults.arm(POINT, "hang")
        appended = asyncio.ensure_future(journal.append(_record(1)))
        await _until(lambda: faults.hits(POINT) == 1, "the group reached the point")
        await settle(50)  # held: no group is written however many loop passes go by
        assert not appended.done() and journal.groups_count == 0
        faults.release(POINT)
        await asyncio.wait_for(appended, 10)
        assert journal.groups_count == 1 and journal.status is JournalStatus.RUNNING
        await journal.stop()

    asyncio.run(scenario())


def test_an_error_at_the_append_point_fails_the_journal_and_answers_the_records(tmp_path: Path) -> None:
    async def scenario() -> None:
        journal = Journal(LocalDisk(str(tmp_path)), SimClock(), BookieConfig(), first_file_id=1)
        await journal.start()
        await journal.append(_record(0))  # the control: unarmed, a record is written and answered
        assert journal.groups_count == 1
        faults.arm(POINT, "error")
        results = await asyncio.wait_for(
            asyncio.gather(*(journal.append(_record(i)) for i in range(1, 4)), return_exceptions=True), 10)
        assert all(isinstance(result, InjectedFaultError) for result in results), results
        assert journal.status is JournalStatus.FAILED and journal.groups_count == 1
        await journal.stop()

    asyncio.run(scenario())
