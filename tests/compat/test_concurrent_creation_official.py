"""The official client creates producers and consumers on one connection while another creation
waits on metadata (broker/requests.py): Pulsar answers them concurrently, so must we.

One ``pulsar.Client`` (one connection to the broker) creates a producer on a topic whose load a
topic-load hook holds, from a thread; meanwhile the same client creates a producer and a consumer
on other topics and publishes and receives. Then the gate opens and the first producer works too.
Handled in line (as before), the second creation would wait behind the first one and its
``create_producer`` would time out (the operation timeout is shorter than the hold).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from magnetar.broker.topic import Topic
from tests.compat.harness import BrokerThread

_BOUND_S = 20.0


def test_one_connection_keeps_creating_while_a_creation_waits(broker: BrokerThread, client: Any) -> None:
    opened = asyncio.Event()
    held: list[str] = []

    async def hold(topic: Topic) -> None:
        if topic.name.local_name.startswith("held-"):
            held.append(topic.name.local_name)
            await opened.wait()

    async def install() -> None:
        assert broker.server is not None
        broker.server.service.topic_load_hooks.append(hold)

    broker.call(install())
    created: list[Any] = []
    failures: list[BaseException] = []

    def create_held() -> None:
        try:
            created.append(client.create_producer("persistent://public/default/held-1"))
        except BaseException as error:  # reported by the assertion below
            failures.append(error)

    thread = threading.Thread(target=create_held, daemon=True)
    thread.start()
    try:
        # the held creation is pending on the broker before the others start
        waited = 0
        while not held and waited < 200:
            thread.join(0.05)  # the client thread works meanwhile; bounded
            waited += 1
        assert held == ["held-1"]
        producer = client.create_producer("persistent://public/default/free-1")
        consumer = client.subscribe("persistent://public/default/free-1", "s")
        producer.send(b"while another creation waits")
        assert consumer.receive(timeout_millis=int(_BOUND_S * 1000)).data() == b"while another creation waits"
        assert not created and thread.is_alive()  # the first creation is still waiting
    finally:
        broker.loop.call_soon_threadsafe(opened.set)
        thread.join(_BOUND_S)
    assert not failures and len(created) == 1
    created[0].send(b"after the gate opened")
