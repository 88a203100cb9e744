"""Composition of geo-replication for a broker: clients of the remote clusters over the node's
``Network``, ``Clock`` and ``Rng`` (TCP and the system clock in a real process)."""

from __future__ import annotations

from magnetar.base.clock import Clock
from magnetar.base.io import Network
from magnetar.base.rng import Rng
from magnetar.broker.service import BrokerService
from magnetar.client.client import PulsarClient
from magnetar.client.config import ClientOptions
from magnetar.replication import ReplicationService


async def start_replication(service: BrokerService, *, clock: Clock, network: Network, rng: Rng) -> ReplicationService:
    """Start the replication service of ``service`` (its cluster is ``config.cluster_name``)."""

    def client(url: str, options: ClientOptions) -> PulsarClient:
        return PulsarClient(url, network=network, clock=clock, rng=rng, options=options)

    replication = ReplicationService(service, service.config.cluster_name, client, clock)
    await replication.start()
    return replication
