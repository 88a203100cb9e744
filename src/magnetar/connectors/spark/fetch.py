"""The connector's I/O: topic layouts from the metadata store, entries from bookies, and the
broker as fallback. Runs on the driver (planning, admission control) and in tasks (reading).

Read path of a slice (``readMode=auto``): each ledger's metadata travels in the slice, so a task
reads entries straight from the ledger's bookies, up to the LAC the planner saw, with a read-ahead
window of entry reads in flight (``entry_stream``). Each entry is first asked of the first bookie
of its write set over a blocking pipelined connection of the stream's own
(``runtime.bookie_reads``: reads sent a window at a time in one write; each answer received into
the connection's buffer and its digest checked right before its rows are built, with no event
loop, future or task per read); an answer that is missing, negative, late (no bytes for
``speculative_read_timeout_ms``) or fails its check (ids, CRC32C digest) sends that entry down
the ledger's speculative read over the whole write set. If that fails too (no replica answers),
the rest of the slice is read through the broker with a non-durable reader (``readMode=broker``
does that from the start; ``readMode=bookies`` fails instead). Either way the rows of one slice
are the same. Offloaded ledgers of a slice are not read here entry by entry: ``offloaded`` reads
their Parquet files as Arrow record batches in the connector's schema (no Python per row), and
the slice's bookie-held ranges follow (``Slice.tiers``).

Layouts (``load_layout``): with ``adminUrl`` and no ``metadataUrl``, the brokers' admin API
answers, authorized as the reading role (``admin_plan``). Otherwise (a trusted cluster) the
managed ledger's ``ManagedLedgerInfo`` at ``/managed-ledgers/<tenant>/<ns>/persistent/<topic>``
lists the ledgers; each ledger's metadata gives its state, and an open ledger's readable end is a
quorum LAC read (no fencing: the broker keeps writing). The metadata store is read through
``runtime.metadata_view`` (read-only).
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from itertools import islice
from typing import Any, cast
from urllib.parse import quote, unquote

import msgspec
import pyarrow as pa

import magnetar.base.entry as base_entry
from magnetar.base.errors import (
    InvalidArgumentError,
    LimitExceededError,
    MagnetarError,
    OperationTimeoutError,
)
from magnetar.base.limits import (
    SPARK_ARROW_BATCH_BYTES_MAX,
    SPARK_ARROW_BATCH_ROWS_MAX,
    SPARK_BOOKIE_READ_CONNECTIONS_COUNT_MAX,
    SPARK_BROKER_READ_IDLE_MS_MAX,
    SPARK_LAKEHOUSE_READ_ENTRIES_COUNT,
    SPARK_PARTITIONS_COUNT_MAX,
    SPARK_READ_AHEAD_BYTES_MAX,
    SPARK_READ_AHEAD_CACHED_BYTES,
    SPARK_READ_AHEAD_ENTRIES_MAX,
    SPARK_READ_ENTRIES_CHUNK_COUNT_MAX,
)
from magnetar.base.types import NO_ENTRY, BookieId, Position, TopicName
from magnetar.client import ClientOptions, MessageId, PulsarClient
from magnetar.connectors.spark import admin_plan
from magnetar.connectors.spark.admin_plan import AdminApi, StoreLocation
from magnetar.connectors.spark.offloaded import offloaded_batches
from magnetar.connectors.spark.options import Credentials
from magnetar.connectors.spark.plan import EntryRange, LedgerSpan, PartitionLayout, Slice
from magnetar.connectors.spark.rows import RowBuilder, ValueField
from magnetar.ledger import BookieClientTransport, LedgerClientConfig
from magnetar.ledger.bookie_client import checked_entry
from magnetar.ledger.ledger_metadata import LedgerMetadata
from magnetar.ledger.metadata_adapter import MetadataStoreAdapter
from magnetar.ledger.metadata_ops import LedgerMetadataStore
from magnetar.ledger.quorum import read_order, write_set
from magnetar.ledger.reader import speculative_read
from magnetar.metadata.records import LedgerState, ManagedLedgerInfo, decode
from magnetar.protocol.bookie.codec import ENTRY_HEADER_BYTES, EncodedEntry, EncodedEntryView
from magnetar.protocol.pulsar.batch import message_count
from magnetar.protocol.pulsar.stored import split_stored_entry
from magnetar.runtime.bookie_reads import BlockingBookieReads
from magnetar.runtime.clock import SystemClock, system_rng
from magnetar.runtime.lakehouse import LazyLakehouse, open_lakehouse
from magnetar.runtime.metadata_view import MetadataView, open_metadata_view
from magnetar.runtime.network import TcpNetwork

#: The schema registry's layout (the broker's ``schema`` module, read here without importing the
#: broker): ``/schemas/{tenant}/{namespace}/{topic}/{version:010d}``, each node a JSON record whose
#: ``type`` is Pulsar's ``Schema.Type`` number and ``data`` the definition (base64 in the JSON).
SCHEMAS_ROOT = "/schemas"
AVRO_SCHEMA_TYPE = 4


class StoredSchema(msgspec.Struct):
    type: int
    data: bytes

#: Where managed ledgers keep their info (``managed_ledger.factory.DEFAULT_ROOT``).
MANAGED_LEDGERS_ROOT = "/managed-ledgers"


class DataLossError(MagnetarError):
    """Offsets point at entries retention trimmed (raised when ``failOnDataLoss`` is true)."""


@dataclass
class Connections:
    """What one process (driver or task) holds open: network, bookie pool, metadata, client."""

    service_url: str
    metadata_url: str | None
    network: TcpNetwork
    clock: SystemClock
    transport: BookieClientTransport
    view: MetadataView | None = None
    client: PulsarClient | None = None
    lakehouse: LazyLakehouse | None = None  # where offloaded ledgers are read from
    admin: AdminApi | None = None  # plans through the brokers (no metadataUrl): ``admin_plan``
    credentials: Credentials | None = None
    #: Where the brokers said their lakehouse is (admin plans; None: not told, or not asked).
    lakehouse_location: StoreLocation | None = None

    @classmethod
    def make(cls, service_url: str, metadata_url: str | None, lakehouse: LazyLakehouse | None = None, *,
             admin_url: str | None = None, credentials: Credentials | None = None) -> Connections:
        network, clock = TcpNetwork(), SystemClock()
        admin = AdminApi(admin_url, credentials) if admin_url is not None and metadata_url is None else None
        return cls(service_url, metadata_url, network, clock, BookieClientTransport(network, clock, LedgerClientConfig()),
                   lakehouse=lakehouse, admin=admin, credentials=credentials)

    async def metadata(self) -> MetadataView:
        if self.view is None:
            if not self.metadata_url:
                raise InvalidArgumentError(
                    "options adminUrl (the brokers' HTTP address: planning through the admin API) or metadataUrl "
                    "(trusted clusters: embedded:/<standalone data dir>/metadata or zk://...) are needed to plan reads"
                )
            self.view = await open_metadata_view(self.metadata_url)
        return self.view

    def pulsar(self) -> PulsarClient:
        if self.client is None:
            options = None
            if self.credentials is not None:
                options = ClientOptions(auth_method_name=self.credentials.method,
                                        auth_data=self.credentials.data.encode())
            self.client = PulsarClient(self.service_url, network=self.network, clock=self.clock, rng=system_rng(),
                                       options=options)
        return self.client

    async def close(self) -> None:
        await self.transport.close()
        if self.client is not None:
            await self.client.close()
        if self.view is not None:
            await self.view.close()


# --- planning -------------------------------------------------------------------------------


def _pattern_namespace(pattern: str) -> tuple[str, str]:
    """(``tenant/ns``, full-name regex) of a topicsPattern (short patterns live in public/default)."""
    full = pattern if "://" in pattern else f"persistent://public/default/{pattern}"
    rest = full.split("://", 1)[1]
    parts = rest.split("/")
    if len(parts) < 3:
        raise InvalidArgumentError(f"topicsPattern {pattern!r}: expected persistent://tenant/namespace/<regex>")
    return f"{parts[0]}/{parts[1]}", full


async def resolve_partitions(cx: Connections, topics: tuple[str, ...], pattern: str | None) -> list[str]:
    """Full names of every partition to read (each topic's partitions, or the topic itself)."""
    names: list[str] = []
    if pattern is not None:
        namespace, regex = _pattern_namespace(pattern)
        compiled = re.compile(regex)
        for name in await _namespace_topics(cx, namespace):
            base = str(TopicName.parse(name).partitioned_topic_name)
            if compiled.fullmatch(name) or compiled.fullmatch(base):
                names.append(name)
    else:
        for topic in topics:
            if cx.admin is not None:
                names.extend(await admin_plan.partitions(cx.admin, topic))
            else:
                names.extend(await cx.pulsar().get_partitions(topic))
    names = sorted(set(names))
    if len(names) > SPARK_PARTITIONS_COUNT_MAX:
        raise LimitExceededError("SPARK_PARTITIONS_COUNT_MAX", len(names), SPARK_PARTITIONS_COUNT_MAX)
    return names


async def _namespace_topics(cx: Connections, namespace: str) -> list[str]:
    if cx.admin is not None:
        return await admin_plan.namespace_topics(cx.admin, namespace)
    view = await cx.metadata()
    return [f"persistent://{namespace}/{unquote(child)}"
            for child in await view.children(f"{MANAGED_LEDGERS_ROOT}/{namespace}/persistent")]


async def load_layout(cx: Connections, name: str) -> PartitionLayout:
    """The ledgers of partition ``name`` and how far each is readable now (from the brokers with
    an admin plan: then ``cx.lakehouse`` becomes where they said offloaded ledgers are, unless
    the query named one)."""
    if cx.admin is not None:
        layout, location = await admin_plan.layout(cx.admin, name)
        if location is not None:
            cx.lakehouse_location = location
            if cx.lakehouse is None:
                cx.lakehouse = open_lakehouse(location.url, s3_endpoint=location.s3_endpoint or None)
        return layout
    topic = TopicName.parse(name)
    view = await cx.metadata()
    found = await view.get(f"{MANAGED_LEDGERS_ROOT}/{topic.persistence_path}")
    spans: list[LedgerSpan] = []
    if found is not None:
        info = decode(ManagedLedgerInfo, found.value)
        ledgers = LedgerMetadataStore(MetadataStoreAdapter(cast(Any, view)))
        for ledger in info.ledgers:
            if ledger.offload is not None and ledger.offload.complete:  # read from the lakehouse
                spans.append(LedgerSpan(ledger.ledger_id, ledger.entries_count, b"", ledger.offload.uid))
                continue
            try:
                metadata = (await ledgers.read(ledger.ledger_id)).metadata
            except MagnetarError:  # deleted between the two reads: trimmed by retention
                continue
            readable = metadata.last_entry_id + 1 if metadata.state is LedgerState.CLOSED else (
                await readable_end(cx, metadata)
            )
            spans.append(LedgerSpan(ledger.ledger_id, readable, metadata.encode()))
    return PartitionLayout(str(topic), topic.partition_index, tuple(spans))


async def avro_schemas(cx: Connections, partition: str) -> dict[int, str]:
    """The Avro schema definitions registered for ``partition``'s topic, by version (read from the
    schema registry's nodes in the metadata store, or the admin API; other schema types are left out)."""
    if cx.admin is not None:
        return await admin_plan.avro_schemas(cx.admin, partition)
    view = await cx.metadata()
    base = TopicName.parse(partition).partitioned_topic_name
    path = f"{SCHEMAS_ROOT}/{base.tenant}/{base.namespace_portion}/{quote(base.local_name, safe='')}"
    out: dict[int, str] = {}
    for child in await view.children(path):
        found = await view.get(f"{path}/{child}")
        if found is None:
            continue
        record = msgspec.json.decode(found.value, type=StoredSchema)
        if record.type == AVRO_SCHEMA_TYPE:
            out[int(child)] = record.data.decode()
    return out


# --- reading entries from bookies -----------------------------------------------------------


async def readable_end(cx: Connections, metadata: LedgerMetadata) -> int:
    """How many entries of an open ledger may be read: every entry that ``Qa`` bookies of its write
    set store. Such an entry was acknowledged or will survive recovery (recovery keeps what it can
    read), so it is never taken back. This reaches past the LAC, which lags the last add by one
    entry until the writer adds again."""
    ensemble = metadata.last_fragment.ensemble
    e, w, a = metadata.ensemble_size, metadata.write_quorum_size, metadata.ack_quorum_size

    async def last_of(bookie: BookieId) -> tuple[int, int]:
        try:
            reply = await cx.transport.read_last_entry(bookie, metadata.ledger_id, fence=False, master_key=b"")
        except MagnetarError:
            return NO_ENTRY, NO_ENTRY
        return reply.last_entry_id, reply.lac

    replies = await asyncio.gather(*(last_of(b) for b in ensemble))
    lac = max(r[1] for r in replies)
    end = lac
    first_of_fragment = metadata.last_fragment.first_entry_id
    for entry_id in range(max(lac + 1, first_of_fragment), max(r[0] for r in replies) + 1):
        stored = sum(1 for i in write_set(entry_id, e, w) if replies[i][0] >= entry_id)
        if stored < a:
            break
        end = entry_id
    return end + 1


async def entry_chunks(cx: Connections, piece: Slice) -> AsyncIterator[tuple[EntryRange, list[EncodedEntry]]]:
    """The slice's entries from bookies, in order, ``SPARK_READ_ENTRIES_CHUNK_COUNT_MAX`` at a time
    (speculative reads over each entry's write set, digests checked)."""
    config = LedgerClientConfig()
    for r in piece.ranges:
        if r.ledger_id in piece.offloaded:
            async for chunk in _offloaded_chunks(cx, piece, r):
                yield chunk
            continue
        metadata = LedgerMetadata.decode(piece.ledger_metadata[r.ledger_id])
        first = r.first
        while first <= r.last:
            last = min(r.last, first + SPARK_READ_ENTRIES_CHUNK_COUNT_MAX - 1)
            entries = await asyncio.gather(*(
                speculative_read(cx.transport, cx.clock, metadata, entry_id, config=config, master_key=b"")
                for entry_id in range(first, last + 1)
            ))
            yield EntryRange(r.ledger_id, first, last), list(entries)
            first = last + 1


async def _offloaded_chunks(cx: Connections, piece: Slice,
                            r: EntryRange) -> AsyncIterator[tuple[EntryRange, list[Any]]]:
    if cx.lakehouse is None:
        raise InvalidArgumentError(f"{piece.topic}: ledger {r.ledger_id} is offloaded; give the option lakehouseUrl")
    managed_ledger = TopicName.parse(piece.topic).persistence_path
    first = r.first
    while first <= r.last:
        last = min(r.last, first + SPARK_LAKEHOUSE_READ_ENTRIES_COUNT - 1)
        stored = await cx.lakehouse.read_offloaded(managed_ledger, r.ledger_id, piece.offloaded[r.ledger_id], first, last)
        yield EntryRange(r.ledger_id, first, last), [base_entry.Entry(Position(r.ledger_id, first + i), s)
                                                      for i, s in enumerate(stored)]
        first = last + 1


def _remaining(piece: Slice, position: Position) -> Slice:
    """The part of ``piece`` at or after ``position``."""
    ranges = []
    for r in piece.ranges:
        if (r.ledger_id, r.last) < (position.ledger_id, position.entry_id):
            continue
        first = max(r.first, position.entry_id) if r.ledger_id == position.ledger_id else r.first
        if first <= r.last:
            ranges.append(EntryRange(r.ledger_id, first, r.last))
    return Slice(piece.topic, piece.partition, tuple(ranges), piece.ledger_metadata)


#: An entry read: a view into a pipelined connection's buffer (valid until that connection's next
#: answer) or, from the speculative path, a copy.
ReadEntry = EncodedEntry | EncodedEntryView

#: A read in the window: (ledger, entry, how it was asked) — a pipelined read on one of the
#: stream's connections with its request id, or the entry's speculative read over its write set,
#: running as a task, when its first bookie has no read connection.
_Pending = tuple[int, int, "tuple[BlockingBookieReads, int] | asyncio.Future[EncodedEntry]"]


class _ReadConnections:
    """One stream's pipelined read connections, one per bookie, opened on first use and again after
    one broke. None — read through the ledger's transport instead — without a network (tests over
    a fake transport), for a bookie that refused, or with ``SPARK_BOOKIE_READ_CONNECTIONS_COUNT_MAX``
    open."""

    def __init__(self, enabled: bool, timeout_s: float) -> None:
        self.enabled = enabled
        self.timeout_s = timeout_s
        self.open: dict[BookieId, BlockingBookieReads] = {}
        self.refused: set[BookieId] = set()

    def get(self, bookie: BookieId) -> BlockingBookieReads | None:
        reads = self.open.get(bookie)
        if reads is not None and reads.closed is None:
            return reads
        self.open.pop(bookie, None)
        if not self.enabled or bookie in self.refused or len(self.open) >= SPARK_BOOKIE_READ_CONNECTIONS_COUNT_MAX:
            return None
        try:
            reads = BlockingBookieReads.connect(bookie.host, bookie.port, timeout_s=self.timeout_s)
        except MagnetarError:
            self.refused.add(bookie)
            return None
        self.open[bookie] = reads
        return reads

    def close(self) -> None:
        for reads in self.open.values():
            reads.close()
        self.open.clear()


async def entry_stream(cx: Connections, piece: Slice) -> AsyncGenerator[ReadEntry, None]:
    """The slice's entries from bookies, in order, with a read-ahead window (``_window``): up to
    ``SPARK_READ_AHEAD_ENTRIES_MAX`` entry reads in flight, fewer once entries are large (the
    window times the largest entry seen aims at ``SPARK_READ_AHEAD_CACHED_BYTES``). The window
    is refilled once half of it was consumed, each bookie's new reads sent in one write; an entry
    whose pipelined read does not bring a checked entry (module docstring) is read speculatively
    over its write set, digest checked. The bookies and the network work on the window while the
    consumer builds rows. An entry yielded is valid until the next one is asked for."""
    config = LedgerClientConfig()
    timeout_ms = config.speculative_read_timeout_ms or config.read_timeout_ms
    metadata = {r.ledger_id: LedgerMetadata.decode(piece.ledger_metadata[r.ledger_id]) for r in piece.ranges}
    wanted = ((r.ledger_id, e) for r in piece.ranges for e in range(r.first, r.last + 1))
    connections = _ReadConnections(cx.network is not None, timeout_ms / 1000)
    window: deque[_Pending] = deque()
    limit = 8  # until the first entry tells how large entries are
    largest = 1
    more = True
    try:
        while True:
            if more and len(window) <= limit // 2:
                more = _send_reads(cx, connections, metadata, wanted, limit - len(window), window)
            if not window:
                return
            ledger_id, entry_id, asked = window.popleft()
            if isinstance(asked, asyncio.Future):
                entry: ReadEntry | None = await asked  # a speculative read's errors end the stream here
            else:
                entry = _pipelined(asked[0], asked[1], ledger_id, entry_id)
            if entry is None:
                entry = await speculative_read(cx.transport, cx.clock, metadata[ledger_id], entry_id, config=config,
                                               master_key=b"")
            if len(entry.raw) > largest:
                largest = len(entry.raw)
                limit = _window(largest)
            yield entry
    finally:
        connections.close()  # answers still on their way are dropped with the connections
        tasks = [asked for _, _, asked in window if isinstance(asked, asyncio.Future)]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


def _pipelined(reads: BlockingBookieReads, request_id: int, ledger_id: int, entry_id: int) -> ReadEntry | None:
    """The checked entry of a pipelined read; None when it brings none: the connection failed
    (then closed: its other reads bring none either), the answer is not OK, or the entry is not
    the one asked for or fails its digest."""
    if reads.closed is not None:
        return None
    try:
        return checked_entry(reads.answer(request_id), ledger_id, entry_id)
    except MagnetarError:
        return None


def _window(largest_bytes: int) -> int:
    """Reads in flight for entries of up to ``largest_bytes``: ``SPARK_READ_AHEAD_CACHED_BYTES``
    worth, at least 2, at most ``SPARK_READ_AHEAD_ENTRIES_MAX`` and ``SPARK_READ_AHEAD_BYTES_MAX``
    worth (and never less than 1)."""
    cached = max(2, SPARK_READ_AHEAD_CACHED_BYTES // largest_bytes)
    return max(1, min(SPARK_READ_AHEAD_ENTRIES_MAX, cached, SPARK_READ_AHEAD_BYTES_MAX // largest_bytes))


def _send_reads(cx: Connections, connections: _ReadConnections, metadata: Mapping[int, LedgerMetadata],
                wanted: Iterator[tuple[int, int]], count: int, window: deque[_Pending]) -> bool:
    """Move up to ``count`` entries of ``wanted`` into ``window``, their pipelined reads sent to
    the first bookie of each entry's write set: one write per bookie and ledger. An entry whose
    bookie has no read connection (or whose connection fails to send) is read speculatively over
    its write set, in a task. Returns whether ``wanted`` may hold more."""
    batch = list(islice(wanted, count))
    runs: dict[tuple[BookieId, int], list[int]] = {}  # (bookie, ledger) -> positions in batch
    for position, (ledger_id, entry_id) in enumerate(batch):
        ledger = metadata[ledger_id]
        first = ledger.ensemble_for(entry_id)[read_order(entry_id, ledger.ensemble_size, ledger.write_quorum_size)[0]]
        runs.setdefault((first, ledger_id), []).append(position)
    asked: list[tuple[BlockingBookieReads, int] | asyncio.Future[EncodedEntry] | None] = [None] * len(batch)
    for (bookie, ledger_id), positions in runs.items():
        reads = connections.get(bookie)
        if reads is None:
            continue
        try:
            request_ids = reads.send_reads(ledger_id, [batch[i][1] for i in positions])
        except MagnetarError:  # the connection broke: these entries are read speculatively
            continue
        for i, request_id in zip(positions, request_ids, strict=True):
            asked[i] = (reads, request_id)
    config = LedgerClientConfig()
    for (ledger_id, entry_id), how in zip(batch, asked, strict=True):
        if how is None:
            how = asyncio.ensure_future(speculative_read(cx.transport, cx.clock, metadata[ledger_id], entry_id,
                                                         config=config, master_key=b""))
        window.append((ledger_id, entry_id, how))
    return len(batch) == count


async def read_slice(cx: Connections, piece: Slice, mode: str, value_fields: tuple[ValueField, ...] = (),
                     avro_schemas: Mapping[int, str] | None = None,
                     lakehouse: LazyLakehouse | None = None) -> AsyncGenerator[pa.RecordBatch, None]:
    """Record batches of every message in ``piece`` (see the module docstring for the modes), cut
    at ``SPARK_ARROW_BATCH_ROWS_MAX`` rows or ``SPARK_ARROW_BATCH_BYTES_MAX`` value bytes.
    Offloaded ledgers are read from ``lakehouse`` (default: ``cx.lakehouse``) as Arrow straight
    from their Parquet files (``offloaded``: no Python per row; the same rows)."""
    lakehouse = lakehouse if lakehouse is not None else cx.lakehouse
    builder = RowBuilder(piece.topic, piece.partition, value_fields, avro_schemas,
                         value_capacity_bytes=SPARK_ARROW_BATCH_BYTES_MAX + SPARK_ARROW_BATCH_BYTES_MAX // 8)
    for part in _by_tier(piece) if mode != "broker" else [piece]:
        if part.offloaded and mode != "broker":
            if lakehouse is None:
                raise InvalidArgumentError(f"{piece.topic}: ledgers {sorted(part.offloaded)} are offloaded; give the "
                                      "option lakehouseUrl (the broker's offload directory or s3://bucket/prefix)")
            if len(builder):  # rows of an earlier bookie part go first
                yield builder.take()
            for batch in offloaded_batches(lakehouse, part, value_fields, avro_schemas):
                yield batch
        else:
            async for batch in _stored_rows(cx, part, mode, builder):
                yield batch
    if len(builder):
        yield builder.take()


def _by_tier(piece: Slice) -> list[Slice]:
    """``piece`` cut into consecutive runs of offloaded and of bookie-held ranges, in order."""
    parts: list[Slice] = []
    run: list[EntryRange] = []
    for r in piece.ranges:
        if run and (run[-1].ledger_id in piece.offloaded) != (r.ledger_id in piece.offloaded):
            parts.append(_sub_slice(piece, run))
            run = []
        run.append(r)
    if run:
        parts.append(_sub_slice(piece, run))
    return parts


def _sub_slice(piece: Slice, ranges: list[EntryRange]) -> Slice:
    ids = {r.ledger_id for r in ranges}
    return Slice(piece.topic, piece.partition, tuple(ranges),
                 {k: v for k, v in piece.ledger_metadata.items() if k in ids},
                 {k: v for k, v in piece.offloaded.items() if k in ids})


async def _stored_rows(cx: Connections, piece: Slice, mode: str,
                       builder: RowBuilder) -> AsyncGenerator[pa.RecordBatch, None]:
    rest = piece
    if mode != "broker":
        entries = entry_stream(cx, piece)
        last_read: tuple[int, int] | None = None
        try:
            while True:
                try:  # only fetching falls back; an undecodable entry is an error in every mode
                    entry = await anext(entries)
                except StopAsyncIteration:
                    rest = Slice(piece.topic, piece.partition, ())
                    break
                except MagnetarError:
                    if mode == "bookies":
                        raise
                    if last_read is not None:
                        rest = _remaining(piece, Position(last_read[0], last_read[1] + 1))
                    break
                builder.add_entry(entry.ledger_id, entry.entry_id, memoryview(entry.raw)[ENTRY_HEADER_BYTES:])
                last_read = entry.ledger_id, entry.entry_id
                if _full(builder):
                    yield builder.take()
        finally:
            await entries.aclose()
    if rest.ranges:
        async for message in broker_messages(cx, rest):
            builder.add_message(message)
            if _full(builder):
                yield builder.take()


def _full(builder: RowBuilder) -> bool:
    return len(builder) >= SPARK_ARROW_BATCH_ROWS_MAX or builder.value_bytes >= SPARK_ARROW_BATCH_BYTES_MAX


async def broker_messages(cx: Connections, piece: Slice) -> AsyncIterator[Any]:
    """The slice's messages through the broker: a non-durable reader from its first entry."""
    first, last = piece.ranges[0], piece.ranges[-1]
    wanted = {r.ledger_id: r for r in piece.ranges}
    reader = await cx.pulsar().create_reader(
        piece.topic, MessageId(first.ledger_id, first.first), inclusive=True, receiver_queue_size=1_000
    )
    try:
        while True:
            try:
                message = await reader.read_next(SPARK_BROKER_READ_IDLE_MS_MAX)
            except OperationTimeoutError as exc:
                raise OperationTimeoutError(
                    f"{piece.topic}: the broker sent nothing for {SPARK_BROKER_READ_IDLE_MS_MAX} ms before "
                    f"{last.ledger_id}:{last.last} (SPARK_BROKER_READ_IDLE_MS_MAX)"
                ) from exc
            mid = message.message_id
            if (mid.ledger_id, mid.entry_id) > (last.ledger_id, last.last):
                return
            r = wanted.get(mid.ledger_id)
            if r is not None and r.first <= mid.entry_id <= r.last:
                yield message
            if (mid.ledger_id, mid.entry_id) == (last.ledger_id, last.last) and (
                mid.batch_index < 0 or mid.batch_index == mid.batch_size - 1
            ):
                return
    finally:
        await reader.close()


# --- admission control and timestamps (driver) ---------------------------------------------


async def advance(cx: Connections, layout: PartitionLayout, start: Position, end: Position, *,
                  max_records: int | None, max_bytes: int | None) -> tuple[Position, int]:
    """The furthest ``p <= end`` such that ``[start, p)`` holds at most ``max_records`` records and
    ``max_bytes`` bytes of entries — but at least one entry, so a query always progresses — and the
    records counted. Entries are never split: a producer batch is read whole."""
    records = 0
    size = 0
    position = start
    ranges = layout.ranges(start, end)
    if not ranges:
        return start, 0
    piece = Slice(layout.topic, layout.partition, tuple(ranges),
                  {r.ledger_id: layout.metadata_of(r.ledger_id) for r in ranges}, _offloaded_of(layout, ranges))
    async for _, entries in entry_chunks(cx, piece):
        for entry in entries:
            metadata, _payload = split_stored_entry(entry.payload)
            count = message_count(metadata)
            over = (max_records is not None and records + count > max_records) or (
                max_bytes is not None and size + entry.payload_bytes > max_bytes
            )
            if over and records > 0:
                return position, records
            records += count
            size += entry.payload_bytes
            position = Position(entry.ledger_id, entry.entry_id + 1)
    return end, records


def _offloaded_of(layout: PartitionLayout, ranges: list[EntryRange]) -> dict[int, str]:
    return {r.ledger_id: layout.offload_of(r.ledger_id) for r in ranges if layout.offload_of(r.ledger_id)}


async def count_records(cx: Connections, layout: PartitionLayout, start: Position, end: Position,
                        up_to: int) -> int:
    """Records in ``[start, end)``, counting no further than ``up_to``."""
    _, counted = await advance(cx, layout, start, end, max_records=up_to, max_bytes=None)
    return counted


async def publish_time(cx: Connections, layout: PartitionLayout, ledger_id: int, entry_id: int) -> int:
    ranges = [EntryRange(ledger_id, entry_id, entry_id)]
    piece = Slice(layout.topic, layout.partition, tuple(ranges), {ledger_id: layout.metadata_of(ledger_id)},
                  _offloaded_of(layout, ranges))
    async for _, entries in entry_chunks(cx, piece):
        return int(split_stored_entry(entries[0].payload)[0].publish_time)
    raise InvalidArgumentError(f"entry {ledger_id}:{entry_id} of {layout.topic} is not readable")


async def position_for_timestamp(cx: Connections, layout: PartitionLayout, timestamp_ms: int) -> Position:
    """The first entry published at or after ``timestamp_ms`` (publish times grow along a partition)."""
    for span in layout.ledgers:
        if span.readable == 0:
            continue
        if await publish_time(cx, layout, span.ledger_id, span.readable - 1) < timestamp_ms:
            continue
        low, high = 0, span.readable - 1
        while low < high:  # binary search over the ledger's entries
            mid = (low + high) // 2
            if await publish_time(cx, layout, span.ledger_id, mid) < timestamp_ms:
                low = mid + 1
            else:
                high = mid
        return Position(span.ledger_id, low)
    return layout.latest


def run(coro: Any) -> Any:
    """Run one coroutine on a fresh event loop (Spark calls the connector from plain threads)."""
    return asyncio.run(coro)


def call(work: Callable[[Connections], Awaitable[Any]], service_url: str, metadata_url: str | None,
         lakehouse: LazyLakehouse | None = None, *, admin_url: str | None = None,
         credentials: Credentials | None = None) -> Any:
    """``await work(cx)`` with fresh connections, closed afterwards."""

    async def main() -> Any:
        cx = Connections.make(service_url, metadata_url, lakehouse, admin_url=admin_url, credentials=credentials)
        try:
            return await work(cx)
        finally:
            await cx.close()

    return run(main())


def iterate(make: Callable[[Connections], AsyncGenerator[Any, None]], service_url: str,
            metadata_url: str | None, lakehouse: LazyLakehouse | None = None, *,
            credentials: Credentials | None = None) -> Iterator[Any]:
    """A plain iterator over the async iterator ``make(cx)``, on a private event loop (tasks: no
    planning, so no admin API)."""
    loop = asyncio.new_event_loop()
    cx = Connections.make(service_url, metadata_url, lakehouse, credentials=credentials)
    items = make(cx)
    try:
        while True:
            try:
                yield loop.run_until_complete(anext(items))
            except StopAsyncIteration:
                return
    finally:
        loop.run_until_complete(items.aclose())
        loop.run_until_complete(cx.close())
        loop.close()

