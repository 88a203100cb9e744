"""Retention through the namespace policy on a broker over managed ledgers (fake bookies, virtual
time): consumed ledgers go only when every subscription consumed them AND retention lets them go."""

from __future__ import annotations

from magnetar import sim
from magnetar.base.types import EARLIEST, TopicName
from magnetar.broker.managed_log import ManagedTopicLog
from magnetar.catalog.policies import Policies, RetentionPolicies
from tests.admin.harness import managed_broker, message
from tests.managed_ledger.harness import config, make_world

T = "persistent://public/default/retained"


def test_retention_trims_only_consumed_ledgers_that_retention_releases() -> None:
    async def main() -> None:
        world = make_world()
        service = await managed_broker(world, config(max_entries_per_ledger=2))
        assert service.resources is not None

        resources = service.resources

        async def set_retention(minutes: int, mb: int) -> None:
            def change(policies: Policies) -> None:
                policies.retention_policies = RetentionPolicies(minutes, mb)

            await resources.update_policies("public/default", change)

        topic = await service.get_topic(TopicName.parse(T), create=True)
        subscription = await topic.subscription("s", durable=True, initial_mark_delete=EARLIEST)
        for i in range(8):
            await topic.publish(message(publish_time=world.clock.now_ms(), sequence_id=i))
        log = topic.log
        assert isinstance(log, ManagedTopicLog)
        ledgers_before = len(log.managed_ledger.ledger_ids)
        assert ledgers_before >= 4

        await set_retention(0, 0)  # retention lets everything go ...
        await service.check_policies()
        assert len(log.managed_ledger.ledger_ids) == ledgers_before  # ... but nothing is consumed

        await set_retention(60, -1)  # keep consumed ledgers for an hour
        await subscription.clear_backlog()
        await service.check_policies()
        assert len(log.managed_ledger.ledger_ids) == ledgers_before  # consumed, but retained

        await world.clock.sleep(3601)
        await service.check_policies()
        assert log.managed_ledger.ledger_ids == [log.managed_ledger.current_ledger_id]  # both allow: trimmed
        await service.close()

    sim.run(main(), steps_max=2_000_000)
