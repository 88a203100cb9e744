"""A loaded topic's ``policies()`` (``PolicyCache.view``: the memo kept on the topic's own view,
not in a map keyed by its name) is ``PolicyCache.effective`` at every step: after namespace and
topic writes through the admin API, their removal, and a change another broker made (the watch).

Negative control (run): a view that returns its first result whatever the nodes hold (the memo
without the identity checks of the two raw nodes) fails at the first write (TTL 100 expected, the
broker's default found).
"""

from __future__ import annotations

import msgspec

from magnetar.base.types import TopicName
from magnetar.catalog.policies import POLICIES_ROOT, Policies
from tests.admin.harness import AdminWorld, run_world
from tests.manual_clock import settle

T = "persistent://public/default/viewed"
NS = "/namespaces/public/default"


def test_a_topics_view_follows_every_change_as_effective_does() -> None:
    async def body(w: AdminWorld) -> None:
        name = TopicName.parse(T)
        topic = await w.service.get_topic(name, create=True)
        partition = w.service.policies.view(name.partition(0))

        def same() -> bool:
            return (topic.policies() == w.service.policies.effective(name)
                    and partition() == w.service.policies.effective(name.partition(0)))

        assert same()
        first = topic.policies()
        assert topic.policies() is first  # nothing changed: the memo, not a new resolution
        path = w.topic_path(T)
        await w.ok("POST", f"{NS}/messageTTL", 100)
        assert topic.policies().message_ttl_s == 100 and same()
        await w.ok("POST", f"{path}/maxMessageSize", 64)
        await w.ok("POST", f"{NS}/compactionThreshold", 500)
        assert topic.policies().max_message_size_bytes == 64 and same()
        assert partition().max_message_size_bytes == 64  # a partition takes its partitioned topic's
        assert topic.policies().compaction_threshold_bytes == 500
        await w.ok("DELETE", f"{path}/maxMessageSize")
        assert topic.policies().max_message_size_bytes == 0 and same()
        store = await w.metadata_server.connect()  # another broker's client
        found = await store.get(f"{POLICIES_ROOT}/public/default")
        assert found is not None
        policies = msgspec.json.decode(found.value, type=Policies)
        policies.max_producers_per_topic = 1
        await store.put(f"{POLICIES_ROOT}/public/default", msgspec.json.encode(policies), found.version)
        await settle()
        assert topic.policies().max_producers == 1 and same()

    run_world(body)
