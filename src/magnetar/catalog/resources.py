"""Clusters, tenants, namespaces and their policies in the metadata store, at Pulsar's paths.

* cluster ``c``: ``/admin/clusters/{c}`` holding ``ClusterData`` JSON;
* tenant ``t``: ``/admin/policies/{t}`` holding ``TenantInfo`` JSON (``adminRoles``, ``allowedClusters``);
* namespace ``t/ns``: ``/admin/policies/{t}/{ns}`` holding ``Policies`` JSON;
* topic overrides: ``/admin/topic-policies/...`` (``policies.topic_policies_path``).

Every write is a compare-and-set on the version read (at most ``POLICY_CAS_RETRY_COUNT_MAX``
attempts), then handed to the ``PolicyCache`` so this broker applies it at once; other brokers see
it through their watches. Missing things raise ``NotFoundError``, existing ones ``AlreadyExistsError``, bad
names or values ``InvalidArgumentError``, a non-empty tenant ``NotEmptyError``.
``bootstrap`` creates cluster ``standalone`` (or the configured one), tenant ``public`` and
namespace ``public/default`` when missing, as ``pulsar standalone`` does on first start.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import TypeVar

import msgspec

from magnetar.base.errors import (
    AlreadyExistsError,
    BadVersionError,
    InvalidArgumentError,
    LimitExceededError,
    MagnetarError,
    NotFoundError,
)
from magnetar.base.limits import ADMIN_LIST_COUNT_MAX
from magnetar.base.types import DEFAULT_NAMESPACE, DEFAULT_TENANT, TopicName
from magnetar.catalog.policies import (
    POLICIES_ROOT,
    Policies,
    TopicPolicies,
    decode_policies,
    namespace_path,
    topic_policies_path,
)
from magnetar.catalog.policy_cache import PolicyCache
from magnetar.metadata.api import MetadataStore

CLUSTERS_ROOT = "/admin/clusters"
#: Compare-and-set attempts of one policy update before it fails (concurrent admins).
POLICY_CAS_RETRY_COUNT_MAX = 16
_NAME = re.compile(r"^[-=:.\w]+$")

S = TypeVar("S", bound=msgspec.Struct)


class NotEmptyError(MagnetarError):
    """A tenant with namespaces, or a namespace with topics, cannot be deleted."""


class ClusterInUseError(InvalidArgumentError):
    """A cluster a tenant still allows cannot be deleted."""


class ClusterNotAllowedError(MagnetarError):
    """A replication cluster the tenant does not allow (Pulsar answers 403)."""


class TopicBusyError(MagnetarError):
    """A topic with producers or consumers attached cannot be deleted without force."""


class TenantInfo(msgspec.Struct, rename="camel"):
    admin_roles: list[str] = msgspec.field(default_factory=list)
    allowed_clusters: list[str] = msgspec.field(default_factory=list)


class ClusterData(msgspec.Struct, rename="camel", omit_defaults=True):
    """Pulsar's ``ClusterData``. ``authenticationPlugin`` / ``authenticationParameters`` are the
    credentials geo-replicators present to this cluster (e.g. ``token`` and ``token:<jwt>``)."""

    service_url: str = ""
    service_url_tls: str = ""
    broker_service_url: str = ""
    broker_service_url_tls: str = ""
    authentication_plugin: str = ""
    authentication_parameters: str = ""

    def validate(self) -> None:
        for name, url, schemes in (("serviceUrl", self.service_url, ("http://", "https://")),
                                   ("serviceUrlTls", self.service_url_tls, ("https://",)),
                                   ("brokerServiceUrl", self.broker_service_url, ("pulsar://",)),
                                   ("brokerServiceUrlTls", self.broker_service_url_tls, ("pulsar+ssl://",))):
            if url and not url.startswith(schemes):
                raise InvalidArgumentError(f"Invalid {name}: {url!r} (expected {' or '.join(schemes)}...)")


def check_name(kind: str, name: str) -> str:
    if not name or not _NAME.match(name) or len(name) > 256:
        raise InvalidArgumentError(f"Invalid {kind} name: {name!r}")
    return name


class Resources:
    def __init__(self, store: MetadataStore, cache: PolicyCache) -> None:
        self.store = store
        self.cache = cache

    # --- generic ---------------------------------------------------------------------------------

    async def _read(self, path: str, kind: type[S], what: str) -> tuple[S, int]:
        found = await self.store.get(path)
        if found is None or not found.value:
            raise NotFoundError(f"{what} does not exist")
        return msgspec.json.decode(found.value, type=kind), found.version

    async def _children(self, path: str) -> list[str]:
        names = await self.store.children(path)
        if len(names) > ADMIN_LIST_COUNT_MAX:
            raise LimitExceededError("ADMIN_LIST_COUNT_MAX", len(names), ADMIN_LIST_COUNT_MAX)
        return names

    async def _has_value(self, path: str) -> bool:
        found = await self.store.get(path)
        return found is not None and bool(found.value)

    async def _create(self, path: str, value: msgspec.Struct, what: str) -> None:
        found = await self.store.get(path)
        if found is not None and found.value:
            raise AlreadyExistsError(f"{what} already exists")
        raw = msgspec.json.encode(value)
        try:
            # An empty node left as a parent by an earlier create is taken over with a CAS.
            await self.store.put(path, raw, -1 if found is None else found.version)
        except BadVersionError as error:
            raise AlreadyExistsError(f"{what} already exists") from error
        self.cache.written(path, raw)

    async def _update(self, path: str, kind: type[S], what: str, change: Callable[[S], None],
                      missing: Callable[[], S] | None = None) -> S:
        for _ in range(POLICY_CAS_RETRY_COUNT_MAX):
            found = await self.store.get(path)
            if found is None or not found.value:
                if missing is None:
                    raise NotFoundError(f"{what} does not exist")
                value, version = missing(), -1 if found is None else found.version
            else:
                value, version = msgspec.json.decode(found.value, type=kind), found.version
            change(value)
            raw = msgspec.json.encode(value)
            try:
                await self.store.put(path, raw, version)
            except BadVersionError:
                continue
            self.cache.written(path, raw)
            return value
        raise BadVersionError(f"{what}: {POLICY_CAS_RETRY_COUNT_MAX} concurrent updates in a row")

    # --- clusters --------------------------------------------------------------------------------

    async def clusters(self) -> list[str]:
        return [c for c in await self._children(CLUSTERS_ROOT) if await self._has_value(f"{CLUSTERS_ROOT}/{c}")]

    async def cluster(self, name: str) -> ClusterData:
        return (await self._read(f"{CLUSTERS_ROOT}/{check_name('cluster', name)}", ClusterData,
                                 f"Cluster {name}"))[0]

    async def create_cluster(self, name: str, data: ClusterData) -> None:
        data.validate()
        await self._create(f"{CLUSTERS_ROOT}/{check_name('cluster', name)}", data, f"Cluster {name}")

    async def update_cluster(self, name: str, data: ClusterData) -> None:
        data.validate()

        def replace(current: ClusterData) -> None:
            for field in ClusterData.__struct_fields__:
                setattr(current, field, getattr(data, field))

        await self._update(f"{CLUSTERS_ROOT}/{check_name('cluster', name)}", ClusterData, f"Cluster {name}", replace)

    async def delete_cluster(self, name: str) -> None:
        """Refused (``NotEmptyError``, 412 in Pulsar) while a tenant still allows the cluster."""
        await self.cluster(name)
        for tenant in await self.tenants():
            if name in (await self.tenant(tenant)).allowed_clusters:
                raise ClusterInUseError(f"Cluster {name} is still allowed for tenant {tenant}")
        path = f"{CLUSTERS_ROOT}/{name}"
        await self.store.delete(path)
        self.cache.written(path, None)

    # --- tenants ---------------------------------------------------------------------------------

    async def tenants(self) -> list[str]:
        return [t for t in await self._children(POLICIES_ROOT) if await self._has_value(f"{POLICIES_ROOT}/{t}")]

    async def tenant(self, name: str) -> TenantInfo:
        return (await self._read(f"{POLICIES_ROOT}/{check_name('tenant', name)}", TenantInfo,
                                 f"Tenant {name}"))[0]

    async def _check_clusters(self, info: TenantInfo) -> None:
        known = set(await self.clusters())
        unknown = [c for c in info.allowed_clusters if c not in known]
        if unknown:
            raise InvalidArgumentError(f"Clusters do not exist: {', '.join(unknown)}")

    async def create_tenant(self, name: str, info: TenantInfo) -> None:
        check_name("tenant", name)
        await self._check_clusters(info)
        await self._create(f"{POLICIES_ROOT}/{name}", info, f"Tenant {name}")

    async def update_tenant(self, name: str, info: TenantInfo) -> None:
        check_name("tenant", name)
        await self._check_clusters(info)

        def replace(current: TenantInfo) -> None:
            current.admin_roles = info.admin_roles
            current.allowed_clusters = info.allowed_clusters

        await self._update(f"{POLICIES_ROOT}/{name}", TenantInfo, f"Tenant {name}", replace)

    async def delete_tenant(self, name: str) -> None:
        await self.tenant(name)
        if await self.namespaces(name):
            raise NotEmptyError(f"The tenant {name} still has active namespaces")
        path = f"{POLICIES_ROOT}/{name}"
        for child in await self._children(path):  # empty parents left by deleted namespaces
            await self.store.delete(f"{path}/{child}")
        await self.store.delete(path)
        self.cache.written(path, None)

    # --- namespaces ------------------------------------------------------------------------------

    async def namespaces(self, tenant: str) -> list[str]:
        await self.tenant(tenant)
        base = f"{POLICIES_ROOT}/{tenant}"
        return [f"{tenant}/{ns}" for ns in await self._children(base) if await self._has_value(f"{base}/{ns}")]

    @staticmethod
    def split_namespace(namespace: str) -> tuple[str, str]:
        tenant, sep, local = namespace.partition("/")
        if not sep:
            raise InvalidArgumentError(f"Invalid namespace name: {namespace!r}")
        return check_name("tenant", tenant), check_name("namespace", local)

    async def namespace_exists(self, namespace: str) -> bool:
        return await self._has_value(namespace_path(namespace))

    async def policies(self, namespace: str) -> Policies:
        self.split_namespace(namespace)
        return (await self._read(namespace_path(namespace), Policies, f"Namespace {namespace}"))[0]

    async def check_replication_clusters(self, tenant: str, clusters: list[str]) -> list[str]:
        """``clusters`` as a replication list of ``tenant``'s: not empty, no repeats, each one
        registered (``InvalidArgumentError``) and allowed by the tenant (``ClusterNotAllowedError``)."""
        if not clusters:
            raise InvalidArgumentError("ClusterIds should not be null or empty")
        known = set(await self.clusters())
        allowed = set((await self.tenant(tenant)).allowed_clusters)
        for cluster in clusters:
            check_name("cluster", cluster)
            if cluster not in known:
                raise InvalidArgumentError(f"Invalid cluster id: {cluster}")
            if cluster not in allowed:
                raise ClusterNotAllowedError(f"Cluster {cluster} is not in the list of allowed clusters list for "
                                        f"tenant [{tenant}]")
        return list(dict.fromkeys(clusters))

    async def create_namespace(self, namespace: str, policies: Policies | None = None) -> None:
        tenant, _ = self.split_namespace(namespace)
        info = await self.tenant(tenant)
        value = policies or Policies()
        if value.replication_clusters:
            value.replication_clusters = await self.check_replication_clusters(tenant, value.replication_clusters)
        else:
            value.replication_clusters = list(info.allowed_clusters[:1]) or list((await self.clusters())[:1])
        await self._create(namespace_path(namespace), value, f"Namespace {namespace}")

    async def delete_namespace(self, namespace: str) -> None:
        await self.policies(namespace)
        path = namespace_path(namespace)
        await self.store.delete(path)
        self.cache.written(path, None)

    async def update_policies(self, namespace: str, change: Callable[[Policies], None]) -> Policies:
        self.split_namespace(namespace)
        return await self._update(namespace_path(namespace), Policies, f"Namespace {namespace}", change)

    # --- topic policies --------------------------------------------------------------------------

    async def topic_policies(self, topic: TopicName) -> TopicPolicies:
        found = await self.store.get(topic_policies_path(topic))
        if found is None or not found.value:
            return TopicPolicies()
        return msgspec.json.decode(found.value, type=TopicPolicies)

    async def update_topic_policies(self, topic: TopicName, change: Callable[[TopicPolicies], None]) -> TopicPolicies:
        return await self._update(topic_policies_path(topic), TopicPolicies, f"Topic {topic}", change,
                                  missing=TopicPolicies)

    async def delete_topic_policies(self, topic: TopicName) -> None:
        """A deleted topic's overrides go, and so do its grants (as Pulsar's do): a topic created
        later under the same name starts without them."""
        path = topic_policies_path(topic)
        if await self.store.exists(path):
            await self.store.delete(path)
        self.cache.written(path, None)
        await self._delete_topic_grants(topic)

    async def _delete_topic_grants(self, topic: TopicName) -> None:
        key = str(topic.partitioned_topic_name)
        found = await self.store.get(namespace_path(topic.namespace))
        if found is None or not found.value or key not in decode_policies(found.value).auth_policies.destination_auth:
            return  # the usual case: no write for a topic without grants of its own

        def forget(policies: Policies) -> None:
            policies.auth_policies.destination_auth.pop(key, None)

        await self.update_policies(topic.namespace, forget)

    # --- first start -----------------------------------------------------------------------------

    async def bootstrap(self, cluster: str, data: ClusterData) -> None:
        """Create the cluster, tenant ``public`` and namespace ``public/default`` if missing."""
        steps: list[Callable[[], Awaitable[None]]] = [
            lambda: self.create_cluster(cluster, data),
            lambda: self.create_tenant(DEFAULT_TENANT, TenantInfo(allowed_clusters=[cluster])),
            lambda: self.create_namespace(f"{DEFAULT_TENANT}/{DEFAULT_NAMESPACE}"),
        ]
        for step in steps:
            try:
                await step()
            except AlreadyExistsError:
                continue
