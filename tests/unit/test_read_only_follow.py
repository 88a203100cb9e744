"""The owner's position feed endpoint (``runtime.read_only``): it answers only for topics loaded on
that broker and never loads one, so a read-only broker cannot make a broker take a topic."""

from __future__ import annotations

import asyncio
import json
import socket
from types import SimpleNamespace
from typing import Any

import pytest

from magnetar.base.errors import InvalidArgumentError
from magnetar.base.limits import READ_ONLY_FEED_BYTES_MAX
from magnetar.base.types import Position
from magnetar.managed_ledger.read_only import FeedUpdate
from magnetar.managed_ledger.read_only_cursors import LockRecord
from magnetar.runtime.read_only import HttpHolderProbe, build_follow_app, decode_header, encode_update


class NoTopics:
    """A service with no topic loaded that fails the test if anything tries to load one."""

    topics: dict[str, Any] = {}

    async def get_topic(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the follow endpoint must never load a topic")


async def call(app: Any, query: str, path: str = "/v1/follow") -> tuple[int, bytes]:
    scope = {"type": "http", "method": "GET", "path": path, "raw_path": path.encode(),
             "query_string": query.encode(), "headers": [], "http_version": "1.1", "scheme": "http",
             "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 1), "root_path": ""}
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, body


def test_a_topic_not_loaded_here_is_answered_404_without_loading_it() -> None:
    app = build_follow_app(lambda: NoTopics())  # type: ignore[arg-type, return-value]
    status, body = asyncio.run(call(app, "topic=persistent://public/default/t&after=3:4"))
    assert status == 404 and b"not served here" in body


def test_between_generations_the_feed_answers_404() -> None:
    app = build_follow_app(lambda: None)
    assert asyncio.run(call(app, "topic=persistent://public/default/t"))[0] == 404


def test_a_bad_position_or_topic_is_a_clear_400() -> None:
    app = build_follow_app(lambda: NoTopics())  # type: ignore[arg-type, return-value]
    status, body = asyncio.run(call(app, "topic=persistent://public/default/t&after=x"))
    assert status == 400 and b"bad position" in body
    assert asyncio.run(call(app, "topic=&after=1:1"))[0] == 400


def test_an_update_carries_the_fresh_entries_golden_bytes() -> None:
    update = FeedUpdate(Position(7, 12), 10, (b"ab", b"", b"xyz"))
    assert encode_update(update) == b"7:12 10 2,0,3\nabxyz"
    assert decode_header(b"7:12 10 2,0,3") == (Position(7, 12), 10, [2, 0, 3])
    assert encode_update(FeedUpdate(Position(7, 12))) == b"7:12\n"
    assert decode_header(b"7:12") == (Position(7, 12), 13, [])


@pytest.mark.parametrize("line", [b"7:12 10", b"7:12 11 2,0,3", b"7:12 10 a,b,c", b"7:12 12 -1",
                                  b"x:1", f"7:12 12 {READ_ONLY_FEED_BYTES_MAX + 1}".encode()])
def test_a_malformed_or_oversized_update_is_a_clear_error(line: bytes) -> None:
    with pytest.raises(InvalidArgumentError):
        decode_header(line)


class OneTopic:
    """A read-only broker's service with one topic loaded, serving subscription ``sub``."""

    def __init__(self) -> None:
        ledger = SimpleNamespace(serves=lambda name: name == "sub")
        self.topics = {"persistent://public/default/t": SimpleNamespace(log=SimpleNamespace(read_only_ledger=ledger))}


def test_the_holder_answers_whether_it_serves_a_subscription() -> None:
    app = build_follow_app(lambda: OneTopic())  # type: ignore[arg-type, return-value]
    for query, serves in (("subscription=sub", True), ("subscription=other", False)):
        status, body = asyncio.run(call(app, f"topic=persistent://public/default/t&{query}", "/v1/serves"))
        assert status == 200 and json.loads(body) == {"serves": serves}
    status, body = asyncio.run(call(app, "topic=persistent://public/default/u&subscription=sub", "/v1/serves"))
    assert json.loads(body) == {"serves": False}  # not loaded here: served by no one here


def test_a_holder_whose_port_refuses_is_gone_and_a_silent_one_may_still_serve() -> None:
    async def ask(http: str) -> bool:
        probe = HttpHolderProbe(timeout_s=0.2)
        try:
            return await probe.still_serves(LockRecord("pulsar://h:1", http), "persistent://public/default/t", "s")
        finally:
            await probe.close()

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        refused_port = closed.getsockname()[1]
    assert asyncio.run(ask(f"http://127.0.0.1:{refused_port}")) is False
    with socket.socket() as silent:  # listens (the kernel accepts) but never answers: paused
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        assert asyncio.run(ask(f"http://127.0.0.1:{silent.getsockname()[1]}")) is True
