"""An asyncio Pulsar client used by the simulator, geo-replication and tools.

Owns: broker connections over an injected ``Network`` (handshake, keep-alive, request table,
backpressure), lookup with redirects and a connection pool, producers (batching, compression,
ordered receipts, resend after reconnect), consumers (flow permits, batch unpacking, grouped and
batch-index acks, negative acks, seek, reconnect and resubscribe), readers, and partitioned
topics. The per-connection protocol state is the sans-IO
``magnetar.protocol.pulsar.client_connection.ClientConnection``.

Invariants: no I/O, time or randomness except through the injected ``Network``, ``Clock`` and
``Rng`` (so the simulator runs it on virtual time); every table and queue has a named bound in
``magnetar.base.limits`` (client section) or in the frozen configs; users may equally use the
official ``pulsar-client``: the broker treats both the same.
"""

from magnetar.client.client import PulsarClient
from magnetar.client.config import (
    ClientOptions,
    Compression,
    ConsumerConfig,
    InitialPosition,
    ProducerConfig,
    SubscriptionType,
)
from magnetar.client.consumer import Consumer, MultiTopicConsumer, Reader
from magnetar.client.errors import (
    BrokerError,
    ClientError,
    ConnectError,
    ConnectionLostError,
    TopicLookupError,
    TopicNotFoundError,
)
from magnetar.client.message import EARLIEST, LATEST, Message, MessageId
from magnetar.client.producer import PartitionedProducer, Producer
from magnetar.client.topic import full_topic_name, key_partition, murmur3_32, partition_name

__all__ = [
    "EARLIEST",
    "LATEST",
    "BrokerError",
    "ClientError",
    "ClientOptions",
    "Compression",
    "ConnectError",
    "ConnectionLostError",
    "Consumer",
    "ConsumerConfig",
    "InitialPosition",
    "Message",
    "MessageId",
    "MultiTopicConsumer",
    "PartitionedProducer",
    "Producer",
    "ProducerConfig",
    "PulsarClient",
    "Reader",
    "SubscriptionType",
    "TopicLookupError",
    "TopicNotFoundError",
    "full_topic_name",
    "key_partition",
    "murmur3_32",
    "partition_name",
]
