"""The connector against a real ``magnetar standalone`` and a real local Spark (``local[2]``)."""

from __future__ import annotations

from typing import Any

import pytest

from magnetar.runtime.processes import StandaloneProcess
from tests.connectors.spark.conftest import produce

pytestmark = pytest.mark.integration

PARTITIONS = 3


def read_options(standalone: StandaloneProcess) -> dict[str, str]:
    return {"serviceUrl": standalone.broker_url, "metadataUrl": standalone.fields["metadata"]}


def test_batch_read_of_a_partitioned_topic(standalone: StandaloneProcess, spark: Any) -> None:
    for p in range(PARTITIONS):
        produce(standalone.broker_url, f"batch-t-partition-{p}", [f"p{p}-{i}".encode() for i in range(200)])
    df = spark.read.format("magnetar").options(**read_options(standalone)).option("topicsPattern", "batch-t").load()
    rows = df.select("value", "partition", "messageId", "properties", "sequenceId").collect()
    assert len(rows) == PARTITIONS * 200
    by_partition: dict[int, list[Any]] = {}
    for row in rows:
        by_partition.setdefault(row.partition, []).append(row)
    assert sorted(by_partition) == list(range(PARTITIONS))
    for p, got in by_partition.items():
        assert [bytes(r.value) for r in got] == [f"p{p}-{i}".encode() for i in range(200)]
        assert [r.properties["i"] for r in got] == [str(i) for i in range(200)]
