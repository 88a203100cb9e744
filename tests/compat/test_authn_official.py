"""Authentication with the official client against one broker (token + basic, anonymous off).

One module-scoped broker serves every case: good tokens produce and consume, junk / wrongly
signed / expired / unsigned tokens and wrong passwords raise ``pulsar.AuthenticationError``,
and a rejected client leaves a connected one untouched.
"""

from __future__ import annotations

import base64
import json
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar.broker import BrokerConfig
from magnetar.protocol.pulsar import pb
from magnetar.protocol.pulsar.frames import encode_command
from magnetar.security import create_token
from tests.compat.harness import BrokerThread

SECRET = b"compat-secret-key-compat-secret!"
HTPASSWD = "admin:$apr1$abcdefgh$h9FWgUz3n9YxylKLlR5SQ/\n"  # admin / secret


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    directory: Path = tmp_path_factory.mktemp("authn")
    (directory / "htpasswd").write_text(HTPASSWD)
    config = BrokerConfig(advertised_port=0, authentication_enabled=True,
                          authentication_providers=("token", "basic"),
                          token_secret_key="data:;base64," + base64.b64encode(SECRET).decode(),
                          basic_auth_conf_path=str(directory / "htpasswd"), auth_refused_linger_s=0.5)
    running = BrokerThread(config).start()
    try:
        yield running
    finally:
        running.stop()


def make_client(url: str, authentication: Any = None) -> Any:
    return pulsar.Client(url, authentication=authentication, operation_timeout_seconds=5,
                         connection_timeout_ms=3000, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))


def round_trip(client: Any, topic: str) -> bytes:
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic)
    producer.send(b"hello")
    message = consumer.receive(timeout_millis=5000)
    consumer.acknowledge(message)
    return bytes(message.data())


def token(subject: str, *, secret: bytes = SECRET, expires_at_s: int | None = None) -> str:
    return create_token(subject, secret_key=secret, expires_at_s=expires_at_s)


def test_token_and_basic_clients_produce_and_consume(secured: BrokerThread) -> None:
    for auth in (pulsar.AuthenticationToken(token("alice")), pulsar.AuthenticationToken(lambda: token("alice")),
                 pulsar.AuthenticationBasic("admin", "secret")):
        client = make_client(secured.url, auth)
        try:
            assert round_trip(client, "persistent://public/default/authn-ok") == b"hello"
        finally:
            client.close()


def unsigned(subject: str) -> str:
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()
    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part({'sub': subject})}."


@pytest.mark.parametrize("auth", [
    None,
    pulsar.AuthenticationToken("junk"),
    pulsar.AuthenticationToken(unsigned("admin")),
    pulsar.AuthenticationToken(create_token("alice", secret_key=b"wrong-secret-wrong-secret-wrong!")),
    pulsar.AuthenticationToken(create_token("alice", secret_key=SECRET, expires_at_s=int(time.time()) - 60)),
    pulsar.AuthenticationBasic("admin", "wrong"),
    pulsar.AuthenticationBasic("nobody", "secret"),
], ids=["none", "junk", "alg-none", "wrong-key", "expired", "wrong-password", "unknown-user"])
@pytest.mark.client_errors(r"AuthenticationError")  # refused credentials, as Pulsar refuses them
def test_bad_credentials_raise_authentication_error_and_harm_no_other_client(secured: BrokerThread,
                                                                             auth: Any) -> None:
    good = make_client(secured.url, pulsar.AuthenticationToken(token("alice")))
    bad = make_client(secured.url, auth)
    try:
        producer = good.create_producer("persistent://public/default/authn-bystander")
        with pytest.raises((pulsar.AuthenticationError, pulsar.ConnectError)) as raised:
            bad.create_producer("persistent://public/default/authn-bad")
        assert isinstance(raised.value, pulsar.AuthenticationError), raised.value
        producer.send(b"still fine")
    finally:
        bad.close()
        good.close()


def read_command(sock: socket.socket) -> pb.BaseCommand | None:
    """One frame's command, or None once the broker closed the connection."""
    header = b""
    while len(header) < 8:
        chunk = sock.recv(8 - len(header))
        if not chunk:
            return None
        header += chunk
    total, command_size = struct.unpack(">II", header)
    rest = b""
    while len(rest) < total - 4:
        chunk = sock.recv(total - 4 - len(rest))
        if not chunk:
            return None
        rest += chunk
    command = pb.BaseCommand()
    command.ParseFromString(rest[:command_size])
    return command


@pytest.mark.parametrize("method,data", [
    ("token", b"x" * (20 * 1024)),  # oversized auth data
    ("token", bytes(range(256)) * 4),  # not a JWT at all
    ("basic", b"\xff\xfe:\x00"),  # not UTF-8
    ("kerberos", b"ticket"),  # a method no provider serves, no anonymous role
])
def test_a_refused_connection_that_sends_nothing_is_closed_within_the_linger_bound(
        secured: BrokerThread, method: str, data: bytes) -> None:
    connect = pb.BaseCommand(type=pb.BaseCommand.CONNECT)
    connect.connect.client_version = "raw"
    connect.connect.protocol_version = 20
    connect.connect.auth_method_name = method
    connect.connect.auth_data = data
    with socket.create_connection(("127.0.0.1", secured.port)) as sock:
        sock.settimeout(10)
        sock.sendall(encode_command(connect))
        first = read_command(sock)
        assert first is not None and first.type == pb.BaseCommand.CONNECTED
        started = time.monotonic()
        assert read_command(sock) is None  # closed by the broker, not by us
        assert time.monotonic() - started < 5


def test_a_refused_connection_gets_authentication_error_for_its_first_request(secured: BrokerThread) -> None:
    connect = pb.BaseCommand(type=pb.BaseCommand.CONNECT)
    connect.connect.client_version = "raw"
    connect.connect.protocol_version = 20
    connect.connect.auth_method_name = "token"
    connect.connect.auth_data = b"junk"
    lookup = pb.BaseCommand(type=pb.BaseCommand.LOOKUP)
    lookup.lookupTopic.topic = "persistent://public/default/x"
    lookup.lookupTopic.request_id = 7
    with socket.create_connection(("127.0.0.1", secured.port)) as sock:
        sock.settimeout(10)
        sock.sendall(encode_command(connect))
        assert (first := read_command(sock)) is not None and first.type == pb.BaseCommand.CONNECTED
        sock.sendall(encode_command(lookup))  # clients wait for CONNECTED before any request
        answer = read_command(sock)
        assert answer is not None and answer.type == pb.BaseCommand.LOOKUP_RESPONSE
        assert answer.lookupTopicResponse.request_id == 7
        assert answer.lookupTopicResponse.error == pb.AuthenticationError
        assert read_command(sock) is None
