"""``magnetar cluster up|status|down|add-broker|add-bookie``: a local cluster of real processes
(``runtime.cluster``). ``status`` also shows the load balancer's leader, the bundles per broker
and its last decisions; ``add-broker``/``add-bookie`` start one more process in a running cluster.

``up`` starts ZooKeeper, the bookies and the brokers on 127.0.0.1 (free ports, private data
directories under ``--dir``), shows their progress while it waits for each to be healthy, prints
ports, URLs and PIDs, writes ``DIR/cluster.json`` and returns, leaving them running. ``status``
reads that file and checks each process (alive, ZooKeeper ``ruok``, bookie port, broker
``/health``); exit 1 if any is unhealthy. ``down`` stops them all by PID.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from magnetar.cli.output import print_table

DEFAULT_DIR = "data/cluster"

cluster_app = typer.Typer(help="A local cluster of real processes: ZooKeeper, bookies, brokers.",
                          no_args_is_help=True)


def _table(cluster: object, console: Console) -> None:
    from magnetar.runtime.cluster import LocalCluster

    assert isinstance(cluster, LocalCluster)
    rows = []
    for status in cluster.status():
        process = cluster.processes[status.name]
        rows.append((status.name, str(status.pid or "-"), str(process.port), str(process.http_port or "-"),
                     "[green]yes[/green]" if status.healthy else "[red]no[/red]", escape(status.detail)))
    print_table(console, f"magnetar cluster in {cluster.base_dir}",
                ("name", "pid", "port", "http", "healthy", "detail"), rows)
    console.print(f"service URL  [bold]{cluster.service_url()}[/bold]")
    console.print(f"metadata URL {cluster.metadata_url}")
    for broker in cluster.of_kind("broker"):
        console.print(f"{broker.name} admin http://127.0.0.1:{broker.http_port}")
    read_only = cluster.read_only_service_url()
    if read_only is not None:
        console.print(f"[bold]read-only service URL:[/bold] {read_only} (consumers and readers only)")
    if cluster.service_url_tls() is not None:
        console.print("[bold]secure:[/bold] TLS, token/certificate authentication and authorization are on")
        for line in cluster.connect_help():
            console.print(line, soft_wrap=True, highlight=False, markup=False)


@cluster_app.command("up")
def up(
    directory: str = typer.Option(DEFAULT_DIR, "--dir", help="state, logs and data directories"),
    bookies: int = typer.Option(3, "--bookies", min=1, max=9, help="bookie processes"),
    brokers: int = typer.Option(2, "--brokers", min=1, max=9, help="broker processes"),
    read_only_brokers: int = typer.Option(0, "--read-only-brokers", min=0, max=9,
                                          help="read-only broker processes (serve reads of every topic, own none)"),
    ensemble: str = typer.Option("3,3,2", "--ensemble", help="E,Qw,Qa of new ledgers"),
    timeout_s: float = typer.Option(90.0, "--timeout-s", min=1, help="bound on the whole start-up"),
    autorecovery: bool = typer.Option(True, "--autorecovery/--no-autorecovery", help="run an AutoRecovery process"),
    secure: bool = typer.Option(False, "--secure", help="TLS, authentication and authorization, with a generated "
                                "CA, certificates and a superuser token"),
    name: str = typer.Option(None, "--name", help="the cluster's name for geo-replication (default dir: "
                             "data/cluster-NAME); link named clusters with `magnetar cluster link`"),
) -> None:
    """Start the cluster and leave it running (stop it with `magnetar cluster down`)."""
    from magnetar.runtime.cluster import STATE_FILE, LocalCluster

    console = Console(soft_wrap=True)
    base = Path(f"{DEFAULT_DIR}-{name}" if name and directory == DEFAULT_DIR else directory)
    if (base / STATE_FILE).exists() and any(p.alive() for p in LocalCluster.load(base).processes.values()):
        console.print(f"[red]error:[/red] a cluster is already running in {base}; `magnetar cluster down --dir {base}`")
        raise typer.Exit(1)
    try:
        e, qw, qa = (int(x) for x in ensemble.split(","))
    except ValueError:
        raise typer.BadParameter(f"--ensemble must be E,Qw,Qa, got {ensemble!r}") from None
    quorum = (min(e, bookies), min(qw, bookies), min(qa, bookies))
    try:
        cluster = LocalCluster(base, bookies=bookies, brokers=brokers, ensemble=quorum, autorecovery=autorecovery,
                               secure=secure, name=name, read_only_brokers=read_only_brokers)
    except (ValueError, RuntimeError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console) as progress:
        tasks = {name: progress.add_task(f"{name}: waiting", total=1) for name in cluster.processes}

        def report(name: str, state: str) -> None:
            progress.update(tasks[name], description=f"{name}: {state}", completed=1 if state == "ready" else 0)

        try:
            cluster.start(timeout_s=timeout_s, progress=report)
        except RuntimeError as exc:
            progress.stop()
            console.print(f"[red]error:[/red] {exc}")
            raise typer.Exit(1) from None
    _table(cluster, console)


@cluster_app.command("status")
def status(directory: str = typer.Option(DEFAULT_DIR, "--dir", help="the directory given to `up`")) -> None:
    """Check every process of the cluster; exit 1 if any is down or unhealthy."""
    from magnetar.runtime.cluster import STATE_FILE, LocalCluster

    console = Console(soft_wrap=True)
    if not (Path(directory) / STATE_FILE).exists():
        console.print(f"no cluster state in {directory}")
        raise typer.Exit(1)
    cluster = LocalCluster.load(Path(directory))
    _table(cluster, console)
    _balance(cluster, console)
    if not all(s.healthy for s in cluster.status()):
        raise typer.Exit(1)


@cluster_app.command("down")
def down(directory: str = typer.Option(DEFAULT_DIR, "--dir", help="the directory given to `up`")) -> None:
    """Stop every process of the cluster by PID (SIGTERM, then SIGKILL)."""
    from magnetar.runtime.cluster import STATE_FILE, LocalCluster

    console = Console(soft_wrap=True)
    if not (Path(directory) / STATE_FILE).exists():
        console.print(f"no cluster state in {directory}")
        return
    cluster = LocalCluster.load(Path(directory))
    running = [p.name for p in cluster.processes.values() if p.alive()]
    cluster.stop()
    console.print(f"stopped {len(running)} processes: {', '.join(running) or '-'}")


def _balance(cluster: object, console: Console) -> None:
    """The load balancer: leader, bundles per broker, last decisions."""
    from magnetar.runtime.cluster import LocalCluster
    from magnetar.runtime.cluster_balance import balance_status

    assert isinstance(cluster, LocalCluster)
    status = balance_status(cluster)
    console.print(f"leader broker {status.leader or '-'}")
    print_table(console, "bundles per broker", ("broker", "bundles", "topics"),
                [(name, str(len(bundles)), str(status.topics.get(name, 0)))
                 for name, bundles in sorted(status.bundles.items())])
    if status.decisions:
        print_table(console, "last load balancer decisions", ("time", "kind", "bundle", "from", "to", "reason"),
                    [(str(d.get("time", "")), str(d.get("kind", "")), str(d.get("bundle", "")),
                      str(d.get("from", "")), str(d.get("to") or "-"), escape(str(d.get("reason", ""))))
                     for d in status.decisions])


def _load_running(directory: str, console: Console) -> object:
    from magnetar.runtime.cluster import STATE_FILE, LocalCluster

    if not (Path(directory) / STATE_FILE).exists():
        console.print(f"no cluster state in {directory}")
        raise typer.Exit(1)
    return LocalCluster.load(Path(directory))


@cluster_app.command("add-broker")
def add_broker(directory: str = typer.Option(DEFAULT_DIR, "--dir", help="the directory given to `up`"),
               timeout_s: float = typer.Option(60.0, "--timeout-s", min=1)) -> None:
    """Start one more broker in the running cluster; the leader broker moves load to it."""
    from magnetar.runtime.cluster import LocalCluster

    console = Console()
    cluster = _load_running(directory, console)
    assert isinstance(cluster, LocalCluster)
    try:
        process = cluster.add_broker(timeout_s=timeout_s)
    except RuntimeError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None
    console.print(f"{process.name} ready: pulsar://127.0.0.1:{process.port} admin http://127.0.0.1:{process.http_port}")


@cluster_app.command("add-bookie")
def add_bookie(directory: str = typer.Option(DEFAULT_DIR, "--dir", help="the directory given to `up`"),
               rack: str = typer.Option(None, "--rack", help="its rack, /rack or /region/rack"),
               region: str = typer.Option(None, "--region", help="its region (stored as /region/rack)"),
               timeout_s: float = typer.Option(60.0, "--timeout-s", min=1)) -> None:
    """Start one more bookie in the running cluster; new ledgers may use it at once."""
    from magnetar.base.errors import InvalidArgumentError
    from magnetar.ledger.racks import rack_with_region
    from magnetar.runtime.cluster import LocalCluster

    console = Console()
    if region:
        try:
            rack = rack_with_region(rack or "", region)
        except InvalidArgumentError as exc:
            console.print(f"[red]error:[/red] {exc}")
            raise typer.Exit(2) from None
    cluster = _load_running(directory, console)
    assert isinstance(cluster, LocalCluster)
    try:
        process = cluster.add_bookie(rack=rack, timeout_s=timeout_s)
    except RuntimeError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None
    console.print(f"{process.name} ready: 127.0.0.1:{process.port}" + (f" rack {rack}" if rack else ""))


def register(app: typer.Typer) -> None:
    app.add_typer(cluster_app, name="cluster")
