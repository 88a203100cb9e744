"""What applications see: ``MessageId`` and ``Message``.

A ``MessageId`` is (ledger, entry, partition, batch_index, batch_size). Ids order by
(ledger, entry, batch_index), which is the order a topic partition stores them in. The wire form
(``pb.MessageIdData``) never carries the partition or batch fields on acks, as the official
client does; ``earliest`` and ``latest`` are the sentinel ids the protocol uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from magnetar.protocol.pulsar.generated import pulsar_api_pb2 as pb

U64_MASK = 0xFFFF_FFFF_FFFF_FFFF
INT64_MAX = 0x7FFF_FFFF_FFFF_FFFF


def _signed64(value: int) -> int:
    return value - (1 << 64) if value > INT64_MAX else value


@dataclass(frozen=True, slots=True, order=True)
class MessageId:
    ledger_id: int
    entry_id: int
    batch_index: int = -1
    partition: int = field(default=-1, compare=False)
    batch_size: int = field(default=0, compare=False)

    @classmethod
    def from_pb(cls, data: pb.MessageIdData, partition: int | None = None) -> MessageId:
        return cls(
            ledger_id=_signed64(data.ledgerId), entry_id=_signed64(data.entryId),
            batch_index=data.batch_index if data.HasField("batch_index") else -1,
            partition=partition if partition is not None else (data.partition if data.HasField("partition") else -1),
            batch_size=data.batch_size if data.HasField("batch_size") else 0,
        )

    def to_pb(self, *, with_partition: bool = False, with_batch: bool = False) -> pb.MessageIdData:
        out = pb.MessageIdData(ledgerId=self.ledger_id & U64_MASK, entryId=self.entry_id & U64_MASK)
        if with_partition and self.partition >= 0:
            out.partition = self.partition
        if with_batch and self.batch_index >= 0:
            out.batch_index = self.batch_index
            out.batch_size = self.batch_size
        return out

    @property
    def entry(self) -> tuple[int, int]:
        """(ledger, entry): the stored entry this id lives in."""
        return (self.ledger_id, self.entry_id)

    @property
    def is_batched(self) -> bool:
        return self.batch_index >= 0

    def serialize(self) -> bytes:
        return bytes(self.to_pb(with_partition=True, with_batch=True).SerializeToString())

    @classmethod
    def deserialize(cls, data: bytes) -> MessageId:
        parsed = pb.MessageIdData()
        parsed.ParseFromString(data)
        return cls.from_pb(parsed)

    def __str__(self) -> str:
        text = f"{self.ledger_id}:{self.entry_id}:{self.partition}"
        return text + (f":{self.batch_index}" if self.batch_index >= 0 else "")


EARLIEST = MessageId(-1, -1)
LATEST = MessageId(INT64_MAX, INT64_MAX)


@dataclass(frozen=True, slots=True)
class Message:
    """One received message. ``consumer_key`` routes acks back to the consumer that received it."""

    topic: str
    message_id: MessageId
    payload: bytes
    key: str | None
    properties: dict[str, str]
    publish_time_ms: int
    event_time_ms: int | None
    producer_name: str
    sequence_id: int
    redelivery_count: int
    ordering_key: bytes | None = None
    consumer_key: int = field(default=-1, compare=False, repr=False)

    def data(self) -> bytes:
        return self.payload

    def value(self) -> str:
        return self.payload.decode("utf-8", errors="replace")
