"""Planning through the brokers' admin API: what the connector needs of a topic, asked of the
brokers as the reading role, so ``serviceUrl`` + ``adminUrl`` (+ credentials) are enough.

With ``adminUrl`` and no ``metadataUrl`` the driver never opens the metadata store. It asks:

* ``GET /admin/v2/persistent/{t}/{ns}/{topic}/partitions``: the partitions of each topic;
* ``GET /admin/v2/persistent/{t}/{ns}``: the topics of a ``topicsPattern``'s namespace;
* ``GET /admin/v2/persistent/{t}/{ns}/{topic}/readLayout`` (``admin/read_layout.py``): each
  partition's ledgers, how many entries of each may be read (the owner's confirmed end for the
  open ledger), their bookie ensembles, their offload state and where the lakehouse is;
* ``GET /admin/v2/schemas/{t}/{ns}/{topic}/schemas``: the Avro writer schemas (``valueFormat=avro``).

Each request carries the credentials' ``Authorization`` header; the broker authorizes it as the
reading role (``readLayout`` needs ``consume`` on the topic, as reading messages does). Executors
then read entries from the bookies the layout names, or from the lakehouse files, as with a
metadata-store plan. A refusal raises ``AdminRefusedError`` saying which role permission is
missing; an unreachable API raises it too, naming the URL and the bound.
"""

from __future__ import annotations

import asyncio
import base64
import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from magnetar.base.errors import MagnetarError
from magnetar.base.limits import SPARK_ADMIN_REQUEST_MS_MAX
from magnetar.base.types import TopicName
from magnetar.connectors.spark.options import Credentials
from magnetar.connectors.spark.plan import LedgerSpan, PartitionLayout

AVRO_SCHEMA_TYPE_NAME = "AVRO"


@dataclass(frozen=True)
class StoreLocation:
    """Where the brokers said offloaded ledgers are: ``url`` a directory or ``s3://bucket/prefix``,
    with the S3 endpoint URL (empty: AWS). ``readLayout``'s ``lakehouse``."""

    url: str
    s3_endpoint: str = ""


class AdminRefusedError(MagnetarError):
    """The brokers' admin API refused a planning request (or could not be reached)."""


def topic_path(name: str) -> str:
    """``/persistent/{tenant}/{ns}/{topic}`` of a full topic name, each part URL-encoded."""
    topic = TopicName.parse(name)
    return (f"/persistent/{quote(topic.tenant, safe='')}/{quote(topic.namespace_portion, safe='')}/"
            f"{quote(topic.local_name, safe='')}")


class AdminApi:
    """GET requests to ``/admin/v2`` of ``url`` as the credentials' role (blocking I/O in a thread)."""

    def __init__(self, url: str, credentials: Credentials | None) -> None:
        self.url = url.rstrip("/")
        self.credentials = credentials

    async def get(self, path: str, *, missing_ok: bool = False) -> Any:
        """The decoded JSON answer of ``GET /admin/v2{path}``; None for a 404 when ``missing_ok``."""
        return await asyncio.to_thread(self._get, path, missing_ok)

    def _get(self, path: str, missing_ok: bool) -> Any:
        headers = {"Accept": "application/json"}
        if self.credentials is not None:
            headers["Authorization"] = self.credentials.http_authorization
        request = urllib.request.Request(f"{self.url}/admin/v2{path}", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=SPARK_ADMIN_REQUEST_MS_MAX / 1000) as reply:
                raw = reply.read()
        except urllib.error.HTTPError as error:
            if error.code == 404 and missing_ok:
                return None
            raise AdminRefusedError(self._refusal(path, error.code, _reason(error))) from None
        except (urllib.error.URLError, OSError) as error:
            raise AdminRefusedError(
                f"cannot reach the admin API at {self.url} within {SPARK_ADMIN_REQUEST_MS_MAX} ms "
                f"(SPARK_ADMIN_REQUEST_MS_MAX): {error}") from None
        return json.loads(raw) if raw else None

    def _refusal(self, path: str, status: int, reason: str) -> str:
        who = "without credentials" if self.credentials is None else f"as the {self.credentials.method} role given"
        what = f"GET {self.url}/admin/v2{path} {who}: HTTP {status}: {reason}"
        if status == 401:
            return f"{what}. The brokers require authentication: give the option token, or authPluginClassName + authParams"
        if status == 403:
            return (f"{what}. The role is not authorized to read this topic: it needs the consume permission on the "
                    "topic or its namespace (POST /admin/v2/persistent/{tenant}/{ns}/{topic}/permissions/{role} "
                    'with ["consume"])')
        return what


def _reason(error: urllib.error.HTTPError) -> str:
    body = error.read().decode(errors="replace")
    try:
        parsed = json.loads(body)
    except ValueError:
        return body.strip() or str(error.reason)
    return str(parsed.get("reason", body)) if isinstance(parsed, dict) else body


async def partitions(api: AdminApi, topic: str) -> list[str]:
    """The partitions of ``topic`` (full name), or the topic itself when it is not partitioned."""
    answer = await api.get(f"{topic_path(topic)}/partitions")
    count = int(answer.get("partitions", 0)) if isinstance(answer, dict) else 0
    return [f"{topic}-partition-{i}" for i in range(count)] if count > 0 else [topic]


async def namespace_topics(api: AdminApi, namespace: str) -> list[str]:
    """Full names of the persistent topics (partitions included) of ``tenant/ns``."""
    tenant, _, local = namespace.partition("/")
    answer = await api.get(f"/persistent/{quote(tenant, safe='')}/{quote(local, safe='')}")
    return [str(name) for name in answer or []]


async def layout(api: AdminApi, name: str) -> tuple[PartitionLayout, StoreLocation | None]:
    """Partition ``name``'s layout and where its lakehouse is (None: the broker offloads nowhere)."""
    topic = TopicName.parse(name)
    answer = await api.get(f"{topic_path(name)}/readLayout")
    spans = []
    for ledger in answer["ledgers"]:
        if ledger.get("offloadUid"):
            spans.append(LedgerSpan(int(ledger["ledgerId"]), int(ledger["entries"]), b"", str(ledger["offloadUid"])))
        else:
            spans.append(LedgerSpan(int(ledger["ledgerId"]), int(ledger["entries"]),
                                    base64.b64decode(ledger["metadata"])))
    lake = answer.get("lakehouse")
    location = StoreLocation(str(lake["url"]), str(lake.get("s3Endpoint") or "")) if lake else None
    return PartitionLayout(str(topic), topic.partition_index, tuple(spans)), location


async def avro_schemas(api: AdminApi, partition: str) -> dict[int, str]:
    """The Avro schema definitions registered for ``partition``'s topic, by version."""
    base = TopicName.parse(partition).partitioned_topic_name
    path = f"/schemas/{quote(base.tenant, safe='')}/{quote(base.namespace_portion, safe='')}/" \
           f"{quote(base.local_name, safe='')}/schemas"
    answer = await api.get(path, missing_ok=True)
    out: dict[int, str] = {}
    for version in (answer or {}).get("getSchemaResponses", []):
        if version.get("type") == AVRO_SCHEMA_TYPE_NAME:
            out[int(version["version"])] = str(version["data"])
    return out
