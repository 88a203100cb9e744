"""``magnetar standalone``: metadata, bookies and HTTP in one process (``runtime.standalone``)."""

from __future__ import annotations

import typer

from magnetar.base.errors import InvalidArgumentError


def register(app: typer.Typer) -> None:
    @app.command("standalone")
    def standalone(
        data_dir: str = typer.Option(None, "--data-dir", help="data directory (default data/standalone)"),
        bookies: int = typer.Option(None, "--bookies", help="bookies in this process: 1 (E=Qw=Qa=1) or 3+ (3,3,2)"),
        host: str = typer.Option(None, "--host", help="address to listen on (default 127.0.0.1)"),
        broker_port: int = typer.Option(None, "--broker-port", help="Pulsar binary protocol port (default 6650)"),
        web_port: int = typer.Option(None, "--web-port", help="HTTP port for /metrics and /health (default 8080)"),
        bookie_port: int = typer.Option(None, "--bookie-port", help="first bookie's port (default 3181; bookie i uses 3181+i; 0 = any)"),
        cluster_name: str = typer.Option(None, "--cluster-name",
                                         help="this cluster's name for geo-replication (default standalone)"),
        broker_port_tls: int = typer.Option(None, "--broker-port-tls",
                                            help="pulsar+ssl:// port (Pulsar's 6651; 0 = any); needs TLS files"),
        web_port_tls: int = typer.Option(None, "--web-port-tls", help="HTTPS port (Pulsar's 8443; 0 = any)"),
        config: str = typer.Option(None, "--config", help="TOML file with a [standalone] section (and a [broker] one)"),
        pulsar_conf: str = typer.Option(None, "--pulsar-conf",
                                        help="a Pulsar standalone.conf/broker.conf (supported keys take effect)"),
    ) -> None:
        """Run Magnetar on one machine: embedded metadata store, bookies and HTTP endpoint."""
        from magnetar.broker import BrokerConfig
        from magnetar.runtime.config import load_config, read_toml, section_of
        from magnetar.runtime.pulsar_conf import read_pulsar_conf
        from magnetar.runtime.standalone import StandaloneConfig, main
        from magnetar.runtime.startup_checks import StartupConflictError
        from magnetar.storage import CookieMismatchError

        try:
            document = read_toml(config)
            pulsar = read_pulsar_conf(pulsar_conf)
            broker_values = {**pulsar.broker, **section_of(document, "broker")}
            if broker_port_tls is not None or web_port_tls is not None:  # a TLS port asked for is TLS on
                broker_values.setdefault("tls_enabled", True)
            load_config(BrokerConfig, "broker", file_values=broker_values)  # report mistakes before starting
            loaded = load_config(
                StandaloneConfig,
                "standalone",
                file_values={**pulsar.node, **section_of(document, "standalone")},
                overrides={
                    "broker_port_tls": broker_port_tls,
                    "web_port_tls": web_port_tls,
                    "data_dir": data_dir,
                    "bookies_count": bookies,
                    "host": host,
                    "broker_port": broker_port,
                    "web_port": web_port,
                    "bookie_port": bookie_port,
                    "cluster_name": cluster_name,
                },
            )
        except InvalidArgumentError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        try:
            main(loaded, broker_values)
        except InvalidArgumentError as exc:  # a key, certificate or htpasswd file that does not load
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        except StartupConflictError as exc:  # the directory or a port is taken: one line, no traceback
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None
        except CookieMismatchError as exc:  # a wiped or foreign bookie directory: refuse, say why
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(3) from None
        except OSError as exc:  # a port in use, an unwritable data directory
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None
