"""The lakehouse tier: offloaded ledgers as Parquet files with a Delta Lake manifest, in a directory
or an S3-compatible bucket. The drivers behind ``managed_ledger.offload.LedgerOffloader``; the only
place ``pyarrow`` (broker side), ``deltalake``, ``fsspec`` and ``s3fs`` are imported.

``open_offloader(config, default_directory)`` builds the driver a ``BrokerConfig`` names, and
``open_lakehouse(url)`` one over an offload root (readers such as the Spark connector). Both
return a ``LazyLakehouse``: pyarrow, deltalake and fsspec (seconds of imports) are loaded on the
first offload or read of offloaded data, not when a broker starts; orphan collection on a topic's
load looks for the topic's directory first, without them.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Mapping
from typing import IO, TYPE_CHECKING
from urllib.parse import urlparse

from magnetar.base.errors import InvalidArgumentError
from magnetar.broker.config import OFFLOAD_DRIVERS, BrokerConfig
from magnetar.managed_ledger.offload import (
    EntryChunks,
    LedgerLocation,
    OffloadSchema,
    StoreLocation,
    WrittenLedger,
)
from magnetar.runtime.lakehouse.layout import file_name, table_dir

if TYPE_CHECKING:
    from magnetar.runtime.lakehouse.store import LakehouseOffloader


class LazyLakehouse:
    """A ``LedgerOffloader`` that builds its ``LakehouseOffloader`` on first use."""

    def __init__(self, driver_name: str, local_root: str | None, make: Callable[[], LakehouseOffloader],
                 location: StoreLocation) -> None:
        self.driver_name = driver_name
        self._local_root = local_root  # the filesystem driver's directory (None: s3)
        self._make = make
        self._real: LakehouseOffloader | None = None
        self._location = location

    @property
    def location(self) -> StoreLocation:
        """Where the store is, for readers outside the broker (``LocatedOffloader``)."""
        return self._location

    @property
    def real(self) -> LakehouseOffloader:
        if self._real is None:
            self._real = self._make()
        return self._real

    def new_attempt_id(self) -> str:
        return uuid.uuid4().hex

    async def write_ledger(self, location: LedgerLocation, chunks: EntryChunks,
                           schema: OffloadSchema | None) -> WrittenLedger:
        return await self.real.write_ledger(location, chunks, schema)

    async def commit_manifest(self, written: WrittenLedger, schema: OffloadSchema | None) -> None:
        await self.real.commit_manifest(written, schema)

    async def read_entries(self, location: LedgerLocation, first: int, last: int) -> list[bytes]:
        return await self.real.read_entries(location, first, last)

    async def read_offloaded(self, managed_ledger: str, ledger_id: int, uid: str, first: int, last: int) -> list[bytes]:
        return await self.real.read_offloaded(managed_ledger, ledger_id, uid, first, last)

    def local_offloaded(self, managed_ledger: str, ledger_id: int, uid: str) -> str | None:
        """The path of an offloaded ledger's Parquet file when the store is a local directory (a
        reader that scans the file itself, such as the Spark connector with pyarrow, then memory
        maps it: no copy through Python file objects), else None (use ``open_offloaded``)."""
        if self._local_root is None:
            return None
        return os.path.join(self._local_root, table_dir(managed_ledger), file_name(ledger_id, uid))

    def open_offloaded(self, managed_ledger: str, ledger_id: int, uid: str) -> IO[bytes]:
        """The Parquet file of an offloaded ledger, opened for reading (blocking; the caller closes
        it), from whichever store this is."""
        local = self.local_offloaded(managed_ledger, ledger_id, uid)
        if local is not None:
            return open(local, "rb")
        real = self.real
        handle: IO[bytes] = real.fs.open(f"{real.root}/{table_dir(managed_ledger)}/{file_name(ledger_id, uid)}", "rb")
        return handle

    async def delete_ledger(self, managed_ledger: str, ledger_id: int) -> None:
        if self._absent(managed_ledger):
            return
        await self.real.delete_ledger(managed_ledger, ledger_id)

    async def collect_orphans(self, managed_ledger: str, keep: Mapping[int, str]) -> list[str]:
        if self._absent(managed_ledger):
            return []
        return await self.real.collect_orphans(managed_ledger, keep)

    def _absent(self, managed_ledger: str) -> bool:
        """The topic has no directory in a local lakehouse (nothing was ever offloaded)."""
        return (self._real is None and self._local_root is not None
                and not os.path.isdir(os.path.join(self._local_root, table_dir(managed_ledger))))


def _directory(value: str) -> str:
    parsed = urlparse(value)
    if parsed.scheme in ("", "file"):
        return os.path.abspath(parsed.path if parsed.scheme else value)
    raise InvalidArgumentError(f"offload_directory must be a local path or file:// URI, got {value!r}")


def open_offloader(config: BrokerConfig, default_directory: str = "") -> LazyLakehouse | None:
    """The offloader ``config`` names, or None when offload is off (driver ``none``, or the
    filesystem driver without a directory)."""
    driver = OFFLOAD_DRIVERS[config.offload_driver]
    if driver == "none":
        return None
    if driver == "filesystem":
        raw = config.offload_directory or default_directory
        if not raw:
            return None
        root = _directory(raw)
        os.makedirs(root, exist_ok=True)
        return LazyLakehouse("filesystem", root, lambda: _filesystem(root), StoreLocation(root))
    bucket = config.offload_s3_bucket.strip("/")
    if not bucket:
        raise InvalidArgumentError("the s3 offload driver needs offload_s3_bucket")
    return LazyLakehouse("s3", None, lambda: _s3(config, bucket),
                         StoreLocation(f"s3://{bucket}", config.offload_s3_endpoint))


def _filesystem(root: str) -> LakehouseOffloader:
    from magnetar.runtime.lakehouse.store import LakehouseOffloader, open_fs

    return LakehouseOffloader("filesystem", open_fs("filesystem"), root, delta_root_uri=root)


def _s3(config: BrokerConfig, bucket: str) -> LakehouseOffloader:
    from magnetar.runtime.lakehouse.store import LakehouseOffloader, open_fs

    options = {"AWS_REGION": config.offload_s3_region, "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}
    if config.offload_s3_endpoint:
        options["AWS_ENDPOINT_URL"] = config.offload_s3_endpoint
        if config.offload_s3_endpoint.startswith("http://"):
            options["AWS_ALLOW_HTTP"] = "true"
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        if os.environ.get(name):
            options[name] = os.environ[name]
    fs = open_fs("s3", s3_endpoint=config.offload_s3_endpoint, s3_region=config.offload_s3_region)
    return LakehouseOffloader("s3", fs, bucket, delta_root_uri=f"s3://{bucket}", delta_storage_options=options)


def open_lakehouse(url: str, *, s3_endpoint: str | None = None, s3_region: str = "us-east-1") -> LazyLakehouse:
    """A reader (and writer) of the offload root ``url``: a directory, ``file://...`` or
    ``s3://bucket/prefix`` (credentials from the AWS environment variables)."""
    if url.startswith("s3://"):
        config = BrokerConfig(offload_driver="s3", offload_s3_bucket=url.removeprefix("s3://"),
                              offload_s3_endpoint=s3_endpoint or "", offload_s3_region=s3_region)
    else:
        config = BrokerConfig(offload_driver="filesystem", offload_directory=url)
    found = open_offloader(config)
    assert found is not None
    return found


__all__ = ["LazyLakehouse", "file_name", "open_lakehouse", "open_offloader", "table_dir"]
