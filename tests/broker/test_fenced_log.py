"""A topic whose log is fenced under it while its broker still owns it is loaded again.

Found by the cluster soak (seeds 1092, 5664, 6423 of ``magnetar sim --scenario cluster``):
AutoRecovery fenced and closed the open ledger of a topic whose bookie had gone (as BookKeeper's
replication worker does after its grace period), while the broker serving the topic kept owning
its bundle. The managed ledger went FENCED for good, and the topic kept answering every resend
of the deduplicating producer with ServiceNotReady ("topic is being unloaded"), for ever: the
client looked the topic up again, found the same broker, and the same fenced log. The producer
never finished.

Here the same thing on the simulated world with the real bookie and broker nodes and our client:
a producer sends, a ledger client of its own opens the topic's current ledger with recovery (it
fences it, as AutoRecovery does), and the producer's next sends must be stored within a bounded
virtual time, once each, in order, after the first ones. A negative control runs the same with
the topic's reload switched off and shows the producer stuck.
"""

from __future__ import annotations

import asyncio

import pytest

from magnetar.broker.service import BrokerService
from magnetar.client import ClientOptions, MessageId, ProducerConfig, PulsarClient
from magnetar.node.ledger import close_ledger_manager, open_ledger_manager
from magnetar.sim import NodeContext
from magnetar.sim.scenarios import cluster
from magnetar.sim.scenarios.cluster_faults import start_servers, until
from magnetar.sim.world import NodeState

TOPIC = "persistent://public/default/fenced"
OPTIONS = ClientOptions(operation_timeout_ms=3_000, connection_timeout_ms=1_000, keep_alive_interval_ms=1_000)
SMALL = cluster.ClusterOptions(bookies_count=3, brokers_count=1, quorum=(2, 2, 2))
SEND_WITHIN_S = 30.0  # virtual seconds a send may take after the fence


def _run(seed: int) -> tuple[list[MessageId], list[str]]:
    """Send 3, fence the current ledger from outside, send 3 more; read everything back.
    Raises TimeoutError (virtual time) when a send after the fence never completes."""
    world = cluster.new_world(seed)
    run = cluster.ClusterRun.new(world, SMALL)
    results: list[tuple[list[MessageId], list[str]]] = []
    errors: list[BaseException] = []

    async def fence(ctx: NodeContext, ledger_id: int) -> None:
        store = await run.connect(ctx)
        manager = await open_ledger_manager(store, network=ctx.network, clock=ctx.clock, rng=ctx.rng,
                                            config=cluster.LEDGER_CONFIG)
        try:
            await manager.recover_ledger(ledger_id)  # what AutoRecovery does to an open ledger that lost a bookie
        finally:
            await close_ledger_manager(manager)

    async def client_main(ctx: NodeContext) -> None:
        client = PulsarClient(("broker0", cluster.BROKER_PORT), network=ctx.network, clock=ctx.clock,
                              rng=ctx.rng, options=OPTIONS)
        try:
            producer = await client.create_producer(TOPIC, ProducerConfig(producer_name="p", send_timeout_ms=0))
            ids = [await producer.send(f"v{seq}".encode(), sequence_id=seq) for seq in range(3)]
            await fence(ctx, ids[-1].ledger_id)
            for seq in range(3, 6):
                ids.append(await asyncio.wait_for(producer.send(f"v{seq}".encode(), sequence_id=seq), SEND_WITHIN_S))
            reader = await client.create_reader(TOPIC)
            values = []
            while await reader.has_message_available():
                values.append((await reader.read_next(timeout_ms=5_000)).value())
            results.append((ids, values))
        except BaseException as error:
            errors.append(error)
            raise
        finally:
            await client.close()

    async def controller() -> None:
        assert await start_servers(run), world.failures
        world.add_node("client", client_main)
        await until(run, lambda: bool(results or errors) or world.state("client") is not NodeState.RUNNING,
                    "the client")

    world.loop.set_exception_handler(cluster.quiet_crashes)
    world.run(controller())
    if errors:
        raise errors[0]
    assert not world.failures, world.failures
    return results[0]


def test_a_topic_whose_ledger_was_fenced_under_it_is_loaded_again_and_takes_the_next_sends() -> None:
    ids, values = _run(seed=1)
    assert values == [f"v{seq}" for seq in range(6)]  # stored once each, in order
    assert ids[3].ledger_id > ids[2].ledger_id  # written to a new ledger after the fenced one
    assert ids == sorted(ids)


def test_negative_control_without_the_reload_the_producer_is_stuck(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(BrokerService, "_unload_fenced", lambda _self, _topic: None)
    with pytest.raises(TimeoutError):
        _run(seed=1)
