"""The connector's read path without Spark: the vectorized row builder (every metadata field,
compression, malformed entries) and the pipelined bookie reads (order, read-ahead window)."""

from __future__ import annotations

import asyncio
import io
import json
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any, cast

import fastavro
import numpy as np
import pyarrow as pa
import pytest

from magnetar.base.errors import MagnetarError
from magnetar.base.invariant import InvariantViolationError
from magnetar.base.limits import SPARK_READ_AHEAD_ENTRIES_MAX
from magnetar.base.types import BookieId
from magnetar.connectors.spark import fetch, rows
from magnetar.connectors.spark.fetch import Connections
from magnetar.connectors.spark.plan import EntryRange, Slice
from magnetar.connectors.spark.rows import RowBuilder, parse_value_schema
from magnetar.ledger.config import LedgerClientConfig
from magnetar.ledger.ledger_metadata import Fragment, LedgerMetadata, LedgerState
from magnetar.protocol.bookie.codec import EncodedEntry
from magnetar.protocol.pulsar.batch import LZ4, ZSTD, encode_entry
from magnetar.protocol.pulsar.errors import MalformedFrameError
from magnetar.protocol.pulsar.frames import headers_and_payload
from magnetar.protocol.pulsar.generated import pulsar_api_pb2 as pb
from magnetar.protocol.pulsar.stored import split_stored_entry
from magnetar.runtime.bookie_reads import BlockingBookieReads
from tests.ledger.fakes import FakeBookie, FakeTransport
from tests.manual_clock import ManualClock
from tests.runtime.test_bookie_reads import SocketBookie, WireBookie

T = "persistent://public/default/r-partition-2"


def batch_entry(singles: list[tuple[pb.SingleMessageMetadata, bytes]], *, codec: int = pb.NONE,
                sequence: int = 10, publish: int = 1_700_000_000_123) -> bytes:
    metadata, payload = encode_entry(
        pb.MessageMetadata(producer_name="prod", sequence_id=sequence, publish_time=publish),
        messages=singles, codec=codec,
    )
    return headers_and_payload(metadata, payload)


def single(**fields: Any) -> pb.SingleMessageMetadata:
    message = pb.SingleMessageMetadata(**{k: v for k, v in fields.items() if k != "properties"})
    for key, value in fields.get("properties", {}).items():
        message.properties.add(key=key, value=value)
    return message


def test_batch_rows_with_every_optional_field_and_without() -> None:
    builder = RowBuilder(T, 2)
    entry = batch_entry([
        (single(sequence_id=50), b"plain"),  # the official client's shape: payload_size + sequence_id
        (single(partition_key="k", event_time=77, properties={"a": "1", "b": "2"}), b"full"),
        (single(partition_key="aGk=", partition_key_b64_encoded=True), b""),
        (single(), b"no-sequence"),
    ])
    assert builder.add_entry(3, 8, entry) == 4
    batch = builder.take()
    assert batch.num_rows == 4 and len(builder) == 0
    rows = batch.to_pylist()
    assert [r["value"] for r in rows] == [b"plain", b"full", b"", b"no-sequence"]
    assert [r["key"] for r in rows] == [None, b"k", b"hi", None]
    assert [r["sequenceId"] for r in rows] == [50, 11, 12, 13]  # own, else the entry's plus the index
    assert [r["messageId"]["batchIndex"] for r in rows] == [0, 1, 2, 3]
    assert {r["messageId"]["entry"] for r in rows} == {8} and {r["messageId"]["ledger"] for r in rows} == {3}
    assert [r["properties"] for r in rows] == [[], [("a", "1"), ("b", "2")], [], []]
    assert rows[1]["eventTime"].timestamp() == pytest.approx(0.077) and rows[0]["eventTime"] is None
    assert {r["producerName"] for r in rows} == {"prod"} and {r["partition"] for r in rows} == {2}
    assert rows[0]["publishTime"].timestamp() == pytest.approx(1_700_000_000.123)
    assert {r["topic"] for r in rows} == {T} and {r["redeliveryCount"] for r in rows} == {0}


@pytest.mark.parametrize("codec", [LZ4, ZSTD])
def test_compressed_batches_decode_to_the_same_rows(codec: int) -> None:
    values = [b"x" * 300, b"y" * 5, b"z"]
    builder = RowBuilder(T, 2)
    builder.add_entry(1, 0, batch_entry([(single(sequence_id=i), v) for i, v in enumerate(values)], codec=codec))
    assert builder.take().column("value").to_pylist() == values


def test_entries_and_broker_messages_mix_in_one_batch_in_order() -> None:
    class Mid:
        ledger_id, entry_id, batch_index, batch_size = 9, 4, 1, 2

    class Message:
        message_id = Mid()
        key, payload, publish_time_ms, event_time_ms = "bk", b"from-broker", 5, 0
        properties = {"p": "q"}
        producer_name, sequence_id, redelivery_count = "other", 99, 2

    builder = RowBuilder(T, 2)
    builder.add_entry(9, 3, batch_entry([(single(sequence_id=1), b"a"), (single(sequence_id=2), b"b")]))
    builder.add_message(Message())
    rows = builder.take().to_pylist()
    assert [(r["messageId"]["entry"], r["messageId"]["batchIndex"]) for r in rows] == [(3, 0), (3, 1), (4, 1)]
    assert rows[2]["key"] == b"bk" and rows[2]["properties"] == [("p", "q")]
    assert (rows[2]["producerName"], rows[2]["redeliveryCount"], rows[2]["sequenceId"]) == ("other", 2, 99)
    assert [r["value"] for r in rows] == [b"a", b"b", b"from-broker"]


#: A batch entry as the official Python client (pulsar-client, C++ core) stores it: five messages
#: ``v0000000``..``v0000004``, captured from a standalone.
OFFICIAL_CLIENT_ENTRY = bytes.fromhex(
    "0e019cdbaf490000001b0a0e7374616e64616c6f6e652d302d31100018d4b1a880a03458050000000418084000763030303030303000"
    "000004180840017630303030303031000000041808400276303030303030320000000418084003763030303030303300000004180840"
    "047630303030303034"
)


def rows_both_ways(monkeypatch: pytest.MonkeyPatch, *entries: bytes) -> tuple[list[dict[str, Any]], bool]:
    """The rows of ``entries`` through the builder as is, and whether they equal the rows of the
    message-by-message walk (the uniform fast path switched off)."""
    builder = RowBuilder(T, 2)
    for entry_id, entry in enumerate(entries):
        builder.add_entry(5, entry_id, entry)
    fast = builder.take()
    with monkeypatch.context() as patch:
        patch.setattr(rows, "_uniform_batch", lambda view, count: None)
        for entry_id, entry in enumerate(entries):
            builder.add_entry(5, entry_id, entry)
        slow = builder.take()
    return fast.to_pylist(), fast.equals(slow)


def test_the_official_clients_batch_takes_the_uniform_path_and_gives_the_same_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    metadata, payload = split_stored_entry(OFFICIAL_CLIENT_ENTRY)
    assert rows._uniform_batch(memoryview(payload), metadata.num_messages_in_batch) is not None
    got, same = rows_both_ways(monkeypatch, OFFICIAL_CLIENT_ENTRY)
    assert same
    assert [r["value"] for r in got] == [b"v%07d" % i for i in range(5)]
    assert [r["sequenceId"] for r in got] == list(range(5))
    assert {r["producerName"] for r in got} == {"standalone-0-1"}


@pytest.mark.parametrize("shape", ["same sizes", "sequence ids cross a varint width", "sizes differ",
                                   "an extra field", "empty payloads", "one message", "large sequence ids"])
def test_uniform_path_or_not_the_rows_are_the_same(monkeypatch: pytest.MonkeyPatch, shape: str) -> None:
    sequences = list(range(120, 136)) if shape == "sequence ids cross a varint width" else list(range(16))
    if shape == "large sequence ids":
        sequences = [2**62 + i for i in range(16)]
    values = [b"%04d" % i for i in range(len(sequences))]
    if shape == "sizes differ":
        values[7] = b"longer"
    if shape == "empty payloads":
        values = [b""] * len(sequences)
    singles = [(single(sequence_id=q), v) for q, v in zip(sequences, values, strict=True)]
    if shape == "an extra field":
        singles[3][0].event_time = 5
    if shape == "one message":
        singles = singles[:1]
    entry = batch_entry(singles)
    metadata, payload = split_stored_entry(entry)
    uniform = rows._uniform_batch(memoryview(payload), metadata.num_messages_in_batch)
    expect_uniform = shape in ("same sizes", "empty payloads", "one message", "large sequence ids")
    assert (uniform is not None) == expect_uniform
    got, same = rows_both_ways(monkeypatch, entry)
    assert same
    assert [r["sequenceId"] for r in got] == [m.sequence_id for m, _ in singles]


def test_a_damaged_message_in_a_uniform_looking_batch_is_not_read_as_uniform() -> None:
    """Negative control: one message whose sequence-id varint is cut short (continuation bit on
    its last byte) must fail the vectorized check, so the walk reports the damage."""
    entry = batch_entry([(single(sequence_id=200 + i), b"abcd") for i in range(8)])
    _, payload = split_stored_entry(entry)
    damaged = bytearray(payload)
    stride = len(damaged) // 8
    damaged[3 * stride + 8] |= 0x80  # message 3: size(4) 0x18 0x04 0x40 then the 2-byte varint
    assert rows._uniform_batch(memoryview(bytes(payload)), 8) is not None  # control: undamaged is uniform
    assert rows._uniform_batch(memoryview(bytes(damaged)), 8) is None


def test_uniform_and_walked_batches_mix_in_one_record_batch_in_order() -> None:
    """Values are copied once from pieces of every kind (a uniform batch's 2-D view, a walked
    batch's per-message views, a non-batch message's bytes) into one buffer, in row order."""
    uniform = batch_entry([(single(sequence_id=i), b"u%03d" % i) for i in range(6)])
    walked = batch_entry([(single(sequence_id=9), b"w-short"), (single(partition_key="k"), b"w-longer-value")])
    metadata, payload = split_stored_entry(uniform)
    assert rows._uniform_batch(memoryview(payload), metadata.num_messages_in_batch) is not None
    alone = headers_and_payload(pb.MessageMetadata(producer_name="p", sequence_id=3, publish_time=1), b"alone")
    builder = RowBuilder(T, 2)
    for entry_id, entry in enumerate([uniform, walked, alone, uniform]):
        builder.add_entry(5, entry_id, entry)
    values = builder.take().column("value").to_pylist()
    expected = [b"u%03d" % i for i in range(6)]
    assert values == [*expected, b"w-short", b"w-longer-value", b"alone", *expected]


def test_batches_of_one_size_share_their_constant_columns_and_never_a_rows_own_fields() -> None:
    """Columns that depend only on the row count are built once per size and reused; a batch
    that has keys, event times, properties or redeliveries gets its own (negative control: the
    first batch of this size has them all, the next one none, and each shows its own)."""
    full = batch_entry([(single(partition_key="k", event_time=77, properties={"a": "1"}), b"x")] * 4)
    plain = batch_entry([(single(sequence_id=i), b"y") for i in range(4)])
    builder = RowBuilder(T, 2)
    builder.add_entry(5, 0, full)
    first = builder.take()
    builder.add_entry(5, 1, plain)
    second = builder.take()
    builder.add_entry(5, 2, plain)
    third = builder.take()
    assert first.column("properties").to_pylist() == [[("a", "1")]] * 4
    assert first.column("key").to_pylist() == [b"k"] * 4 and first.column("eventTime").null_count == 0
    assert second.column("properties").to_pylist() == [[]] * 4
    assert second.column("key").null_count == second.column("eventTime").null_count == 4
    assert second.column("topic").to_pylist() == [T] * 4 and second.column("partition").to_pylist() == [2] * 4
    def addresses(batch: pa.RecordBatch, name: str) -> list[int]:
        return [b.address for b in batch.column(name).buffers() if b is not None]

    for name in ("key", "topic", "partition", "eventTime", "properties", "redeliveryCount"):
        assert addresses(third, name) == addresses(second, name), name  # the very same buffers
    assert addresses(first, "properties") != addresses(second, "properties")


def test_values_whose_row_count_disagrees_with_the_builders_are_an_invariant_violation() -> None:
    """The values' buffer grows as needed and keeps row order across kinds of pieces; negative
    control: asking for more rows than values were added is caught, not padded."""
    def values() -> rows._Values:
        built = rows._Values(4)  # small: every piece below makes it grow
        built.add(b"abc")
        built.add_rows(np.frombuffer(b"defghi", np.uint8).reshape(2, 3))
        built.add(memoryview(b"--xy--")[2:4])
        return built

    assert values().array(4).to_pylist() == [b"abc", b"def", b"ghi", b"xy"]
    with pytest.raises(InvariantViolationError):
        values().array(5)


def corrupt(entry: bytes, old: bytes, new: bytes) -> bytes:
    assert entry.count(old) == 1
    return entry.replace(old, new)


@pytest.mark.parametrize("damage", ["payload_size too large", "trailing bytes", "count too large", "truncated",
                                    "count zero"])
def test_malformed_batches_are_refused(damage: str) -> None:
    good = batch_entry([(single(sequence_id=1), b"abc"), (single(sequence_id=2), b"defg")])
    if damage == "payload_size too large":
        bad = corrupt(good, b"\x18\x04", b"\x18\x7f")  # second message: payload_size 4 -> 127
    elif damage == "trailing bytes":
        bad = good + b"\x00"
    elif damage == "count too large":
        bad = corrupt(good, b"\x58\x02", b"\x58\x03")  # num_messages_in_batch 2 -> 3
    elif damage == "count zero":
        bad = corrupt(good, b"\x58\x02", b"\x58\x00")  # num_messages_in_batch 2 -> 0, payload left
    else:
        bad = good[:-3]
    with pytest.raises(MalformedFrameError):
        RowBuilder(T, 2).add_entry(1, 0, bad)
    RowBuilder(T, 2).add_entry(1, 0, good)  # control: the undamaged entry decodes


# --- pipelined bookie reads ------------------------------------------------------------------


class CountingTransport(FakeTransport):
    """Records how many reads were in flight at once."""

    def __init__(self, bookies: dict[Any, FakeBookie]) -> None:
        super().__init__(bookies)
        self.in_flight = 0
        self.most_in_flight = 0

    async def read(self, bookie: Any, ledger_id: int, entry_id: int, *, fence: bool, master_key: bytes) -> EncodedEntry:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0)
            return await super().read(bookie, ledger_id, entry_id, fence=fence, master_key=master_key)
        finally:
            self.in_flight -= 1

    async def close(self) -> None:
        pass


def stored_ledger(ledger_id: int, payloads: list[bytes]) -> tuple[FakeBookie, LedgerMetadata]:
    bookie = FakeBookie(BookieId("127.0.0.1", 3181))
    for entry_id, payload in enumerate(payloads):
        bookie.durable[(ledger_id, entry_id)] = EncodedEntry.build(ledger_id, entry_id, entry_id - 1, payload)
    metadata = LedgerMetadata(ledger_id, 1, 1, 1, LedgerState.CLOSED, len(payloads) - 1,
                              (Fragment(0, (bookie.bookie_id,)),))
    return bookie, metadata


async def read_all(entry_bytes: int, count: int, ranges: tuple[EntryRange, ...]) -> tuple[list[int], int]:
    bookie, metadata = stored_ledger(7, [b"%d-" % i + b"x" * entry_bytes for i in range(count)])
    transport = CountingTransport({bookie.bookie_id: bookie})
    cx = Connections("pulsar://unused", None, cast(Any, None), cast(Any, ManualClock()), cast(Any, transport))
    piece = Slice(T, 2, ranges, {7: metadata.encode()})
    got = [entry.entry_id async for entry in fetch.entry_stream(cx, piece)]
    return got, transport.most_in_flight


def test_entries_come_in_order_with_many_reads_in_flight() -> None:
    got, most = asyncio.run(read_all(10, 1200, (EntryRange(7, 5, 1099), EntryRange(7, 1150, 1199))))
    assert got == list(range(5, 1100)) + list(range(1150, 1200))
    # pipelined: far more than one read at a time, never more than the window
    assert 100 < most <= SPARK_READ_AHEAD_ENTRIES_MAX


def test_read_ahead_shrinks_for_large_entries() -> None:
    got, most = asyncio.run(read_all(4 * 1024 * 1024, 30, (EntryRange(7, 0, 29),)))
    assert got == list(range(30))
    assert most <= 8  # 32 MiB of read-ahead holds 7 entries of 4 MiB (8 before the first arrived)


def test_the_window_aims_at_the_cached_bytes_within_its_bounds() -> None:
    from magnetar.base.limits import SPARK_READ_AHEAD_BYTES_MAX, SPARK_READ_AHEAD_CACHED_BYTES

    assert fetch._window(100) == SPARK_READ_AHEAD_ENTRIES_MAX  # small entries: the count bound
    assert fetch._window(128 * 1024) == SPARK_READ_AHEAD_CACHED_BYTES // (128 * 1024)
    assert fetch._window(SPARK_READ_AHEAD_CACHED_BYTES) == 2  # at least two in flight...
    assert fetch._window(SPARK_READ_AHEAD_BYTES_MAX // 2 + 1) == 1  # ...unless the byte bound says one


# --- pipelined reads over the stream's own bookie connections (real loopback sockets) -----------


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Any]]:
    """``cluster(count, refuse=False)``: a closed ledger 7 of ``count`` entries on two bookies A and B
    (E = W = A = 2: both store every entry, and the first bookie of an entry's write set
    alternates), each a ``SocketBookie`` on a loopback port (the pipelined path) and a
    ``FakeBookie`` of the fake transport (the speculative path); ``refuse``: nothing listens on
    their ports. Returns (connections, wire bookies, transport, metadata, sends per bookie); the
    speculative read timeout is 0.3 s."""
    servers: list[SocketBookie] = []
    monkeypatch.setattr(fetch, "LedgerClientConfig", lambda: LedgerClientConfig(speculative_read_timeout_ms=300))

    def make(count: int, *, refuse: bool = False) -> tuple[Connections, dict[BookieId, WireBookie],
                                                           CountingTransport, LedgerMetadata, list[int]]:
        entries = {(7, e): EncodedEntry.build(7, e, e - 1, b"%d-" % e + b"x" * 200) for e in range(count)}
        wires = [WireBookie(dict(entries)) for _ in range(2)]
        if refuse:
            ports = []
            for _ in wires:
                with socket.create_server(("127.0.0.1", 0)) as listener:
                    ports.append(listener.getsockname()[1])
        else:
            servers.extend(SocketBookie(w) for w in wires)
            ports = [server.port for server in servers[-2:]]
        a, b = (BookieId("127.0.0.1", port) for port in ports)
        fakes = {bookie: FakeBookie(bookie, durable=dict(entries)) for bookie in (a, b)}
        metadata = LedgerMetadata(7, 2, 2, 2, LedgerState.CLOSED, count - 1, (Fragment(0, (a, b)),))
        transport = CountingTransport(fakes)
        cx = Connections("pulsar://unused", None, cast(Any, object()), cast(Any, ManualClock()), cast(Any, transport))
        sends: list[int] = []
        real_send = BlockingBookieReads.send_reads

        def counted(self: BlockingBookieReads, ledger_id: int, entry_ids: Any) -> list[int]:
            sends.append(len(entry_ids))
            return real_send(self, ledger_id, entry_ids)

        monkeypatch.setattr(BlockingBookieReads, "send_reads", counted)
        return cx, {a: wires[0], b: wires[1]}, transport, metadata, sends

    yield make
    for server in servers:
        server.close()


async def stream(cx: Connections, piece: Slice) -> list[tuple[int, bytes]]:
    try:
        return [(e.entry_id, bytes(e.raw)) async for e in fetch.entry_stream(cx, piece)]
    finally:
        await cx.close()


def test_pipelined_reads_come_in_order_a_window_per_write_without_the_speculative_path(
        cluster: Callable[..., Any]) -> None:
    cx, wires, transport, metadata, sends = cluster(1200)
    a, b = wires
    piece = Slice(T, 2, (EntryRange(7, 5, 1099), EntryRange(7, 1150, 1199)), {7: metadata.encode()})
    got = asyncio.run(stream(cx, piece))
    assert [entry_id for entry_id, _ in got] == list(range(5, 1100)) + list(range(1150, 1200))
    assert all(raw == wires[a].entries[(7, e)].raw for e, raw in got)
    asked = sorted(wires[a].asked + wires[b].asked)
    assert asked == [e for e, _ in got]  # each entry asked once, of one bookie
    assert set(wires[a].asked) == {e for e, _ in got if e % 2 == 0}  # the first of its write set
    assert sum(sends) == len(got) and len(sends) < 60  # ~1,150 reads in a few writes (window halves)
    assert transport.log == []  # no speculative read was needed


def test_without_read_connections_every_entry_takes_the_speculative_path(cluster: Callable[..., Any]) -> None:
    """Negative control of the test above: the bookies refuse connections, so the counters that
    stayed at zero there count every entry here; the entries are the same."""
    cx, _, transport, metadata, sends = cluster(300, refuse=True)
    piece = Slice(T, 2, (EntryRange(7, 0, 299),), {7: metadata.encode()})
    assert [e for e, _ in asyncio.run(stream(cx, piece))] == list(range(300))
    assert sends == []
    assert sorted(e for op, _, e in transport.log if op == "read") == list(range(300))


def test_a_damaged_missing_or_late_pipelined_read_is_read_again_over_the_write_set(
        cluster: Callable[..., Any]) -> None:
    """Entry 3 comes damaged from its first bookie, entry 4 is missing there, entry 5 is never
    answered: each is read speculatively over its write set (after the speculative timeout for
    5, which also drops the connection its later reads were on) and the stream goes on in order."""
    cx, wires, transport, metadata, sends = cluster(1200)
    a, b = wires
    first_of = {3: b, 4: a, 5: b}  # read_order alternates with the entry id
    wires[first_of[3]].corrupt.add(3)
    del wires[first_of[4]].entries[(7, 4)]
    wires[first_of[5]].silent.add(5)
    piece = Slice(T, 2, (EntryRange(7, 0, 1199),), {7: metadata.encode()})
    started = time.monotonic()
    got = asyncio.run(stream(cx, piece))
    assert time.monotonic() - started >= 0.29  # waited the speculative timeout for 5
    assert [e for e, _ in got] == list(range(1200))
    assert all(raw == EncodedEntry.build(7, e, e - 1, b"%d-" % e + b"x" * 200).raw for e, raw in got)
    speculative = sorted(e for op, _, e in transport.log if op == "read")
    assert speculative[:3] == [3, 4, 5]
    # B's connection was dropped at 5: the reads still on it (odd entries of the window sent by
    # then) went speculative too; the reads sent after that went to B over a new connection
    in_flight = sum(sends[:4])  # the first window (8) and its first refill, one send per bookie each
    assert speculative[3:] == list(range(7, in_flight, 2))
    assert [e for e in wires[b].asked if e >= in_flight] == [e for e in range(in_flight, 1200) if e % 2]


def test_a_pipelined_failure_the_write_set_cannot_mend_ends_the_stream(cluster: Callable[..., Any]) -> None:
    """Negative control of the test above: entry 3 damaged on the wire and unreadable through the
    transport on both bookies: the stream fails at entry 3 instead of yielding it."""
    cx, wires, transport, metadata, _ = cluster(10)
    wires[list(wires)[1]].corrupt.add(3)
    for bookie in wires:
        transport.rule(bookie, "read", 3, action="fail")
    piece = Slice(T, 2, (EntryRange(7, 0, 9),), {7: metadata.encode()})
    with pytest.raises(MagnetarError):
        asyncio.run(stream(cx, piece))


# --- Avro values -----------------------------------------------------------------------------

AVRO_V0 = {"type": "record", "name": "Click", "fields": [{"name": "page", "type": "string"},
                                                          {"name": "n", "type": "int"}]}
AVRO_V1 = {"type": "record", "name": "Click", "fields": [{"name": "n", "type": "long"},
                                                          {"name": "page", "type": "string"},
                                                          {"name": "extra", "type": "double", "default": 0.0}]}


def avro_bytes(schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def test_avro_values_decode_with_the_writer_schema_of_their_version() -> None:
    fields = parse_value_schema("page STRING, n BIGINT")
    builder = RowBuilder(T, 2, fields, {0: json.dumps(AVRO_V0), 1: json.dumps(AVRO_V1)})
    for entry_id, (version, value) in enumerate([
        (0, avro_bytes(AVRO_V0, {"page": "/a", "n": 1})),
        (1, avro_bytes(AVRO_V1, {"n": 2, "page": "/b", "extra": 1.5})),  # other field order: needs v1 to decode
        (None, avro_bytes(AVRO_V1, {"n": 3, "page": "/c", "extra": 0.0})),  # no version: the newest
        (0, b"\xff"),  # not Avro of v0: null columns
    ]):
        metadata = pb.MessageMetadata(producer_name="p", sequence_id=entry_id, publish_time=1)
        if version is not None:
            metadata.schema_version = version.to_bytes(8, "big")
        meta, payload = encode_entry(metadata, payload=value)
        builder.add_entry(1, entry_id, headers_and_payload(meta, payload))
    rows_ = builder.take().to_pylist()
    assert [(r["page"], r["n"]) for r in rows_] == [("/a", 1), ("/b", 2), ("/c", 3), (None, None)]


# --- falling back to the broker ----------------------------------------------------------------


def test_a_failed_bookie_read_hands_the_rest_of_the_slice_to_the_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Entries 0..9 stored; reads of entry 6 fail: rows 0..5 come from the bookie, the broker path
    is asked for exactly 6..9 (``readMode=auto``); ``readMode=bookies`` fails instead."""
    entries = [batch_entry([(single(sequence_id=i), b"e%d" % i)], sequence=i) for i in range(10)]
    bookie, metadata = stored_ledger(7, entries)
    transport = CountingTransport({bookie.bookie_id: bookie})
    transport.rule(bookie.bookie_id, "read", 6, action="fail")
    asked: list[Slice] = []

    class Mid:
        def __init__(self, entry_id: int) -> None:
            self.ledger_id, self.entry_id, self.batch_index, self.batch_size = 7, entry_id, 0, 1

    class BrokerMessage:
        def __init__(self, entry_id: int) -> None:
            self.message_id = Mid(entry_id)
            self.key, self.payload, self.publish_time_ms, self.event_time_ms = None, b"e%d" % entry_id, 1, 0
            self.properties: dict[str, str] = {}
            self.producer_name, self.sequence_id, self.redelivery_count = "p", entry_id, 0

    async def broker_messages(cx: Any, piece: Slice) -> Any:
        asked.append(piece)
        for r in piece.ranges:
            for entry_id in range(r.first, r.last + 1):
                yield BrokerMessage(entry_id)

    monkeypatch.setattr(fetch, "broker_messages", broker_messages)
    cx = Connections("pulsar://unused", None, cast(Any, None), cast(Any, ManualClock()), cast(Any, transport))
    piece = Slice(T, 2, (EntryRange(7, 0, 9),), {7: metadata.encode()})

    async def read(mode: str) -> list[bytes]:
        return [v for batch in [b async for b in fetch.read_slice(cx, piece, mode)] for v in batch.column("value").to_pylist()]

    assert asyncio.run(read("auto")) == [b"e%d" % i for i in range(10)]
    assert [p.ranges for p in asked] == [(EntryRange(7, 6, 9),)]
    with pytest.raises(MagnetarError):
        asyncio.run(read("bookies"))


def test_a_workers_first_tasks_freeze_long_lived_objects_and_nothing_else_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """Spark's daemon collects garbage after every task of a reused worker; a worker's first two
    reads freeze what is alive then (the second: what the first one's lazy imports left), later
    ones nothing. Negative control: outside a task (driver, tests) nothing is frozen."""
    import gc

    from magnetar.connectors.spark import source

    monkeypatch.setattr(source, "_freezes", 0)

    def tracked(objects: list[list[int]]) -> int:
        """How many of ``objects`` the collector still walks: frozen objects are in the permanent
        generation, which ``gc.get_objects()`` leaves out. (Not ``gc.get_freeze_count()``: frozen
        objects of other tests and threads may die meanwhile and make the count fall.)"""
        walked = {id(o) for o in gc.get_objects()}
        return sum(id(o) in walked for o in objects)

    gc.unfreeze()
    try:
        before_any_task = [[] for _ in range(100)]
        source._freeze_long_lived()
        assert tracked(before_any_task) == 100  # no TaskContext: not a Spark task
        monkeypatch.setattr(source.TaskContext, "get", classmethod(lambda cls: object()))
        source._freeze_long_lived()
        assert tracked(before_any_task) == 0
        first_tasks_import = [[] for _ in range(100)]  # alive at the second task's start: frozen
        source._freeze_long_lived()
        assert tracked(first_tasks_import) == 0
        later_task = [[] for _ in range(100)]  # what a later task allocates is not frozen
        source._freeze_long_lived()
        assert tracked(later_task) == 100
    finally:
        gc.unfreeze()
