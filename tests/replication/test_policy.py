"""Replication precedence (pure functions): topic over namespace, the tenant caps, messages narrow."""

from __future__ import annotations

from magnetar.catalog.resources import ClusterData
from magnetar.protocol.pulsar import pb
from magnetar.replication import effective_clusters, remote_cluster, remote_targets, should_replicate


def test_topic_list_overrides_the_namespace_and_the_tenant_caps_both() -> None:
    assert effective_clusters(["A", "B", "C"], ["A", "B"], None) == ["A", "B"]
    assert effective_clusters(["A", "B", "C"], ["A", "B"], ["A", "C"]) == ["A", "C"]
    assert effective_clusters(["A", "B"], ["A", "B", "C"], None) == ["A", "B"]  # C no longer allowed
    assert effective_clusters(["A"], ["A", "B"], ["A", "B", "B"]) == ["A"]
    assert effective_clusters(["A", "B"], ["A", "B"], []) == []


def test_remotes_exclude_the_local_cluster_and_need_it_in_the_list() -> None:
    assert remote_targets("A", ["A", "B", "C"], ["A", "B", "C"], None) == ["B", "C"]
    assert remote_targets("A", ["A", "B"], ["B"], None) == []  # A is not a replication cluster of it
    assert remote_targets("A", ["A", "B"], ["A", "B"], ["A"]) == []


def _metadata(**fields: object) -> pb.MessageMetadata:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    for name, value in fields.items():
        if isinstance(value, list):
            getattr(metadata, name).extend(value)
        else:
            setattr(metadata, name, value)
    return metadata


def test_a_message_narrows_but_never_escapes_and_replicated_entries_never_travel_on() -> None:
    assert should_replicate(_metadata(), "B")
    assert should_replicate(_metadata(replicate_to=["A", "B"]), "B")
    assert not should_replicate(_metadata(replicate_to=["A"]), "B")
    assert not should_replicate(_metadata(replicate_to=["__local__"]), "B")  # disable_replication
    assert not should_replicate(_metadata(replicated_from="C"), "B")  # no loops in a mesh
    assert not should_replicate(_metadata(marker_type=20), "B")  # transaction markers stay
    assert should_replicate(_metadata(marker_type=10, replicate_to=["B"]), "B")  # snapshot request
    assert not should_replicate(_metadata(marker_type=12, replicate_to=["A"]), "B")  # snapshot: local


def test_replicator_credentials_come_from_the_cluster_registration() -> None:
    plain = remote_cluster("B", ClusterData(broker_service_url="pulsar://h:1"))
    assert (plain.auth_method_name, plain.auth_data) == ("none", None)
    token = remote_cluster("B", ClusterData(broker_service_url="pulsar://h:1", authentication_plugin=(
        "org.apache.pulsar.client.impl.auth.AuthenticationToken"), authentication_parameters="token:abc.def"))
    assert (token.auth_method_name, token.auth_data) == ("token", b"abc.def")
    bare = remote_cluster("B", ClusterData(broker_service_url="pulsar://h:1", authentication_plugin="token",
                                           authentication_parameters="xyz"))
    assert (bare.auth_method_name, bare.auth_data) == ("token", b"xyz")
