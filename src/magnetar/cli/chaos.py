"""``magnetar chaos``: a fault schedule against real processes, the workload, and the checker.

Exit status: 0 when the checker found no violation, 1 when it did, 2 on bad arguments.
``--check FILE`` re-checks a recorded history without running anything.
"""

from __future__ import annotations

from pathlib import Path

import typer

from magnetar.base.errors import InvalidArgumentError


def register(app: typer.Typer) -> None:
    @app.command("chaos")
    def chaos(
        scenario: str = typer.Option("smoke", "--scenario", help="seed-matrix | every-point | random | smoke | zombie"),
        injections: int = typer.Option(10, "--injections", min=0, help="fault injections of --scenario random"),
        seed: int = typer.Option(1, "--seed", help="seed of the schedule (which points, hits, processes)"),
        breaks: list[str] = typer.Option([], "--break", help="negative control: ack-before-fsync | no-fencing | "
                                          "truncate-to-lac (the checker must then report loss)"),
        out: Path = typer.Option(Path("chaos-out"), "--out", help="directory for history.json, result.json, logs"),
        target: str = typer.Option("standalone", "--target", help="standalone (3 bookies, one process) | cluster"),
        bookies: int = typer.Option(3, "--bookies", min=3, help="bookies of a cluster target"),
        brokers: int = typer.Option(2, "--brokers", min=1, help="brokers of a cluster target"),
        settle_s: float = typer.Option(2.0, "--settle-s", min=0.0, help="traffic between two injections"),
        run_s_max: float = typer.Option(3600.0, "--run-s-max", help="stop injecting after this long"),
        send_interval_s: float = typer.Option(0.0, "--send-interval-s", min=0.0,
                                              help="pause between two sends of a producer (smaller histories)"),
        topics: int = typer.Option(1, "--topics", min=1, help="topics of the workload"),
        check_file: Path = typer.Option(None, "--check", help="only check this history.json"),
    ) -> None:
        """Inject faults into real Magnetar processes under an official-client workload; check the history."""
        from rich.console import Console
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        from magnetar.chaos.report import print_summary
        from magnetar.chaos.runner import RunConfig, Runner
        from magnetar.sim.checker import check
        from magnetar.sim.history import History

        console = Console()
        if check_file is not None:
            result = check(History.from_json(check_file.read_text()))
            print_summary(console, result, title=str(check_file))
            raise typer.Exit(0 if result.valid else 1)
        try:
            config = RunConfig(scenario=scenario, out_dir=out, injections=injections, seed=seed,
                               breaks=tuple(breaks), target=target, bookies=bookies, brokers=brokers,
                               settle_s=settle_s, run_s_max=run_s_max, send_interval_s=send_interval_s,
                               topics=topics)
        except InvalidArgumentError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TextColumn("{task.completed}/{task.total}"),
                      TimeElapsedColumn(), console=console) as progress:
            task = progress.add_task(f"chaos {scenario}", total=None)

            def on_event(text: str) -> None:
                progress.console.print(text)
                progress.update(task, description=text.strip()[:80])

            def on_progress(done: int, total: int) -> None:
                progress.update(task, completed=done, total=total)

            try:
                outcome = Runner(config, on_event, on_progress).run()
            except InvalidArgumentError as exc:
                typer.echo(f"error: {exc}", err=True)
                raise typer.Exit(2) from None
        print_summary(console, outcome.result, title=f"chaos {scenario} seed={seed} breaks={list(breaks)}")
        console.print(f"steps: {outcome.steps_done}; points reached: {sorted(outcome.reached)}; "
                      f"not reached: {sorted(outcome.not_reached)}")
        console.print(f"history: {out / 'history.json'}  result: {out / 'result.json'}")
        raise typer.Exit(0 if outcome.result.valid else 1)
