"""Topic requests sent to a broker that does not own the topic's bundle: 307 to the owner.

As Pulsar does (``validateTopicOwnership``): a request for one topic
(``/{persistent|non-persistent}/{tenant}/{namespace}/{topic}[/...]``) reaching a cluster broker
that does not serve the topic's bundle is looked up (authoritatively: a bundle nobody owns is
taken here and the request served); when another broker owns the bundle, the answer is
``307 Temporary Redirect`` to the same path and query on the owner's HTTP URL. A 307 keeps the
method and the body, so a client re-sends the request as it was.

Not redirected: a broker without bundle ownership (standalone); the namespace-level lists; a
partitioned topic's own name (its partitions live in different bundles, the metadata anywhere);
a lookup that cannot be decided now (the route then answers as before, 503 while ownership is
unknown).
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from starlette.responses import RedirectResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from magnetar.admin.common import AdminContext
from magnetar.base.errors import InvalidArgumentError
from magnetar.base.types import TopicName
from magnetar.broker.errors import BrokerError
from magnetar.catalog.lookup import LookupKind
from magnetar.control.ownership import OwnershipLookup

_TOPIC_PATH = re.compile(r"^/(?P<domain>persistent|non-persistent)/(?P<tenant>[^/]+)/(?P<namespace>[^/]+)"
                         r"/(?P<topic>[^/]+)(?P<rest>/.*)?$")
#: Suffixes answered for a partitioned topic as a whole, by any broker.
_ANY_BROKER = frozenset({"/partitions", "/partitioned-stats", "/partitioned-internalStats"})


class OwnerRedirect:
    """ASGI middleware in front of the admin routes."""

    def __init__(self, app: ASGIApp, ctx: AdminContext) -> None:
        self.app = app
        self.ctx = ctx

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            target = await self._owner_url(scope)
            if target is not None:
                await RedirectResponse(target, status_code=307)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    async def _owner_url(self, scope: Scope) -> str | None:
        lookup = self.ctx.service.lookup
        if not isinstance(lookup, OwnershipLookup):
            return None
        path: str = scope["path"]
        root: str = scope.get("root_path", "")
        local = path[len(root):] if root and path.startswith(root) else path
        match = _TOPIC_PATH.match(local)
        if match is None or match["rest"] in _ANY_BROKER or (match["topic"] == "partitioned" and not match["rest"]):
            return None
        try:
            topic = TopicName.parse(f"{match['domain']}://{match['tenant']}/{match['namespace']}/"
                                    f"{unquote(match['topic'])}")
        except InvalidArgumentError:
            return None  # the route answers the bad name
        ownership = lookup.ownership
        if ownership.serves(topic):
            return None
        try:
            if not topic.is_partition and await self.ctx.service.partitioned.partitions(topic) > 0:
                return None
            answer = await lookup.lookup(topic, authoritative=True)
            if answer.kind is not LookupKind.REDIRECT:
                return None  # taken here: served by this broker
            bundle = (await ownership.bundles_of(topic.namespace)).find(topic)
            found = await ownership.owner_of(topic.namespace, bundle)
        except BrokerError:
            return None
        if found is None or not found[0].http_url:
            return None
        query = scope.get("query_string", b"").decode("latin-1")
        return f"{found[0].http_url.rstrip('/')}{path}" + (f"?{query}" if query else "")
