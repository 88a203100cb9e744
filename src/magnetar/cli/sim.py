"""``magnetar sim``: run a simulation scenario with a seed, print its trace and verdict.

The same seed replays the same run byte for byte. String hashing is randomised per process
unless ``PYTHONHASHSEED`` is set, so the command re-executes itself with ``PYTHONHASHSEED=0``
first: nothing in a run may then depend on it, even by accident. Exit code 1 on a violation.
"""

from __future__ import annotations

import os
import sys

import typer

HASH_SEED_ENV = "PYTHONHASHSEED"


def _reexec_with_fixed_hash_seed() -> None:
    if os.environ.get(HASH_SEED_ENV) is not None:
        return
    env = dict(os.environ, **{HASH_SEED_ENV: "0"})
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


def sim(
    seed: int = typer.Option(..., "--seed", help="Seed of the run; the same seed replays it exactly."),
    scenario: str = typer.Option("durable-log", "--scenario", help="Scenario to run."),
    ops: int = typer.Option(50, "--ops", "--steps", min=1, help="Operations per client."),
    breaks: list[str] = typer.Option(
        [], "--break", help="Negative control: break a mechanism on purpose (e.g. ack-before-fsync)."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only the verdict."),
    list_scenarios: bool = typer.Option(False, "--list", help="List scenarios and their breaks, then exit."),
) -> None:
    """Run a deterministic simulation: same seed, same trace."""
    _reexec_with_fixed_hash_seed()
    from magnetar.sim.scenarios import BREAKS, SCENARIOS, ScenarioOptions, run_scenario

    if list_scenarios:
        for name in SCENARIOS:
            typer.echo(f"{name}  breaks: {', '.join(sorted(BREAKS.get(name, ()))) or '-'}")
        return
    try:
        world, verdict = run_scenario(scenario, seed, ScenarioOptions(ops_count=ops, breaks=frozenset(breaks)))
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if not quiet:
        typer.echo(world.trace_text(), nl=False)
    typer.echo(f"seed {seed} scenario {scenario}")
    typer.echo(verdict.text())
    if not verdict.ok:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("sim")(sim)
