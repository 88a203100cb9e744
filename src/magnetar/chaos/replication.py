"""Checker for geo-replication under faults (pure: no I/O, no clock).

Inputs, as the real-process experiment records them (``tests/integration/test_geo_replication.py``):

* ``acknowledged``: the values whose send the source cluster acknowledged (the client's callback
  said Ok);
* ``source``: every value stored in the source topic, read back from the earliest position
  (it holds the acknowledged ones and may hold sends whose outcome the client never learned);
* ``remote``: every value stored in the remote cluster's copy of the topic, read back the same way.

What it reports:

* ``lost``        acknowledged in the source cluster and absent from the remote one
* ``unreplicated`` stored in the source (outcome unknown to the client) and absent from the remote:
                  the replicator sends what the source stores, so this is a loss too
* ``duplicated``  stored more than once in the remote cluster (replication dedup failed)
* ``unexpected``  stored in the remote and never stored in the source
* ``source_lost`` acknowledged and absent from the source itself (not replication's fault, but the
                  experiment is void then)

``ok`` is true iff every list is empty. The negative control (``MAGNETAR_BREAK=no-repl-dedup`` on
the remote) must make ``duplicated`` non-empty for the same experiment.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass
class ReplicationCheck:
    lost: list[str] = field(default_factory=list)
    unreplicated: list[str] = field(default_factory=list)
    duplicated: dict[str, int] = field(default_factory=dict)
    unexpected: list[str] = field(default_factory=list)
    source_lost: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.unreplicated or self.duplicated or self.unexpected or self.source_lost)

    def summary(self) -> str:
        return (f"acknowledged={self.counts.get('acknowledged', 0)} source={self.counts.get('source', 0)} "
                f"remote={self.counts.get('remote', 0)} lost={len(self.lost)} "
                f"unreplicated={len(self.unreplicated)} duplicated={sum(n - 1 for n in self.duplicated.values())} "
                f"unexpected={len(self.unexpected)} source_lost={len(self.source_lost)}")


def check_replication(acknowledged: Iterable[str], source: Iterable[str], remote: Iterable[str]) -> ReplicationCheck:
    acked = list(dict.fromkeys(acknowledged))
    source_list = list(source)
    remote_counts = Counter(remote)
    source_set = set(source_list)
    result = ReplicationCheck()
    result.lost = [v for v in acked if v not in remote_counts]
    result.source_lost = [v for v in acked if v not in source_set]
    acked_set = set(acked)
    result.unreplicated = [v for v in dict.fromkeys(source_list) if v not in remote_counts and v not in acked_set]
    result.duplicated = {v: n for v, n in remote_counts.items() if n > 1}
    result.unexpected = [v for v in remote_counts if v not in source_set]
    result.counts = {"acknowledged": len(acked), "source": len(source_list), "remote": sum(remote_counts.values())}
    return result
