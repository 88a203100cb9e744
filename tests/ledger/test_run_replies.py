"""A bookie's answer to a whole run in one call (``RunReplies.stored``, the local bookies'
journal answer; issue 22, 3 bookies): each add is still counted per bookie and told once, in
entry order, with its ack quorum (E=3, Qw=3, Qa=2: one run to each bookie, the same entries);
the completion runs once, after the run's replies are counted; a reply's fault point still
gates each entry; per-entry replies (a remote bookie's) complete as before.

Negative control: a writer that did not complete after counting a run (``_on_stored`` without
its final ``_complete_in_order``) tells nothing, and the first test fails."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from magnetar import faults
from magnetar.ledger.handle import LedgerHandle, RunReplies
from tests.ledger.fakes import HeldTransport, held_writers
from tests.managed_ledger.harness import until


@pytest.fixture(autouse=True)
def _disarm() -> Iterator[None]:
    yield
    faults.disarm_all()


async def _writer(transport: HeldTransport) -> LedgerHandle:
    return (await held_writers(transport, 1))[0]


def _append(handle: LedgerHandle, count: int, told: list[tuple[int | None, int]]) -> None:
    def on_done(entry_id: int | None, _error: BaseException | None) -> None:
        told.append((entry_id, handle.last_add_confirmed))
    handle.append_run([(b"x", on_done)] * count)


async def test_a_run_stored_by_two_of_three_bookies_completes_each_add_once_in_order() -> None:
    transport = HeldTransport()
    handle = await _writer(transport)
    told: list[tuple[int | None, int]] = []
    _append(handle, 4, told)
    # One run of the four entries to each of the three bookies.
    assert sorted(entries for _, entries, _ in transport.runs) == [[0, 1, 2, 3]] * 3
    assert len({bookie for bookie, _, _ in transport.runs}) == 3
    replies = [on_reply for _, _, on_reply in transport.runs]
    assert all(isinstance(on_reply, RunReplies) for on_reply in replies)
    replies[0].stored(range(4))  # type: ignore[attr-defined]
    assert told == [] and handle.last_add_confirmed == -1  # one bookie: below Qa
    replies[1].stored(range(4))  # type: ignore[attr-defined]
    assert told == [(0, 0), (1, 1), (2, 2), (3, 3)]  # in order, each with its LAC, once
    replies[2].stored(range(4))  # type: ignore[attr-defined]  # the third copy changes nothing
    assert len(told) == 4 and handle.pending_count == 0


async def test_per_entry_replies_and_a_stored_run_mix() -> None:
    transport = HeldTransport()
    handle = await _writer(transport)
    told: list[tuple[int | None, int]] = []
    _append(handle, 3, told)
    first, second, _third = (on_reply for _, _, on_reply in transport.runs)
    second(1, None)  # a remote bookie's answers, one entry at a time
    first.stored([1, 2])  # type: ignore[attr-defined]
    assert told == []  # entry 0 has no quorum yet: 1 and 2 wait behind it
    second(0, None)
    assert told == []  # entry 0 has one copy (bookie 1), entry 1 two: it waits behind 0
    first.stored([0])  # type: ignore[attr-defined]
    assert told == [(0, 0), (1, 1)]  # 0 reached Qa, then 1 goes; 2 has one copy
    second(2, None)
    assert told == [(0, 0), (1, 1), (2, 2)]


async def test_a_reply_gate_still_holds_each_entry_of_a_stored_run() -> None:
    transport = HeldTransport()
    handle = await _writer(transport)
    told: list[tuple[int | None, int]] = []
    _append(handle, 2, told)
    replies = [on_reply for _, _, on_reply in transport.runs]
    faults.arm("ledger.after_reply_before_count", "hang", from_hit=4)  # bookie 1's entry 1
    replies[0].stored(range(2))  # type: ignore[attr-defined]
    replies[1].stored(range(2))  # type: ignore[attr-defined]
    assert told == [(0, 0)]  # entry 1's second copy is held at its gate
    await until(lambda: faults.holding("ledger.after_reply_before_count"))  # its task waits
    assert told == [(0, 0)]
    faults.release("ledger.after_reply_before_count")
    await until(lambda: len(told) == 2)  # the held reply is counted from the event loop
    assert told == [(0, 0), (1, 1)]
