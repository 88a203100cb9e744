"""Unit tests of the connector's pure parts: offsets, options, planning, rows (no Spark, no I/O)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from magnetar.base.errors import InvalidArgumentError
from magnetar.base.types import Position
from magnetar.connectors.spark.offsets import BEGINNING, canonical, from_offset, parse_position, parse_spec
from magnetar.connectors.spark.options import ReadOptions, WriteOptions
from magnetar.connectors.spark.plan import EntryRange, LedgerSpan, PartitionLayout, cut
from magnetar.connectors.spark.progress import SubscriptionError, advance_subscription, subscription_path
from magnetar.connectors.spark.rows import RowBuilder, parse_value_schema, schema_ddl
from magnetar.connectors.spark.sink import sequence_id, to_message
from magnetar.protocol.pulsar.batch import encode_entry
from magnetar.protocol.pulsar.frames import headers_and_payload
from magnetar.protocol.pulsar.generated import pulsar_api_pb2 as pb
from magnetar.runtime.processes import free_port

T0 = "persistent://public/default/t-partition-0"
T1 = "persistent://public/default/t-partition-1"


# --- offsets -----------------------------------------------------------------------------------


def test_offsets_are_canonical_whatever_the_insertion_order() -> None:
    a = canonical({T1: Position(3, 4), T0: Position(1, 2)})
    b = canonical({T0: Position(1, 2), T1: Position(3, 4)})
    assert json.dumps(a) == json.dumps(b) == json.dumps({T0: "1:2", T1: "3:4"})
    assert from_offset(a) == {T0: Position(1, 2), T1: Position(3, 4)}


def test_offset_json_per_partition_with_short_names() -> None:
    spec = parse_spec('{"t-partition-0": "5:7", "t-partition-1": "earliest"}', "latest")
    assert spec == {T0: Position(5, 7), T1: "earliest"}
    assert parse_spec(None, "latest") == "latest"
    assert parse_spec(" earliest ", "latest") == "earliest"


@pytest.mark.parametrize("bad", ["5", "a:b", "-2:0", "1:-1", '{"t": 5}', "[1]", "{bad json"])
def test_bad_offsets_are_refused_with_the_reason(bad: str) -> None:
    with pytest.raises(InvalidArgumentError):
        if bad.startswith(("{", "[")):
            parse_spec(bad, "latest")
        else:
            parse_position(bad)


# --- options -----------------------------------------------------------------------------------


def test_read_options_any_case_and_defaults() -> None:
    batch = ReadOptions.parse({"topic": "t", "maxrecordspertrigger": "10"}, streaming=False)
    assert batch.topics == ("persistent://public/default/t",)
    assert batch.starting == "earliest" and batch.ending == "latest"
    assert batch.max_records_per_trigger == 10 and batch.fail_on_data_loss
    stream = ReadOptions.parse({"TOPICS": "a, b", "failOnDataLoss": "false"}, streaming=True)
    assert stream.starting == "latest" and len(stream.topics) == 2 and not stream.fail_on_data_loss


@pytest.mark.parametrize("options", [
    {},
    {"topic": "a", "topics": "b"},
    {"topic": "a", "failOnDataLoss": "maybe"},
    {"topic": "a", "maxRecordsPerTrigger": "0"},
    {"topic": "a", "splitBy": "bytes"},
    {"topicsPattern": "(unclosed"},
])
def test_read_options_refuse_what_is_wrong(options: dict[str, str]) -> None:
    with pytest.raises(InvalidArgumentError):
        ReadOptions.parse(options, streaming=False)


def test_ending_offsets_are_batch_only() -> None:
    with pytest.raises(InvalidArgumentError, match="batch"):
        ReadOptions.parse({"topic": "a", "endingOffsets": "latest"}, streaming=True)


def test_named_subscription_is_for_streams_and_needs_the_admin_url() -> None:
    options = ReadOptions.parse({"topic": "a", "subscription": "etl", "adminUrl": "http://127.0.0.1:8080"},
                                streaming=True)
    assert (options.subscription, options.admin_url) == ("etl", "http://127.0.0.1:8080")
    with pytest.raises(InvalidArgumentError, match="adminUrl"):
        ReadOptions.parse({"topic": "a", "subscription": "etl"}, streaming=True)
    with pytest.raises(InvalidArgumentError, match="streaming"):
        ReadOptions.parse({"topic": "a", "subscription": "etl", "adminUrl": "http://h:1"}, streaming=False)
    assert subscription_path("persistent://t/ns/a b-partition-3", "my/sub") == (
        "/persistent/t/ns/a%20b-partition-3/subscription/my%2Fsub")


def test_advancing_the_subscription_reports_an_unreachable_admin_api() -> None:
    with pytest.raises(SubscriptionError, match="SPARK_ADMIN_REQUEST_MS_MAX"):
        advance_subscription(f"http://127.0.0.1:{free_port()}", "etl", {T0: Position(3, 4)})
    advance_subscription("http://unused", "etl", {T0: BEGINNING})  # nothing read yet: no call at all


def test_write_options() -> None:
    options = WriteOptions.parse({"topic": "out", "exactlyonce": "false"})
    assert options.topic == "persistent://public/default/out" and not options.exactly_once


# --- planning ----------------------------------------------------------------------------------


def layout(name: str, *spans: tuple[int, int]) -> PartitionLayout:
    return PartitionLayout(name, 0, tuple(LedgerSpan(lid, n, b"m%d" % lid) for lid, n in spans))


def test_ranges_cross_ledgers_and_skip_empty_ones() -> None:
    lay = layout(T0, (3, 10), (5, 0), (8, 4))
    assert lay.earliest == Position(3, 0) and lay.latest == Position(8, 4)
    assert lay.ranges(Position(3, 7), Position(8, 2)) == [EntryRange(3, 7, 9), EntryRange(8, 0, 1)]
    assert lay.ranges(lay.latest, lay.latest) == []
    assert lay.ranges(BEGINNING, lay.latest) == [EntryRange(3, 0, 9), EntryRange(8, 0, 3)]


def test_trimmed_start_is_data_loss_but_beginning_never_is() -> None:
    lay = layout(T0, (7, 5))
    assert lay.trimmed(Position(3, 2))
    assert not lay.trimmed(BEGINNING)
    assert not lay.trimmed(Position(7, 0))
    assert "retention trimmed" in lay.describe_loss(Position(3, 2))


def test_cut_per_partition_per_ledger_and_to_min_partitions() -> None:
    layouts = {T0: layout(T0, (1, 10), (2, 10)), T1: layout(T1, (4, 3))}
    starts = {n: lay.earliest for n, lay in layouts.items()}
    ends = {n: lay.latest for n, lay in layouts.items()}
    assert len(cut(layouts, starts, ends)) == 2
    by_ledger = cut(layouts, starts, ends, split_by="ledger")
    assert [s.ranges for s in by_ledger] == [(EntryRange(1, 0, 9),), (EntryRange(2, 0, 9),), (EntryRange(4, 0, 2),)]
    assert by_ledger[0].ledger_metadata == {1: b"m1"}
    many = cut(layouts, starts, ends, min_partitions=6)
    assert len(many) == 6
    covered = sorted((r.ledger_id, e) for s in many for r in s.ranges for e in range(r.first, r.last + 1))
    assert covered == sorted([(1, e) for e in range(10)] + [(2, e) for e in range(10)] + [(4, e) for e in range(3)])


def test_halving_keeps_offloaded_ledgers_whole_when_a_file_boundary_is_near() -> None:
    spans = (LedgerSpan(1, 30, b"", "u1"), LedgerSpan(2, 50, b"", "u2"), LedgerSpan(3, 20, b"m3"))
    layouts = {T0: PartitionLayout(T0, -1, spans)}
    starts, ends = {T0: layouts[T0].earliest}, {T0: layouts[T0].latest}
    halves = cut(layouts, starts, ends, min_partitions=2)
    # the middle (entry 50 of 100) falls inside offloaded ledger 2 (entries 30..79): cut at its start
    assert [s.ranges for s in halves] == [(EntryRange(1, 0, 29),), (EntryRange(2, 0, 49), EntryRange(3, 0, 19))]
    assert [s.tiers for s in halves] == [("lakehouse",), ("lakehouse", "bookies")]
    # a ledger on the bookies is cut in the middle, as before
    live = {T0: PartitionLayout(T0, -1, (LedgerSpan(1, 30, b"m1"), LedgerSpan(2, 50, b"m2"), LedgerSpan(3, 20, b"m3")))}
    assert next(s.ranges for s in cut(live, starts, ends, min_partitions=2)) == (EntryRange(1, 0, 29),
                                                                                  EntryRange(2, 0, 19))
    # no boundary within a quarter of the slice: the middle
    one = {T0: PartitionLayout(T0, -1, (LedgerSpan(1, 100, b"", "u1"),))}
    assert [s.ranges for s in cut(one, {T0: Position(1, 0)}, {T0: Position(1, 100)}, min_partitions=2)] == [
        (EntryRange(1, 0, 49),), (EntryRange(1, 50, 99),)]


# --- rows --------------------------------------------------------------------------------------


def stored_batch(values: list[bytes], *, keys: list[str | None], sequence: int = 100) -> bytes:
    singles = []
    for value, key in zip(values, keys, strict=True):
        single = pb.SingleMessageMetadata(payload_size=len(value))
        if key is not None:
            single.partition_key = key
        single.properties.add(key="k", value=value.decode())
        singles.append((single, value))
    metadata, payload = encode_entry(
        pb.MessageMetadata(producer_name="p", sequence_id=sequence, publish_time=1_700_000_000_000),
        messages=singles,
    )
    return headers_and_payload(metadata, payload)


def test_rows_of_a_batch_entry_and_a_single_message() -> None:
    builder = RowBuilder(T0, 0)
    assert builder.add_entry(4, 9, stored_batch([b"a", b"b"], keys=["k1", None])) == 2
    single, payload = encode_entry(pb.MessageMetadata(producer_name="q", sequence_id=7, publish_time=5,
                                                      event_time=6, partition_key="z"), payload=b"c")
    builder.add_entry(4, 10, headers_and_payload(single, payload))
    rows = builder.take().to_pylist()
    assert [r["value"] for r in rows] == [b"a", b"b", b"c"]
    assert [r["key"] for r in rows] == [b"k1", None, b"z"]
    assert [r["messageId"] for r in rows] == [
        {"ledger": 4, "entry": 9, "batchIndex": 0}, {"ledger": 4, "entry": 9, "batchIndex": 1},
        {"ledger": 4, "entry": 10, "batchIndex": -1},
    ]
    assert [r["sequenceId"] for r in rows] == [100, 101, 7]
    assert rows[0]["properties"] == [("k", "a")] and rows[0]["eventTime"] is None
    assert rows[2]["eventTime"] is not None and rows[2]["producerName"] == "q"
    assert len(builder) == 0


def test_value_schema_decodes_json_into_columns() -> None:
    fields = parse_value_schema("id INT, name STRING")
    assert schema_ddl(fields).endswith(", `id` INT, `name` STRING")
    builder = RowBuilder(T0, 0, fields)
    builder.add_entry(1, 0, stored_batch([b'{"id": 3, "name": "x"}', b"not json"], keys=[None, None]))
    rows = builder.take().to_pylist()
    assert (rows[0]["id"], rows[0]["name"]) == (3, "x")
    assert (rows[1]["id"], rows[1]["name"]) == (None, None)
    with pytest.raises(InvalidArgumentError):
        parse_value_schema("value STRING")
    with pytest.raises(InvalidArgumentError):
        parse_value_schema("a MAP")


# --- sink --------------------------------------------------------------------------------------


def test_sequence_ids_order_by_batch_then_row() -> None:
    assert sequence_id(0, 5) < sequence_id(1, 0) < sequence_id(1, 1)
    with pytest.raises(InvalidArgumentError):
        sequence_id(0, 1 << 32)


def test_rows_to_messages() -> None:
    message = to_message({"value": "v", "key": b"k", "properties": {"a": 1}}, "persistent://public/default/o")
    assert (message.value, message.key, message.properties) == (b"v", "k", {"a": "1"})
    assert to_message({"value": b"x", "topic": "t2"}, None).topic == "persistent://public/default/t2"
    with pytest.raises(InvalidArgumentError):
        to_message({"value": b"x"}, None)


# --- credentials -------------------------------------------------------------------------------


def test_credentials_take_pulsars_option_names_and_hide_the_secret(tmp_path: Any) -> None:
    base = {"topic": "t", "adminUrl": "http://127.0.0.1:1"}
    token = ReadOptions.parse({**base, "token": "abc.def.ghi"}, streaming=False)
    assert token.credentials is not None and token.plans_via_admin
    assert token.credentials.http_authorization == "Bearer abc.def.ghi"
    assert "abc" not in repr(token)
    plugin = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
    assert ReadOptions.parse({**base, "authPluginClassName": plugin, "authParams": "token:xyz"},
                             streaming=False).credentials.data == "xyz"  # type: ignore[union-attr]
    (tmp_path / "t.jwt").write_text("from-file\n")
    assert ReadOptions.parse({**base, "authPluginClassName": "token", "authParams": f"file://{tmp_path / 't.jwt'}"},
                             streaming=False).credentials.data == "from-file"  # type: ignore[union-attr]
    basic = ReadOptions.parse({**base, "authPluginClassName": "org.apache.pulsar.client.impl.auth.AuthenticationBasic",
                               "authParams": '{"userId": "u", "password": "p"}'}, streaming=False).credentials
    assert basic is not None and basic.method == "basic" and basic.http_authorization == "Basic dTpw"
    assert not ReadOptions.parse({**base, "metadataUrl": "embedded:/x"}, streaming=False).plans_via_admin


@pytest.mark.parametrize("options, error", [
    ({"authPluginClassName": "kerberos", "authParams": "x"}, "not supported"),
    ({"authPluginClassName": "token"}, "authParams is needed"),
    ({"authParams": "token:x"}, "needs authPluginClassName"),
    ({"token": "a", "authPluginClassName": "token", "authParams": "b"}, "not both"),
    ({"authPluginClassName": "basic", "authParams": "no-colon"}, "user:password"),
])
def test_bad_credentials_options_are_refused(options: dict[str, str], error: str) -> None:
    with pytest.raises(InvalidArgumentError, match=error):
        ReadOptions.parse({"topic": "t", **options}, streaming=False)
