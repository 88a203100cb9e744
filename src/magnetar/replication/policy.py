"""Where a topic's messages go: Pulsar's precedence, as pure functions.

* The topic-level list (``TopicPolicies.replication_clusters``) overrides the namespace's
  (``Policies.replication_clusters``).
* The tenant's ``allowedClusters`` caps it: a cluster the tenant does not allow is never a target,
  whatever a policy says (the admin API refuses such lists, and a tenant narrowed later wins).
* The local cluster is not a remote; a topic replicates only if its list holds the local cluster
  and at least one other.
* A message narrows further with ``replicate_to`` (the client's ``replication_clusters=[...]``;
  ``disable_replication=True`` sends just the local cluster): an entry goes to remote ``R`` only if
  its ``replicate_to`` is empty or names ``R`` — it can never reach a cluster outside the topic's.
* An entry that already carries ``replicated_from`` came from another cluster and is never sent on
  (no loops in a full mesh). Markers of replicated subscriptions travel like messages, each with
  its own ``replicate_to`` (a snapshot request to the remotes, a response to the requester, a
  snapshot nowhere); other markers (transactions) never leave the cluster.
"""

from __future__ import annotations

from collections.abc import Sequence

from magnetar.protocol.pulsar import pb
from magnetar.protocol.pulsar.markers import MarkerType

_TRAVELLING_MARKERS = frozenset({MarkerType.SNAPSHOT_REQUEST, MarkerType.SNAPSHOT_RESPONSE, MarkerType.UPDATE})


def effective_clusters(tenant_allowed: Sequence[str], namespace: Sequence[str],
                       topic: Sequence[str] | None) -> list[str]:
    """The topic's replication clusters: its own list if set, else the namespace's, capped by the
    tenant's allowed clusters (order kept, no repeats)."""
    chosen = topic if topic is not None else namespace
    allowed = set(tenant_allowed)
    return [c for c in dict.fromkeys(chosen) if c in allowed]


def remote_targets(local: str, tenant_allowed: Sequence[str], namespace: Sequence[str],
                   topic: Sequence[str] | None) -> list[str]:
    """The remote clusters a topic of cluster ``local`` replicates to (none unless ``local`` is in
    its list: a cluster outside the list neither sends nor is sent to)."""
    clusters = effective_clusters(tenant_allowed, namespace, topic)
    if local not in clusters:
        return []
    return [c for c in clusters if c != local]


def should_replicate(metadata: pb.MessageMetadata, remote: str) -> bool:
    """Whether a stored entry with ``metadata`` goes to ``remote`` (see the module docstring)."""
    if metadata.marker_type and metadata.marker_type not in _TRAVELLING_MARKERS:
        return False
    if metadata.HasField("replicated_from") and metadata.replicated_from:
        return False
    targets = metadata.replicate_to
    return not targets or remote in targets
