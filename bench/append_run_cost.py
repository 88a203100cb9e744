"""Benchmark: the managed ledger's and the ledger client's own CPU per append run (issue 22).

At 100,000 topics and at a modest rate every run holds one message, so each layer's fixed cost
per run is paid per message. This measures the two layers of this repository that a run passes
between the broker and the bookie: ``AppendPipeline.append_run`` (queue, kick, start) ->
``LedgerHandle.append_run`` (pending add, gates, entry built, one ``add_run`` per bookie) and
back (``RunReplies.stored`` -> count, quorum, in-order completion -> the pipeline's in-order
delivery, the entry cache, the caller's callback), with nothing else on the path: the bookie is
a transport that answers every run of a loop pass at once through ``RunReplies.stored`` (as a
local bookie's journal group answers), no disk, no network, no broker.

Per repeat: ``--ledgers`` managed ledgers (each its own ledger, one bookie, quorum 1,1,1), then
``--appends`` appends of one message each, round-robin over the ledgers, ``--per-pass`` per
event-loop pass (each append its own run, as at 100,000 topics; with one ledger, at most its
window of 32 per pass); reports the process's CPU per
append (ns, ``time.process_time``) and, where ``perf stat`` works, user instructions per append
(the A/B measure that moves least on a shared machine). ``--src`` A/B: each tree runs in its own
process with ``PYTHONPATH=<tree>/src`` (its compiled build), alternating.

Run: ``.venv/bin/python bench/append_run_cost.py --src /tmp/base17/src --src src --ledgers 1,10000``.
Bounded: ``repeats * len(src) * len(ledgers)`` child runs of ``--appends`` appends each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PERF_EVENT = "instructions:u"
CHILD_SECONDS_MAX = 300.0


async def _child(ledgers: int, appends: int, per_pass: int) -> dict[str, float]:
    from magnetar.base.rng import SeededRng
    from magnetar.base.types import BookieId, Position
    from magnetar.ledger.config import LedgerClientConfig
    from magnetar.ledger.handle import RunReplies
    from magnetar.ledger.manager import LedgerManager
    from magnetar.ledger.metadata_adapter import MetadataStoreAdapter
    from magnetar.ledger.metadata_ops import LedgerMetadataStore
    from magnetar.ledger.placement import RandomPlacement, StaticBookieDirectory
    from magnetar.managed_ledger.append import AppendPipeline
    from magnetar.managed_ledger.config import ManagedLedgerConfig
    from magnetar.managed_ledger.entry_reader import CacheBudget, EntryReader
    from magnetar.managed_ledger.ledger_list import LedgerList
    from magnetar.managed_ledger.state import MLState, MLStateMachine
    from magnetar.metadata.memory import MemoryMetadataServer
    from magnetar.protocol.bookie.codec import EncodedEntry
    from magnetar.runtime import SystemClock

    loop = asyncio.get_running_loop()

    class InstantBookie:
        """Answers every run of a loop pass at once, as a local bookie's journal group does."""

        def __init__(self) -> None:
            self.waiting: list[tuple[int, Any]] = []
            self.scheduled = False

        def add_run(self, bookie: BookieId, entries: Sequence[EncodedEntry], recovery: bool, master_key: bytes,
                    on_reply: Callable[[int, BaseException | None], None]) -> None:
            self.waiting.append((len(entries), on_reply))
            if not self.scheduled:
                self.scheduled = True
                loop.call_soon(self.answer)

        def answer(self) -> None:
            self.scheduled = False
            waiting, self.waiting = self.waiting, []
            for count, on_reply in waiting:
                if isinstance(on_reply, RunReplies):
                    on_reply.stored(range(count))
                else:
                    for index in range(count):
                        on_reply(index, None)

    class Host:
        async def roll_over(self) -> None:
            raise AssertionError("no rollover in this benchmark")

        def become_fenced(self, cause: BaseException) -> None:
            raise AssertionError(f"fenced: {cause}")

        def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
            return asyncio.ensure_future(coro)

    clock = SystemClock()
    meta = await MemoryMetadataServer(clock).connect()
    bookie = BookieId("127.0.0.1", 3181)
    manager = LedgerManager(store=LedgerMetadataStore(MetadataStoreAdapter(meta)), transport=InstantBookie(),  # type: ignore[arg-type]
                            directory=StaticBookieDirectory([bookie]), placement=RandomPlacement(SeededRng(1)),
                            clock=clock, config=LedgerClientConfig(pending_adds_count_max=32))
    config = ManagedLedgerConfig(ensemble_size=1, write_quorum_size=1, ack_quorum_size=1,
                                 max_entries_per_ledger=2**62)  # no rollover: the measured path only
    budget = CacheBudget()
    pipelines = []
    for index in range(ledgers):
        states = MLStateMachine(f"t{index}")
        pipeline = AppendPipeline(f"t{index}", config=config, clock=clock, states=states, ledgers=LedgerList(),
                                  cache=EntryReader(manager, budget), host=Host())
        handle = await manager.create_ledger(1, 1, 1)
        pipeline.install(handle)
        pipeline.last_confirmed = Position(handle.ledger_id, -1)
        states.move(MLState.LEDGER_OPENED)
        pipelines.append(pipeline)
    payload = b"x" * 1024
    told = 0

    def on_done(position: Position | None, error: BaseException | None) -> None:
        nonlocal told
        if error is not None:
            raise error
        told += 1

    async def drive(count: int) -> None:
        sent, give_up = 0, time.monotonic() + CHILD_SECONDS_MAX
        while sent < count or told < count:
            if time.monotonic() > give_up:
                raise RuntimeError(f"{told} of {count} appends told after {CHILD_SECONDS_MAX:.0f} s")
            for _ in range(min(per_pass, count - sent)):
                pipelines[sent % ledgers].append_run(((payload, on_done),))
                sent += 1
            await asyncio.sleep(0)  # the pass ends: the bookie answers, the next pass appends

    await drive(min(appends, 2 * ledgers))  # warm-up: every ledger's first add, the caches
    told = 0
    perf = _perf_start()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    await drive(appends)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    instructions = _perf_stop(perf)
    await meta.close()
    return {"ns_per_append": 1e9 * cpu / appends, "appends_per_s": appends / wall,
            "kinstr_per_append": instructions / 1e3 / appends if instructions else 0.0}


def _perf_start() -> subprocess.Popen[str] | None:
    if os.environ.get("APPEND_RUN_COST_PERF") != "1" or shutil.which("perf") is None:
        return None
    process = subprocess.Popen(["perf", "stat", "-x", ",", "-e", PERF_EVENT, "-p", str(os.getpid())],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(0.2)  # perf attaches before the measured phase starts (a start-up wait, not a poll)
    return process


def _perf_stop(process: subprocess.Popen[str] | None) -> float:
    if process is None:
        return 0.0
    process.send_signal(2)
    _, err = process.communicate(timeout=30)
    for line in err.splitlines():
        fields = line.split(",")
        if len(fields) > 2 and fields[2].startswith(PERF_EVENT.split(":")[0]) and fields[0].strip().isdigit():
            return float(fields[0])
    return 0.0


def _run_child(src: str, ledgers: int, args: argparse.Namespace) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(Path(src).resolve()), APPEND_RUN_COST_PERF="1" if args.perf else "0")
    env.pop("MAGNETAR_FAULTS", None)
    out = subprocess.run([sys.executable, __file__, "--child", str(ledgers), "--appends", str(args.appends),
                          "--per-pass", str(args.per_pass)], env=env, capture_output=True, text=True,
                         timeout=CHILD_SECONDS_MAX, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", action="append", default=[], help="a source tree (repeat for an A/B)")
    parser.add_argument("--ledgers", default="1,10000", help="comma-separated ledger counts")
    parser.add_argument("--appends", type=int, default=100_000)
    parser.add_argument("--per-pass", type=int, default=16,
                        help="appends (runs of one) per event-loop pass (at most the ledger window, 32)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-perf", dest="perf", action="store_false", help="no perf stat (CPU time only)")
    parser.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        import uvloop

        print(json.dumps(uvloop.run(_child(args.child, args.appends, args.per_pass))))
        return
    sources = args.src or [str(REPO / "src")]
    counts = [int(n) for n in args.ledgers.split(",") if n]
    results: dict[tuple[str, int], list[dict[str, float]]] = {(s, n): [] for s in sources for n in counts}
    for repeat in range(args.repeats):
        for ledgers in counts:
            for src in sources:  # alternating: each pair shares the machine's load of the moment
                row = _run_child(src, ledgers, args)
                results[(src, ledgers)].append(row)
                print(f"repeat {repeat + 1} ledgers {ledgers} {src}: {row['ns_per_append']:.0f} ns/append, "
                      f"{row['kinstr_per_append']:.2f} kinstr/append", flush=True)
    print(f"\n{' '.join([Path(sys.executable).name, *sys.argv])}\nmin / median / max over {args.repeats} repeats")
    for ledgers in counts:
        for src in sources:
            rows = results[(src, ledgers)]
            cells = []
            for key in ("ns_per_append", "kinstr_per_append"):
                values = sorted(row[key] for row in rows)
                cells.append(f"{key} {values[0]:.2f}/{statistics.median(values):.2f}/{values[-1]:.2f}")
            print(f"ledgers {ledgers:>7} {src}: {'  '.join(cells)}")


if __name__ == "__main__":
    main()
