"""Reading and ending a topic through ``/admin/v2``, with Pulsar's paths and reply headers.

* ``GET .../{topic}/subscription/{sub}/position/{n}``: peek the n-th entry (1-based) the
  subscription has not acknowledged, after its mark-delete position;
* ``GET .../{topic}/ledger/{ledgerId}/entry/{entryId}``: an entry by its message id;
* ``GET .../{topic}/examinemessage?initialPosition=earliest|latest&messagePosition=n``: the
  n-th entry from the first or from the last;
* ``POST .../{topic}/terminate``: no more appends, ever; answers the last message id (JSON
  ``{"ledgerId", "entryId", "partitionIndex"}``); producers then fail with TopicTerminated;
* ``POST .../{topic}/trim``: delete the ledgers the topic's retention no longer keeps, now.

An entry is answered as Pulsar answers it: the body is the payload as the producer sent it (a
batch stays one body, compressed if it was), the metadata goes into headers:
``X-Pulsar-Message-ID`` (``ledgerId:entryId``), ``X-Pulsar-PROPERTY-{key}``,
``X-Pulsar-publish-time`` / ``-event-time`` / ``-deliver-at-time`` (ISO-8601, UTC, ms),
``X-Pulsar-num-batch-message`` and ``X-Pulsar-batch-size`` for a batch,
``X-Pulsar-compression-type`` and ``X-Pulsar-uncompressed-size`` when compressed,
``X-Pulsar-producer-name``, ``X-Pulsar-sequence-id``, ``X-Pulsar-partition-key``,
``X-Pulsar-null-value``, ``X-Pulsar-Is-Encrypted``, ``X-Pulsar-schema-version`` (base64).
"""

from __future__ import annotations

import base64
import datetime

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from magnetar.admin.common import AdminContext, AdminError, api_route, json_response, no_content, topic_of
from magnetar.admin.subscriptions import _subscription
from magnetar.admin.topics import load, targets
from magnetar.base.entry import Entry
from magnetar.base.limits import ADMIN_PEEK_SCAN_ENTRIES_COUNT_MAX, MANAGED_LEDGER_READ_COUNT_MAX
from magnetar.base.types import Position
from magnetar.broker.log import TopicLog
from magnetar.broker.topic import Topic
from magnetar.protocol.pulsar import pb, stored_entry_parts

_COMPRESSION_NAMES = {pb.NONE: "NONE", pb.LZ4: "LZ4", pb.ZLIB: "ZLIB", pb.ZSTD: "ZSTD", pb.SNAPPY: "SNAPPY"}


def _iso_ms(epoch_ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def entry_response(entry: Entry) -> Response:
    """One stored entry as Pulsar's admin answers it (see the module docstring)."""
    metadata, payload = stored_entry_parts(entry.payload)
    headers = {"X-Pulsar-Message-ID": f"{entry.position.ledger_id}:{entry.position.entry_id}"}
    for prop in metadata.properties:
        headers[f"X-Pulsar-PROPERTY-{prop.key}"] = prop.value
    headers["X-Pulsar-publish-time"] = _iso_ms(metadata.publish_time)
    if metadata.event_time:
        headers["X-Pulsar-event-time"] = _iso_ms(metadata.event_time)
    if metadata.HasField("deliver_at_time"):
        headers["X-Pulsar-deliver-at-time"] = _iso_ms(metadata.deliver_at_time)
    if metadata.HasField("num_messages_in_batch"):
        headers["X-Pulsar-num-batch-message"] = str(metadata.num_messages_in_batch)
        headers["X-Pulsar-batch-size"] = str(len(payload))
    if metadata.compression != pb.NONE:
        headers["X-Pulsar-compression-type"] = _COMPRESSION_NAMES.get(metadata.compression, str(metadata.compression))
        headers["X-Pulsar-uncompressed-size"] = str(metadata.uncompressed_size)
    headers["X-Pulsar-producer-name"] = metadata.producer_name
    headers["X-Pulsar-sequence-id"] = str(metadata.sequence_id)
    if metadata.HasField("partition_key"):
        headers["X-Pulsar-partition-key"] = metadata.partition_key
    if metadata.null_value:
        headers["X-Pulsar-null-value"] = "true"
    headers["X-Pulsar-Is-Encrypted"] = "true" if metadata.encryption_keys else "false"
    if metadata.HasField("schema_version"):
        headers["X-Pulsar-schema-version"] = base64.b64encode(metadata.schema_version).decode()
    return Response(bytes(payload), media_type="application/octet-stream", headers=headers)


def _ledger_counts(log: TopicLog) -> list[tuple[int, int]]:
    """(ledger id, entries) of the log's ledgers in order; the one being written counts up to
    the last position (its stored count may lag)."""
    last = log.last_position
    counts = [(ledger.ledger_id, ledger.entries_count) for ledger in log.storage_stats().ledgers
              if ledger.ledger_id != last.ledger_id and ledger.entries_count > 0]
    if last.entry_id >= 0:
        counts.append((last.ledger_id, last.entry_id + 1))
    return sorted(counts)


def nth_position(log: TopicLog, n: int, *, from_latest: bool) -> Position | None:
    """The n-th entry (1-based) from the first or from the last, None beyond the log."""
    counts = _ledger_counts(log)
    remaining = n - 1
    for ledger_id, count in (reversed(counts) if from_latest else counts):
        if remaining < count:
            return Position(ledger_id, count - 1 - remaining if from_latest else remaining)
        remaining -= count
    return None


async def _read_one(topic: Topic, position: Position) -> Entry:
    found = await topic.log.read(position, 1)
    if not found or found[0].position != position:
        raise AdminError(404, f"Message not found: {position.ledger_id}:{position.entry_id}")
    return found[0]


async def _peek(topic: Topic, subscription_name: str, ctx: AdminContext, n: int) -> Entry:
    cursor = (await _subscription(ctx, topic, subscription_name)).cursor
    start = cursor.mark_delete_position.next()
    seen = 0
    while seen < ADMIN_PEEK_SCAN_ENTRIES_COUNT_MAX:
        entries = await topic.log.read(start, min(MANAGED_LEDGER_READ_COUNT_MAX, ADMIN_PEEK_SCAN_ENTRIES_COUNT_MAX - seen))
        if not entries:
            break
        for entry in entries:
            seen += 1
            if cursor.is_acked(entry.position):
                continue
            n -= 1
            if n == 0:
                return entry
        start = entries[-1].position.next()
    raise AdminError(404, "Message not found: the subscription has fewer unacknowledged messages")


def _position_arg(request: Request, name: str) -> int:
    text = request.path_params.get(name) or request.query_params.get(name) or ""
    try:
        value = int(text)
    except ValueError:
        raise AdminError(412, f"{name} must be an integer, got {text!r}") from None
    if value < 1:
        raise AdminError(412, f"{name} must be at least 1, got {value}")
    return value


async def _single(ctx: AdminContext, request: Request) -> Topic:
    topic = topic_of(request)
    names = await targets(ctx, topic)
    if names != [topic]:
        raise AdminError(412, f"{topic} is a partitioned topic: ask for one of its partitions")
    return await load(ctx, topic)


def routes(ctx: AdminContext) -> list[BaseRoute]:
    base = "/persistent/{tenant}/{namespace}/{topic}"

    @api_route(f"{base}/subscription/{{subscription}}/position/{{position}}", ["GET"],
               "Peek the n-th unacknowledged message of a subscription")
    async def peek(request: Request) -> Response:
        topic = await _single(ctx, request)
        n = _position_arg(request, "position")
        return entry_response(await _peek(topic, request.path_params["subscription"], ctx, n))

    @api_route(f"{base}/ledger/{{ledger}}/entry/{{entry}}", ["GET"], "Get a message by its id")
    async def get_by_id(request: Request) -> Response:
        topic = await _single(ctx, request)
        try:
            position = Position(int(request.path_params["ledger"]), int(request.path_params["entry"]))
        except ValueError:
            raise AdminError(412, "ledgerId and entryId must be integers") from None
        return entry_response(await _read_one(topic, position))

    @api_route(f"{base}/examinemessage", ["GET"], "Examine the n-th message from the earliest or the latest",
               query=(("initialPosition", "string"), ("messagePosition", "integer")))
    async def examine(request: Request) -> Response:
        topic = await _single(ctx, request)
        initial = request.query_params.get("initialPosition", "latest").lower()
        if initial not in ("earliest", "latest"):
            raise AdminError(412, f"initialPosition must be earliest or latest, got {initial!r}")
        n = _position_arg(request, "messagePosition") if "messagePosition" in request.query_params else 1
        position = nth_position(topic.log, n, from_latest=initial == "latest")
        if position is None:
            raise AdminError(404, f"Message not found: the topic has fewer than {n} messages")
        return entry_response(await _read_one(topic, position))

    @api_route(f"{base}/terminate", ["POST"], "Terminate a topic (no more messages); returns the last message id")
    async def terminate(request: Request) -> Response:
        topic = await _single(ctx, request)
        last = await topic.terminate()
        return json_response({"ledgerId": last.ledger_id, "entryId": last.entry_id,
                              "partitionIndex": topic.partition_index})

    @api_route(f"{base}/trim", ["POST"], "Trim a topic: delete the ledgers its retention no longer keeps")
    async def trim(request: Request) -> Response:
        topic = await _single(ctx, request)
        await topic.trim()
        return no_content()

    return [peek, get_by_id, examine, terminate, trim]
