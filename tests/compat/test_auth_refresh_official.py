"""Token expiry on an open connection, with the official client: the broker challenges
(AUTH_CHALLENGE), a client with a token supplier answers with a fresh token and keeps its
connection; a client whose token cannot be renewed is closed. Expiry is real time here (the
broker's clock is the system clock): tokens live 2 s, the check runs every second."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest

from magnetar.broker import BrokerConfig
from magnetar.security import create_token
from tests.compat.harness import BrokerThread

SECRET = b"refresh-secret-refresh-secret-re"
TOKEN_LIFETIME_S = 2
DEADLINE_S = 15.0


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerThread]:
    config = BrokerConfig(advertised_port=0, authentication_enabled=True, authentication_providers=("token",),
                          token_secret_key="data:;base64," + base64.b64encode(SECRET).decode(),
                          auth_refresh_check_interval_s=1)
    running = BrokerThread(config).start()
    try:
        yield running
    finally:
        running.stop()


def fresh_token() -> str:
    return create_token("alice", secret_key=SECRET, expires_at_s=int(time.time()) + TOKEN_LIFETIME_S)


def on_broker(broker: BrokerThread, read: Any) -> Any:
    async def run() -> Any:
        return read(broker.server)
    return broker.call(run())


def wait_until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def make_client(broker: BrokerThread, auth: Any) -> Any:
    return pulsar.Client(broker.url, authentication=auth, operation_timeout_seconds=5,
                         logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))


def test_a_token_supplier_refreshes_on_challenge_and_keeps_its_connection(broker: BrokerThread) -> None:
    client = make_client(broker, pulsar.AuthenticationToken(fresh_token))
    try:
        producer = client.create_producer("persistent://public/default/refresh-ok")
        closed_before = on_broker(broker, lambda s: s.expired_closed_count)
        wait_until(lambda: on_broker(broker, lambda s: s.refreshed_credentials_count()) >= 2,
                   "two refreshes through AUTH_CHALLENGE/AUTH_RESPONSE")
        producer.send(b"after the first token expired")
        assert on_broker(broker, lambda s: s.expired_closed_count) == closed_before
    finally:
        client.close()


def test_an_expired_token_that_cannot_be_renewed_closes_the_connection(broker: BrokerThread) -> None:
    client = make_client(broker, pulsar.AuthenticationToken(fresh_token()))  # one fixed token
    try:
        client.create_producer("persistent://public/default/refresh-expired")
        closed_before = on_broker(broker, lambda s: s.expired_closed_count)
        wait_until(lambda: on_broker(broker, lambda s: s.expired_closed_count) > closed_before,
                   "the broker to close the connection whose token expired")
    finally:
        client.close()
