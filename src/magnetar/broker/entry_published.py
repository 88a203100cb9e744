"""The log's callback for one entry a topic publishes (``Topic.start_publish_run``).

``Topic.entry_published`` with the entry's size, message count and start time, and the caller's
callback, as a plain class: compiled, one native object and a native call per entry, where a
``functools.partial`` of the bound method was a generic call that copied its six arguments
(docs/performance.md, session 16).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.base.types import Position

if TYPE_CHECKING:
    from magnetar.broker.topic import PublishCallback, Topic


class EntryPublished:
    __slots__ = ("messages", "on_done", "size", "started_ns", "topic")

    def __init__(self, topic: Topic, size: int, messages: int, started_ns: int, on_done: PublishCallback) -> None:
        self.topic = topic
        self.size = size
        self.messages = messages
        self.started_ns = started_ns
        self.on_done = on_done

    def __call__(self, position: Position | None, error: BaseException | None) -> None:
        self.topic.entry_published(self.size, self.messages, self.started_ns, self.on_done, position, error)
