"""Requests of one connection answered from their own task, so the connection keeps reading.

Creating a producer or a consumer waits on metadata (the topic's managed ledger and ledger
created, deduplication recovered, a schema stored: several group-committed writes); lookups read
it. Handled in line, one such request held up every later command of its connection: PINGs went
unanswered (the keep-alive closed connections queueing creations) and a connection created one
topic at a time. Pulsar's ``ServerCnx`` answers them asynchronously and keeps reading; so does
``Session`` with this table (``broker/session.py``).

Contract (the ordering Pulsar gives, and only that):

* Requests of one connection may be answered out of order (each answer carries its request id).
* A producer (consumer) id is ``pending`` from its PRODUCER (SUBSCRIBE) until answered: a SEND
  for it meanwhile is a SEND for an unknown producer (the client sends none before
  PRODUCER_SUCCESS); a second PRODUCER with that id is refused with ServiceNotReady, as Java's
  broker does ("Producer is already present on the connection").
* CLOSE_PRODUCER (CLOSE_CONSUMER) for a pending id is answered SUCCESS at once and the creation
  is *abandoned*: it runs to its end and then does not attach the producer (consumer) and sends
  no answer (Java completes the creation future exceptionally; same effect). A closed connection
  abandons every pending creation. Nothing is cancelled mid-way: a creation waits on metadata
  writes and recoveries shared with other callers, which must not be interrupted half done.
* At most ``BROKER_REQUESTS_IN_FLIGHT_PER_CONNECTION_COUNT_MAX`` run at once; at the bound the
  connection stops reading (``room``) until one is answered, like the SEND bound.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from magnetar.base.limits import BROKER_REQUESTS_IN_FLIGHT_PER_CONNECTION_COUNT_MAX

log = logging.getLogger(__name__)


class InFlightRequests:
    """The concurrent requests of one connection and the handle ids they are creating."""

    __slots__ = ("_room", "_tasks", "consumers", "producers")

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()
        self._room: asyncio.Event | None = None  # made at the bound only
        #: Producer (consumer) id -> request id of its pending creation.
        self.producers: dict[int, int] = {}
        self.consumers: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._tasks)

    def pending_handles(self) -> int:
        return len(self.producers) + len(self.consumers)

    async def room(self) -> None:
        """Returns once another request may start (at once below the bound)."""
        while len(self._tasks) >= BROKER_REQUESTS_IN_FLIGHT_PER_CONNECTION_COUNT_MAX:
            if self._room is None:
                self._room = asyncio.Event()
            self._room.clear()
            await self._room.wait()

    def start(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` (which answers its request itself, errors included) from its own task."""
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:  # the work answers its own errors
            log.error("request task failed", exc_info=error)
        if self._room is not None and len(self._tasks) < BROKER_REQUESTS_IN_FLIGHT_PER_CONNECTION_COUNT_MAX:
            self._room.set()

    def claimed(self, table: dict[int, int], handle_id: int, request_id: int) -> bool:
        """Whether the creation of ``handle_id`` by ``request_id`` is still wanted (not closed by
        the client, nor its connection)."""
        return table.get(handle_id) == request_id

    def release(self, table: dict[int, int], handle_id: int, request_id: int) -> None:
        """The creation of ``handle_id`` by ``request_id`` ended (attached, failed or abandoned)."""
        if table.get(handle_id) == request_id:
            del table[handle_id]

    def abandon_all(self) -> None:
        """The connection closed: every pending creation is abandoned."""
        self.producers.clear()
        self.consumers.clear()
        if self._room is not None:
            self._room.set()

    async def settled(self) -> None:
        """Returns once every request started so far (and any they started) has been answered."""
        while self._tasks:
            await asyncio.wait(set(self._tasks))
