"""``magnetar produce``: publish messages with Magnetar's own client (``magnetar.client``).

Also home of ``connect(url)``, the composition root that gives the client the real network,
clock and randomness from ``magnetar.runtime``. Bounded: ``--count`` messages, ``--timeout-s``
for the whole run.
"""

from __future__ import annotations

import asyncio
import dataclasses

import typer
from rich.console import Console

from magnetar.base.errors import InvalidArgumentError, MagnetarError
from magnetar.cli.credentials import Credentials
from magnetar.client import ClientOptions, Compression, MessageId, PulsarClient

DEFAULT_SERVICE_URL = "pulsar://127.0.0.1:6650"


def connect(service_url: str = DEFAULT_SERVICE_URL, options: ClientOptions | None = None,
            credentials: Credentials | None = None) -> PulsarClient:
    """A client over real TCP with the system clock (call it inside a running event loop); with
    ``credentials`` it authenticates, and a ``pulsar+ssl://`` URL is reached over TLS."""
    from magnetar.runtime import SystemClock, TcpNetwork, system_rng

    credentials = credentials or Credentials()
    options = dataclasses.replace(options or ClientOptions(), auth_method_name=credentials.method,
                                  auth_data=credentials.data or None)
    client_ssl = credentials.ssl_context() if service_url.startswith("pulsar+ssl://") else None
    return PulsarClient(service_url, network=TcpNetwork(client_ssl_context=client_ssl), clock=SystemClock(),
                        rng=system_rng(), options=options)


def credentials_of(token: str | None, auth_plugin: str | None, auth_params: str | None, tls_trust_cert: str | None,
                   tls_cert: str | None, tls_key: str | None) -> Credentials:
    try:
        return Credentials.from_options(token=token, auth_plugin=auth_plugin, auth_params=auth_params,
                                        tls_trust_cert=tls_trust_cert, tls_cert=tls_cert, tls_key=tls_key)
    except InvalidArgumentError as error:
        raise typer.BadParameter(str(error)) from None


TOKEN_OPTION = typer.Option(None, "--token", envvar="MAGNETAR_TOKEN", help="JWT, or file:///path to one")
AUTH_PLUGIN_OPTION = typer.Option(None, "--auth-plugin", help="token, basic or tls (or Pulsar's class names)")
AUTH_PARAMS_OPTION = typer.Option(None, "--auth-params", help="token:JWT, user:password, tlsCertFile:..,tlsKeyFile:..")
TLS_TRUST_OPTION = typer.Option(None, "--tls-trust-cert", help="CA file for pulsar+ssl:// URLs")
TLS_CERT_OPTION = typer.Option(None, "--tls-cert", help="client certificate (mTLS)")
TLS_KEY_OPTION = typer.Option(None, "--tls-key", help="client certificate's key")


def parse_properties(items: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"property {item!r} is not key=value")
        out[key] = value
    return out


async def produce(service_url: str, topic: str, messages: list[str], count: int, key: str | None,
                  properties: dict[str, str], batching: bool, compression: Compression,
                  timeout_s: float, credentials: Credentials | None = None) -> list[MessageId]:
    options = ClientOptions(operation_timeout_ms=max(1, int(timeout_s * 1000)),
                            connection_timeout_ms=max(1, min(10_000, int(timeout_s * 1000))))
    client = connect(service_url, options, credentials)
    try:
        producer = await client.create_producer(topic, batching_enabled=batching, compression=compression,
                                                send_timeout_ms=max(1, int(timeout_s * 1000)))
        futures = []
        for _ in range(count):
            for text in messages:
                futures.append(await producer.send_async(text.encode(), key=key, properties=properties))
        ids = list(await asyncio.gather(*futures))
        await producer.close()
        return ids
    finally:
        await client.close()


def register(app: typer.Typer) -> None:
    @app.command("produce")
    def produce_command(
        topic: str = typer.Argument(..., help="topic name (short or persistent://tenant/ns/topic)"),
        message: list[str] = typer.Option(..., "--message", "-m", help="message text (repeatable)"),
        count: int = typer.Option(1, "--count", "-n", min=1, max=1_000_000, help="times to send each message"),
        service_url: str = typer.Option(DEFAULT_SERVICE_URL, "--service-url", "-u"),
        key: str = typer.Option(None, "--key", "-k", help="partition key of every message"),
        prop: list[str] = typer.Option(None, "--property", "-p", help="key=value property (repeatable)"),
        batching: bool = typer.Option(False, "--batch/--no-batch", help="batch messages"),
        compression: str = typer.Option("none", "--compression", help="none, lz4, zlib, zstd or snappy"),
        timeout_s: float = typer.Option(30.0, "--timeout-s", min=0.1, help="bound on the whole run"),
        token: str = TOKEN_OPTION, auth_plugin: str = AUTH_PLUGIN_OPTION, auth_params: str = AUTH_PARAMS_OPTION,
        tls_trust_cert: str = TLS_TRUST_OPTION, tls_cert: str = TLS_CERT_OPTION, tls_key: str = TLS_KEY_OPTION,
    ) -> None:
        """Publish messages to a topic and print their message ids."""
        console = Console(soft_wrap=True)
        credentials = credentials_of(token, auth_plugin, auth_params, tls_trust_cert, tls_cert, tls_key)
        try:
            codec = Compression[compression.upper()]
        except KeyError:
            raise typer.BadParameter(f"unknown compression {compression!r}") from None
        properties = parse_properties(prop)
        try:
            ids = asyncio.run(asyncio.wait_for(
                produce(service_url, topic, message, count, key, properties, batching, codec, timeout_s, credentials),
                timeout=timeout_s + 5))
        except (MagnetarError, OSError, TimeoutError) as exc:
            console.print(f"[red]error:[/red] {type(exc).__name__}: {exc}")
            raise typer.Exit(1) from None
        for msg_id in ids[:20]:
            console.print(f"[green]sent[/green] {msg_id}")
        if len(ids) > 20:
            console.print(f"... and {len(ids) - 20} more")
        console.print(f"[bold]{len(ids)} messages produced[/bold] to {topic}")
