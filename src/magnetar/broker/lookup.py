"""Answers to PARTITIONED_METADATA and LOOKUP for a broker that owns every topic it is asked for.

Partition counts of partitioned topics are read from the metadata store at
``/admin/partitioned-topics/{tenant}/{namespace}/{domain}/{encoded local name}`` (JSON
``{"partitions": N}``), where the admin API writes them, as in Pulsar. Everything else is
non-partitioned (0), including each ``-partition-N`` name itself. A single broker answers every
LOOKUP with "connect here" (response=Connect, authoritative=true) and its advertised URL.
"""

from __future__ import annotations

import json
from urllib.parse import quote

from magnetar.base.types import TopicName
from magnetar.metadata.api import MetadataStore

PARTITIONED_TOPICS_ROOT = "/admin/partitioned-topics"


def partitioned_topic_path(topic: TopicName) -> str:
    return (f"{PARTITIONED_TOPICS_ROOT}/{topic.namespace}/{topic.domain.value}/"
            f"{quote(topic.local_name, safe='')}")


class PartitionedTopics:
    """Partition counts, from the metadata store when there is one."""

    def __init__(self, metadata: MetadataStore | None) -> None:
        self._metadata = metadata

    async def partitions(self, topic: TopicName) -> int:
        if self._metadata is None or topic.is_partition:
            return 0
        found = await self._metadata.get(partitioned_topic_path(topic))
        if found is None:
            return 0
        try:
            count = int(json.loads(found.value)["partitions"])
        except (ValueError, KeyError, TypeError):
            return 0
        return max(0, count)

    async def create(self, topic: TopicName, partitions: int) -> None:
        """Record a partitioned topic (tests and the admin API use this)."""
        if self._metadata is None:
            raise ValueError("no metadata store to record partitioned topics in")
        body = json.dumps({"partitions": partitions}).encode()
        await self._metadata.create(partitioned_topic_path(topic), body)
