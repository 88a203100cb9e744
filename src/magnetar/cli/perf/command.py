"""``magnetar perf produce|consume|e2e``: the command line over ``run_perf`` (and ``--blast``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import typer
from rich.console import Console
from rich.live import Live
from rich.text import Text

from magnetar.base.errors import InvalidArgumentError
from magnetar.cli.perf.processes import run_perf
from magnetar.cli.perf.settings import PerfSettings
from magnetar.cli.perf.stats import summary_lines
from magnetar.cli.produce import DEFAULT_SERVICE_URL


def _cli(mode: str, **options: Any) -> None:
    console = Console()
    json_path = options.pop("json_path")
    try:
        settings = PerfSettings(mode=mode, **options)
    except InvalidArgumentError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    if console.is_terminal:
        live = Live(Text("starting..."), console=console, refresh_per_second=4, transient=False)
        with live:
            result = _guarded(console, settings, lambda line: live.update(Text(line)))
    else:
        result = _guarded(console, settings, lambda line: console.print(line, highlight=False))
    result["command"] = " ".join(["magnetar", *sys.argv[1:]])
    for line in summary_lines(result):
        console.print(line, highlight=False)
    for error in result["errors"]:
        console.print(f"[red]error:[/red] {error}")
    if json_path:
        with open(json_path, "w") as out:
            json.dump(result, out, indent=2)
        console.print(f"results written to {json_path}")
    moved = sum(result[side]["count"] for side in ("publish", "receive") if side in result)
    failed = sum(result[side]["failed"] for side in ("publish", "receive") if side in result)
    if moved == 0 or failed:
        raise typer.Exit(1)


def _guarded(console: Console, settings: PerfSettings, on_tick: Callable[[str], None]) -> dict[str, Any]:
    try:
        return run_perf(settings, on_tick)
    except InvalidArgumentError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    except Exception as exc:  # the official client raises its own exception types
        console.print(f"[red]error:[/red] {type(exc).__name__}: {exc}")
        raise typer.Exit(1) from None


def register(app: typer.Typer) -> None:
    perf_app = typer.Typer(help="Load generator (pulsar-perf style) with the official client.", no_args_is_help=True)
    app.add_typer(perf_app, name="perf")

    def command(mode: str, doc: str) -> None:
        def run(
            topic: str = typer.Argument("perf", help="topic name, or the prefix of --topics names"),
            service_url: str = typer.Option(DEFAULT_SERVICE_URL, "--service-url", "-u"),
            topics: int = typer.Option(1, "--topics", "-t", help="number of topics"),
            partitions: int = typer.Option(0, "--partitions", help="partitions per topic (0 = not partitioned)"),
            producers: int = typer.Option(1, "--producers", help="producers per topic"),
            consumers: int = typer.Option(1, "--consumers", help="consumers per topic"),
            size: int = typer.Option(1024, "--size", "-s", help="message payload bytes"),
            rate: float = typer.Option(0.0, "--rate", "-r", help="messages/s over all producers (0 = max)"),
            batching: bool = typer.Option(True, "--batching/--no-batching"),
            batch_max_messages: int = typer.Option(1000, "--batch-max-messages"),
            batch_delay_ms: int = typer.Option(10, "--batch-delay-ms"),
            max_pending: int = typer.Option(1000, "--max-pending", help="pending messages per producer"),
            burst: int = typer.Option(1, "--burst", help="messages to one producer before the next one's turn"),
            max_outstanding: int = typer.Option(0, "--max-outstanding",
                                                help="messages awaiting receipt over all producers (0 = no bound)"),
            duration_s: float = typer.Option(10.0, "--duration", "-d", help="seconds (always bounded)"),
            messages: int = typer.Option(0, "--messages", "-m", help="stop after this many (0 = duration only)"),
            subscription: str = typer.Option("perf-sub", "--subscription"),
            subscription_type: str = typer.Option("exclusive", "--subscription-type"),
            receiver_queue: int = typer.Option(1000, "--receiver-queue"),
            earliest: bool = typer.Option(False, "--earliest", help="new subscriptions start at the earliest"),
            windows: int = typer.Option(1, "--windows", help="measured windows of --duration each (same clients)"),
            operation_timeout_s: int = typer.Option(30, "--operation-timeout", help="seconds per create/close"),
            processes: int = typer.Option(1, "--processes",
                                          help="client processes, each with its own client and a share of the load"),
            json_path: str = typer.Option(None, "--json", help="write the results to this JSON file"),
            token: str = typer.Option(None, "--token", envvar="MAGNETAR_TOKEN", help="JWT, or file:///path to one"),
            tls_trust_cert: str = typer.Option(None, "--tls-trust-cert", help="CA file for pulsar+ssl:// URLs"),
            client_tuning: bool = typer.Option(True, "--client-tuning/--no-client-tuning",
                                               help="this process's GIL switch interval and GC set for the run"),
            split: bool = typer.Option(False, "--split", help="e2e: producers in one client process, consumers "
                                       "in another (no GIL shared by receipts and received messages)"),
            blast: bool = typer.Option(False, "--blast", help="produce only: pre-encoded SEND frames, pipelined up to "
                                       "--max-pending per process, --processes processes (the broker's ingest limit)"),
            blast_batch: int = typer.Option(1, "--blast-batch", help="with --blast: messages per SEND frame (one "
                                            "batch entry; 1 = unbatched); --max-pending then counts frames"),
        ) -> None:
            from magnetar.cli.credentials import Credentials

            if blast:
                _blast_cli(mode, service_url=service_url, topic=topic, size=size, duration_s=duration_s,
                           window=max_pending, processes=processes, json_path=json_path, batch=blast_batch)
                return

            try:
                credentials = Credentials.from_options(token=token, tls_trust_cert=tls_trust_cert)
            except InvalidArgumentError as exc:
                raise typer.BadParameter(str(exc)) from None
            _cli(mode, token=credentials.data.decode() or None, tls_trust_cert=tls_trust_cert,
                 service_url=service_url, topic=topic, topics=topics, partitions=partitions,
                 producers=producers, consumers=consumers, size=size, rate=rate, batching=batching,
                 batch_max_messages=batch_max_messages, batch_delay_ms=batch_delay_ms, max_pending=max_pending, burst=burst,
                 max_outstanding=max_outstanding,
                 duration_s=duration_s, messages=messages, subscription=subscription,
                 subscription_type=subscription_type, receiver_queue=receiver_queue, earliest=earliest,
                 windows=windows, operation_timeout_s=operation_timeout_s, processes=2 if split else processes,
                 client_tuning=client_tuning, split=split, json_path=json_path)

        run.__doc__ = doc
        perf_app.command(mode)(run)

    command("produce", "Publish at a rate (or as fast as possible) and report publish latency.")
    command("consume", "Receive and acknowledge, and report the end-to-end latency of perf-produced messages.")
    command("e2e", "Produce and consume in one process: publish and end-to-end latency.")


def _blast_cli(mode: str, *, service_url: str, topic: str, size: int, duration_s: float, window: int,
               processes: int, json_path: str | None, batch: int = 1) -> None:
    from magnetar.cli.blast import run_blast

    if mode != "produce":
        raise typer.BadParameter("--blast is a produce option")
    try:
        result = run_blast(service_url, topic, size=size, seconds=duration_s, window=window, processes=processes,
                           batch=batch)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    typer.echo(f"blast: {result['acked']:,} acknowledged of {result['sent']:,} sent ({result['failed']} failed) "
               f"in {result['elapsed_s']:.1f} s: {result['msgs_s']:,.0f} msg/s {result['mb_s']:.1f} MB/s, "
               f"p50 {result['p50_ms']:.2f} p99 {result['p99_ms']:.2f} ms, "
               f"client CPU {result['client_cpu_us_per_msg']:.1f} us/msg (busiest process "
               f"{result['client_cpu_pct_max']:.0f}% of a core), {processes} process(es), {batch} message(s) per SEND")
    if json_path:
        with open(json_path, "w") as out:
            json.dump(result, out, indent=1)
