"""``PulsarClient``: lookup, the connection pool, and the factory for producers, consumers and readers.

All I/O goes through the injected ``Network``; all waiting and deadlines through the injected
``Clock``; every random choice (consumer names, reader subscriptions, jitter, round-robin start)
through the injected ``Rng``. The runtime passes ``TcpNetwork``/``SystemClock``/``system_rng()``
(see ``magnetar.cli.produce.connect``); the simulator passes its simulated twins.

Lookup (shared/reference/pulsar_protocol.md 2.4): PARTITIONED_METADATA on the service URL, then
one LOOKUP per partition, following Redirect answers (``authoritative`` copied) for at most
``CLIENT_LOOKUP_REDIRECTS_COUNT_MAX`` hops, until Connect names the owning broker. Retryable
failures (ServiceNotReady, lost connections, timeouts) are retried with backoff until
``operation_timeout_ms``; fatal ones (TopicNotFound, ...) fail at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from magnetar.base.clock import Clock
from magnetar.base.errors import ClosedError, InvalidArgumentError, LimitExceededError, OperationTimeoutError
from magnetar.base.io import Network
from magnetar.base.limits import CLIENT_LOOKUP_REDIRECTS_COUNT_MAX, CLIENT_PARTITIONS_COUNT_MAX
from magnetar.base.rng import Rng
from magnetar.client._util import Backoff
from magnetar.client.config import ClientOptions, ConsumerConfig, ProducerConfig, SubscriptionType
from magnetar.client.connection import BrokerConnection, ConnectionPool, parse_service_url, retrying
from magnetar.client.consumer import Consumer, MultiTopicConsumer, Reader, ReceiveQueue
from magnetar.client.errors import TopicLookupError, broker_error, is_retryable
from magnetar.client.message import EARLIEST, MessageId
from magnetar.client.producer import PartitionedProducer, Producer
from magnetar.client.topic import full_topic_name, partition_index, partition_name
from magnetar.protocol.pulsar.generated import pulsar_api_pb2 as pb

T = pb.BaseCommand


class PulsarClient:
    """An asyncio Pulsar client. Create it inside a running event loop; ``close()`` it when done."""

    def __init__(self, service_url: str | tuple[str, int], *, network: Network, clock: Clock, rng: Rng,
                 options: ClientOptions | None = None) -> None:
        if isinstance(service_url, tuple):
            host, port = service_url
            service_url = f"pulsar://{host}:{port}"
        parse_service_url(service_url)  # validate early
        self.service_url = service_url
        self.network = network
        self.clock = clock
        self.rng = rng
        self.options = options or ClientOptions()
        self.options.validate()
        self.pool = ConnectionPool(network, clock, self.options)
        self._next_producer_id = 0
        self._next_consumer_id = 0
        self._closed = False
        self._producers: list[Producer] = []
        self._consumers: list[Consumer] = []

    # --- lookup --------------------------------------------------------------------------

    async def retry_until_deadline(self, operation: Callable[[], Awaitable[Any]], what: str) -> Any:
        """Run ``operation`` with backoff on retryable errors until the operation timeout."""
        self._check_open()
        deadline_ns = self.clock.monotonic_ns() + self.options.operation_timeout_ms * 1_000_000
        backoff = Backoff(self.rng, max_ms=self.options.backoff_max_ms)

        def retryable(error: BaseException) -> bool:
            return is_retryable(error) or isinstance(error, OperationTimeoutError)

        return await retrying(operation, self.clock, deadline_ns, backoff.next_s, retryable)

    async def get_partitions(self, topic: str) -> list[str]:
        """The partition topic names of ``topic`` (the topic itself when it is not partitioned)."""
        full = full_topic_name(topic)
        count = await self.retry_until_deadline(lambda: self._partition_count(full), f"metadata of {full}")
        return [partition_name(full, i) for i in range(count)] if count else [full]

    async def _partition_count(self, topic: str) -> int:
        cnx = await self.pool.get(self.service_url)
        request_id = cnx.new_request_id()
        body = pb.CommandPartitionedTopicMetadata(topic=topic, request_id=request_id)
        response = await cnx.request(T(type=T.PARTITIONED_METADATA, partitionMetadata=body), request_id,
                                     "PARTITIONED_METADATA")
        result = response.body
        assert isinstance(result, pb.CommandPartitionedTopicMetadataResponse)
        if not result.HasField("response") or result.response != pb.CommandPartitionedTopicMetadataResponse.Success:
            raise broker_error(result.error if result.HasField("error") else pb.UnknownError,
                               result.message or "partitioned metadata failed")
        if result.partitions > CLIENT_PARTITIONS_COUNT_MAX:
            raise LimitExceededError("CLIENT_PARTITIONS_COUNT_MAX", result.partitions, CLIENT_PARTITIONS_COUNT_MAX)
        return int(result.partitions)

    async def lookup(self, topic: str) -> str:
        """The broker URL that owns ``topic`` (one lookup chain, following redirects)."""
        cnx = await self.pool.get(self.service_url)
        authoritative = False
        for _hop in range(CLIENT_LOOKUP_REDIRECTS_COUNT_MAX + 1):
            request_id = cnx.new_request_id()
            body = pb.CommandLookupTopic(topic=topic, request_id=request_id, authoritative=authoritative,
                                         advertised_listener_name="")
            response = await cnx.request(T(type=T.LOOKUP, lookupTopic=body), request_id, "LOOKUP")
            result = response.body
            assert isinstance(result, pb.CommandLookupTopicResponse)
            kind = result.response if result.HasField("response") else pb.CommandLookupTopicResponse.Failed
            if kind == pb.CommandLookupTopicResponse.Failed:
                raise broker_error(result.error if result.HasField("error") else pb.UnknownError,
                                   result.message or f"lookup of {topic} failed")
            url = result.brokerServiceUrl
            if self.service_url.startswith("pulsar+ssl://"):  # a TLS client stays on TLS listeners
                url = result.brokerServiceUrlTls
            if not url:
                raise TopicLookupError(f"lookup of {topic} returned an empty broker URL")
            if kind == pb.CommandLookupTopicResponse.Connect:
                return url
            authoritative = result.authoritative
            cnx = await self.pool.get(url)
        raise TopicLookupError(f"lookup of {topic}: more than {CLIENT_LOOKUP_REDIRECTS_COUNT_MAX} redirects")

    async def connection_for(self, topic: str) -> BrokerConnection:
        """Look ``topic`` up and return a ready connection to its owner."""
        return await self.pool.get(await self.lookup(topic))

    # --- factories -----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("client is closed")

    async def create_producer(self, topic: str, config: ProducerConfig | None = None,
                              **overrides: Any) -> Producer | PartitionedProducer:
        """A producer; a partitioned topic gets one producer per partition behind a router."""
        self._check_open()
        config = replace(config or ProducerConfig(), **overrides)
        config.validate()
        partitions = await self.get_partitions(topic)
        full = full_topic_name(topic)
        producers = [self._new_producer(name, partition_index(name), config) for name in partitions]
        try:
            await asyncio.gather(*(p.start() for p in producers))
        except BaseException:
            for producer in producers:
                with contextlib.suppress(Exception):
                    await producer.close()
            raise
        if len(partitions) == 1 and partitions[0] == full:
            return producers[0]
        return PartitionedProducer(full, producers, self.rng.randint(0, len(producers) - 1), config.round_robin)

    def _new_producer(self, topic: str, partition: int, config: ProducerConfig) -> Producer:
        producer = Producer(self, topic, partition, self._next_producer_id, config)
        self._next_producer_id += 1
        self._producers.append(producer)
        return producer

    async def subscribe(self, topic: str, subscription: str, config: ConsumerConfig | None = None,
                        **overrides: Any) -> Consumer | MultiTopicConsumer:
        """A consumer; a partitioned topic gets one consumer per partition merged into one queue."""
        self._check_open()
        if not subscription:
            raise InvalidArgumentError("subscription name must not be empty")
        config = replace(config or ConsumerConfig(), **overrides)
        config.validate()
        partitions = await self.get_partitions(topic)
        full = full_topic_name(topic)
        partitioned = not (len(partitions) == 1 and partitions[0] == full)
        queue = ReceiveQueue(self)
        name = config.consumer_name if config.consumer_name is not None else self.rng.randbytes(5).hex()
        per_partition = config
        if partitioned:
            per_partition = replace(config, receiver_queue_size=max(1, min(config.receiver_queue_size,
                                                                            50_000 // len(partitions))))
        consumers = [self._new_consumer(p, partition_index(p), subscription, per_partition,
                                        queue=queue, consumer_name=name) for p in partitions]
        try:
            await asyncio.gather(*(c.start() for c in consumers))
        except BaseException:
            for consumer in consumers:
                with contextlib.suppress(Exception):
                    await consumer.close()
            raise
        if not partitioned:
            return consumers[0]
        return MultiTopicConsumer(full, queue, consumers)

    def _new_consumer(self, topic: str, partition: int, subscription: str, config: ConsumerConfig,
                      **kwargs: Any) -> Consumer:
        consumer = Consumer(self, topic, partition, self._next_consumer_id, subscription, config, **kwargs)
        self._next_consumer_id += 1
        self._consumers.append(consumer)
        return consumer

    async def create_reader(self, topic: str, start_message_id: MessageId = EARLIEST, *,
                            inclusive: bool = False, receiver_queue_size: int = 1_000) -> Reader:
        """A reader from ``start_message_id`` (``EARLIEST``, ``LATEST`` or an id; exclusive unless
        ``inclusive``). Readers work on non-partitioned topics and on single partitions."""
        self._check_open()
        partitions = await self.get_partitions(topic)
        full = full_topic_name(topic)
        if partitions != [full]:
            raise InvalidArgumentError(f"{full} is partitioned: create a reader per partition")
        config = ConsumerConfig(subscription_type=SubscriptionType.EXCLUSIVE, receiver_queue_size=receiver_queue_size)
        subscription = f"reader-{self.rng.randbytes(5).hex()}"
        consumer = self._new_consumer(full, partition_index(full), subscription, config, durable=False,
                                      start_message_id=start_message_id, start_inclusive=inclusive,
                                      consumer_name="")
        await consumer.start()
        return Reader(consumer)

    # --- closing -------------------------------------------------------------------------

    async def close(self) -> None:
        """Close every producer and consumer, then every connection."""
        if self._closed:
            return
        for producer in self._producers:
            with contextlib.suppress(Exception):
                await producer.close()
        for consumer in self._consumers:
            with contextlib.suppress(Exception):
                await consumer.close()
        self._closed = True
        self.pool.close_all()

    async def __aenter__(self) -> PulsarClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
