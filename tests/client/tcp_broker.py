"""The fake broker on a real loopback socket, on its own event loop in a background thread.

For tests whose other side blocks the calling thread (the official client, the CLI's
``asyncio.run``). ``start()`` returns once the port is bound; ``stop()`` ends the loop and joins
the thread (bounded).
"""

from __future__ import annotations

import asyncio
import threading

from magnetar.runtime import TcpNetwork
from tests.client.fake_broker import FakeBroker

STOP_TIMEOUT_S = 10


class ThreadedBroker:
    def __init__(self, **knobs: object) -> None:
        self._knobs = knobs
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fake-broker", daemon=True)
        self.broker: FakeBroker | None = None

    def start(self) -> FakeBroker:
        self._thread.start()
        broker = FakeBroker(TcpNetwork(), **self._knobs)  # type: ignore[arg-type]
        future = asyncio.run_coroutine_threadsafe(broker.start(), self._loop)
        self.broker = future.result(timeout=STOP_TIMEOUT_S)
        return self.broker

    def call(self, fn, *args):  # type: ignore[no-untyped-def]
        """Run ``fn(*args)`` on the broker's loop and return its result."""

        async def run():  # type: ignore[no-untyped-def]
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=STOP_TIMEOUT_S)

    def stop(self) -> None:
        if self.broker is not None:
            self.call(self.broker.stop)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=STOP_TIMEOUT_S)
        if not self._thread.is_alive():
            self._loop.close()
