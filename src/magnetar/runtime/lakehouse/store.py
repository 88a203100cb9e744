"""``LakehouseOffloader``: offloaded ledgers as Parquet files plus a Delta Lake manifest, in a
directory (``filesystem``) or an S3-compatible bucket (``s3``, through ``s3fs``).

Layout under the root (a directory, or ``bucket/prefix``)::

    <tenant>/<namespace>/<topic>/partition=<n>/ledger-<ledger id, 20 digits>-<uid>.parquet
    <tenant>/<namespace>/<topic>/partition=<n>/_delta_log/...        the Delta table's log

``<topic>`` is the topic's base name (URL-quoted), ``n`` its partition (-1: not partitioned).
``spark.read.parquet("<root>/<tenant>/<namespace>/<topic>")`` reads every partition of the topic
(``partition`` appears as a column through Spark's partition discovery, and ``_delta_log`` is
hidden); each ``partition=<n>`` directory is one Delta table whose log lists exactly the files the
ledger list names (an attempt a crash interrupted is removed from the log by orphan collection).
One Delta commit per offloaded ledger: it adds the attempt's file and removes any other attempt's
file of that ledger; its commit info carries ``ledger``, ``uid`` and ``schemaVersion``.

Files hold one row group per ``OFFLOAD_ROW_GROUP_BYTES_MAX`` of stored entries; the file's
key-value metadata ``magnetar.row_groups`` lists each row group's first and last entry id, so a
read of entries ``a..b`` opens only the row groups that hold them (and keeps the decoded row group
in a bounded LRU, since a consumer reads one row group in many small reads).

Every blocking call runs in a worker thread; errors of the store become ``OffloadError``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import TableNotFoundError
from deltalake.transaction import AddAction, RemoveAction, create_table_with_add_actions

from magnetar.base.limits import (
    OFFLOAD_FILES_INDEXED_COUNT_MAX,
    OFFLOAD_READ_CACHE_BYTES_MAX,
    OFFLOAD_ROW_GROUP_BYTES_MAX,
)
from magnetar.managed_ledger.offload import (
    EntryChunks,
    LedgerLocation,
    OffloadError,
    OffloadSchema,
    WrittenLedger,
)
from magnetar.runtime.lakehouse.layout import FILE_NAME as _FILE
from magnetar.runtime.lakehouse.layout import (
    ROW_GROUPS_KEY,
    VALUE_KIND_KEY,
    file_name,
    table_dir,
    topic_and_partition,
)
from magnetar.runtime.lakehouse.rows import (
    COLUMNS_FOR_REPLAY,
    LedgerRows,
    arrow_schema,
    entries_of,
    value_columns,
)

log = logging.getLogger(__name__)

T = TypeVar("T")



class _RowGroupCache:
    """Decoded row groups ``(path, index) -> [(entry id, stored entry)]``, LRU-bounded by bytes."""

    def __init__(self, bytes_max: int = OFFLOAD_READ_CACHE_BYTES_MAX) -> None:
        self.bytes_max = bytes_max
        self.bytes = 0
        self._items: OrderedDict[tuple[str, int], tuple[list[tuple[int, bytes]], int]] = OrderedDict()

    def get(self, key: tuple[str, int]) -> list[tuple[int, bytes]] | None:
        found = self._items.get(key)
        if found is None:
            return None
        self._items.move_to_end(key)
        return found[0]

    def put(self, key: tuple[str, int], entries: list[tuple[int, bytes]]) -> None:
        size = sum(len(data) for _, data in entries)
        self._items[key] = (entries, size)
        self.bytes += size
        while self.bytes > self.bytes_max and len(self._items) > 1:
            _, (_, evicted) = self._items.popitem(last=False)
            self.bytes -= evicted

    def forget(self, path: str) -> None:
        for key in [k for k in self._items if k[0] == path]:
            self.bytes -= self._items.pop(key)[1]


class LakehouseOffloader:
    """A ``LedgerOffloader`` over an fsspec filesystem (``local`` or ``s3``)."""

    def __init__(self, driver_name: str, fs: Any, root: str, *, delta_root_uri: str,
                 delta_storage_options: dict[str, str] | None = None) -> None:
        self.driver_name = driver_name
        self.fs = fs
        self.root = root.rstrip("/")
        self.delta_root_uri = delta_root_uri.rstrip("/")
        self.delta_storage_options = delta_storage_options
        self._cache = _RowGroupCache()
        self._groups: OrderedDict[str, list[tuple[int, int]]] = OrderedDict()  # file -> row groups' entry ranges

    # --- names -----------------------------------------------------------------------------------

    def new_attempt_id(self) -> str:
        return uuid.uuid4().hex

    def table_path(self, managed_ledger: str) -> str:
        return f"{self.root}/{table_dir(managed_ledger)}"

    def table_uri(self, managed_ledger: str) -> str:
        return f"{self.delta_root_uri}/{table_dir(managed_ledger)}"

    def file_path(self, location: LedgerLocation) -> str:
        return f"{self.table_path(location.managed_ledger)}/{file_name(location.ledger_id, location.uid)}"

    async def _run(self, work: Callable[[], T]) -> T:
        try:
            return await asyncio.to_thread(work)
        except OffloadError:
            raise
        except Exception as error:  # OSError, botocore, deltalake, arrow: the store failed
            raise OffloadError(f"object store ({self.driver_name}): {type(error).__name__}: {error}") from error

    # --- write -----------------------------------------------------------------------------------

    async def write_ledger(self, location: LedgerLocation, chunks: EntryChunks,
                           schema: OffloadSchema | None) -> WrittenLedger:
        topic, partition = topic_and_partition(location.managed_ledger)
        rows = LedgerRows(topic, partition, value_columns(schema))
        path = self.file_path(location)
        await self._run(lambda: self.fs.makedirs(self.table_path(location.managed_ledger), exist_ok=True))
        sink = await self._run(lambda: self.fs.open(path, "wb"))
        writer = pq.ParquetWriter(sink, rows.schema, compression="zstd")
        groups: list[str] = []
        first_entry = -1
        last_entry = -1
        entries = 0
        rows_count = 0
        try:
            async for chunk in chunks:
                for entry_id, data in chunk:
                    if first_entry < 0:
                        first_entry = entry_id
                    rows.add(location.ledger_id, entry_id, data)
                    last_entry = entry_id
                    entries += 1
                if rows.stored_bytes >= OFFLOAD_ROW_GROUP_BYTES_MAX:
                    rows_count += len(rows)
                    table = rows.take()
                    await self._run(lambda t=table: writer.write_table(t))  # type: ignore[misc]
                    groups.append(f"{first_entry}:{last_entry}")
                    first_entry = -1
            if len(rows):
                rows_count += len(rows)
                table = rows.take()
                await self._run(lambda: writer.write_table(table))
                groups.append(f"{first_entry}:{last_entry}")
            kept = {ROW_GROUPS_KEY.decode(): ",".join(groups)}
            if rows.values is not None:  # readers use the typed columns only for values of this kind
                kept[VALUE_KIND_KEY.decode()] = rows.values.kind
            writer.add_key_value_metadata(kept)
            await self._run(writer.close)
            await self._run(sink.close)
        except BaseException:
            sink.close()
            raise
        size = await self._run(lambda: int(self.fs.size(path)))
        relative = file_name(location.ledger_id, location.uid)
        return WrittenLedger(location, (relative,), size, rows_count, entries)

    async def commit_manifest(self, written: WrittenLedger, schema: OffloadSchema | None) -> None:
        location = written.location
        uri = self.table_uri(location.managed_ledger)
        table_schema = arrow_schema(value_columns(schema))
        now_ms = _now_ms()
        adds = [AddAction(path, written.size_bytes, {}, now_ms, True, json.dumps({"numRecords": written.rows_count}))
                for path in written.files]
        info = {"magnetar.ledger": str(location.ledger_id), "magnetar.uid": location.uid,
                "magnetar.schemaVersion": str(schema.version if schema is not None else -1)}

        def commit() -> None:
            try:
                table = DeltaTable(uri, storage_options=self.delta_storage_options)
            except TableNotFoundError:
                create_table_with_add_actions(uri, _delta_schema(table_schema), adds, mode="append",
                                              storage_options=self.delta_storage_options,
                                              commit_properties=CommitProperties(custom_metadata=info))
                return
            listed = _listed_files(table)
            stale = [p for p in listed if _ledger_of(p) == location.ledger_id and p not in written.files]
            wanted = [a for a in adds if a.path not in listed]
            if not wanted and not stale:
                return  # committed by an earlier call (idempotent)
            removes: list[AddAction | RemoveAction] = [RemoveAction(p, True, now_ms) for p in stale]
            _add_new_columns(table, table_schema)  # a schema registered later: its typed columns join the table
            table.create_write_transaction([*wanted, *removes], "append", table.schema(),
                                           commit_properties=CommitProperties(custom_metadata=info))

        await self._run(commit)

    # --- read ------------------------------------------------------------------------------------

    async def read_entries(self, location: LedgerLocation, first: int, last: int) -> list[bytes]:
        return await self._run(lambda: self._read(location, first, last))

    async def read_offloaded(self, managed_ledger: str, ledger_id: int, uid: str, first: int, last: int) -> list[bytes]:
        """``read_entries`` by parts (for readers outside the broker, e.g. the Spark connector)."""
        return await self.read_entries(LedgerLocation(managed_ledger, ledger_id, uid), first, last)

    def _read(self, location: LedgerLocation, first: int, last: int) -> list[bytes]:
        path = self.file_path(location)
        out: list[bytes] = []
        parquet: pq.ParquetFile | None = None
        try:
            for index, (low, high) in enumerate(self._row_groups(path)):
                if high < first or low > last:
                    continue
                entries = self._cache.get((path, index))
                if entries is None:
                    if parquet is None:
                        parquet = pq.ParquetFile(self.fs.open(path, "rb"))
                    entries = entries_of(parquet.read_row_group(index, columns=COLUMNS_FOR_REPLAY))
                    self._cache.put((path, index), entries)
                out.extend(data for entry_id, data in entries if first <= entry_id <= last)
        finally:
            if parquet is not None:
                parquet.close()
        if len(out) != last - first + 1:
            raise OffloadError(f"offloaded ledger {location.ledger_id} ({path}) lacks entries of {first}..{last}: "
                               f"found {len(out)}")
        return out

    def _row_groups(self, path: str) -> list[tuple[int, int]]:
        groups = self._groups.get(path)
        if groups is not None:
            self._groups.move_to_end(path)
            return groups
        with self.fs.open(path, "rb") as handle:
            metadata = pq.read_metadata(handle).metadata or {}
        groups = []
        for part in metadata.get(ROW_GROUPS_KEY, b"").decode().split(","):
            if part:
                low, high = part.split(":")
                groups.append((int(low), int(high)))
        self._groups[path] = groups
        while len(self._groups) > OFFLOAD_FILES_INDEXED_COUNT_MAX:
            self._groups.popitem(last=False)
        return groups

    # --- delete, orphans -------------------------------------------------------------------------

    async def delete_ledger(self, managed_ledger: str, ledger_id: int) -> None:
        await self._remove(managed_ledger, lambda lid, _uid: lid == ledger_id)

    async def collect_orphans(self, managed_ledger: str, keep: Mapping[int, str]) -> list[str]:
        return await self._remove(managed_ledger, lambda lid, uid: keep.get(lid) != uid)

    async def _remove(self, managed_ledger: str, doomed: Callable[[int, str], bool]) -> list[str]:
        directory = self.table_path(managed_ledger)
        uri = self.table_uri(managed_ledger)

        def remove() -> list[str]:
            if not self.fs.exists(directory):
                return []
            names = [p.rsplit("/", 1)[-1] for p in self.fs.ls(directory, detail=False)]
            victims = []
            for name in names:
                found = _FILE.match(name)
                if found and doomed(int(found.group(1)), found.group(2)):
                    victims.append(name)
            if not victims:
                return []
            try:
                table = DeltaTable(uri, storage_options=self.delta_storage_options)
            except TableNotFoundError:
                table = None
            if table is not None:  # the manifest first: no table reader is pointed at a missing file
                listed = set(_listed_files(table))
                removes: list[AddAction | RemoveAction] = [RemoveAction(n, True, _now_ms()) for n in victims
                                                           if n in listed]
                if removes:
                    table.create_write_transaction(removes, "append", table.schema())
            for name in victims:
                path = f"{directory}/{name}"
                self._cache.forget(path)
                self._groups.pop(path, None)
                self.fs.rm(path)
            return victims

        return await self._run(remove)


def _now_ms() -> int:
    # Delta's modification times are wall-clock facts about the files, not decisions of a core.
    return int(time.time() * 1000)


def _listed_files(table: DeltaTable) -> list[str]:
    actions = table.get_add_actions(flatten=True)
    return [str(p) for p in pa.table(actions).column("path").to_pylist()]


def _ledger_of(name: str) -> int:
    found = _FILE.match(name.rsplit("/", 1)[-1])
    return int(found.group(1)) if found else -1


def _delta_schema(schema: pa.Schema) -> Any:
    from deltalake import Schema

    return Schema.from_arrow(schema)


def _add_new_columns(table: DeltaTable, schema: pa.Schema) -> None:
    """Columns of ``schema`` the table lacks are added to it (nullable: older files have none).
    A column whose type changed keeps the table's type (Delta readers then read it as null)."""
    known = set(pa.schema(table.schema().to_arrow()).names)
    new = [f.with_nullable(True) for f in schema if f.name not in known]
    if new:
        table.alter.add_columns(list(_delta_schema(pa.schema(new)).fields))


def open_fs(driver: str, *, s3_endpoint: str = "", s3_region: str = "") -> Any:
    if driver == "filesystem":
        return fsspec.filesystem("file")
    options: dict[str, Any] = {}
    if s3_endpoint:
        options["endpoint_url"] = s3_endpoint
    if s3_region:
        options["client_kwargs"] = {"region_name": s3_region}
    return fsspec.filesystem("s3", **options)


__all__ = ["LakehouseOffloader", "open_fs"]
