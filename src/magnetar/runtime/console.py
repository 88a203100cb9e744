"""The web console in a running broker: its app, its rate sampler and its questions to bookies.

``start_console`` builds the console app (``admin.console``) over the broker's admin context and
starts one task that samples the loaded topics' counters every ``sample_interval_ms`` into the
bounded ``RateHistory``; ``stop()`` ends the task. Bookie disk figures come from each bookie's own
answer to GET_INFO over the bookie protocol (one short connection per bookie and request, bounded
by ``CONSOLE_BOOKIE_INFO_TIMEOUT_S``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette

from magnetar.admin import AdminContext
from magnetar.admin.console import ConsoleContext, RateHistory, build_console_app, sample_now
from magnetar.base.limits import LEDGER_DIRECTORY_BOOKIES_COUNT_MAX
from magnetar.base.types import BookieId
from magnetar.ledger.bookie_client import BookieClient
from magnetar.runtime.clock import SystemClock
from magnetar.runtime.network import TcpNetwork

log = logging.getLogger(__name__)

#: How often the console samples rates by default (the graphs' resolution).
CONSOLE_SAMPLE_INTERVAL_MS = 2000
#: One bookie's GET_INFO answer, connection included.
CONSOLE_BOOKIE_INFO_TIMEOUT_S = 3.0


#: A bookie's answer is reused for this long (every open overview page asks every 2 s).
CONSOLE_BOOKIE_INFO_FRESH_S = 5.0


class BookieInfoCache:
    """``bookie_info`` answers kept ``CONSOLE_BOOKIE_INFO_FRESH_S``; at most
    ``LEDGER_DIRECTORY_BOOKIES_COUNT_MAX`` bookies (the most the directory lists)."""

    def __init__(self) -> None:
        self._clock = SystemClock()
        self._answers: dict[BookieId, tuple[float, dict[str, Any]]] = {}

    async def __call__(self, bookie: BookieId) -> dict[str, Any]:
        now_s = self._clock.monotonic_ns() / 1e9
        found = self._answers.get(bookie)
        if found is not None and now_s - found[0] < CONSOLE_BOOKIE_INFO_FRESH_S:
            return found[1]
        info = await bookie_info(bookie)
        if len(self._answers) >= LEDGER_DIRECTORY_BOOKIES_COUNT_MAX:
            self._answers.clear()
        self._answers[bookie] = (now_s, info)
        return info


async def bookie_info(bookie: BookieId) -> dict[str, Any]:
    """The bookie's own GET_INFO answer: free disk bytes, ledgers, read-only."""
    clock = SystemClock()
    async with asyncio.timeout(CONSOLE_BOOKIE_INFO_TIMEOUT_S):
        client = await BookieClient.connect(TcpNetwork(), bookie.host, bookie.port, clock)
        try:
            info = await client.get_info(timeout_ms=int(CONSOLE_BOOKIE_INFO_TIMEOUT_S * 1000))
        finally:
            await client.close()
    return {"freeBytes": info.free_bytes, "ledgers": info.ledger_count, "readOnly": info.read_only}


@dataclass
class RunningConsole:
    app: Starlette
    context: ConsoleContext
    task: asyncio.Task[None]

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


async def _sample_loop(context: ConsoleContext) -> None:
    clock = SystemClock()
    while True:
        try:
            sample_now(context, clock.now_ms())
        except Exception:  # a topic closing mid-sample: the next sample is whole again
            log.exception("console rate sample failed")
        await asyncio.sleep(context.sample_interval_ms / 1000)


def start_console(admin: AdminContext, *, metadata_url: str = "", http_url: str = "",
                  sample_interval_ms: int = CONSOLE_SAMPLE_INTERVAL_MS) -> RunningConsole:
    context = ConsoleContext(admin, RateHistory(), metadata_url=metadata_url, http_url=http_url,
                             bookie_info=BookieInfoCache(), sample_interval_ms=sample_interval_ms)
    task = asyncio.get_running_loop().create_task(_sample_loop(context), name="console-sampler")
    return RunningConsole(build_console_app(context), context, task)
