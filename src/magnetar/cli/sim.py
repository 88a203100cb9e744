"""``magnetar sim``: run a simulation scenario with a seed, print its trace and verdict.

The same seed replays the same run byte for byte. String hashing is randomised per process
unless ``PYTHONHASHSEED`` is set, so the command re-executes itself with ``PYTHONHASHSEED=0``
first: nothing in a run may then depend on it, even by accident. Exit code 1 on a violation.

``cluster`` is the whole stack (metadata store, bookies, brokers, our client) under every kind
of fault, judged by the Jepsen-queue checker (``docs/simulation.md``). ``ledger-matrix`` (one
replicated ledger over real bookie cores under one kind of fault) is registered here with the
bookie protocol server it is given (``node.bookie.BookieServer``). Its options: ``--ensemble``/``--write-quorum``/
``--ack-quorum``, ``--fault`` (one of ``ledger_matrix.FAULTS``), ``--ops`` (entries written).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from magnetar.sim import SimWorld
    from magnetar.sim.scenarios.base import Verdict

HASH_SEED_ENV = "PYTHONHASHSEED"
LEDGER_MATRIX = "ledger-matrix"
LEDGER_MATRIX_OPS_DEFAULT = 30  # entries the writer appends (MatrixOptions' default)
OPS_DEFAULT = 50
CLUSTER = "cluster"
CLUSTER_OPS_DEFAULT = 12  # messages per producer (ClusterOptions' default)
SOAK_PROGRESS_EVERY = 200  # --seeds: a progress line after every this many seeds


def _reexec_with_fixed_hash_seed() -> None:
    if os.environ.get(HASH_SEED_ENV) is not None:
        return
    env = dict(os.environ, **{HASH_SEED_ENV: "0"})
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


def _run_ledger_matrix(
    seed: int, ops: int, breaks: frozenset[str], fault: str, quorum: tuple[int, int, int]
) -> tuple[SimWorld, Verdict]:
    from magnetar.node.bookie import BookieServer
    from magnetar.sim import SimWorld
    from magnetar.sim.scenarios.ledger_matrix import MatrixOptions, run_matrix

    ensemble, write_quorum, ack_quorum = quorum
    if not ensemble >= write_quorum >= ack_quorum >= 1:
        raise ValueError(f"need E >= Qw >= Qa >= 1, got ({ensemble},{write_quorum},{ack_quorum})")
    world = SimWorld(seed)
    options = MatrixOptions(ensemble, write_quorum, ack_quorum, fault=fault, entries_count=ops, breaks=breaks)
    return world, run_matrix(world, options, BookieServer)


def sim(
    seed: int | None = typer.Option(None, "--seed", help="Seed of the run (required); the same seed replays it exactly."),
    scenario: str = typer.Option("durable-log", "--scenario", help="Scenario to run."),
    ops: int = typer.Option(None, "--ops", "--steps", min=1,
                            help="Operations per client (entries written in ledger-matrix)."),
    breaks: list[str] = typer.Option(
        [], "--break", help="Negative control: break a mechanism on purpose (e.g. ack-before-fsync)."
    ),
    fault: str = typer.Option("bookie-restart", "--fault", help="ledger-matrix: the kind of fault injected."),
    ensemble: int = typer.Option(3, "--ensemble", "-E", min=1, help="ledger-matrix: ensemble size E."),
    write_quorum: int = typer.Option(3, "--write-quorum", "--qw", min=1, help="ledger-matrix: write quorum Qw."),
    ack_quorum: int = typer.Option(2, "--ack-quorum", "--qa", min=1, help="ledger-matrix: ack quorum Qa."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only the verdict."),
    list_scenarios: bool = typer.Option(False, "--list", help="List scenarios and their breaks, then exit."),
    seeds: str = typer.Option("", "--seeds", help="cluster: run seeds FROM-TO (inclusive) and print a summary."),
    time_limit_s: float = typer.Option(0.0, "--time-limit-s", min=0.0,
                                       help="--seeds: stop starting new seeds after this long (0: no limit)."),
    jobs: int = typer.Option(1, "--jobs", "-j", min=1, max=16,
                             help="--seeds: worker processes running seeds side by side."),
) -> None:
    """Run a deterministic simulation: same seed, same trace."""
    _reexec_with_fixed_hash_seed()
    from magnetar.sim.scenarios import BREAKS, SCENARIOS, ScenarioOptions, ledger_matrix, run_scenario

    if list_scenarios:
        for name in SCENARIOS:
            typer.echo(f"{name}  breaks: {', '.join(sorted(BREAKS.get(name, ()))) or '-'}")
        typer.echo(f"{LEDGER_MATRIX}  breaks: {', '.join(sorted(ledger_matrix.BREAKS))}  "
                   f"faults: {', '.join(ledger_matrix.FAULTS)}")
        return
    if seeds:
        _soak(seeds, ops or CLUSTER_OPS_DEFAULT, frozenset(breaks), time_limit_s, jobs)
        return
    if seed is None:
        typer.echo("error: --seed is required (e.g. magnetar sim --seed 1); --list shows the scenarios", err=True)
        raise typer.Exit(2)
    try:
        if scenario == LEDGER_MATRIX:
            world, verdict = _run_ledger_matrix(
                seed, ops or LEDGER_MATRIX_OPS_DEFAULT, frozenset(breaks), fault, (ensemble, write_quorum, ack_quorum)
            )
        else:
            default_ops = CLUSTER_OPS_DEFAULT if scenario == CLUSTER else OPS_DEFAULT
            world, verdict = run_scenario(
                scenario, seed, ScenarioOptions(ops_count=ops or default_ops, breaks=frozenset(breaks))
            )
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if not quiet:
        typer.echo(world.trace_text(), nl=False)
    label = scenario
    if scenario == LEDGER_MATRIX:
        label = f"{scenario} fault {fault} quorum ({ensemble},{write_quorum},{ack_quorum})"
    typer.echo(f"seed {seed} scenario {label}")
    typer.echo(verdict.text())
    if not verdict.ok:
        raise typer.Exit(1)


def _soak(seeds: str, ops: int, breaks: frozenset[str], time_limit_s: float, jobs: int) -> None:
    """Run the cluster scenario on every seed of ``FROM-TO`` (``jobs`` worker processes); one line
    per failed seed as it is found, then the totals, the wall time and the rate."""
    import time

    from magnetar.sim.scenarios.cluster import ClusterOptions, ClusterResult
    from magnetar.sim.soak import run_many

    first, sep, last = seeds.partition("-")
    if not sep or not first.isdigit() or not last.isdigit() or int(first) > int(last):
        typer.echo(f"error: --seeds must be FROM-TO, got {seeds!r}", err=True)
        raise typer.Exit(2)
    started = time.monotonic()
    options = ClusterOptions(messages_per_producer=ops, breaks=breaks)

    def out_of_time() -> bool:
        return bool(time_limit_s) and time.monotonic() - started > time_limit_s

    done: list[int] = []

    def on_result(number: int, result: ClusterResult) -> None:
        done.append(number)
        if not result.verdict.ok:
            typer.echo(f"seed {number}: {result.verdict.text()}", err=True)
        if len(done) % SOAK_PROGRESS_EVERY == 0:
            elapsed_s = time.monotonic() - started
            typer.echo(f"progress: {len(done)} seeds in {elapsed_s:.0f} s ({len(done) / elapsed_s:.2f} seeds/s)",
                       err=True)

    wanted = range(int(first), int(last) + 1)
    report = run_many(wanted, options, jobs=jobs, should_stop=out_of_time, on_result=on_result)
    wall_s = time.monotonic() - started
    if report.seeds_count < len(wanted):
        typer.echo(f"time limit of {time_limit_s:.0f} s reached after {report.seeds_count} of {len(wanted)} seeds")
    typer.echo(f"{report.text()}, wall {wall_s:.0f} s, {report.seeds_count / max(wall_s, 1e-9):.2f} seeds/s "
               f"({jobs} worker process{'es' if jobs > 1 else ''})")
    if report.failed_seeds:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("sim")(sim)
