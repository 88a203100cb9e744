"""The deduplicating writer: stable producer names and sequence ids (task side; no pyspark).

Each Spark task writes its rows with one producer per topic named ``<prefix>-p<partitionId>``
(``prefix``: the ``producerName`` option, else ``spark-<queryId>`` for a streaming query or
``spark-<id chosen when the write was planned>`` for a batch write) and gives row ``i`` of micro
batch ``b`` the sequence id ``b << 32 | i`` (``b`` = 0 for a batch write). The broker drops any
message whose sequence id is not above the highest it persisted for that producer name, so:

Exactly once holds when all of these hold —
1. deduplication is on for the target topic (off by default, as in Pulsar: the namespace or topic
   policy, or the broker's setting, turns it on; see docs/spark.md);
2. the re-run of a task (a task retry, or Spark replaying micro-batch ``b`` after a restart from
   its checkpoint) produces the same rows in the same order in the same Spark partition: true for
   a deterministic query over a replayable source (this connector's source is; a shuffle whose
   order depends on timing, or ``rand()``/``now()``, is not);
3. the broker still knows the producer's highest sequence id when the re-run arrives: always
   while it keeps running; across a broker restart only once deduplication state is persisted;
4. only one attempt of a task writes at a time (leave Spark speculation off);
5. rows bound for a partitioned topic carry a key (routing by key hash is deterministic; unkeyed
   rows of an exactly-once write all go to partition 0).
Otherwise the writer is at least once. Messages are batched only at fixed boundaries (every
``BATCH_MESSAGES`` rows of a task, never by a timer), so a re-run groups rows into the same
batches and a batch is either wholly new or wholly a duplicate.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from magnetar.base.errors import InvalidArgumentError
from magnetar.base.limits import SPARK_WRITE_PENDING_COUNT_MAX
from magnetar.client import ClientOptions, PartitionedProducer, Producer, ProducerConfig, PulsarClient
from magnetar.client.topic import full_topic_name
from magnetar.runtime.clock import SystemClock, system_rng
from magnetar.runtime.network import TcpNetwork

#: Rows per producer batch: fixed, so a re-run batches identically (see the module docstring).
BATCH_MESSAGES = 500
#: Row index bits of a sequence id: a task writes fewer than 2**32 rows per micro-batch.
ROW_BITS = 32


def sequence_id(batch_id: int, row_index: int) -> int:
    if not 0 <= row_index < (1 << ROW_BITS):
        raise InvalidArgumentError(f"row index {row_index} does not fit in {ROW_BITS} bits")
    if batch_id < 0:
        raise InvalidArgumentError(f"batch id must be >= 0, got {batch_id}")
    return (batch_id << ROW_BITS) | row_index


def producer_name(prefix: str, partition_id: int) -> str:
    return f"{prefix}-p{partition_id}"


@dataclass(frozen=True)
class OutMessage:
    topic: str
    value: bytes
    key: str | None
    properties: dict[str, str]
    event_time_ms: int | None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="surrogateescape")
    return str(value)


def to_message(row: Mapping[str, Any], topic: str | None) -> OutMessage:
    """A Spark row (as a dict) to a message: ``value`` (binary or string) required; ``key``,
    ``properties``, ``eventTime`` optional; ``topic`` from the option, else the row's column."""
    name = topic or row.get("topic")
    if not name:
        raise InvalidArgumentError("no topic: set the topic option or give every row a topic column")
    value = row.get("value")
    if value is None:
        raise InvalidArgumentError("every row needs a non-null value column")
    data = value.encode() if isinstance(value, str) else bytes(value)
    props = row.get("properties") or {}
    event = row.get("eventTime")
    event_ms = None
    if isinstance(event, datetime):
        event_ms = int(event.timestamp() * 1000)
    elif isinstance(event, int):
        event_ms = event
    return OutMessage(full_topic_name(str(name)), data, _text(row.get("key")),
                      {str(k): str(v) for k, v in dict(props).items()}, event_ms)


class InjectedTaskError(RuntimeError):
    """The ``failTaskAfterRows`` drill: a first task attempt stops after that many receipted rows."""


async def write_messages(service_url: str, messages: Iterable[OutMessage], *, name: str, batch_id: int,
                         exactly_once: bool, batching: bool, fail_after_rows: int | None = None,
                         auth: tuple[str, bytes] | None = None) -> int:
    """Send every message (row ``i`` gets ``sequence_id(batch_id, i)`` when ``exactly_once``);
    returns how many were sent once all are receipted (duplicates count: the broker answered).
    With ``fail_after_rows`` it raises ``InjectedTaskError`` once that many rows are receipted."""
    options = None if auth is None else ClientOptions(auth_method_name=auth[0], auth_data=auth[1])
    client = PulsarClient(service_url, network=TcpNetwork(), clock=SystemClock(), rng=system_rng(), options=options)
    producers: dict[str, Producer | PartitionedProducer] = {}
    pending: list[asyncio.Future[Any]] = []
    sent = 0
    try:
        config = ProducerConfig(
            producer_name=name if exactly_once else None,
            send_timeout_ms=0 if exactly_once else 30_000,
            max_pending_messages=SPARK_WRITE_PENDING_COUNT_MAX,
            batching_enabled=batching,
            batch_max_messages=BATCH_MESSAGES,
            batch_max_bytes=4 * 1024 * 1024,
            batch_max_delay_ms=3_600_000 if exactly_once else 10,
            round_robin=not exactly_once,  # unkeyed rows of an exactly-once write: partition 0
        )
        for index, message in enumerate(messages):
            producer = producers.get(message.topic)
            if producer is None:
                producer = producers[message.topic] = await client.create_producer(message.topic, config)
            pending.append(await producer.send_async(
                message.value, key=message.key, properties=message.properties or None,
                event_time_ms=message.event_time_ms,
                sequence_id=sequence_id(batch_id, index) if exactly_once else None,
            ))
            sent += 1
            if sent == fail_after_rows:
                for producer in producers.values():
                    await producer.flush()
                await asyncio.gather(*pending)
                raise InjectedTaskError(f"failTaskAfterRows: task stopped after {sent} receipted rows")
            if len(pending) >= SPARK_WRITE_PENDING_COUNT_MAX:
                for producer in producers.values():
                    await producer.flush()
                await asyncio.gather(*pending)
                pending.clear()
        for producer in producers.values():
            await producer.flush()
        await asyncio.gather(*pending)
    finally:
        for producer in producers.values():
            await producer.close()
        await client.close()
    return sent
