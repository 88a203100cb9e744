"""``LedgerList.any_offloaded``: the broker's policy pass asks every topic's offload state per pass
(``ManagedLedgerOffload.check``); it reads the list in place and must answer as the copy with the
live ledger's stats (``with_live_stats``) did."""

from __future__ import annotations

import random

from magnetar.managed_ledger.ledger_list import LedgerList
from magnetar.managed_ledger.offload import offloaded
from magnetar.metadata.records import LedgerInfo, OffloadContext


def test_any_offloaded_answers_as_the_list_with_live_stats_does() -> None:
    """Random lists (offloads complete, incomplete or absent; the live ledger last, earlier, or
    absent) against the old form, ``any(offloaded(i) for i in with_live_stats())``. (Negative
    control, run: without the live ledger's exception, an offloaded live ledger answers True and
    the comparison fails.)"""
    rng = random.Random(24)
    contexts = (None, None, OffloadContext("u", "filesystem"), OffloadContext("u", "filesystem", complete=False))
    seen = set()
    for _ in range(2_000):
        ids = sorted(rng.sample(range(1, 20), rng.randint(0, 5)))
        infos = [LedgerInfo(i, rng.randint(0, 3), 10, 0, rng.choice(contexts)) for i in ids]
        ledgers = LedgerList()
        ledgers.set(infos)
        ledgers.set_live(rng.choice([*ids, 99]) if ids else 99)
        expected = any(offloaded(i) for i in ledgers.with_live_stats())
        assert ledgers.any_offloaded() == expected, (infos, ledgers.live_ledger_id)
        last_live_offloaded = bool(infos) and infos[-1].ledger_id == ledgers.live_ledger_id and offloaded(infos[-1])
        seen.add((expected, last_live_offloaded))
    assert seen == {(False, False), (True, False), (False, True), (True, True)}  # every case drawn
