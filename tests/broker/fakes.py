"""Fakes for broker unit tests: a recording channel and helpers to build stored entries."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

from magnetar.base.types import Position
from magnetar.broker.log import AppendCallback, TopicLog
from magnetar.protocol.pulsar import headers_and_payload, pb


@dataclass
class FakeChannel:
    messages: list[tuple[int, tuple[int, int], int]] = field(default_factory=list)  # (cid, (l, e), redeliveries)
    closed_consumers: list[int] = field(default_factory=list)
    active_changes: list[tuple[int, bool]] = field(default_factory=list)
    receipts: list[tuple[int, int, int, int]] = field(default_factory=list)
    send_errors: list[tuple[int, int, int]] = field(default_factory=list)
    open: bool = True
    can_write: bool = True

    def send_message(self, consumer_id: int, ledger_id: int, entry_id: int, partition: int, data: bytes,
                     redelivery_count: int, ack_set: Sequence[int]) -> None:
        self.messages.append((consumer_id, (ledger_id, entry_id), redelivery_count))

    def send_close_consumer(self, consumer_id: int) -> None:
        self.closed_consumers.append(consumer_id)

    def send_active_consumer_change(self, consumer_id: int, is_active: bool) -> None:
        self.active_changes.append((consumer_id, is_active))

    def send_receipt(self, producer_id: int, sequence_id: int, ledger_id: int, entry_id: int,
                     highest_sequence_id: int | None) -> None:
        self.receipts.append((producer_id, sequence_id, ledger_id, entry_id))

    def send_send_error(self, producer_id: int, sequence_id: int, code: int, message: str) -> None:
        self.send_errors.append((producer_id, sequence_id, code))

    def send_close_producer(self, producer_id: int) -> None:
        return

    def writable(self) -> bool:
        return self.can_write

    def is_open(self) -> bool:
        return self.open


def entry(key: str = "", sequence_id: int = 0, batch: int | None = None,
          chunk: tuple[str, int, int] | None = None) -> bytes:
    """A stored entry; ``chunk`` = (uuid, chunk_id, num_chunks) makes it one chunk of a message."""
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=sequence_id, publish_time=1000 + sequence_id)
    if key:
        metadata.partition_key = key
    if batch is not None:
        metadata.num_messages_in_batch = batch
    if chunk is not None:
        metadata.uuid, metadata.chunk_id, metadata.num_chunks_from_msg = chunk
        metadata.total_chunk_msg_size = chunk[2]
    return headers_and_payload(metadata, b"x")


async def settle(rounds: int = 50) -> None:
    """Let dispatcher tasks run until they block (no time passes)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


async def append(log: TopicLog, data: bytes) -> Position:
    """``log.append_run`` of one entry awaited: the position (or the error)."""
    appended: asyncio.Future[Position] = asyncio.get_running_loop().create_future()

    def done(position: Position | None, error: BaseException | None) -> None:
        if error is not None:
            appended.set_exception(error)
        else:
            appended.set_result(position)  # type: ignore[arg-type]

    log.append_run(((data, done),))
    return await appended


def append_each_then(run: Sequence[tuple[bytes, AppendCallback]],
                     append_one: Callable[[bytes], Awaitable[Position]]) -> None:
    """A log's ``append_run`` over an awaitable per entry (test logs that gate or fail appends):
    one task per entry, each telling its callback the position or the error."""
    for data, on_done in run:
        task = asyncio.ensure_future(append_one(data))
        task.add_done_callback(partial(_tell, on_done))


def _tell(on_done: AppendCallback, done: asyncio.Future[Position]) -> None:
    error = done.exception()
    if error is not None:
        on_done(None, error)
    else:
        on_done(done.result(), None)
