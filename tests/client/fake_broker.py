"""A small in-memory broker for client tests, built from our server-side state machine.

It serves over any ``magnetar.base.io.Network`` (``SimNetwork`` for virtual-time tests,
``TcpNetwork`` for loopback tests with the official client or the CLI). It models just enough of
a broker: topics as entry lists (ledger 7, entry = index), partitioned metadata, lookup (Connect
or a Redirect chain), producers with in-order receipts and optional dedup by
(producer_name, sequence_id), durable and non-durable subscriptions with a cursor, individual and
cumulative acks (ack_set kept for partial batches), redelivery with counts, permits, exclusive /
shared dispatch, seek (CLOSE_CONSUMER before SUCCESS, as Java does), unsubscribe and
GET_LAST_MESSAGE_ID. Knobs let tests inject faults: drop a connection after N sends, fail the
first N lookups with ServiceNotReady, withhold replies.
"""

from __future__ import annotations

import contextlib
from collections import deque
from dataclasses import dataclass, field

from magnetar.base.io import Connection, Network
from magnetar.protocol.pulsar import (
    AckReceived,
    CommandReceived,
    FlowReceived,
    SendReceived,
    ServerConnection,
    commands,
    pb,
)
from magnetar.protocol.pulsar.batch import message_count

T = pb.BaseCommand
LEDGER_ID = 7
EARLIEST_U64 = 0xFFFF_FFFF_FFFF_FFFF
LATEST_U64 = 0x7FFF_FFFF_FFFF_FFFF


@dataclass
class Entry:
    index: int
    metadata: pb.MessageMetadata
    stored: bytes  # headers_and_payload as received
    count: int


@dataclass
class Sub:
    name: str
    type: int
    durable: bool
    cursor: int = 0  # next index never dispatched
    acked: set[int] = field(default_factory=set)
    partial: dict[int, list[int]] = field(default_factory=dict)
    redeliver: deque[int] = field(default_factory=deque)
    redelivery_counts: dict[int, int] = field(default_factory=dict)
    consumers: list[ConsumerSession] = field(default_factory=list)
    rr: int = 0

    def mark_delete(self) -> int:
        index = -1
        while index + 1 in self.acked:
            index += 1
        return index


@dataclass
class Topic:
    name: str
    entries: list[Entry] = field(default_factory=list)
    subs: dict[str, Sub] = field(default_factory=dict)
    last_seq: dict[str, int] = field(default_factory=dict)  # producer_name -> highest persisted


@dataclass(eq=False)
class ConsumerSession:
    session: Session
    consumer_id: int
    topic: Topic
    sub: Sub
    permits: int = 0
    unacked: set[int] = field(default_factory=set)


@dataclass(eq=False)
class Session:
    conn: ServerConnection
    io: Connection
    producers: dict[int, tuple[Topic, str]] = field(default_factory=dict)
    consumers: dict[int, ConsumerSession] = field(default_factory=dict)
    sends: int = 0


@dataclass
class FakeBroker:
    network: Network
    host: str = "127.0.0.1"
    port: int = 0
    url: str = ""
    partitions: dict[str, int] = field(default_factory=dict)
    topics: dict[str, Topic] = field(default_factory=dict)
    sessions: list[Session] = field(default_factory=list)
    received: list[str] = field(default_factory=list)  # command names in arrival order
    subscribes: list[pb.CommandSubscribe] = field(default_factory=list)
    producers_seen: list[pb.CommandProducer] = field(default_factory=list)
    acks: list[pb.CommandAck] = field(default_factory=list)
    redelivers: list[pb.CommandRedeliverUnacknowledgedMessages] = field(default_factory=list)
    dedup: bool = True
    drop_after_sends: int | None = None  # close a connection once it has carried this many SENDs
    lookup_failures: int = 0  # answer this many LOOKUPs with ServiceNotReady first
    redirect_to: str | None = None  # answer LOOKUP with Redirect to this URL
    silent_types: set[int] = field(default_factory=set)  # requests of these types get no reply
    topic_not_found: set[str] = field(default_factory=set)
    hold_receipts: bool = False  # keep receipts in ``held`` until ``release_receipts()``
    held: list[tuple[Session, pb.BaseCommand]] = field(default_factory=list)
    connections_accepted: int = 0
    _producer_names: int = 0
    _listener: object | None = None

    async def start(self) -> FakeBroker:
        listener = await self.network.listen(self.host, self.port, self._serve)
        self._listener = listener
        self.port = listener.port
        self.url = f"pulsar://{self.host}:{self.port}"
        return self

    def stop(self) -> None:
        if self._listener is not None:
            self._listener.close()  # type: ignore[attr-defined]
        for session in list(self.sessions):
            session.io.close()

    def topic(self, name: str) -> Topic:
        return self.topics.setdefault(name, Topic(name))

    def release_receipts(self) -> None:
        held, self.held = self.held, []
        self.hold_receipts = False
        for session, command in held:
            if session in self.sessions:
                session.conn.send_command(command)
        self._flush_all()

    def drop_connections(self) -> None:
        for session in list(self.sessions):
            self._end(session)
            session.io.close()

    # --- serving -------------------------------------------------------------------------

    async def _serve(self, io: Connection) -> None:
        self.connections_accepted += 1
        session = Session(ServerConnection(now_ms=0), io)
        self.sessions.append(session)
        try:
            while True:
                data = await io.read(256 * 1024)
                if not data:
                    return
                for event in session.conn.receive_data(data, 0):
                    self._on_event(session, event)
                    if session not in self.sessions:
                        return
                self._dispatch_all()
                self._flush_all()
        finally:
            self._end(session)

    def _flush_all(self) -> None:
        for session in list(self.sessions):
            parts = session.conn.data_to_send()
            with contextlib.suppress(Exception):
                for part in parts:
                    session.io.write(part)

    def _end(self, session: Session) -> None:
        if session not in self.sessions:
            return
        self.sessions.remove(session)
        for consumer in list(session.consumers.values()):
            self._detach(consumer)
        session.consumers.clear()
        self._flush_all()
        session.io.close()

    def _detach(self, consumer: ConsumerSession) -> None:
        sub = consumer.sub
        if consumer in sub.consumers:
            sub.consumers.remove(consumer)
        for index in sorted(consumer.unacked):
            if index not in sub.acked and index not in sub.redeliver:
                sub.redeliver.append(index)
        consumer.unacked.clear()
        if not sub.durable and not sub.consumers:
            consumer.topic.subs.pop(sub.name, None)

    def _on_event(self, session: Session, event: object) -> None:
        if isinstance(event, SendReceived):
            self.received.append("SEND")
            self._on_send(session, event)
        elif isinstance(event, FlowReceived | AckReceived):  # FLOW and ACK: events of their own
            kind = T.FLOW if isinstance(event, FlowReceived) else T.ACK
            self.received.append(T.Type.Name(kind))
            if kind in self.silent_types:
                return
            self._on_request(session, pb.CommandFlow(consumer_id=event.consumer_id, messagePermits=event.permits)
                             if isinstance(event, FlowReceived) else event.decoded())
        elif isinstance(event, CommandReceived):
            self.received.append(T.Type.Name(event.type))
            if event.type in self.silent_types:
                return
            self._on_request(session, event.body)

    def _on_send(self, session: Session, event: SendReceived) -> None:
        topic, name = session.producers[event.command.producer_id]
        seq = event.command.sequence_id
        metadata = event.message.metadata
        count = message_count(metadata)
        last_seq = seq + count - 1
        if self.dedup and last_seq <= topic.last_seq.get(name, -1):
            session.conn.send_receipt(event.command.producer_id, seq, EARLIEST_U64, EARLIEST_U64)
        else:
            entry = Entry(len(topic.entries), metadata, bytes(event.message.headers_and_payload), count)
            topic.entries.append(entry)
            topic.last_seq[name] = last_seq
            if self.hold_receipts:
                self.held.append((session, commands.send_receipt(event.command.producer_id, seq, LEDGER_ID,
                                                                 entry.index)))
            else:
                session.conn.send_receipt(event.command.producer_id, seq, LEDGER_ID, entry.index)
        session.sends += 1
        if self.drop_after_sends is not None and session.sends >= self.drop_after_sends:
            self.drop_after_sends = None
            # The receipt queued above is lost with the connection, as on a real crash.
            session.conn.data_to_send()
            self._end(session)

    def _on_request(self, session: Session, body: object) -> None:
        conn = session.conn
        if isinstance(body, pb.CommandPartitionedTopicMetadata):
            if body.topic in self.topic_not_found:
                conn.send_partitioned_metadata_error(body.request_id, pb.TopicNotFound, "no such topic")
            else:
                conn.send_partitioned_metadata(body.request_id, self.partitions.get(body.topic, 0))
        elif isinstance(body, pb.CommandLookupTopic):
            if self.lookup_failures > 0:
                self.lookup_failures -= 1
                conn.send_lookup_error(body.request_id, pb.ServiceNotReady, "warming up")
            elif self.redirect_to is not None and not body.authoritative:
                conn.send_lookup_redirect(body.request_id, self.redirect_to, authoritative=True)
            else:
                conn.send_lookup_connect(body.request_id, self.url)
        elif isinstance(body, pb.CommandProducer):
            self.producers_seen.append(body)
            topic = self.topic(body.topic)
            if body.HasField("producer_name"):
                name = body.producer_name
            else:
                name = f"fake-{self._producer_names}"
                self._producer_names += 1
            session.producers[body.producer_id] = (topic, name)
            conn.send_producer_success(body.request_id, name, topic.last_seq.get(name, -1))
        elif isinstance(body, pb.CommandSubscribe):
            self._on_subscribe(session, body)
        elif isinstance(body, pb.CommandFlow):
            consumer = session.consumers.get(body.consumer_id)
            if consumer is not None:
                consumer.permits += body.messagePermits
        elif isinstance(body, pb.CommandAck):
            self.acks.append(body)
            self._on_ack(session, body)
        elif isinstance(body, pb.CommandRedeliverUnacknowledgedMessages):
            self.redelivers.append(body)
            self._on_redeliver(session, body)
        elif isinstance(body, pb.CommandSeek):
            self._on_seek(session, body)
        elif isinstance(body, pb.CommandGetLastMessageId):
            consumer = session.consumers[body.consumer_id]
            entries = consumer.topic.entries
            if entries:
                last = entries[-1]
                batch_index = last.count - 1 if last.metadata.HasField("num_messages_in_batch") else None
                last_id = commands.message_id(LEDGER_ID, last.index, batch_index=batch_index)
            else:
                last_id = commands.message_id(-1, -1)
            mark = consumer.sub.mark_delete()
            mark_id = commands.message_id(LEDGER_ID, mark) if mark >= 0 else commands.message_id(LEDGER_ID, -1)
            if not consumer.sub.durable and consumer.sub.cursor > 0 and mark < 0:
                mark_id = commands.message_id(LEDGER_ID, consumer.sub.cursor - 1)
            conn.send_get_last_message_id_response(body.request_id, last_id, mark_id)
        elif isinstance(body, pb.CommandUnsubscribe):
            consumer = session.consumers.pop(body.consumer_id)
            consumer.topic.subs.pop(consumer.sub.name, None)
            conn.send_success(body.request_id)
        elif isinstance(body, pb.CommandCloseConsumer):
            consumer = session.consumers.pop(body.consumer_id, None)
            if consumer is not None:
                self._detach(consumer)
            conn.send_success(body.request_id)
        elif isinstance(body, pb.CommandCloseProducer):
            session.producers.pop(body.producer_id, None)
            conn.send_success(body.request_id)

    def _on_subscribe(self, session: Session, body: pb.CommandSubscribe) -> None:
        self.subscribes.append(body)
        if body.consumer_id in session.consumers:
            session.conn.send_success(body.request_id)
            return
        topic = self.topic(body.topic)
        sub = topic.subs.get(body.subscription)
        if sub is None:
            sub = Sub(body.subscription, body.subType, body.durable)
            if body.HasField("start_message_id"):
                sub.cursor = self._position(topic, body.start_message_id)
            elif body.initialPosition == pb.CommandSubscribe.Latest:
                sub.cursor = len(topic.entries)
            topic.subs[body.subscription] = sub
        elif sub.consumers and sub.type in (pb.CommandSubscribe.Exclusive,):
            session.conn.send_error(body.request_id, pb.ConsumerBusy, "exclusive consumer already attached")
            return
        consumer = ConsumerSession(session, body.consumer_id, topic, sub)
        sub.consumers.append(consumer)
        session.consumers[body.consumer_id] = consumer
        session.conn.send_success(body.request_id)

    @staticmethod
    def _position(topic: Topic, msg_id: pb.MessageIdData) -> int:
        if msg_id.ledgerId == EARLIEST_U64:
            return 0
        if msg_id.ledgerId == LATEST_U64:
            return len(topic.entries)
        return min(msg_id.entryId, len(topic.entries))

    def _on_ack(self, session: Session, body: pb.CommandAck) -> None:
        consumer = session.consumers.get(body.consumer_id)
        if consumer is None:
            return
        sub = consumer.sub
        for msg_id in body.message_id:
            index = msg_id.entryId
            if body.ack_type == pb.CommandAck.Cumulative and not msg_id.ack_set:
                covered = [i for i in range(index + 1)]
            elif msg_id.ack_set:
                sub.partial[index] = list(msg_id.ack_set)
                if body.ack_type == pb.CommandAck.Cumulative:
                    for i in range(index):
                        sub.acked.add(i)
                continue
            else:
                covered = [index]
            for i in covered:
                sub.acked.add(i)
                sub.partial.pop(i, None)
                for other in sub.consumers:
                    other.unacked.discard(i)

    def _on_redeliver(self, session: Session, body: pb.CommandRedeliverUnacknowledgedMessages) -> None:
        consumer = session.consumers.get(body.consumer_id)
        if consumer is None:
            return
        wanted = [m.entryId for m in body.message_ids] if body.message_ids else sorted(consumer.unacked)
        for index in wanted:
            if index in consumer.unacked and index not in consumer.sub.acked:
                consumer.unacked.discard(index)
                consumer.sub.redeliver.append(index)

    def _on_seek(self, session: Session, body: pb.CommandSeek) -> None:
        consumer = session.consumers[body.consumer_id]
        sub, topic = consumer.sub, consumer.topic
        if body.HasField("message_id"):
            sub.cursor = self._position(topic, body.message_id)
        else:
            sub.cursor = next((e.index for e in topic.entries if e.metadata.publish_time >= body.message_publish_time),
                              len(topic.entries))
        sub.acked = {i for i in sub.acked if i < sub.cursor}
        sub.redeliver.clear()
        for other in list(sub.consumers):
            other.unacked.clear()
            other.session.consumers.pop(other.consumer_id, None)
            sub.consumers.remove(other)
            other.session.conn.send_close_consumer(other.consumer_id)
        session.conn.send_success(body.request_id)

    # --- dispatch ------------------------------------------------------------------------

    def _dispatch_all(self) -> None:
        for topic in self.topics.values():
            for sub in list(topic.subs.values()):
                self._dispatch(topic, sub)

    def _pick(self, sub: Sub) -> ConsumerSession | None:
        ready = [c for c in sub.consumers if c.permits > 0]
        if not ready:
            return None
        if sub.type in (pb.CommandSubscribe.Shared, pb.CommandSubscribe.Key_Shared):
            sub.rr = (sub.rr + 1) % len(ready)
            return ready[sub.rr]
        first = sub.consumers[0]
        return first if first.permits > 0 else None

    def _dispatch(self, topic: Topic, sub: Sub) -> None:
        while True:
            consumer = self._pick(sub)
            if consumer is None:
                return
            if sub.redeliver:
                index = sub.redeliver.popleft()
                if index in sub.acked:
                    continue
                sub.redelivery_counts[index] = sub.redelivery_counts.get(index, 0) + 1
            elif sub.cursor < len(topic.entries):
                index = sub.cursor
                sub.cursor += 1
                if index in sub.acked:
                    continue
            else:
                return
            entry = topic.entries[index]
            partition = _partition_of(topic.name)
            consumer.session.conn.send_message(consumer.consumer_id, LEDGER_ID, entry.index, entry.stored,
                                               partition=partition,
                                               redelivery_count=sub.redelivery_counts.get(index, 0),
                                               ack_set=sub.partial.get(index, ()))
            consumer.permits -= entry.count
            consumer.unacked.add(index)


def _partition_of(name: str) -> int:
    _head, sep, tail = name.rpartition("-partition-")
    return int(tail) if sep and tail.isdigit() else -1
