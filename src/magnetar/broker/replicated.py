"""What the broker knows of geo-replication's messages (``magnetar.replication`` sends them).

A replicator in cluster ``A`` sends each entry of a topic to the same topic in cluster ``B`` with
the producer name ``pulsar.repl.A-->B``, ``replicated_from = "A"`` in the metadata and the
property ``__MSG_PROP_REPL_SOURCE_POSITION = "<ledger>:<entry>"``: the entry's position in ``A``
(one SEND per source entry, a batch entry stays one batch). Source positions of one topic only
grow, so the receiving topic keeps, per source cluster, the highest source position persisted
(``Topic.repl_dedup``: a ``MessageDeduplication`` keyed by source cluster, snapshotted in the
``pulsar.repl.dedup`` cursor and rebuilt from the log on load) and drops any SEND not above it.
A replicator that restarts, fails over or dies mid-batch resends from its cursor: what was already
stored is answered as a duplicate, so nothing is stored twice and nothing is lost.
"""

from __future__ import annotations

import contextlib

from magnetar.base.errors import AlreadyExistsError
from magnetar.base.types import TopicName
from magnetar.broker.dedup import REPLICATION_CURSOR_PREFIX
from magnetar.broker.log import SubscriptionCursor
from magnetar.catalog.lookup import PartitionedTopics
from magnetar.protocol.pulsar import pb

#: Pulsar's property name for the source position of a replicated message.
REPL_SOURCE_POSITION_PROPERTY = "__MSG_PROP_REPL_SOURCE_POSITION"
#: Entry ids of one ledger stay below this (the managed ledger rolls over long before).
_ENTRY_BITS = 32


def replicator_producer_name(local: str, remote: str) -> str:
    """Pulsar's name for the producer that replicates from ``local`` to ``remote``."""
    return f"{REPLICATION_CURSOR_PREFIX}{local}-->{remote}"


def is_replicator_producer(name: str) -> bool:
    return name.startswith(REPLICATION_CURSOR_PREFIX) and "-->" in name


def encode_source_position(ledger_id: int, entry_id: int) -> int:
    """One ordered number for a source position (what the dedup map stores)."""
    return (ledger_id << _ENTRY_BITS) | entry_id


def decode_source_position(value: int) -> tuple[int, int]:
    return value >> _ENTRY_BITS, value & ((1 << _ENTRY_BITS) - 1)


def parse_source_position(text: str) -> int | None:
    ledger, sep, entry = text.partition(":")
    if not sep:
        return None
    try:
        ledger_id, entry_id = int(ledger), int(entry)
    except ValueError:
        return None
    if ledger_id < 0 or not 0 <= entry_id < 1 << _ENTRY_BITS:
        return None
    return encode_source_position(ledger_id, entry_id)


def replicated_source(metadata: pb.MessageMetadata) -> tuple[str, int] | None:
    """(source cluster, encoded source position) of a replicated message, or None."""
    if not metadata.HasField("replicated_from") or not metadata.replicated_from:
        return None
    for prop in metadata.properties:
        if prop.key == REPL_SOURCE_POSITION_PROPERTY:
            position = parse_source_position(prop.value)
            return None if position is None else (metadata.replicated_from, position)
    return None


#: Cursor property marking a replicated subscription (Pulsar's name; the value is 1).
REPLICATED_SUBSCRIPTION_PROPERTY = "pulsar.replicated.subscription"


def is_replicated_subscription(cursor: SubscriptionCursor) -> bool:
    return bool(cursor.properties.get(REPLICATED_SUBSCRIPTION_PROPERTY))


async def mark_replicated_subscription(cursor: SubscriptionCursor) -> None:
    """Persist the flag (with the position unchanged): it outlives the consumer and the broker."""
    if not is_replicated_subscription(cursor):
        await cursor.mark_delete(cursor.mark_delete_position,
                                 {**cursor.properties, REPLICATED_SUBSCRIPTION_PROPERTY: 1})


#: A replicator's PRODUCER metadata: the partition count of the source topic (when it sends to a
#: partition), so the remote cluster can create the partitioned topic its consumers look up.
REPL_PARTITIONS_PRODUCER_PROPERTY = "pulsar.repl.partitions"


async def adopt_replicated_partitions(partitioned: PartitionedTopics, topic: TopicName,
                                      properties: dict[str, str]) -> None:
    """A replicator produces to partition N of a topic this cluster does not know as partitioned:
    record the partitioned topic with the source's partition count (one to one mapping)."""
    if not topic.is_partition:
        return
    try:
        count = int(properties.get(REPL_PARTITIONS_PRODUCER_PROPERTY, "0"))
    except ValueError:
        return
    base = topic.partitioned_topic_name
    if count <= topic.partition_index or await partitioned.partitions(base):
        return
    with contextlib.suppress(AlreadyExistsError):  # another replicator (partition) created it first
        await partitioned.create(base, count)
