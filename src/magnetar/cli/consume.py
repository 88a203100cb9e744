"""``magnetar consume``: receive (and acknowledge) messages with Magnetar's own client.

Bounded: stops after ``--count`` messages (0: until the timeout) or ``--timeout-s``, whichever
comes first; exits 1 if fewer than ``--count`` messages arrived, and says so ("received N of M
within the timeout").

A subscription that starts at ``earliest`` can only start at the first message still stored: on a
topic with no subscription and no retention policy the broker trims every ledger but the last
(Pulsar's rule). When the subscription started at the first stored message (a reader from
earliest sees the same one) and that message is not its producer's first (producers number
their messages from 0), the earlier ones were trimmed, and the command says so (``trim_note``).
"""

from __future__ import annotations

import asyncio

import typer
from rich.console import Console
from rich.markup import escape

from magnetar.base.errors import MagnetarError, OperationTimeoutError
from magnetar.cli.credentials import Credentials
from magnetar.cli.produce import (
    AUTH_PARAMS_OPTION,
    AUTH_PLUGIN_OPTION,
    DEFAULT_SERVICE_URL,
    TLS_CERT_OPTION,
    TLS_KEY_OPTION,
    TLS_TRUST_OPTION,
    TOKEN_OPTION,
    connect,
    credentials_of,
)
from magnetar.client import ClientOptions, InitialPosition, Message, SubscriptionType
from magnetar.client.client import PulsarClient
from magnetar.client.message import EARLIEST

#: How long ``consume`` waits for the first stored message when it checks for trimmed ones.
FIRST_STORED_TIMEOUT_MS = 2_000


async def consume(service_url: str, topic: str, subscription: str, count: int, sub_type: SubscriptionType,
                  position: InitialPosition, timeout_s: float, console: Console,
                  credentials: Credentials | None = None) -> list[Message]:
    options = ClientOptions(operation_timeout_ms=max(1, int(timeout_s * 1000)),
                            connection_timeout_ms=max(1, min(10_000, int(timeout_s * 1000))))
    client = connect(service_url, options, credentials)
    received: list[Message] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    try:
        consumer = await client.subscribe(topic, subscription, subscription_type=sub_type, initial_position=position)
        while count == 0 or len(received) < count:
            remaining_ms = int((deadline - loop.time()) * 1000)
            if remaining_ms <= 0:
                break
            try:
                message = await consumer.receive(timeout_ms=remaining_ms)
            except OperationTimeoutError:
                break
            received.append(message)
            key = f" key={escape(message.key)}" if message.key is not None else ""
            props = f" props={escape(str(message.properties))}" if message.properties else ""
            console.print(f"[cyan]{message.message_id}[/cyan]{key}{props} {escape(message.value())}")
            consumer.acknowledge(message)
        await consumer.flush_acks()
        await consumer.close()
        if position is InitialPosition.EARLIEST and received and received[0].sequence_id > 0:
            first_stored = await _first_stored(client, topic, max(1, int((deadline - loop.time()) * 1000)))
            note = trim_note(received[0], first_stored)
            if note:
                console.print(f"[yellow]note:[/yellow] {escape(note)}")
        return received
    finally:
        await client.close()


async def _first_stored(client: PulsarClient, topic: str, timeout_ms: int) -> Message | None:
    """The first message the topic still stores (a reader from earliest), or None."""
    try:
        reader = await client.create_reader(topic, EARLIEST)
        try:
            return await reader.read_next(timeout_ms=min(timeout_ms, FIRST_STORED_TIMEOUT_MS))
        finally:
            await reader.close()
    except MagnetarError:  # a partitioned topic, or nothing within the bound: say nothing
        return None


def trim_note(first_received: Message, first_stored: Message | None) -> str | None:
    """What to say when a subscription from ``earliest`` started at the first message the topic
    still stores and that message is not its producer's first (producers number from 0): the
    ones before it were trimmed. None otherwise (a subscription that acknowledged them before
    simply resumes after them)."""
    if first_stored is None or first_stored.message_id != first_received.message_id:
        return None
    seq = first_received.sequence_id
    if seq <= 0:
        return None
    return (f"older messages were trimmed: the first message still stored ({first_received.message_id}) is number "
            f"{seq} of producer {first_received.producer_name}, whose {seq} earlier message(s) are gone (a topic "
            "that no subscription holds and no retention policy keeps is trimmed to its last ledger). Create the "
            "subscription before producing, or set a retention policy: magnetar admin namespaces set-retention "
            "public/default --time-minutes 60 --size-mb 100")


def shortfall_line(received_count: int, count: int, timeout_s: float) -> str:
    """The one line ``consume`` prints when fewer than ``count`` messages arrived."""
    return (f"received {received_count} of {count} messages within the timeout ({timeout_s:g} s): "
            f"the subscription had no more to deliver (raise --timeout-s, or lower -n)")


def register(app: typer.Typer) -> None:
    @app.command("consume")
    def consume_command(
        topic: str = typer.Argument(..., help="topic name (short or persistent://tenant/ns/topic)"),
        subscription: str = typer.Option(..., "--subscription", "-s", help="subscription name"),
        count: int = typer.Option(1, "--count", "-n", min=0, max=1_000_000, help="messages to receive (0: until timeout)"),
        sub_type: str = typer.Option("exclusive", "--type", "-t", help="exclusive, shared, failover or key_shared"),
        position: str = typer.Option("earliest", "--position", help="where a new subscription starts: earliest or latest"),
        service_url: str = typer.Option(DEFAULT_SERVICE_URL, "--service-url", "-u"),
        timeout_s: float = typer.Option(30.0, "--timeout-s", min=0.1, help="bound on the whole run"),
        token: str = TOKEN_OPTION, auth_plugin: str = AUTH_PLUGIN_OPTION, auth_params: str = AUTH_PARAMS_OPTION,
        tls_trust_cert: str = TLS_TRUST_OPTION, tls_cert: str = TLS_CERT_OPTION, tls_key: str = TLS_KEY_OPTION,
    ) -> None:
        """Receive messages from a subscription, print and acknowledge them."""
        console = Console(soft_wrap=True)
        credentials = credentials_of(token, auth_plugin, auth_params, tls_trust_cert, tls_cert, tls_key)
        try:
            kind = SubscriptionType[sub_type.upper()]
            initial = InitialPosition[position.upper()]
        except KeyError as exc:
            raise typer.BadParameter(f"unknown value {exc}") from None
        try:
            received = asyncio.run(asyncio.wait_for(
                consume(service_url, topic, subscription, count, kind, initial, timeout_s, console, credentials),
                timeout=timeout_s + 5))
        except (MagnetarError, OSError, TimeoutError) as exc:
            console.print(f"[red]error:[/red] {type(exc).__name__}: {exc}")
            raise typer.Exit(1) from None
        console.print(f"[bold]{len(received)} messages consumed[/bold] from {escape(topic)}")
        if count and len(received) < count:
            typer.echo(f"error: {shortfall_line(len(received), count, timeout_s)}", err=True)
            raise typer.Exit(1)
