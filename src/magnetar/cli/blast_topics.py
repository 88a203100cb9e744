"""A raw-protocol load generator for many topics: many producers share one connection (issue 22).

``--blast`` (``blast.py``) drives one producer per connection. Driving 100,000 topics through
the official client would need 100,000 client producers in the generator (each with its own
queues and timers): the generator, not the broker, would be measured. Here one connection holds
up to ``BLAST_PRODUCERS_PER_CONNECTION_COUNT_MAX`` producers (one PRODUCER command per topic,
distinct producer ids, pipelined up to a window of outstanding requests) and every SEND frame is
a copy of one pre-encoded template with its producer id and sequence id patched in
(``SendTemplate``), so a message costs the generator the same few microseconds whatever the
number of topics.

Layout used by ``bench/topic_scale_100k.py``: ``connections`` connections; every connection has a
producer on topic 0 (so the 1-topic load goes through the same connections as the N-topic load),
and topic ``i >= 1`` gets its producer on connection ``i % connections``. ``send_load`` spreads
SEND frames round-robin over the producers of the first ``topics`` topics on every connection,
with at most ``window`` frames awaiting their receipt over all connections.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from magnetar.base.limits import BROKER_HANDLES_PER_CONNECTION_COUNT_MAX
from magnetar.cli.blast import SendTemplate
from magnetar.protocol.pulsar.client_connection import ClientConfig, connect_command
from magnetar.protocol.pulsar.frames import FrameDecoder, encode_command, type_name
from magnetar.protocol.pulsar.generated import pulsar_api_pb2 as pb

T = pb.BaseCommand
#: The broker's own bound on handles per connection.
BLAST_PRODUCERS_PER_CONNECTION_COUNT_MAX = BROKER_HANDLES_PER_CONNECTION_COUNT_MAX
#: PRODUCER commands awaiting their answer on one connection while producers are created. The
#: broker answers them concurrently (``broker/requests.py``) and keeps reading the connection
#: meanwhile, so creations overlap and share the metadata store's group commits; before that
#: (issue 22, session 9) it handled them one at a time, and a queue of them kept PONGs unread past
#: the keep-alive.
BLAST_PRODUCER_REQUESTS_WINDOW_COUNT = 16
_READ_BYTES = 262144
_RUN_FRAMES_MAX = 64


class BlastError(Exception):
    """The broker refused a producer or a message, or closed the connection."""


@dataclass
class _Link:
    """One connection and the producers it holds: ``topics[k]`` is producer id ``k``'s topic index.

    A reader task (``start_reading``) reads all the time: it answers PINGs at once (the broker's
    keep-alive closes a connection that answers nothing for 60 s, and a connection whose share
    of a step is done waits for the others) and queues the other commands for ``frames``."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    decoder: FrameDecoder = field(default_factory=FrameDecoder)
    topics: list[int] = field(default_factory=list)
    sent_frames: int = 0
    acked_frames: int = 0
    failed_frames: int = 0
    inbox: list[pb.BaseCommand] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    closed: bool = False
    task: asyncio.Task[None] | None = None

    def start_reading(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        try:
            while True:
                data = await self.reader.read(_READ_BYTES)
                if not data:
                    return
                self.decoder.feed(data)
                while (frame := self.decoder.next_frame()) is not None:
                    if frame.command.type == T.PING:
                        self.writer.write(encode_command(T(type=T.PONG, pong=pb.CommandPong())))
                    else:
                        self.inbox.append(frame.command)
                if self.inbox:
                    self.arrived.set()
        except (ConnectionError, OSError):
            return
        finally:
            self.closed = True
            self.arrived.set()

    async def frames(self) -> list[pb.BaseCommand]:
        """The next commands the broker sent (at least one)."""
        while not self.inbox:
            if self.closed:
                raise BlastError("the broker closed the connection")
            self.arrived.clear()
            await self.arrived.wait()
        out, self.inbox = self.inbox, []
        return out

    def outstanding(self) -> int:
        return self.sent_frames - self.acked_frames - self.failed_frames


class TopicsBlaster:
    """``connections`` connections holding producers on topics ``prefix-0 .. prefix-(n-1)``."""

    def __init__(self, host: str, port: int, prefix: str, *, connections: int, producer_name: str,
                 requests_window: int = BLAST_PRODUCER_REQUESTS_WINDOW_COUNT) -> None:
        if not 1 <= connections <= 256 or requests_window < 1:
            raise ValueError("connections must be 1-256 and the requests window >= 1")
        self.requests_window = requests_window
        self.host, self.port, self.prefix, self.producer_name = host, port, prefix, producer_name
        self.connections_count = connections
        self.links: list[_Link] = []
        self.topics_count = 0

    async def connect(self) -> None:
        for _ in range(self.connections_count):
            reader, writer = await asyncio.open_connection(self.host, self.port)
            link = _Link(reader, writer)
            link.start_reading()
            writer.write(encode_command(connect_command(ClientConfig())))
            await self._expect_connected(link)
            self.links.append(link)

    async def _expect_connected(self, link: _Link) -> None:
        for command in await link.frames():
            if command.type == T.CONNECTED:
                return
            raise BlastError(f"broker answered {type_name(command.type)} to CONNECT")

    def close(self) -> None:
        for link in self.links:
            link.writer.close()
            if link.task is not None:
                link.task.cancel()

    async def add_topics(self, count: int) -> None:
        """Create producers so that topics ``0 .. count-1`` all have theirs (topic 0: one per connection)."""
        plan: list[list[int]] = [[] for _ in self.links]
        for index in range(self.topics_count, count):
            targets = range(len(self.links)) if index == 0 else [index % len(self.links)]
            for c in targets:
                plan[c].append(index)
        for c, indexes in enumerate(plan):
            if len(self.links[c].topics) + len(indexes) > BLAST_PRODUCERS_PER_CONNECTION_COUNT_MAX:
                raise ValueError(f"more than {BLAST_PRODUCERS_PER_CONNECTION_COUNT_MAX} producers on one connection")
        await asyncio.gather(*(self._open_producers(link, indexes) for link, indexes in zip(self.links, plan, strict=True)))
        self.topics_count = max(self.topics_count, count)

    async def _open_producers(self, link: _Link, indexes: Sequence[int]) -> None:
        waiting: set[int] = set()
        position = 0
        while position < len(indexes) or waiting:
            while position < len(indexes) and len(waiting) < self.requests_window:
                producer_id = len(link.topics)
                link.topics.append(indexes[position])
                waiting.add(producer_id)
                link.writer.write(encode_command(T(type=T.PRODUCER, producer=pb.CommandProducer(
                    topic=f"{self.prefix}-{indexes[position]}", producer_id=producer_id, request_id=producer_id,
                    producer_name=self.link_producer_name(link)))))
                position += 1
            for command in await link.frames():
                if command.type == T.PRODUCER_SUCCESS:
                    waiting.discard(command.producer_success.request_id)
                elif command.type == T.ERROR:
                    raise BlastError(f"PRODUCER refused: {command.error.message}")

    def link_producer_name(self, link: _Link) -> str:
        """Producer names are unique per topic: topic 0 has one producer per connection."""
        return f"{self.producer_name}-{self.links.index(link)}"

    def templates(self, payload: bytes, *, batch_count: int = 1) -> list[SendTemplate]:
        """One SEND template per connection (its producers' name), for ``send_load``."""
        return [SendTemplate(0, self.link_producer_name(link), payload, batch_count=batch_count) for link in self.links]

    async def send_load(self, templates: Sequence[SendTemplate], topics: int, *, window: int, seconds: float | None,
                        frames_per_producer: int | None = None, first: int = 0) -> float:
        """SEND frames round-robin over the producers of topics ``first .. topics-1``, at most
        ``window`` outstanding in all, for ``seconds`` or ``frames_per_producer`` frames each; waits
        for every receipt. Returns the elapsed seconds (first send to last receipt)."""
        if not 0 <= first < topics <= self.topics_count or window < len(self.links):
            raise ValueError("topics must be created first and the window hold a frame per connection")
        started = time.perf_counter()
        deadline = None if seconds is None else started + seconds
        share = window // len(self.links)
        await asyncio.gather(*(self._drive(link, template, range(first, topics), share, deadline, frames_per_producer)
                               for link, template in zip(self.links, templates, strict=True)))
        return time.perf_counter() - started

    async def _drive(self, link: _Link, template: SendTemplate, topics: range, window: int,
                     deadline: float | None, frames_per_producer: int | None) -> None:
        producers = [pid for pid, index in enumerate(link.topics) if topics.start <= index < topics.stop]
        if not producers:
            return
        budget = None if frames_per_producer is None else frames_per_producer * len(producers)
        sent_here = 0
        turn = 0
        while True:
            more = (budget is None or sent_here < budget) and (deadline is None or time.perf_counter() < deadline)
            if not more and link.outstanding() <= 0:
                return
            free = window - link.outstanding() if more else 0
            if free > 0:
                count = min(free, _RUN_FRAMES_MAX) if budget is None else min(free, _RUN_FRAMES_MAX, budget - sent_here)
                run = []
                for _ in range(count):
                    run.append(template.frame(link.sent_frames, producers[turn]))
                    link.sent_frames += 1
                    turn = turn + 1 if turn + 1 < len(producers) else 0
                sent_here += count
                link.writer.writelines(run)
                await link.writer.drain()
                if link.outstanding() < window and (budget is None or sent_here < budget):
                    continue
            self._count_receipts(link, await link.frames())

    @staticmethod
    def _count_receipts(link: _Link, commands: list[pb.BaseCommand]) -> None:
        for command in commands:
            if command.type == T.SEND_RECEIPT:
                link.acked_frames += 1
            elif command.type == T.SEND_ERROR:
                link.failed_frames += 1
            elif command.type == T.CLOSE_PRODUCER:
                raise BlastError("the broker closed a producer")

    def totals(self) -> tuple[int, int]:
        """(acknowledged, failed) frames over all connections so far."""
        return sum(link.acked_frames for link in self.links), sum(link.failed_frames for link in self.links)
