"""Marker entries of replicated subscriptions (PIP-33): types, payloads, stored bytes. Sans-IO.

A marker is a stored entry like any message, told apart by ``MessageMetadata.marker_type``; its
producer name is ``pulsar.marker`` and its sequence id 0. ``replicate_to`` says which clusters the
geo-replicators carry it to (a snapshot stays local). Dispatchers never deliver markers.
"""

from __future__ import annotations

import enum

from magnetar.protocol.pulsar.frames import headers_and_payload
from magnetar.protocol.pulsar.generated import pulsar_api_pb2 as pb
from magnetar.protocol.pulsar.generated import pulsar_markers_pb2 as mpb

MARKER_PRODUCER_NAME = "pulsar.marker"


class MarkerType(enum.IntEnum):
    SNAPSHOT_REQUEST = 10
    SNAPSHOT_RESPONSE = 11
    SNAPSHOT = 12
    UPDATE = 13
    TXN_COMMITTING = 20
    TXN_COMMIT = 21
    TXN_ABORT = 22


REPLICATED_SUBSCRIPTION_MARKERS = frozenset({MarkerType.SNAPSHOT_REQUEST, MarkerType.SNAPSHOT_RESPONSE,
                                             MarkerType.SNAPSHOT, MarkerType.UPDATE})


def is_marker(metadata: pb.MessageMetadata) -> bool:
    return metadata.marker_type != 0


def marker_entry(kind: MarkerType, payload: bytes, *, replicate_to: list[str], publish_time_ms: int) -> bytes:
    """The stored bytes of one marker (what the topic appends)."""
    metadata = pb.MessageMetadata(producer_name=MARKER_PRODUCER_NAME, sequence_id=0, publish_time=publish_time_ms,
                                  marker_type=int(kind))
    metadata.replicate_to.extend(replicate_to)
    return headers_and_payload(metadata, payload)


def cluster_position(cluster: str, ledger_id: int, entry_id: int) -> mpb.ClusterMessageId:
    return mpb.ClusterMessageId(cluster=cluster,
                                message_id=mpb.MarkersMessageIdData(ledger_id=ledger_id, entry_id=entry_id))


__all__ = [
    "MARKER_PRODUCER_NAME",
    "REPLICATED_SUBSCRIPTION_MARKERS",
    "MarkerType",
    "cluster_position",
    "is_marker",
    "marker_entry",
    "mpb",
]
