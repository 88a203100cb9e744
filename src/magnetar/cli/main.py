"""Entry point of the ``magnetar`` console script: one typer app, one module per command group."""

from __future__ import annotations

from typing import Any

import typer
from rich.console import Console

from magnetar import __version__
from magnetar.faults import REGISTRY, parse_specs

app = typer.Typer(
    name="magnetar",
    help="Magnetar: durable, replicated messaging that speaks the Pulsar protocol.",
    no_args_is_help=True,
    add_completion=False,
)
faults_app = typer.Typer(help="Named fault points (docs/faults.md).", no_args_is_help=True)
app.add_typer(faults_app, name="faults")


@app.command()
def version() -> None:
    """Print the Magnetar version."""
    typer.echo(__version__)


@faults_app.command("list")
def faults_list() -> None:
    """List every registered fault point with its code and meaning."""
    from magnetar.cli.output import print_table

    print_table(Console(), "Magnetar fault points", ("code", "name", "seed", "meaning"),
                [(p.code, p.name, p.seed_timing, p.meaning) for p in REGISTRY.values()])


@faults_app.command("check")
def faults_check(spec: str = typer.Argument(..., help="name:action[@N][,...] as in MAGNETAR_FAULTS")) -> None:
    """Validate a MAGNETAR_FAULTS value without arming anything."""
    try:
        specs = parse_specs(spec)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    for item in specs:
        typer.echo(str(item))


def _register_commands() -> None:
    """Attach the command modules; each exposes ``register(app)``."""
    from magnetar.cli import commands

    for register in commands.REGISTRARS:
        register(app)


def cli_command() -> Any:
    """The whole ``magnetar`` command tree as click runs it, with plain help (``cli.help``)."""
    from magnetar.cli.help import plain_help

    _register_commands()
    return plain_help(typer.main.get_command(app))


def main() -> None:
    cli_command()(prog_name="magnetar")
