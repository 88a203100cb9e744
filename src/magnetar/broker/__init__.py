"""The broker core: topics, producers, subscriptions, dispatchers, lookup, per-connection sessions.

Owns: ``BrokerService`` (topic registry, loaded on demand, auto-created), ``Topic`` (producers
with access modes and deduplication, subscriptions), ``Producer`` (SEND -> persist -> SEND_RECEIPT
strictly in SEND order), ``Subscription`` with one dispatcher per type (Exclusive/Failover in
``dispatcher_single``, Shared, Key_Shared), ``Session`` (one client connection's commands) and the
storage ports it needs (``log``: ``LogStore``/``TopicLog``/``SubscriptionCursor``), implemented by
``memory_log`` (reference) and ``managed_log`` (over ``magnetar.managed_ledger``).

No sockets, no clock, no randomness: ``node/broker.py`` runs sessions over a ``Network``.
Invariants: a receipt is sent only after its entry is durable, in SEND order per producer; a
consumer receives only with permits (counted per message); an acknowledged entry is never
dispatched again; every table has a named bound (``BrokerConfig`` or ``base.limits``).
"""

from magnetar.broker.config import BrokerConfig
from magnetar.broker.consumer import Consumer, ConsumerChannel, SubType
from magnetar.broker.errors import BrokerError
from magnetar.broker.log import LogStore, SubscriptionCursor, TopicLog
from magnetar.broker.memory_log import MemoryLogStore
from magnetar.broker.producer import AccessMode, Producer, ProducerChannel
from magnetar.broker.service import BrokerService
from magnetar.broker.session import Session
from magnetar.broker.subscription import Subscription
from magnetar.broker.topic import Topic

__all__ = [
    "AccessMode",
    "BrokerConfig",
    "BrokerError",
    "BrokerService",
    "Consumer",
    "ConsumerChannel",
    "LogStore",
    "MemoryLogStore",
    "Producer",
    "ProducerChannel",
    "Session",
    "SubType",
    "Subscription",
    "SubscriptionCursor",
    "Topic",
    "TopicLog",
]
