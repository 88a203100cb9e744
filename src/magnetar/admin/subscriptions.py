"""``/persistent/{t}/{ns}/{topic}/subscription(s)``: list, create, delete, skip, clear backlog,
expire, reset cursor by publish time or by message id.

On a partitioned topic each operation applies to every partition, as Pulsar's does. Moving a
cursor forward (skip, clear backlog, expire) acknowledges through the broker's subscription, so
connected consumers are not sent what was skipped; a reset detaches the consumers first
(CLOSE_CONSUMER) and they subscribe again at the new position, as a client seek does.
"""

from __future__ import annotations

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from magnetar.admin.common import (
    AdminContext,
    AdminError,
    api_route,
    json_response,
    no_content,
    read_body,
    topic_of,
)
from magnetar.admin.topics import load, targets
from magnetar.base.limits import ADMIN_SKIP_ENTRIES_COUNT_MAX, BROKER_SEEK_SCAN_ENTRIES_COUNT_MAX
from magnetar.base.types import EARLIEST, Position, TopicName
from magnetar.broker.dedup import is_system_cursor
from magnetar.broker.ids import before
from magnetar.broker.subscription import Subscription
from magnetar.broker.topic import Topic


class MessageIdBody(msgspec.Struct, rename="camel"):
    ledger_id: int = -1
    entry_id: int = -1
    partition_index: int = -1


async def _subscription(ctx: AdminContext, topic: Topic, name: str) -> Subscription:
    if is_system_cursor(name) or name not in topic.subscription_names():
        raise AdminError(404, f"Subscription {name} not found")
    found = topic.subscriptions.get(name)
    if found is not None:
        return found
    return await topic.subscription(name, durable=True, initial_mark_delete=topic.log.last_position)


async def _each(ctx: AdminContext, request: Request) -> list[tuple[TopicName, Subscription]]:
    """The named subscription on the topic or on each of its partitions."""
    name = request.path_params["subscription"]
    out = []
    for topic_name in await targets(ctx, topic_of(request)):
        topic = await load(ctx, topic_name)
        out.append((topic_name, await _subscription(ctx, topic, name)))
    return out


_BASE = "/persistent/{tenant}/{namespace}/{topic}"
_SUB = f"{_BASE}/subscription/{{subscription}}"


def routes(ctx: AdminContext) -> list[BaseRoute]:
    """Subscriptions made and removed, their cursors moved forward, and their cursors reset."""
    return [*_lifecycle_routes(ctx), *_forward_routes(ctx), *_reset_routes(ctx)]


def _lifecycle_routes(ctx: AdminContext) -> list[BaseRoute]:
    """List, create and delete subscriptions."""
    base, sub = _BASE, _SUB

    @api_route(f"{base}/subscriptions", ["GET"], "List the subscriptions of a topic")
    async def list_subscriptions(request: Request) -> Response:
        names: set[str] = set()
        for topic_name in await targets(ctx, topic_of(request)):
            names.update((await load(ctx, topic_name)).subscription_names())
        return json_response(sorted(names))

    @api_route(sub, ["PUT"], "Create a durable subscription (at the given message id, default latest)",
               body=MessageIdBody, body_required=False)
    async def create_subscription(request: Request) -> Response:
        name = request.path_params["subscription"]
        if not name or is_system_cursor(name):
            raise AdminError(412, f"Invalid subscription name {name!r}")
        body = await read_body(request, MessageIdBody, required=False)
        for topic_name in await targets(ctx, topic_of(request)):
            topic = await load(ctx, topic_name)
            if name in topic.subscription_names():
                raise AdminError(409, f"Subscription {name} already exists")
            if body is None or (body.ledger_id, body.entry_id) == (2**63 - 1, 2**63 - 1):
                start = topic.log.last_position
            elif body.ledger_id < 0:
                start = EARLIEST
            else:
                start = before(Position(body.ledger_id, body.entry_id))
            await topic.subscription(name, durable=True, initial_mark_delete=start)
        return no_content()

    @api_route(sub, ["DELETE"], "Delete a subscription (force: disconnect its consumers)",
               query=(("force", "boolean"),))
    async def delete_subscription(request: Request) -> Response:
        force = request.query_params.get("force", "false").lower() == "true"
        found = await _each(ctx, request)
        if not force and any(s.consumers for _, s in found):
            raise AdminError(412, "Subscription has active connected consumers")
        for _, subscription in found:
            subscription.disconnect_consumers()
            await subscription.close(delete=True)
        return no_content()

    return [list_subscriptions, create_subscription, delete_subscription]


def _forward_routes(ctx: AdminContext) -> list[BaseRoute]:
    """Move cursors forward: clear the backlog, skip entries, expire entries older than a time."""
    base, sub = _BASE, _SUB

    @api_route(f"{sub}/skip_all", ["POST"], "Clear the subscription's backlog")
    async def skip_all(request: Request) -> Response:
        for _, subscription in await _each(ctx, request):
            await subscription.clear_backlog()
        return no_content()

    @api_route(f"{sub}/skip/{{count:int}}", ["POST"], "Skip the next count unacknowledged entries")
    async def skip(request: Request) -> Response:
        count = request.path_params["count"]
        if not 0 <= count <= ADMIN_SKIP_ENTRIES_COUNT_MAX:
            raise AdminError(412, f"count must be 0..{ADMIN_SKIP_ENTRIES_COUNT_MAX} (ADMIN_SKIP_ENTRIES_COUNT_MAX)")
        for _, subscription in await _each(ctx, request):
            await subscription.skip(count)
        return no_content()

    @api_route(f"{sub}/expireMessages/{{seconds:int}}", ["POST"], "Expire entries older than seconds")
    async def expire(request: Request) -> Response:
        cutoff = _cutoff_ms(ctx, request.path_params["seconds"])
        for _, subscription in await _each(ctx, request):
            await subscription.expire_older_than(cutoff)
        return no_content()

    @api_route(f"{base}/all_subscription/expireMessages/{{seconds:int}}", ["POST"],
               "Expire entries older than seconds on every subscription")
    async def expire_all(request: Request) -> Response:
        cutoff = _cutoff_ms(ctx, request.path_params["seconds"])
        for topic_name in await targets(ctx, topic_of(request)):
            topic = await load(ctx, topic_name)
            for name in topic.subscription_names():
                await (await _subscription(ctx, topic, name)).expire_older_than(cutoff)
        return no_content()

    return [skip_all, skip, expire, expire_all]


def _reset_routes(ctx: AdminContext) -> list[BaseRoute]:
    """Reset cursors to a publish time or to a message id (the consumers subscribe again)."""
    sub = _SUB

    @api_route(f"{sub}/resetcursor/{{timestamp:int}}", ["POST"], "Reset the cursor to a publish time (ms)")
    async def reset_by_time(request: Request) -> Response:
        timestamp = request.path_params["timestamp"]
        for topic_name, subscription in await _each(ctx, request):
            topic = await load(ctx, topic_name)
            found = await topic.find_by_publish_time(timestamp, BROKER_SEEK_SCAN_ENTRIES_COUNT_MAX)
            await subscription.reset(topic.log.last_position if found is None else before(found))
        return no_content()

    @api_route(f"{sub}/resetcursor", ["POST"], "Reset the cursor to a message id", body=MessageIdBody)
    async def reset_by_id(request: Request) -> Response:
        body = await read_body(request, MessageIdBody)
        assert body is not None
        for topic_name, subscription in await _each(ctx, request):
            if body.partition_index >= 0 and topic_name.partition_index not in (-1, body.partition_index):
                continue
            target = EARLIEST if body.ledger_id < 0 else before(Position(body.ledger_id, max(0, body.entry_id)))
            await subscription.reset(target)
        return no_content()

    return [reset_by_time, reset_by_id]


def _cutoff_ms(ctx: AdminContext, seconds: int) -> int:
    clock = ctx.service.clock
    if clock is None:
        raise AdminError(503, "the broker has no clock to expire by")
    if seconds < 0:
        raise AdminError(412, "expire time must be >= 0 seconds")
    return clock.now_ms() - seconds * 1000
