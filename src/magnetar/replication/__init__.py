"""Geo-replication between clusters (``shared/reference/geo_replication.md``).

``ReplicationService`` runs in each broker: for every loaded topic and every remote cluster in the
topic's replication clusters (``policy``) a ``Replicator`` sends the topic's locally produced
entries to the same topic in the remote cluster, deduplicated there by source position
(``magnetar.broker.replicated``).
"""

from magnetar.replication.policy import effective_clusters, remote_targets, should_replicate
from magnetar.replication.replicator import Replicator, ReplicatorState, cursor_name
from magnetar.replication.service import RemoteCluster, ReplicationService, remote_cluster

__all__ = [
    "RemoteCluster",
    "ReplicationService",
    "Replicator",
    "ReplicatorState",
    "cursor_name",
    "effective_clusters",
    "remote_cluster",
    "remote_targets",
    "should_replicate",
]
