"""TLS with the official client: ``pulsar+ssl://`` with a real CA, a broker certificate for
``localhost`` and client certificates, all made with ``cryptography``.

One module-scoped broker (TLS listener, token and tls providers, client certificates optional)
serves most cases; one with ``tls_require_trusted_client_cert`` serves the mTLS-only ones.
Failures the client detects itself (wrong CA, wrong host name, swapped certificate and key) are
``pulsar.ConnectError`` at once; a handshake the broker refuses (no or untrusted client
certificate) looks to the C++ client like a dropped connection, which it retries until its
operation timeout (``pulsar.Timeout``), as it does against Java's broker.
"""

from __future__ import annotations

import asyncio
import base64
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar.broker import BrokerConfig, MemoryLogStore
from magnetar.runtime.broker_server import BrokerServer, start_broker
from magnetar.runtime.certs import CertificateAuthority, make_pki
from magnetar.runtime.clock import SystemClock
from magnetar.security import create_token

SECRET = b"tls-secret-key-tls-secret-key-tl"
STEP_S = 30.0
DEADLINE_S = 10.0


class TlsBroker:
    def __init__(self, config: BrokerConfig) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

        async def start() -> BrokerServer:
            return await start_broker(config, log_store=MemoryLogStore(), clock=SystemClock(), port=0, tls_port=0)

        self.server = self.call(start())

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(STEP_S)

    def sync(self, function: Any) -> Any:
        async def run() -> Any:
            return function()
        return self.call(run())

    @property
    def tls_url(self) -> str:
        return f"pulsar+ssl://localhost:{self.server.tls_port}"

    def stop(self) -> None:
        try:
            self.call(self.server.close())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)


def secured_config(pki: dict[str, str], **kwargs: Any) -> BrokerConfig:
    return BrokerConfig(advertised_port=0, advertised_host="localhost", authentication_enabled=True,
                        authentication_providers=("token", "tls"),
                        token_secret_key="data:;base64," + base64.b64encode(SECRET).decode(),
                        tls_enabled=True, tls_certificate_file_path=pki["broker_cert"],
                        tls_key_file_path=pki["broker_key"], tls_trust_certs_file_path=pki["ca"], **kwargs)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    directory = tmp_path_factory.mktemp("pki")
    paths = make_pki(str(directory), client_roles=("superuser", "alice"))
    other = CertificateAuthority("someone else's CA")
    paths["other_ca"] = other.write(str(directory / "other-ca.cert.pem"))
    stranger = other.issue("stranger", str(directory / "stranger.cert.pem"), str(directory / "stranger.key.pem"),
                           client=True)
    paths["stranger_cert"], paths["stranger_key"] = stranger.cert_path, stranger.key_path
    return paths


@pytest.fixture(scope="module")
def broker(pki: dict[str, str]) -> Iterator[TlsBroker]:
    running = TlsBroker(secured_config(pki, tls_handshake_timeout_s=1.0))
    try:
        yield running
    finally:
        running.stop()


def client(url: str, ca: str, authentication: Any = None, *, validate_hostname: bool = True,
           timeout_s: int = 5) -> Any:
    return pulsar.Client(url, authentication=authentication, tls_trust_certs_file_path=ca,
                         tls_validate_hostname=validate_hostname, operation_timeout_seconds=timeout_s,
                         connection_timeout_ms=3000, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))


def round_trip(c: Any, topic: str) -> bytes:
    consumer = c.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    c.create_producer(topic).send(b"over tls")
    message = consumer.receive(timeout_millis=5000)
    consumer.acknowledge(message)
    return bytes(message.data())


def wait_for(condition: Any, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_token_over_tls_with_hostname_verification(broker: TlsBroker, pki: dict[str, str]) -> None:
    c = client(broker.tls_url, pki["ca"], pulsar.AuthenticationToken(create_token("alice", secret_key=SECRET)))
    try:
        assert round_trip(c, "persistent://public/default/tls-token") == b"over tls"
        assert "alice" in broker.sync(broker.server.connection_roles)
    finally:
        c.close()


@pytest.mark.parametrize("how", ["object", "params", "java-class-name"])
def test_client_certificate_cn_is_the_role(broker: TlsBroker, pki: dict[str, str], how: str) -> None:
    cert, key = pki["superuser_cert"], pki["superuser_key"]
    auth = {"object": lambda: pulsar.AuthenticationTLS(cert, key),
            "params": lambda: pulsar.Authentication("tls", f"tlsCertFile:{cert},tlsKeyFile:{key}"),
            "java-class-name": lambda: pulsar.Authentication(
                "org.apache.pulsar.client.impl.auth.AuthenticationTls", f"tlsCertFile:{cert},tlsKeyFile:{key}")}[how]()
    c = client(broker.tls_url, pki["ca"], auth)
    try:
        assert round_trip(c, f"persistent://public/default/tls-mtls-{how}") == b"over tls"
        assert "superuser" in broker.sync(broker.server.connection_roles)
    finally:
        c.close()


@pytest.mark.client_errors(r"Handshake failed: certificate verify failed", r"ConnectError")  # the client refuses the broker's certificate
def test_wrong_ca_fails_to_connect(broker: TlsBroker, pki: dict[str, str]) -> None:
    c = client(broker.tls_url, pki["other_ca"], pulsar.AuthenticationToken(create_token("alice", secret_key=SECRET)),
               timeout_s=2)
    try:
        with pytest.raises(pulsar.ConnectError):
            c.create_producer("persistent://public/default/tls-wrong-ca")
    finally:
        c.close()


@pytest.mark.client_errors(r"Resolve error", r"ConnectError")  # the client refuses the host
def test_hostname_mismatch_fails_to_connect(broker: TlsBroker, pki: dict[str, str]) -> None:
    # The broker certificate names localhost and 127.0.0.1, not this name.
    url = f"pulsar+ssl://localhost.localdomain.invalid:{broker.server.tls_port}"
    c = client(url, pki["ca"], pulsar.AuthenticationToken(create_token("alice", secret_key=SECRET)), timeout_s=2)
    try:
        with pytest.raises(pulsar.ConnectError):
            c.create_producer("persistent://public/default/tls-wrong-host")
    finally:
        c.close()


@pytest.mark.client_errors(r"Failed to create connection: use_private_key_file", r"ConnectError")  # the client cannot load its key
def test_swapped_certificate_and_key_fail_to_connect(broker: TlsBroker, pki: dict[str, str]) -> None:
    auth = pulsar.AuthenticationTLS(pki["superuser_key"], pki["superuser_cert"])
    c = client(broker.tls_url, pki["ca"], auth, timeout_s=2)
    try:
        with pytest.raises(pulsar.ConnectError):
            c.create_producer("persistent://public/default/tls-swapped")
    finally:
        c.close()


@pytest.mark.client_errors(r"-- TimeOut")  # the broker refuses the handshake; the client retries until its timeout
def test_certificate_from_an_untrusted_ca_is_refused(broker: TlsBroker, pki: dict[str, str]) -> None:
    c = client(broker.tls_url, pki["ca"], pulsar.AuthenticationTLS(pki["stranger_cert"], pki["stranger_key"]),
               timeout_s=2)
    try:
        with pytest.raises((pulsar.ConnectError, pulsar.Timeout)):
            c.create_producer("persistent://public/default/tls-stranger")
    finally:
        c.close()


def test_stalled_and_truncated_handshakes_are_bounded_and_harm_no_one(broker: TlsBroker,
                                                                       pki: dict[str, str]) -> None:
    port = broker.server.tls_port
    stalled = socket.create_connection(("127.0.0.1", port))
    truncated = socket.create_connection(("127.0.0.1", port))
    truncated.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # a ClientHello cut short
    garbage = socket.create_connection(("127.0.0.1", port))
    garbage.sendall(b"GET / HTTP/1.1\r\n\r\n" * 4)
    good = client(broker.tls_url, pki["ca"], pulsar.AuthenticationToken(create_token("alice", secret_key=SECRET)))
    try:
        assert round_trip(good, "persistent://public/default/tls-bystander") == b"over tls"
        for sock in (stalled, truncated, garbage):  # closed by the broker within the handshake bound
            sock.settimeout(DEADLINE_S)
            started = time.monotonic()
            try:
                while sock.recv(4096):
                    pass
            except ConnectionResetError:
                pass
            assert time.monotonic() - started < DEADLINE_S
        assert round_trip(good, "persistent://public/default/tls-bystander-after") == b"over tls"
    finally:
        good.close()
        for sock in (stalled, truncated, garbage):
            sock.close()


def served_serial(port: int, ca: str) -> int:
    context = ssl.create_default_context(cafile=ca)
    with socket.create_connection(("127.0.0.1", port)) as raw, context.wrap_socket(raw, server_hostname="localhost") as tls:
        der = tls.getpeercert(binary_form=True)
    from cryptography import x509
    assert der is not None
    return int(x509.load_der_x509_certificate(der).serial_number)


def test_certificate_files_are_reloaded_when_they_change(tmp_path: Path) -> None:
    paths = make_pki(str(tmp_path), client_roles=())
    running = TlsBroker(BrokerConfig(advertised_port=0, tls_enabled=True, tls_certificate_file_path=paths["broker_cert"],
                                     tls_key_file_path=paths["broker_key"], tls_cert_refresh_check_interval_s=1))
    try:
        port = running.server.tls_port
        before = served_serial(port, paths["ca"])
        fresh = make_pki(str(tmp_path / "next"), client_roles=())  # a new CA and a new broker certificate
        Path(paths["broker_key"]).write_bytes(Path(fresh["broker_key"]).read_bytes())
        Path(paths["broker_cert"]).write_bytes(Path(fresh["broker_cert"]).read_bytes())

        def renewed() -> bool:
            try:
                return served_serial(port, fresh["ca"]) != before
            except ssl.SSLError:  # still the old certificate, which the new CA does not vouch for
                return False

        wait_for(renewed, "the broker to serve the renewed certificate")
    finally:
        running.stop()


@pytest.mark.client_errors(r"-- TimeOut")  # the broker refuses a client without a certificate
def test_required_client_certificate(pki: dict[str, str]) -> None:
    running = TlsBroker(secured_config(pki, tls_require_trusted_client_cert=True))
    try:
        with_cert = client(running.tls_url, pki["ca"], pulsar.AuthenticationTLS(pki["alice_cert"], pki["alice_key"]))
        token_only = client(running.tls_url, pki["ca"],
                            pulsar.AuthenticationToken(create_token("alice", secret_key=SECRET)), timeout_s=2)
        try:
            assert round_trip(with_cert, "persistent://public/default/mtls-required") == b"over tls"
            with pytest.raises((pulsar.ConnectError, pulsar.Timeout)):
                token_only.create_producer("persistent://public/default/mtls-required")
        finally:
            with_cert.close()
            token_only.close()
    finally:
        running.stop()
