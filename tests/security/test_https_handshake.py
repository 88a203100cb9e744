"""The HTTPS listener bounds the TLS handshake with the same named timeout as the binary TLS
listener (``BrokerConfig.tls_handshake_timeout_s``, ``TLS_HANDSHAKE_TIMEOUT_S``): a client that
connects and never sends its ClientHello is dropped within the bound while other HTTPS requests
are served. Control: with a long bound the silent client is still connected after the short one."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest

from magnetar.runtime.certs import make_pki
from magnetar.runtime.http import start_http
from magnetar.runtime.tls import TlsFiles

BOUND_S = 0.3
SLACK_S = 3.0  # scheduling on a loaded machine; far below asyncio's 60 s default


async def _https_get(port: int, ca: str, path: str) -> bytes:
    context = ssl.create_default_context(cafile=ca)
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode())
        return await asyncio.wait_for(reader.read(), SLACK_S)
    finally:
        writer.close()


async def _silent_client_closed_within(tmp_path: Path, bound_s: float, wait_s: float) -> tuple[bool, bytes]:
    """(whether the server dropped a client that never sent a ClientHello within ``wait_s``, the
    reply to an HTTPS request made meanwhile)."""
    pki = make_pki(str(tmp_path), client_roles=())
    tls = TlsFiles(pki["broker_cert"], pki["broker_key"])
    endpoint = await start_http("127.0.0.1", 0, health=lambda: {"status": "ok"}, tls=tls,
                                tls_handshake_timeout_s=bound_s)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", endpoint.port)  # says nothing
        try:
            reply = await _https_get(endpoint.port, pki["ca"], "/health")
            try:
                await asyncio.wait_for(reader.read(), wait_s)  # b"" (EOF) once the server drops it
                closed = True
            except ConnectionResetError:
                closed = True
            except TimeoutError:
                closed = False
        finally:
            writer.close()
        return closed, reply
    finally:
        await endpoint.stop()


def test_a_client_that_never_starts_the_handshake_is_dropped_within_the_bound(tmp_path: Path) -> None:
    closed, reply = asyncio.run(_silent_client_closed_within(tmp_path, BOUND_S, BOUND_S + SLACK_S))
    assert closed, "the silent client was not dropped within the handshake bound"
    assert reply.startswith(b"HTTP/1.1 200") and b'"status":"ok"' in reply


def test_negative_control_a_long_bound_keeps_the_silent_client(tmp_path: Path) -> None:
    closed, reply = asyncio.run(_silent_client_closed_within(tmp_path, 60.0, BOUND_S + 1.0))
    assert not closed
    assert reply.startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize("bound_s", [0.0, -1.0])
def test_the_bound_must_be_positive(bound_s: float) -> None:
    from magnetar.base.errors import InvalidArgumentError
    from magnetar.broker import BrokerConfig

    with pytest.raises(InvalidArgumentError):
        BrokerConfig(tls_handshake_timeout_s=bound_s)
