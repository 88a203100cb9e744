from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pulsar
import pytest

from tests.compat.harness import BrokerThread


@pytest.fixture
def broker() -> Iterator[BrokerThread]:
    running = BrokerThread().start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def client(broker: BrokerThread) -> Iterator[Any]:
    c = pulsar.Client(broker.url, operation_timeout_seconds=10, connection_timeout_ms=3000,
                      logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        yield c
    finally:
        c.close()
