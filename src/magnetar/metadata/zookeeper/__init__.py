"""The ZooKeeper metadata store (kazoo). The only package that imports kazoo."""

from magnetar.metadata.zookeeper.store import ZooKeeperMetadataStore, parse_zk_url

__all__ = ["ZooKeeperMetadataStore", "parse_zk_url"]
