"""The watched cache of namespace and topic policy nodes (``PolicyCache``), split from
``catalog/policies.py`` so that it can be compiled: ``effective`` runs on every publish run, and
the policy model's ``msgspec.Struct`` classes (whose field defaults are ``msgspec.field`` calls)
cannot be compiled with mypyc. See ``catalog/policies.py`` for the model and the resolution.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from magnetar.base.limits import POLICY_CACHE_NODES_COUNT_MAX
from magnetar.base.types import TopicName
from magnetar.catalog.policies import (
    BrokerSettings,
    EffectivePolicies,
    Policies,
    TopicPolicies,
    decode_policies,
    decode_topic_policies,
    namespace_path,
    resolve,
    topic_policies_path,
)
from magnetar.metadata.api import MetadataStore, Watch, WatchEvent

D = TypeVar("D")


class PolicyCache:
    """Namespace and topic policy nodes, read once, watched, written through.

    ``on_change`` is called with the changed node's path after a watched change was reloaded.
    Without a metadata store every topic runs on the broker defaults.
    """

    def __init__(self, metadata: MetadataStore | None, config: BrokerSettings) -> None:
        self._metadata = metadata
        self.config = config
        self._nodes: dict[str, bytes | None] = {}
        #: Bumped whenever ``_nodes`` changes (a node loaded, reloaded, written or forgotten): a
        #: view resolved at the current generation answers without looking its two nodes up
        #: (issue 22: once per publish run, so per message at 100,000 topics, on a dict of every
        #: loaded topic's nodes, out of cache).
        self.generation = 0
        self._watches: dict[str, Watch] = {}
        self._reloads: set[asyncio.Task[None]] = set()
        self.listeners: list[Callable[[str], None]] = []
        # topic -> its view (the raw nodes last resolved, the result): policies are asked on every
        # publish run, and decoding and resolving both nodes each time cost ~7% of the loop.
        self._resolved: dict[TopicName, TopicPolicyView] = {}
        self._decoded: dict[str, tuple[bytes, Callable[[bytes], Any], Any]] = {}  # path -> (raw, decode, value)
        #: topic -> its topic-policies node path: the broker's periodic compaction check asks for
        #: every loaded topic's policies, and building the path (a ``quote`` of its name) was 28%
        #: of that pass (issue 22, 100,000 topics).
        self._topic_paths: dict[TopicName, str] = {}
        #: Every watched node's callback: one bound method for all (a lambda per watch was two
        #: GC-tracked objects per loaded topic; issue 22).
        self._on_watch_event: Callable[[WatchEvent], None] = self._watch_event

    @property
    def metadata(self) -> MetadataStore | None:
        return self._metadata

    async def _node(self, path: str) -> bytes | None:
        if path in self._nodes or self._metadata is None:
            return self._nodes.get(path)
        if len(self._nodes) >= POLICY_CACHE_NODES_COUNT_MAX:
            self._forget(next(iter(self._nodes)))
        found = await self._metadata.get(path)
        if path not in self._watches and len(self._watches) < POLICY_CACHE_NODES_COUNT_MAX:
            self._watches[path] = await self._metadata.watch(path, self._on_watch_event)
        value = found.value if found is not None and found.value else None
        self._nodes[path] = value
        self.generation += 1
        return value

    def _forget(self, path: str) -> None:
        self._nodes.pop(path, None)
        self.generation += 1
        watch = self._watches.pop(path, None)
        if watch is not None:
            watch.cancel()

    def _watch_event(self, event: WatchEvent) -> None:
        self._changed(event.path, event)

    def _changed(self, path: str, event: WatchEvent) -> None:
        if path not in self._nodes:
            return
        task = asyncio.get_running_loop().create_task(self._reload(path))
        self._reloads.add(task)
        task.add_done_callback(self._reloads.discard)

    async def _reload(self, path: str) -> None:
        if self._metadata is None:
            return
        found = await self._metadata.get(path)
        self._nodes[path] = found.value if found is not None and found.value else None
        self.generation += 1
        for listener in self.listeners:
            listener(path)

    def written(self, path: str, value: bytes | None) -> None:
        """The admin API stored ``value`` at ``path`` (None: deleted); adopt it at once."""
        if path in self._nodes:
            self._nodes[path] = value
            self.generation += 1
        for listener in self.listeners:
            listener(path)

    async def decoded(self, path: str, decode: Callable[[bytes], D]) -> D | None:
        """``decode`` of the node at ``path`` (cached and watched as the policy nodes are; None if
        unset), run again only when the node was replaced: authorization asks this on every
        LOOKUP, PRODUCER and SUBSCRIBE."""
        raw = await self._node(path)
        if raw is None:
            return None
        memo = self._decoded.get(path)
        if memo is not None and memo[0] is raw and memo[1] is decode:
            return memo[2]  # type: ignore[no-any-return]
        value = decode(raw)
        if memo is None and len(self._decoded) >= POLICY_CACHE_NODES_COUNT_MAX:
            del self._decoded[next(iter(self._decoded))]
        self._decoded[path] = (raw, decode, value)
        return value

    async def namespace_policies(self, namespace: str) -> Policies | None:
        raw = await self._node(namespace_path(namespace))
        return decode_policies(raw) if raw else None

    async def topic_policies(self, topic: TopicName) -> TopicPolicies | None:
        path = self._topic_paths.get(topic)
        if path is None:
            path = topic_policies_path(topic)
            if len(self._topic_paths) >= POLICY_CACHE_NODES_COUNT_MAX:
                del self._topic_paths[next(iter(self._topic_paths))]
            self._topic_paths[topic] = path
        raw = await self._node(path)
        return decode_topic_policies(raw) if raw else None

    async def load(self, topic: TopicName) -> EffectivePolicies:
        """Read (and watch) what ``topic`` needs; later ``effective`` calls are synchronous."""
        return resolve(self.config, await self.namespace_policies(topic.namespace), await self.topic_policies(topic))

    def effective(self, topic: TopicName) -> EffectivePolicies:
        """The policies in force for ``topic`` now: resolved again only when one of its two nodes
        was replaced since the last call (a reload or an admin write stores a new bytes object)."""
        view = self._resolved.get(topic)
        if view is None:
            if len(self._resolved) >= POLICY_CACHE_NODES_COUNT_MAX:
                del self._resolved[next(iter(self._resolved))]
            view = self._resolved[topic] = self.view(topic)
        return view()

    def resolve_raw(self, ns_raw: bytes | None, tp_raw: bytes | None) -> EffectivePolicies:
        """The policies two raw nodes (namespace, topic; None: unset) resolve to."""
        return resolve(self.config, decode_policies(ns_raw) if ns_raw else None,
                       decode_topic_policies(tp_raw) if tp_raw else None)

    def view(self, topic: TopicName) -> TopicPolicyView:
        """``effective(topic)`` as a call without arguments, memoized on itself (a loaded topic's
        ``policies``: it holds the view, no entry is kept here)."""
        return TopicPolicyView(self, topic)

    def close(self) -> None:
        for watch in self._watches.values():
            watch.cancel()
        self._watches.clear()
        for task in self._reloads:
            task.cancel()


class TopicPolicyView:
    """``PolicyCache.effective`` of one topic, its memo kept here: no lookup keyed by the topic's
    name, whose hash (a ``TopicName`` of four fields) was a third of the 2.2 us a call to
    ``effective`` cost (issue 22: called once per publish run and per topic in the broker's policy
    pass, so per message at 100,000 topics). Resolved again only when one of its two nodes was
    replaced since the last call, as ``effective`` is."""

    def __init__(self, cache: PolicyCache, topic: TopicName) -> None:
        self._cache = cache
        self._ns_path = namespace_path(topic.namespace)
        self._tp_path = topic_policies_path(topic)
        self._ns_raw: bytes | None = None
        self._tp_raw: bytes | None = None
        self._result: EffectivePolicies | None = None
        self._generation = -1  # the cache's ``generation`` when ``_result`` was last checked

    def __call__(self) -> EffectivePolicies:
        cache = self._cache
        result = self._result
        generation = cache.generation
        if result is not None and generation == self._generation:
            return result  # no node changed since: no lookups (issue 22, per publish run)
        nodes = cache._nodes
        ns_raw = nodes.get(self._ns_path)
        tp_raw = nodes.get(self._tp_path)
        self._generation = generation
        if result is not None and ns_raw is self._ns_raw and tp_raw is self._tp_raw:
            return result
        result = cache.resolve_raw(ns_raw, tp_raw)
        self._ns_raw, self._tp_raw, self._result = ns_raw, tp_raw, result
        return result
