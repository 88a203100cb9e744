"""Answers to PARTITIONED_METADATA and LOOKUP.

Partition counts of partitioned topics are read from the metadata store at
``/admin/partitioned-topics/{tenant}/{namespace}/{domain}/{encoded local name}`` (JSON
``{"partitions": N}``), where the admin API writes them, as in Pulsar. Everything else is
non-partitioned (0), including each ``-partition-N`` name itself.

LOOKUP is answered by a ``TopicLookup``: ``SingleBrokerLookup`` (standalone, tests) answers every
topic with "connect here" (response=Connect, authoritative=true) and the broker's advertised URL;
in a cluster ``control.ownership.OwnershipLookup`` answers Connect for bundles this broker owns (or
acquires) and Redirect to the owner (or to the broker chosen to own it) otherwise.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import quote

from magnetar.base.types import TopicName
from magnetar.metadata.api import MetadataStore

PARTITIONED_TOPICS_ROOT = "/admin/partitioned-topics"


class LookupKind(enum.Enum):
    CONNECT = "connect"  # the topic is served at ``url``: create the producer/consumer there
    REDIRECT = "redirect"  # ask ``url`` again (with ``authoritative`` copied into the next LOOKUP)


@dataclass(frozen=True, slots=True)
class LookupAnswer:
    kind: LookupKind
    url: str
    authoritative: bool
    url_tls: str | None = None  # the same broker's ``pulsar+ssl://`` listener, when it has one
    #: The target broker's advertised listeners (``catalog.listeners`` format; "" none besides its
    #: internal one) when known, so a Redirect can name the client's listener; None: unknown.
    listeners: str | None = field(default=None, compare=False)


class TopicLookup(Protocol):
    async def lookup(self, topic: TopicName, authoritative: bool) -> LookupAnswer:
        """Where ``topic`` is served; raises ``BrokerError`` (e.g. ServiceNotReady) when unknown now."""


class SingleBrokerLookup:
    """A broker that serves every topic itself: always Connect to its own advertised URL."""

    def __init__(self, service_url: Callable[[], str], service_url_tls: Callable[[], str | None] = lambda: None) -> None:
        self._service_url = service_url
        self._service_url_tls = service_url_tls

    async def lookup(self, topic: TopicName, authoritative: bool) -> LookupAnswer:
        return LookupAnswer(LookupKind.CONNECT, self._service_url(), True, self._service_url_tls())


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
