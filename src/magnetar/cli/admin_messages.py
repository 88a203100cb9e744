"""``magnetar admin topics peek-messages|get-message-by-id|examine-message|terminate|trim-topic|get-schema``
and ``magnetar admin namespaces get|set-schema-compatibility-strategy``.

The broker answers an entry as Pulsar does (payload body, metadata in ``X-Pulsar-*`` headers,
``magnetar.admin.messages``); a batch is split here into its messages, as ``pulsar-admin`` does,
each printed with its id (``ledger:entry:batchIndex``), properties and payload (text when it is
UTF-8, else hex).
"""

from __future__ import annotations

from typing import Any

import typer

from magnetar.cli.admin import _api, _done, _json, _ns, _topic, namespaces_app, topics_app
from magnetar.protocol.pulsar import decode_entry, pb

#: Messages one ``peek-messages`` asks for (each is one request).
PEEK_MESSAGES_COUNT_MAX = 1000

_CODECS = {"NONE": pb.NONE, "LZ4": pb.LZ4, "ZLIB": pb.ZLIB, "ZSTD": pb.ZSTD, "SNAPPY": pb.SNAPPY}


def _header(headers: dict[str, str], name: str) -> str | None:
    lowered = name.lower()
    return next((v for k, v in headers.items() if k.lower() == lowered), None)


def _text(payload: bytes) -> str:
    try:
        return payload.decode()
    except UnicodeDecodeError:
        return payload.hex()


def messages_of(headers: dict[str, str], body: bytes) -> list[dict[str, Any]]:
    """The messages of one entry answer: id, publish time, properties, payload."""
    message_id = _header(headers, "X-Pulsar-Message-ID") or "?"
    properties = {k[len("X-Pulsar-PROPERTY-"):]: v for k, v in headers.items()
                  if k.lower().startswith("x-pulsar-property-")}
    common = {"publishTime": _header(headers, "X-Pulsar-publish-time")}
    batch = _header(headers, "X-Pulsar-num-batch-message")
    codec = _CODECS.get(_header(headers, "X-Pulsar-compression-type") or "NONE", pb.NONE)
    metadata = pb.MessageMetadata(producer_name="", sequence_id=0, publish_time=0, compression=codec)
    if codec != pb.NONE:
        metadata.uncompressed_size = int(_header(headers, "X-Pulsar-uncompressed-size") or 0)
    if batch is None:
        payload = decode_entry(metadata, body)[0].payload
        return [{"messageId": message_id, **common, "properties": properties, "payload": _text(payload)}]
    metadata.num_messages_in_batch = int(batch)
    out = []
    for index, single in enumerate(decode_entry(metadata, body)):
        own = {p.key: p.value for p in single.metadata.properties} if single.metadata is not None else {}
        out.append({"messageId": f"{message_id}:{index}", **common, "properties": own,
                    "payload": _text(single.payload)})
    return out


@topics_app.command("peek-messages")
def peek_messages(topic: str, subscription: str = typer.Option(..., "--subscription", "-s"),
                  count: int = typer.Option(1, "--count", "-n", min=1, max=PEEK_MESSAGES_COUNT_MAX)) -> None:
    """Peek the first COUNT unacknowledged messages of a subscription (nothing is acknowledged)."""
    found: list[dict[str, Any]] = []
    for position in range(1, count + 1):
        headers, body = _api().exchange("GET", f"{_topic(topic)}/subscription/{subscription}/position/{position}")
        found.extend(messages_of(headers, body))
    _json(found)


@topics_app.command("get-message-by-id")
def get_message_by_id(topic: str, ledger_id: int = typer.Option(..., "--ledger-id", "-l"),
                      entry_id: int = typer.Option(..., "--entry-id", "-e")) -> None:
    """Show the message(s) stored at LEDGER_ID:ENTRY_ID."""
    _json(messages_of(*_api().exchange("GET", f"{_topic(topic)}/ledger/{ledger_id}/entry/{entry_id}")))


@topics_app.command("examine-message")
def examine_message(topic: str, initial_position: str = typer.Option("latest", "--initialPosition", "-i"),
                    message_position: int = typer.Option(1, "--messagePosition", "-m", min=1)) -> None:
    """Show the n-th message from the earliest or the latest one."""
    query = f"initialPosition={initial_position}&messagePosition={message_position}"
    _json(messages_of(*_api().exchange("GET", f"{_topic(topic)}/examinemessage", query=query)))


@topics_app.command("terminate")
def terminate(topic: str) -> None:
    """Terminate a topic: no more messages; prints the last message id."""
    last = _api().call("POST", f"{_topic(topic)}/terminate")
    _done(f"Topic successfully terminated at {last['ledgerId']}:{last['entryId']}")


@topics_app.command("trim-topic")
def trim_topic(topic: str) -> None:
    """Delete the ledgers the topic's retention no longer keeps."""
    _api().call("POST", f"{_topic(topic)}/trim")
    _done(f"trimmed {topic}")


# --- schemas ----------------------------------------------------------------------------------------

_STRATEGIES = ("ALWAYS_INCOMPATIBLE", "ALWAYS_COMPATIBLE", "BACKWARD", "FORWARD", "FULL", "BACKWARD_TRANSITIVE",
               "FORWARD_TRANSITIVE", "FULL_TRANSITIVE", "UNDEFINED")


def _schemas_path(topic: str) -> str:
    return "/schemas/" + _topic(topic).removeprefix("/persistent/")


@namespaces_app.command("get-schema-compatibility-strategy")
def get_schema_compatibility_strategy(namespace: str) -> None:
    """Show the schema compatibility strategy in force in a namespace."""
    typer.echo(_api().call("GET", f"{_ns(namespace)}/schemaCompatibilityStrategy"))


@namespaces_app.command("set-schema-compatibility-strategy")
def set_schema_compatibility_strategy(namespace: str, compatibility: str = typer.Option(
        ..., "--compatibility", "-c", help=f"one of {', '.join(_STRATEGIES)}")) -> None:
    """Set a namespace's schema compatibility strategy (UNDEFINED: the broker's applies)."""
    if compatibility.upper() not in _STRATEGIES:
        typer.echo(f"error: --compatibility must be one of {', '.join(_STRATEGIES)}", err=True)
        raise typer.Exit(2)
    _api().call("PUT", f"{_ns(namespace)}/schemaCompatibilityStrategy", compatibility.upper())
    _done(f"{namespace}: schema compatibility strategy {compatibility.upper()}")


@topics_app.command("get-schema")
def get_schema(topic: str, version: int = typer.Option(-1, "--version", help="a version (default: the latest)")) -> None:
    """Show a topic's schema (the latest version, or --version)."""
    suffix = "/schema" if version < 0 else f"/schema/{version}"
    _json(_api().call("GET", _schemas_path(topic) + suffix))
