"""The lakehouse tier: offloaded ledgers as Parquet files with a Delta Lake manifest, in a directory
or an S3-compatible bucket. The drivers behind ``managed_ledger.offload.LedgerOffloader``; the only
place ``pyarrow`` (broker side), ``deltalake``, ``fsspec`` and ``s3fs`` are imported.

``open_offloader(config, default_directory)`` builds the driver a ``BrokerConfig`` names.
"""

from __future__ import annotations

import os
from urllib.parse import urlparse

from magnetar.base.errors import InvalidArgument
from magnetar.broker.config import OFFLOAD_DRIVERS, BrokerConfig
from magnetar.runtime.lakehouse.store import LakehouseOffloader, file_name, open_fs, table_dir


def _directory(value: str) -> str:
    parsed = urlparse(value)
    if parsed.scheme in ("", "file"):
        return os.path.abspath(parsed.path if parsed.scheme else value)
    raise InvalidArgument(f"offload_directory must be a local path or file:// URI, got {value!r}")


def open_offloader(config: BrokerConfig, default_directory: str = "") -> LakehouseOffloader | None:
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
        return LakehouseOffloader("filesystem", open_fs("filesystem"), root, delta_root_uri=root)
    bucket = config.offload_s3_bucket.strip("/")
    if not bucket:
        raise InvalidArgument("the s3 offload driver needs offload_s3_bucket")
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


def open_lakehouse(url: str, *, s3_endpoint: str | None = None, s3_region: str = "us-east-1") -> LakehouseOffloader:
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


__all__ = ["LakehouseOffloader", "file_name", "open_lakehouse", "open_offloader", "table_dir"]
