"""The lakehouse driver on a real directory: Parquet with one row per message (batches unpacked,
keys, properties, event times, compressed batches, Avro fields as typed columns), the stored entry
kept byte for byte, a Delta table listing exactly the recorded attempt, row-group ranged reads,
orphan collection, and ``spark.read.parquet``'s layout (partition directories)."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import fastavro
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from magnetar.base.errors import InvalidArgumentError
from magnetar.broker.config import BrokerConfig
from magnetar.managed_ledger.offload import LedgerLocation, OffloadError, OffloadSchema
from magnetar.protocol.pulsar import pb
from magnetar.protocol.pulsar.batch import LZ4, encode_entry
from magnetar.protocol.pulsar.frames import headers_and_payload
from magnetar.runtime.lakehouse import LazyLakehouse, open_offloader, table_dir

ML = "public/default/persistent/orders-partition-2"
AVRO = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"}, {"name": "item", "type": "string"},
    {"name": "price", "type": ["null", "double"]}, {"name": "key", "type": "int"},
]}


def _avro(record: dict[str, object]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(AVRO), record)
    return out.getvalue()


def _entries() -> list[bytes]:
    """Stored entries: single messages (with and without key/properties/event time), a batch, an
    LZ4-compressed batch, and bytes that are no Pulsar entry at all."""
    entries = []
    for i in range(3):
        meta = pb.MessageMetadata(producer_name="p1", sequence_id=i, publish_time=1_700_000_000_000 + i)
        if i == 1:
            meta.partition_key = "k1"
            meta.event_time = 1_600_000_000_000
            meta.properties.add(key="a", value="b")
        meta.schema_version = (0).to_bytes(8, "big")
        metadata, payload = encode_entry(meta, payload=_avro({"id": i, "item": f"i{i}", "price": i * 1.5, "key": i}))
        entries.append(headers_and_payload(metadata, payload, checksum=i % 2 == 0))
    for codec in (0, LZ4):
        meta = pb.MessageMetadata(producer_name="p2", sequence_id=10, publish_time=1_700_000_001_000)
        singles = []
        for j in range(4):
            single = pb.SingleMessageMetadata(payload_size=0, sequence_id=10 + j)
            if j == 2:
                single.partition_key = "bk"
            singles.append((single, _avro({"id": 100 + j, "item": "b", "price": None, "key": j})))
        for single, value in singles:
            single.payload_size = len(value)
        metadata, payload = encode_entry(meta, messages=singles, codec=codec)
        entries.append(headers_and_payload(metadata, payload, checksum=True))
    entries.append(b"\x00\x01 not an entry")
    return entries


async def _chunks(entries: Sequence[bytes], size: int = 2) -> AsyncIterator[list[tuple[int, bytes]]]:
    for start in range(0, len(entries), size):
        yield [(start + i, e) for i, e in enumerate(entries[start:start + size])]


def _store(root: Path) -> LazyLakehouse:
    offloader = open_offloader(BrokerConfig(offload_directory=str(root)))
    assert offloader is not None
    return offloader


def test_layout_is_tenant_namespace_topic_partition() -> None:
    assert table_dir(ML) == "public/default/orders/partition=2"
    assert table_dir("t/ns/persistent/a%2Fb") == "t/ns/a%2Fb/partition=-1"


def test_config_selects_the_driver(tmp_path: Path) -> None:
    assert open_offloader(BrokerConfig(offload_driver="none"), str(tmp_path)) is None
    assert open_offloader(BrokerConfig(), "") is None  # filesystem without a directory: off
    assert open_offloader(BrokerConfig(), str(tmp_path)).driver_name == "filesystem"  # type: ignore[union-attr]
    with pytest.raises(InvalidArgumentError):
        open_offloader(BrokerConfig(offload_driver="s3"))  # no bucket
    with pytest.raises(InvalidArgumentError):
        BrokerConfig(offload_driver="tape")


def test_write_read_manifest_and_orphans(tmp_path: Path) -> None:
    asyncio.run(_write_read_manifest_and_orphans(tmp_path))


async def _write_read_manifest_and_orphans(tmp_path: Path) -> None:
    store = _store(tmp_path)
    entries = _entries()
    schema = OffloadSchema(0, "AVRO", json.dumps(AVRO))
    location = LedgerLocation(ML, 7, store.new_attempt_id())
    written = await store.write_ledger(location, _chunks(entries), schema)
    assert written.entries_count == len(entries)
    assert written.rows_count == 3 + 4 + 4 + 1
    await store.commit_manifest(written, schema)
    await store.commit_manifest(written, schema)  # idempotent: no second commit

    # every entry back byte for byte, over any range
    assert await store.read_entries(location, 0, len(entries) - 1) == entries
    assert await store.read_entries(location, 3, 4) == entries[3:5]
    with pytest.raises(OffloadError):
        await store.read_entries(location, 0, len(entries))  # past the ledger's end

    # analysts' view: spark.read.parquet-style discovery over the topic's directory
    table = ds.dataset(str(tmp_path / "public/default/orders"), format="parquet", partitioning="hive").to_table()
    rows = table.to_pylist()
    assert len(rows) == 12 and {r["partition"] for r in rows} == {2}
    assert [(r["messageId"]["entry"], r["messageId"]["batchIndex"]) for r in rows[:5]] == [
        (0, -1), (1, -1), (2, -1), (3, 0), (3, 1)]
    one = rows[1]
    assert one["key"] == b"k1" and dict(one["properties"]) == {"a": "b"}
    assert one["eventTime"].year == 2020 and one["topic"] == "persistent://public/default/orders-partition-2"
    assert one["id"] == 1 and one["item"] == "i1" and one["price"] == 1.5
    assert one["value_key"] == 1  # a field named like a fixed column gets a prefix
    batch = [r for r in rows if r["messageId"]["entry"] == 4]
    assert [r["id"] for r in batch] == [100, 101, 102, 103] and batch[2]["key"] == b"bk"
    assert [r["sequenceId"] for r in batch] == [10, 11, 12, 13]
    assert [r["entry"] is not None for r in batch] == [True, False, False, False]
    # uncompressed entries are kept without their payloads (spliced back from ``value``): stored once
    firsts = [r for r in rows if r["entry"] is not None]
    assert [r["entrySpliced"] for r in firsts] == [True, True, True, True, False, False]
    assert all(len(r["entry"]) < len(e) for r, e in zip(firsts[:4], entries, strict=False))
    assert firsts[4]["entry"] == entries[4] and firsts[5]["entry"] == entries[5]  # LZ4 batch, foreign bytes: whole
    assert rows[-1]["value"] == b"\x00\x01 not an entry" and rows[-1]["id"] is None

    # the Delta table lists exactly this attempt's file, and reads the same rows
    delta = DeltaTable(str(tmp_path / "public/default/orders/partition=2"))
    assert pa.table(delta.get_add_actions(flatten=True)).column("path").to_pylist() == list(written.files)
    assert delta.to_pyarrow_table().num_rows == 12
    info = delta.history()[0]
    assert info["magnetar.ledger"] == "7" and info["magnetar.uid"] == location.uid

    # a second attempt for the same ledger (a crash before it was recorded), then collection
    retry = LedgerLocation(ML, 7, store.new_attempt_id())
    again = await store.write_ledger(retry, _chunks(entries), schema)
    await store.commit_manifest(again, schema)
    delta = DeltaTable(str(tmp_path / "public/default/orders/partition=2"))
    assert pa.table(delta.get_add_actions(flatten=True)).column("path").to_pylist() == list(again.files)
    removed = await store.collect_orphans(ML, {7: retry.uid})
    assert removed == list(written.files)
    assert sorted(p.name for p in (tmp_path / "public/default/orders/partition=2").glob("*.parquet")) == list(again.files)
    assert await store.read_entries(retry, 0, len(entries) - 1) == entries
    assert pq.read_table(str(tmp_path / "public/default/orders/partition=2" / again.files[0])).num_rows == 12

    await store.delete_ledger(ML, 7)
    assert not list((tmp_path / "public/default/orders/partition=2").glob("*.parquet"))
    assert DeltaTable(str(tmp_path / "public/default/orders/partition=2")).to_pyarrow_table().num_rows == 0


def test_without_schema_there_are_no_value_columns(tmp_path: Path) -> None:
    async def run() -> None:
        store = _store(tmp_path)
        location = LedgerLocation("t/ns/persistent/plain", 1, store.new_attempt_id())
        written = await store.write_ledger(location, _chunks(_entries()[:2]), None)
        await store.commit_manifest(written, None)
        table = pq.read_table(str(tmp_path / "t/ns/plain/partition=-1" / written.files[0]))
        assert "id" not in table.column_names and table.num_rows == 2

    asyncio.run(run())


def test_a_schema_registered_later_adds_its_columns_to_the_table(tmp_path: Path) -> None:
    async def run() -> None:
        store = _store(tmp_path)
        entries = _entries()
        plain = await store.write_ledger(LedgerLocation(ML, 1, store.new_attempt_id()), _chunks(entries), None)
        await store.commit_manifest(plain, None)
        schema = OffloadSchema(0, "AVRO", json.dumps(AVRO))
        typed = await store.write_ledger(LedgerLocation(ML, 2, store.new_attempt_id()), _chunks(entries), schema)
        await store.commit_manifest(typed, schema)
        table = DeltaTable(str(tmp_path / "public/default/orders/partition=2")).to_pyarrow_table()
        assert table.num_rows == 24
        ids = table.column("id").to_pylist()
        assert ids[:12] == [None] * 12 or ids[12:] == [None] * 12  # the plain ledger's rows have none
        assert sorted(i for i in ids if i is not None) == [0, 1, 2, 100, 100, 101, 101, 102, 102, 103, 103]

    asyncio.run(run())
