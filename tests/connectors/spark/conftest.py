"""Fixtures of the Spark connector tests: one standalone process and one SparkSession per module."""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from magnetar.connectors.spark.fetch import run
from magnetar.connectors.spark.sink import OutMessage, write_messages
from magnetar.runtime.processes import StandaloneProcess


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    process = StandaloneProcess(str(tmp_path_factory.mktemp("standalone") / "data"))
    try:
        yield process
    finally:
        process.terminate()


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2,4]")  # 2 threads; a failed task is retried (up to 4 attempts)
        .appName("magnetar-connector-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("warehouse")))
        .config("spark.driver.memory", "1g")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "50")  # rows reach a writer before a failure
        .getOrCreate()
    )
    try:
        yield session
    finally:
        session.stop()


def produce(service_url: str, topic: str, values: list[bytes], *, batching: bool = True,
            keys: list[str] | None = None, event_times_ms: list[int] | None = None) -> None:
    """Publish ``values`` to ``topic`` in order (one entry per message unless ``batching``)."""
    messages = [OutMessage(topic, value, keys[i] if keys else None, {"i": str(i)},
                           event_times_ms[i] if event_times_ms else None) for i, value in enumerate(values)]
    run(write_messages(service_url, messages, name="", batch_id=0, exactly_once=False, batching=batching))


def admin(standalone: StandaloneProcess, method: str, path: str, body: Any = None) -> Any:
    """One admin REST call (``/admin/v2`` + ``path``) to the standalone; the decoded JSON reply."""
    request = urllib.request.Request(f"http://{standalone.fields['http']}/admin/v2{path}", method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        raw = reply.read()
    return json.loads(raw) if raw else None
