"""The durability view on a real standalone with three bookies: when a bookie's registration is
gone (its session expired, as when it dies), the view names it missing in each ledger's ensemble and
counts the entries that no longer have Qw copies on live bookies; an AutoRecovery marker counts too."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from magnetar.cli.produce import produce
from magnetar.client import Compression
from magnetar.ledger.directory import AVAILABLE_PATH
from magnetar.ledger.underreplication import UnderReplicationMarkers
from magnetar.runtime.standalone import StandaloneConfig, start_standalone

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return json.loads(reply.read())


async def _scenario(data_dir: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], list[str]]:
    running = await start_standalone(StandaloneConfig(data_dir=data_dir, bookies_count=3, broker_port=0, web_port=0,
                                                      bookie_port=0))
    try:
        assert running.broker is not None and running.http is not None
        await produce(running.broker.service_url, "durable", ["m"], 12, None, {}, False, Compression.NONE, 30)
        url = f"http://127.0.0.1:{running.http.port}/console/api/topic/public/default/durable/ledgers"
        before = await asyncio.to_thread(_get, url)
        ledger = next(lg for lg in before["topics"][0]["ledgers"] if lg["entries"])
        ensemble = [b["id"] for b in ledger["fragments"][0]["bookies"]]
        await running.store.delete(f"{AVAILABLE_PATH}/{ensemble[1]}")  # its session ended
        gone = await asyncio.to_thread(_get, url)
        await UnderReplicationMarkers(running.store).mark(ledger["ledgerId"], frozenset(), 0)
        overview = await asyncio.to_thread(_get, f"http://127.0.0.1:{running.http.port}/console/api/overview")
        return before, gone, overview, ensemble
    finally:
        await running.stop()


def test_a_missing_bookie_shows_in_the_ensembles_and_counts(tmp_path: Path) -> None:
    before, gone, overview, ensemble = asyncio.run(_scenario(str(tmp_path / "data")))
    first = next(lg for lg in before["topics"][0]["ledgers"] if lg["entries"])
    assert (first["ensembleSize"], first["writeQuorum"], first["ackQuorum"]) == (3, 3, 2)
    assert first["underReplicatedEntries"] == 0 and first["lac"] == 11
    after = next(lg for lg in gone["topics"][0]["ledgers"] if lg["ledgerId"] == first["ledgerId"])
    missing = [b["id"] for f in after["fragments"] for b in f["bookies"] if b["missing"]]
    assert missing == [ensemble[1]]
    assert after["underReplicatedEntries"] == 12  # Qw = E: every entry had a copy there
    assert ensemble[1] not in gone["bookies"]["writable"]
    assert overview["underReplicatedLedgers"] == [first["ledgerId"]]
