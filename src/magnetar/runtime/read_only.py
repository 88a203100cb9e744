"""The owner's position feed between processes (HTTP), and a read-only broker's generation parts.

Owner side: ``GET /read-only/v1/follow?topic=<full name>&after=<ledger>:<entry>`` on a broker's
HTTP port streams one line ``<ledger>:<entry>`` each time the topic's last confirmed position
grows (``managed_ledger.read_only.follow_managed_ledger``: coalesced, so a busy topic costs one
line per wake-up, not per entry). Only a topic *loaded here* is followed: a request for any other
topic is answered 404 at once and never loads (or takes ownership of) the topic, so a reader
cannot make an owner recover anything. The stream ends when the topic is unloaded or fenced.

Read-only side: ``HttpPositionFeed`` finds the owner of a topic in the metadata store (the
namespace's bundle boundaries, then the bundle's ownership node, as ``control.ownership`` writes
them) and follows its stream with one pooled HTTP connection per owner.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import quote

import aiohttp
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from magnetar.base.errors import InvalidArgumentError
from magnetar.base.limits import BROKER_TOPICS_LOADED_COUNT_MAX
from magnetar.base.types import Position, TopicName
from magnetar.broker.managed_log import ManagedTopicLog
from magnetar.broker.service import BrokerService
from magnetar.control.bundles import NamespaceBundles, local_policies_path
from magnetar.control.ownership import OwnerData, owner_path
from magnetar.managed_ledger.read_only import follow_managed_ledger
from magnetar.metadata.api import MetadataStore

log = logging.getLogger(__name__)

FOLLOW_PATH = "/read-only"
#: Bound on one follow request's connect (the stream itself is long-lived).
FOLLOW_CONNECT_TIMEOUT_S = 5.0


def _parse_position(text: str) -> Position:
    ledger, _, entry = text.partition(":")
    try:
        return Position(int(ledger), int(entry))
    except ValueError:
        raise InvalidArgumentError(f"bad position {text!r}: want <ledger>:<entry>") from None


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
            yield f"{ml.last_confirmed_entry.ledger_id}:{ml.last_confirmed_entry.entry_id}\n".encode()
            async for position in follow_managed_ledger(ml, after):
                yield f"{position.ledger_id}:{position.entry_id}\n".encode()

        return StreamingResponse(lines(), media_type="text/plain")

    return Starlette(routes=[Route("/v1/follow", follow)])


class HttpPositionFeed:
    """``PositionFeed`` over the owners' HTTP follow streams."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self._session: aiohttp.ClientSession | None = None
        self._owners: dict[str, str] = {}  # topic -> owner's service URL, as last found

    def owner_url(self, topic: str) -> str | None:
        return self._owners.get(topic)

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

    async def follow(self, topic: str, after: Position) -> AsyncIterator[Position]:
        owner = await self._owner(topic)
        if owner is None or not owner.http_url:
            return
        url = (f"{owner.http_url}{FOLLOW_PATH}/v1/follow?topic={quote(str(TopicName.parse(topic)), safe='')}"
               f"&after={after.ledger_id}:{after.entry_id}")
        async with self._client().get(url) as response:
            if response.status != 200:
                return
            async for line in response.content:
                text = line.decode().strip()
                if text:
                    yield _parse_position(text)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


async def close_quietly(feed: Any) -> None:
    try:
        await feed.close()
    except Exception:
        log.debug("closing the position feed failed", exc_info=True)
