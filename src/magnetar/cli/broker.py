"""``magnetar broker``: a stateless cluster broker over ZooKeeper (``runtime.broker_node``)."""

from __future__ import annotations

import typer

from magnetar.base.errors import InvalidArgumentError


def _quorum(text: str | None) -> tuple[int | None, int | None, int | None]:
    if text is None:
        return None, None, None
    parts = text.split(",")
    if len(parts) != 3 or not all(p.strip().isdigit() for p in parts):
        raise InvalidArgumentError(f"--ensemble must be E,Qw,Qa (e.g. 3,3,2), got {text!r}")
    e, qw, qa = (int(p) for p in parts)
    return e, qw, qa


#: The standalone's port names (what ``runtime.pulsar_conf`` produces) as ``BrokerNodeConfig`` names.
_NODE_NAMES = {"broker_port": "port", "broker_port_tls": "port_tls", "web_port": "http_port",
               "web_port_tls": "http_port_tls", "host": "host"}


def register(app: typer.Typer) -> None:
    @app.command("broker")
    def broker(
        metadata: str = typer.Option(None, "--metadata", help="metadata store URL (zk://host:port/chroot)"),
        port: int = typer.Option(None, "--port", help="Pulsar protocol port (default 6650; 0 = any free one)"),
        http_port: int = typer.Option(None, "--http-port", help="HTTP port: /health, /metrics, admin (default 8080)"),
        host: str = typer.Option(None, "--host", help="address to listen on (default 127.0.0.1)"),
        advertised_address: str = typer.Option(None, "--advertised-address", help="address clients are sent to"),
        ensemble: str = typer.Option(None, "--ensemble", help="E,Qw,Qa of new ledgers (default 3,3,2)"),
        session_timeout_ms: int = typer.Option(None, "--session-timeout-ms", help="metadata session timeout"),
        cluster_name: str = typer.Option(None, "--cluster-name", help="cluster name (producer-name prefix)"),
        port_tls: int = typer.Option(None, "--port-tls", help="pulsar+ssl:// port (Pulsar's 6651; 0 = any)"),
        http_port_tls: int = typer.Option(None, "--http-port-tls", help="HTTPS port (Pulsar's 8443; 0 = any)"),
        config: str = typer.Option(None, "--config", help="TOML file with a broker section"),
        read_only: bool = typer.Option(None, "--read-only",
                                       help="serve reads of topics owned by other brokers; own nothing, write nothing"),
        pulsar_conf: str = typer.Option(None, "--pulsar-conf",
                                        help="a Pulsar broker.conf (supported keys take effect)"),
    ) -> None:
        """Run a broker: serves the topics of the bundles it owns, over the bookies in the metadata store."""
        import dataclasses

        from magnetar.broker import BrokerConfig
        from magnetar.runtime.broker_node import BrokerNodeConfig, main
        from magnetar.runtime.config import load_config, read_toml, section_of
        from magnetar.runtime.pulsar_conf import read_pulsar_conf

        try:
            e, qw, qa = _quorum(ensemble)
            section = section_of(read_toml(config), "broker")
            node_fields = {f.name for f in dataclasses.fields(BrokerNodeConfig)}
            broker_fields = {f.name for f in dataclasses.fields(BrokerConfig)}
            pulsar = read_pulsar_conf(pulsar_conf)
            # the [broker] section holds both the node's keys and the broker's (authentication, TLS...)
            node_values = {_NODE_NAMES.get(k, k): v for k, v in pulsar.node.items() if _NODE_NAMES.get(k, k)}
            node_values |= {k: v for k, v in section.items() if k in node_fields or k not in broker_fields}
            broker_values = {**pulsar.broker,
                             **{k: v for k, v in section.items() if k in broker_fields and k not in node_fields}}
            if port_tls is not None or http_port_tls is not None:  # a TLS port asked for is TLS on
                broker_values.setdefault("tls_enabled", True)
            if "cluster_name" in pulsar.broker and "cluster_name" not in node_values:
                node_values["cluster_name"] = pulsar.broker["cluster_name"]
            load_config(BrokerConfig, "broker", file_values=broker_values)  # report mistakes before starting
            loaded = load_config(
                BrokerNodeConfig,
                "broker",
                file_values=node_values,
                overrides={
                    "port_tls": port_tls, "http_port_tls": http_port_tls,
                    "metadata_url": metadata, "port": port, "http_port": http_port, "host": host,
                    "advertised_address": advertised_address, "ensemble_size": e, "write_quorum_size": qw,
                    "ack_quorum_size": qa, "session_timeout_ms": session_timeout_ms, "cluster_name": cluster_name,
                    "read_only": read_only,
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
        except OSError as exc:  # a port in use
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None
