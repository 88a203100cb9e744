"""Names in the lakehouse (light: no pyarrow, no deltalake), see ``store``'s docstring for the layout."""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

#: Parquet key-value metadata of an offloaded ledger's file: each row group's first and last entry
#: id (``"first:last,..."``), and the kind of the schema its typed columns were decoded with
#: (``AVRO`` or ``JSON``; absent: no typed columns, or a file written before the key existed).
ROW_GROUPS_KEY = b"magnetar.row_groups"
VALUE_KIND_KEY = b"magnetar.value_kind"

FILE_NAME = re.compile(r"^ledger-(\d{20})-([0-9a-f]{32})\.parquet$")
_PARTITION = re.compile(r"^(.*)-partition-(\d+)$")


def table_dir(managed_ledger: str) -> str:
    """``tenant/ns/<topic>/partition=<n>`` of managed ledger ``tenant/ns/persistent/<encoded>``."""
    tenant, namespace, _domain, encoded = managed_ledger.split("/")
    local = unquote(encoded)
    found = _PARTITION.match(local)
    base, partition = (found.group(1), int(found.group(2))) if found else (local, -1)
    return f"{tenant}/{namespace}/{quote(base, safe='')}/partition={partition}"


def topic_and_partition(managed_ledger: str) -> tuple[str, int]:
    tenant, namespace, domain, encoded = managed_ledger.split("/")
    local = unquote(encoded)
    found = _PARTITION.match(local)
    return f"{domain}://{tenant}/{namespace}/{local}", int(found.group(2)) if found else -1


def file_name(ledger_id: int, uid: str) -> str:
    return f"ledger-{ledger_id:020d}-{uid}.parquet"


__all__ = ["FILE_NAME", "ROW_GROUPS_KEY", "VALUE_KIND_KEY", "file_name", "table_dir", "topic_and_partition"]
