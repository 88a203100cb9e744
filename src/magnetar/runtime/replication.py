"""Composition of geo-replication for a real broker process: remote clients over TCP, the system clock."""

from __future__ import annotations

from magnetar.base.clock import Clock
from magnetar.base.io import Network
from magnetar.broker.service import BrokerService
from magnetar.client.client import PulsarClient
from magnetar.client.config import ClientOptions
from magnetar.replication import ReplicationService
from magnetar.runtime.clock import system_rng


async def start_replication(service: BrokerService, *, clock: Clock, network: Network) -> ReplicationService:
    """Start the replication service of ``service`` (its cluster is ``config.cluster_name``)."""

    def client(url: str, options: ClientOptions) -> PulsarClient:
        return PulsarClient(url, network=network, clock=clock, rng=system_rng(), options=options)

    replication = ReplicationService(service, service.config.cluster_name, client, clock)
    await replication.start()
    return replication
