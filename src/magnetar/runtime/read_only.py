"""The owner's position feed between processes (HTTP), and a read-only broker's generation parts.

Owner side: ``GET /read-only/v1/follow?topic=<full name>&after=<ledger>:<entry>`` on a broker's
HTTP port streams one update each time the topic's last confirmed position grows
(``managed_ledger.read_only.follow_managed_ledger``: coalesced, so a busy topic costs one update
per wake-up, not per entry). An update is a line ``<ledger>:<entry>`` (nothing more is known), or
``<ledger>:<entry> <first> <size>,<size>,...`` followed by those entries' bytes back to back:
entries ``<first>..<entry>`` of the ledger, the fresh ones the owner still caches
(``READ_ONLY_FEED_*_MAX`` bound them), so the read-only broker dispatches them without reading
them back from the bookies. Only a topic *loaded here* is followed: a request for any other
topic is answered 404 at once and never loads (or takes ownership of) the topic, so a reader
cannot make an owner recover anything. The stream ends when the topic is unloaded or fenced.

Read-only side: ``HttpPositionFeed`` finds the owner of a topic in the metadata store (the
namespace's bundle boundaries, then the bundle's ownership node, as ``control.ownership`` writes
them) and follows its stream with one pooled HTTP connection per owner.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import quote

import aiohttp
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from magnetar.base.errors import InvalidArgumentError
from magnetar.base.limits import (
    BROKER_TOPICS_LOADED_COUNT_MAX,
    READ_ONLY_FEED_BYTES_MAX,
    READ_ONLY_FEED_ENTRIES_COUNT_MAX,
)
from magnetar.base.types import Position, TopicName
from magnetar.broker.managed_log import ManagedTopicLog
from magnetar.broker.service import BrokerService
from magnetar.control.bundles import NamespaceBundles, local_policies_path
from magnetar.control.ownership import OwnerData, owner_path
from magnetar.managed_ledger.read_only import FeedUpdate, follow_managed_ledger
from magnetar.managed_ledger.read_only_cursors import LockRecord
from magnetar.metadata.api import MetadataStore

log = logging.getLogger(__name__)

FOLLOW_PATH = "/read-only"
#: Bound on one follow request's connect (the stream itself is long-lived).
FOLLOW_CONNECT_TIMEOUT_S = 5.0
#: Bound on asking a subscription's holder whether it still serves it (no answer: it may).
HOLDER_PROBE_TIMEOUT_S = 2.0


def _parse_position(text: str) -> Position:
    ledger, _, entry = text.partition(":")
    try:
        return Position(int(ledger), int(entry))
    except ValueError:
        raise InvalidArgumentError(f"bad position {text!r}: want <ledger>:<entry>") from None


def encode_update(update: FeedUpdate) -> bytes:
    """One update of the follow stream (see the module docstring)."""
    position = update.position
    if not update.payloads:
        return f"{position.ledger_id}:{position.entry_id}\n".encode()
    sizes = ",".join(map(str, map(len, update.payloads)))
    header = f"{position.ledger_id}:{position.entry_id} {update.first_entry_id} {sizes}\n".encode()
    return header + b"".join(update.payloads)


def decode_header(line: bytes) -> tuple[Position, int, list[int]]:
    """An update's line: its position, and the first entry id and sizes of the entries that follow."""
    parts = line.decode("ascii", "replace").split()
    if len(parts) not in (1, 3):
        raise InvalidArgumentError(f"bad follow update {line[:80]!r}")
    position = _parse_position(parts[0])
    if len(parts) == 1:
        return position, position.entry_id + 1, []
    try:
        first, sizes = int(parts[1]), [int(size) for size in parts[2].split(",")]
    except ValueError:
        raise InvalidArgumentError(f"bad follow update {line[:80]!r}") from None
    if (first + len(sizes) - 1 != position.entry_id or len(sizes) > READ_ONLY_FEED_ENTRIES_COUNT_MAX
            or min(sizes) < 0 or sum(sizes) > READ_ONLY_FEED_BYTES_MAX):
        raise InvalidArgumentError(f"follow update {line[:80]!r} is out of bounds")
    return position, first, sizes


def build_follow_app(service: Callable[[], BrokerService | None]) -> Starlette:
    """The owner's feed endpoint over whichever service is current (None between generations)."""

    async def follow(request: Request) -> Response:
        topic = request.query_params.get("topic", "")
        try:
            after = _parse_position(request.query_params.get("after", "-1:-1"))
            name = str(TopicName.parse(topic))
        except InvalidArgumentError as error:
            return PlainTextResponse(str(error), status_code=400)
        current = service()
        loaded = current.topics.get(name) if current is not None else None
        if loaded is None or not isinstance(loaded.log, ManagedTopicLog):
            return PlainTextResponse(f"{name} is not served here", status_code=404)
        ml = loaded.log.managed_ledger

        async def lines() -> AsyncIterator[bytes]:
            yield encode_update(FeedUpdate(ml.last_confirmed_entry))
            async for update in follow_managed_ledger(ml, after):
                yield encode_update(update)

        return StreamingResponse(lines(), media_type="text/plain")

    async def serves(request: Request) -> Response:
        # Asked by a read-only broker about to take a subscription's lock over from this one.
        try:
            name = str(TopicName.parse(request.query_params.get("topic", "")))
        except InvalidArgumentError as error:
            return PlainTextResponse(str(error), status_code=400)
        subscription = request.query_params.get("subscription", "")
        current = service()
        loaded = current.topics.get(name) if current is not None else None
        ledger = getattr(loaded.log, "read_only_ledger", None) if loaded is not None else None
        held = ledger is not None and ledger.serves(subscription)
        return JSONResponse({"serves": held})

    return Starlette(routes=[Route("/v1/follow", follow), Route("/v1/serves", serves)])


class HttpPositionFeed:
    """``PositionFeed`` over the owners' HTTP follow streams."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self._session: aiohttp.ClientSession | None = None
        self._owners: dict[str, str] = {}  # topic -> owner's service URL, as last found

    def owner_url(self, topic: str) -> str | None:
        return self._owners.get(topic)

    async def find_owner_url(self, topic: str) -> str | None:
        data = await self._owner(topic)
        return data.native_url if data is not None else None

    async def _owner(self, topic: str) -> OwnerData | None:
        name = TopicName.parse(topic)
        found = await self._store.get(local_policies_path(name.namespace))
        if found is None:
            return None
        bundle = NamespaceBundles.decode(name.namespace, found.value).find(name)
        owner = await self._store.get(owner_path(name.namespace, bundle))
        if owner is None:
            return None
        data = OwnerData.decode(owner.value)
        self._owners[topic] = data.native_url
        return data

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # One long-lived stream per loaded topic: the pool must hold as many (aiohttp's default
            # of 100 would leave the 101st topic without notifications).
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=BROKER_TOPICS_LOADED_COUNT_MAX, limit_per_host=0),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=FOLLOW_CONNECT_TIMEOUT_S))
        return self._session

    async def follow(self, topic: str, after: Position) -> AsyncIterator[FeedUpdate]:
        owner = await self._owner(topic)
        if owner is None or not owner.http_url:
            return
        url = (f"{owner.http_url}{FOLLOW_PATH}/v1/follow?topic={quote(str(TopicName.parse(topic)), safe='')}"
               f"&after={after.ledger_id}:{after.entry_id}")
        async with self._client().get(url) as response:
            if response.status != 200:
                return
            content = response.content
            while True:
                line = await content.readline()
                if not line:
                    return
                if not line.strip():
                    continue
                position, first, sizes = decode_header(line.strip())
                if not sizes:
                    yield FeedUpdate(position, first)
                    continue
                try:
                    blob = await content.readexactly(sum(sizes))
                except asyncio.IncompleteReadError:
                    return  # the owner went away mid-update: what it sent whole stands
                payloads, offset = [], 0
                for size in sizes:
                    payloads.append(blob[offset:offset + size])
                    offset += size
                yield FeedUpdate(position, first, tuple(payloads))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class HttpHolderProbe:
    """``HolderProbe`` over the holder's HTTP port: ``GET /read-only/v1/serves``.

    Safe to act on only what proves the holder does not serve the subscription: a refused
    connection (nothing listens on its port: the process is gone, as after kill -9) or its own
    answer ``{"serves": false}`` (it restarted, so the lock is a previous life's). A paused or
    partitioned holder gives no answer within ``HOLDER_PROBE_TIMEOUT_S``: that counts as serving,
    and the lock waits for the holder's metadata session to expire."""

    def __init__(self, timeout_s: float = HOLDER_PROBE_TIMEOUT_S) -> None:
        self._timeout_s = timeout_s
        self._session: aiohttp.ClientSession | None = None

    async def still_serves(self, lock: LockRecord, topic: str, subscription: str) -> bool:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self._timeout_s))
        url = (f"{lock.http}{FOLLOW_PATH}/v1/serves?topic={quote(topic, safe='')}"
               f"&subscription={quote(subscription, safe='')}")
        try:
            async with self._session.get(url) as response:
                if response.status != 200:
                    return True
                return bool((await response.json()).get("serves", True))
        except aiohttp.ClientConnectorError as error:
            return not isinstance(error.os_error, ConnectionRefusedError)
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return True

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


async def close_quietly(feed: Any) -> None:
    try:
        await feed.close()
    except Exception:
        log.debug("closing the position feed failed", exc_info=True)
