"""The optional named subscription that follows a streaming query (option ``subscription``).

Spark's checkpoint is the query's position; the broker knows nothing of it, so backlog figures and
retention ignore the pipeline. With ``subscription=<name>`` and ``adminUrl``, the source's
``commit(end)`` moves a durable subscription of that name, on every partition of the query, to
``end`` (the next entry to read) through the admin REST API: a reset of the cursor by message id,
and the first time a creation at that position. So the subscription's backlog is what the query
has not committed yet, and retention keeps it.

What holds: the subscription trails Spark by one micro-batch (Spark commits batch N while it plans
N+1) and the last batch before a stop is never committed to the source, so the backlog reads a
little high, never low. Nothing reads through the subscription: it is only a marker, and it is
left in place when the query stops (delete it with the admin API when the pipeline is retired).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import quote

from magnetar.base.errors import MagnetarError
from magnetar.base.limits import SPARK_ADMIN_REQUEST_MS_MAX
from magnetar.base.types import Position, TopicName

if TYPE_CHECKING:
    from magnetar.connectors.spark.options import Credentials


class SubscriptionError(MagnetarError):
    """The admin API refused to move the subscription, or could not be reached."""


def subscription_path(partition: str, subscription: str) -> str:
    """``/persistent/{tenant}/{ns}/{topic}/subscription/{name}`` of one partition (URL-encoded)."""
    topic = TopicName.parse(partition)
    return (f"/persistent/{quote(topic.tenant, safe='')}/{quote(topic.namespace_portion, safe='')}/"
            f"{quote(topic.local_name, safe='')}/subscription/{quote(subscription, safe='')}")


def _call(admin_url: str, method: str, path: str, body: object, credentials: Credentials | None) -> tuple[int, str]:
    headers = {"Content-Type": "application/json"}
    if credentials is not None:
        headers["Authorization"] = credentials.http_authorization
    request = urllib.request.Request(f"{admin_url.rstrip('/')}/admin/v2{path}", data=json.dumps(body).encode(),
                                     method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=SPARK_ADMIN_REQUEST_MS_MAX / 1000) as reply:
            return reply.status, ""
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as error:
        raise SubscriptionError(
            f"cannot reach the admin API at {admin_url} within {SPARK_ADMIN_REQUEST_MS_MAX} ms "
            f"(SPARK_ADMIN_REQUEST_MS_MAX): {error}"
        ) from None


def advance_subscription(admin_url: str, subscription: str, positions: Mapping[str, Position],
                         credentials: Credentials | None = None) -> None:
    """Move ``subscription`` on each partition so that ``positions[partition]`` is the next entry it
    would read (created there if missing). Partitions still before their first ledger are skipped."""
    for partition in sorted(positions):
        position = positions[partition]
        if position.ledger_id < 0:
            continue
        path = subscription_path(partition, subscription)
        body = {"ledgerId": position.ledger_id, "entryId": position.entry_id}
        status, reason = _call(admin_url, "POST", f"{path}/resetcursor", body, credentials)
        if status == 404:
            status, reason = _call(admin_url, "PUT", path, body, credentials)
        if status not in (200, 204):
            raise SubscriptionError(f"{partition}: moving subscription {subscription!r} to "
                                    f"{position.ledger_id}:{position.entry_id} failed: HTTP {status} {reason}")
