from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pulsar
import pytest

from tests.compat.client_log import CLIENT_LOG, ClientLog, install
from tests.compat.harness import BrokerThread

install()  # before any test makes a client: see tests/compat/client_log.py


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "client_errors(*patterns): ERROR lines of the official client this "
                                       "test provokes on purpose (a refusal Pulsar gives too)")


@pytest.fixture(autouse=True)
def client_log(request: pytest.FixtureRequest) -> Iterator[ClientLog]:
    """Every official client logs into ``CLIENT_LOG``; ERROR lines a real Pulsar broker would not
    cause fail the test (see ``tests/compat/client_log.py``)."""
    log = CLIENT_LOG
    log.forget()
    yield log
    marker = request.node.get_closest_marker("client_errors")
    unexpected = log.unexpected(tuple(marker.args) if marker is not None else ())
    if unexpected:
        pytest.fail(f"the official client logged {len(unexpected)} unexpected ERROR line(s), e.g. "
                    f"{unexpected[:5]}", pytrace=False)


@pytest.fixture
def broker() -> Iterator[BrokerThread]:
    running = BrokerThread().start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def client(broker: BrokerThread, client_log: ClientLog) -> Iterator[Any]:
    c = pulsar.Client(broker.url, operation_timeout_seconds=10, connection_timeout_ms=3000,
                      logger=client_log.logger)
    try:
        yield c
    finally:
        c.close()
