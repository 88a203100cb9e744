"""A topic's queries over its log: the last message id (GET_LAST_MESSAGE_ID) and the seek by
publish time (split out of ``broker/topic.py``; ``Topic`` answers them with these)."""

from __future__ import annotations

from magnetar.base.types import EARLIEST, Position
from magnetar.broker.entry import entry_message_count
from magnetar.broker.errors import BrokerError
from magnetar.broker.log import TopicLog
from magnetar.protocol.pulsar import pb, stored_entry_metadata


async def last_message_id(log: TopicLog, partition: int) -> pb.MessageIdData:
    """The last entry's id; batch_index = size - 1 for a batch (Java does the same)."""
    last = log.last_position
    if last.entry_id < 0:
        return _wire_id(last, partition, None)
    entries = await log.read(last, 1)
    batch_index = None
    if entries and entries[0].position == last:
        metadata = stored_entry_metadata(entries[0].payload)
        if metadata.HasField("num_messages_in_batch"):
            batch_index = entry_message_count(metadata) - 1
    return _wire_id(last, partition, batch_index)


async def find_by_publish_time(log: TopicLog, read_count: int, timestamp_ms: int, scan_max: int) -> Position | None:
    """The first entry published at or after ``timestamp_ms`` (a bounded forward scan, reads of
    ``read_count`` entries)."""
    start = EARLIEST
    scanned = 0
    while scanned < scan_max:
        entries = await log.read(start, read_count)
        if not entries:
            return None
        for entry in entries:
            if stored_entry_metadata(entry.payload).publish_time >= timestamp_ms:
                return entry.position
        scanned += len(entries)
        start = entries[-1].position.next()
    raise BrokerError(pb.UnknownError, f"publish-time seek scanned {scanned} entries without a match")


def _wire_id(position: Position, partition: int, batch_index: int | None) -> pb.MessageIdData:
    from magnetar.protocol.pulsar import commands

    return commands.message_id(position.ledger_id, position.entry_id, partition=partition, batch_index=batch_index)
