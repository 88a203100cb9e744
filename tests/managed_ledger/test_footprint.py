"""What an idle managed ledger keeps alive (issue 22: 100,000 topics on one broker).

Each topic's managed ledger, its pipeline, its current ledger and the ledger's writer stay in
memory while the topic idles, and every object the cyclic GC tracks is walked by the young
collections that follow its creation (docs/performance.md, session 19: ~28 s of CPU to create
100,000 topics). Empty containers are the bulk of it when idle: an empty ``deque`` is ~760 bytes,
an empty ``set`` ~220, a ``list`` ~56 and an empty ``dict`` ~64. The writer's and the pipeline's
waiters for room, the adds a failed ledger leaves undecided, the failed and excluded bookies,
the timeout suspects, the tasks, the offload's lock and its default policy are absent or
shared until used (session 20).
"""

from __future__ import annotations

from functools import partial

from tests import footprint
from tests.managed_ledger.harness import TOPIC, config, make_world

#: Managed ledgers opened (each with one entry appended: its first ledger created) before the
#: measure (shared state: metadata parents, caches, interned names) and measured.
WARM_COUNT = 20
MEASURED_COUNT = 100
#: Bounds per idle managed ledger, this layer's state and what the fake bookie and the metadata
#: store keep for it. Measured in session 20: 57 objects and 10,243 bytes compiled, 58 and 11,720
#: pure. Negative control (measured, the tree before session 20 with this test): 65 objects and
#: 13,600 bytes compiled, 66 and 15,140 pure (its three deques and six sets per idle managed
#: ledger), both bounds exceeded in both modes. Session 21: the pipeline's queue and in-flight adds
#: are lists read from a head index (no deque) and the entry cache a list of runs: 59 objects and
#: 8,716 bytes compiled, 60 and 10,158 pure; the byte bound follows (control: session 20's tree,
#: 10,282 compiled and 11,721 pure, exceeds it pure). Session 22: the writer's gates call their
#: continuations natively and keep no bound method each: 55 objects and 8,417 bytes compiled, 56
#: and 9,929 pure; the object bound follows (control: session 21's tree, 59 compiled and 60 pure,
#: exceeds it in both modes). Session 23: the pipeline's and the writer's waiters for room, the
#: pipeline's entry waiters and both drained events are absent until used: 50 objects and 8,055
#: bytes compiled, 51 and 9,619 pure; the object bound follows (control: session 22's tree, 55
#: compiled and 56 pure, exceeds it in both modes). Session 24: the entry reader's readers
#: (``OrderedDict``), a ledger's undecided adds and the read-only holds are absent or shared until
#: used: 47 objects and 7,768 bytes compiled, 48 and 9,388 pure; the object bound follows (control:
#: session 23's tree, 50 compiled and 51 pure, exceeds it in both modes).
TRACKED_OBJECTS_MAX = 49
BYTES_MAX = 11_000


async def _open_and_append(factory: object, names: list[str]) -> list[object]:
    opened = []
    for name in names:
        ml = await factory.open(name)  # type: ignore[attr-defined]
        await ml.append(b"x" * 16)
        opened.append(ml)
    return opened


async def test_an_idle_managed_ledger_keeps_few_objects_and_bytes() -> None:
    world = make_world(1)
    factory = await world.broker(config(ensemble_size=1, write_quorum_size=1, ack_quorum_size=1))
    objects_per, bytes_per = await footprint.per_item(partial(_open_and_append, factory), f"{TOPIC}-", WARM_COUNT,
                                                      MEASURED_COUNT)
    print(f"per idle managed ledger: {objects_per:.1f} tracked objects, {bytes_per:.0f} bytes")
    assert objects_per <= TRACKED_OBJECTS_MAX
    assert bytes_per <= BYTES_MAX
