"""The console's JSON endpoints (``/console/api/...``): what the pages show that ``/admin/v2`` does not.

Everything here is read from what the broker and the metadata store already hold: the loaded
topics and their counters (through the admin stats documents), the ledger metadata records, the
bookie registrations, the AutoRecovery markers, the brokers' load reports (which carry the
bundles each owns). Nothing is stored twice; the only memory of its own is ``RateHistory``, the
last minutes of rates the runtime samples. Actions (create, delete, policies, skip, clear,
reset) go through the admin API itself: the pages call ``/admin/v2``.

* ``GET overview``: brokers, bookies (state, free disk, ledgers), metadata store, totals, rates
  over time, under-replicated ledgers.
* ``GET tree``: tenants, namespaces, topics (partitioned topics with their partition count).
* ``GET topic/{tenant}/{namespace}/{topic}``: stats with producers and consumers (with their
  addresses), one row per partition, rates over time.
* ``GET topic/.../ledgers``: the durability view (``durability.ledger_view``).
* ``GET topic/.../peek?subscription=S&count=N``: the next N messages of S, not moving its cursor.
* ``GET cluster``: brokers and the bundles each owns.
* ``GET whoami``: the role the request was authenticated as (``request.state.role``), or null.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from magnetar import __version__
from magnetar.admin.common import AdminContext, AdminError, api_route, json_response, query_int, topic_of
from magnetar.admin.console.durability import LedgerFacts, ledger_view
from magnetar.admin.console.history import Counters, RateHistory
from magnetar.admin.stats import partitioned_stats, topic_stats
from magnetar.admin.topics import load, targets
from magnetar.base.errors import MagnetarError
from magnetar.base.limits import (
    CONSOLE_LEDGERS_COUNT_MAX,
    CONSOLE_PEEK_COUNT_MAX,
    CONSOLE_PEEK_SCAN_ENTRIES_MAX,
    CONSOLE_TREE_TOPICS_COUNT_MAX,
)
from magnetar.base.types import BookieId, TopicName
from magnetar.broker.dedup import is_system_cursor
from magnetar.broker.managed_log import ManagedTopicLog
from magnetar.broker.topic import Topic
from magnetar.catalog.lookup import PARTITIONED_TOPICS_ROOT
from magnetar.control.load import LOAD_REPORTS_ROOT, LoadReport
from magnetar.ledger.directory import MetadataBookieDirectory
from magnetar.ledger.metadata_adapter import MetadataStoreAdapter
from magnetar.ledger.metadata_ops import LedgerMetadataStore
from magnetar.ledger.underreplication import UnderReplicationMarkers
from magnetar.managed_ledger.managed_ledger import MLState
from magnetar.protocol.pulsar.batch import decode_entry
from magnetar.protocol.pulsar.stored import split_stored_entry

API_PATH = "/console/api"

#: ``bookie_info(bookie)``: the bookie's own answer to GET_INFO (``{"freeBytes", "ledgers",
#: "readOnly"}``), or an error; given by the runtime (it owns the network).
BookieInfo = Callable[[BookieId], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class ConsoleContext:
    admin: AdminContext
    history: RateHistory
    metadata_url: str = ""
    http_url: str = ""
    bookie_info: BookieInfo | None = None
    sample_interval_ms: int = 2000


def topic_counters(topic: Topic) -> Counters:
    """The counters ``RateHistory`` samples: what the topic's meters and cursors hold now."""
    out = backlog = 0
    for name, sub in topic.subscriptions.items():  # one pass (the sampler visits up to 2,000 topics)
        if not is_system_cursor(name):
            out += sub.dispatched.msg_count
            backlog += sub.cursor.backlog_entries()
    return Counters(topic.published.msg_count, out, topic.published.byte_count, backlog)


def sample_now(ctx: ConsoleContext, now_ms: int) -> None:
    # Counters only of the topics the history records (at most CONSOLE_TOPICS_TRACKED_COUNT_MAX):
    # reading all of 100,000 loaded topics every sample cost more than anything else idle.
    # Not a filter over every loaded topic either: a pass over 65,000 names every 2 s was 20% of
    # a busy standalone's CPU (issue 22). The tracked ones, then new ones while there is room.
    history = ctx.history
    topics = ctx.admin.service.topics
    chosen = {name: topics[name] for name in history.tracked() if name in topics}
    room = history.room()
    if room > 0:
        for name, topic in topics.items():  # no await in the loop: the dict cannot change
            if name not in chosen:
                chosen[name] = topic
                room -= 1
                if room == 0:
                    break
    history.sample(now_ms, {name: topic_counters(t) for name, t in chosen.items()})


async def _bookies(ctx: ConsoleContext) -> list[dict[str, Any]]:
    directory = MetadataBookieDirectory(ctx.admin.resources.store)
    writable = await directory.available_bookies()
    read_only = await directory.read_only_bookies()
    rows = [{"id": str(b), "state": "writable"} for b in writable] + [
        {"id": str(b), "state": "read-only"} for b in read_only]
    if ctx.bookie_info is not None:
        infos = await asyncio.gather(*(ctx.bookie_info(BookieId.parse(r["id"])) for r in rows),
                                     return_exceptions=True)
        for row, info in zip(rows, infos, strict=True):
            if isinstance(info, BaseException):
                row["error"] = f"{type(info).__name__}: {info}"
            else:
                row.update(info)
    return rows


async def _brokers(ctx: ConsoleContext, request: Request) -> list[dict[str, Any]]:
    store = ctx.admin.resources.store
    reports = []
    for broker_id in sorted(await store.children(LOAD_REPORTS_ROOT)):
        found = await store.get(f"{LOAD_REPORTS_ROOT}/{broker_id}")
        if found is None:
            continue
        try:
            report = LoadReport.decode(broker_id, found.value)
        except MagnetarError:
            continue
        reports.append({"id": broker_id, "serviceUrl": report.pulsar_service_url, "httpUrl": report.web_service_url,
                        "bundles": list(report.bundles), "topics": report.topics, "connections": report.connections,
                        "msgRateIn": report.msg_rate_in, "msgRateOut": report.msg_rate_out})
    if reports:
        return reports
    service = ctx.admin.service  # standalone: no load reports, this broker serves every bundle
    here = ctx.http_url or f"{request.url.scheme}://{request.url.netloc}"
    return [{"id": service.config.service_url, "serviceUrl": service.config.service_url, "httpUrl": here,
             "bundles": ["(all: standalone)"], "topics": len(service.topics), "connections": None,
             "msgRateIn": None, "msgRateOut": None}]


async def _metadata(ctx: ConsoleContext) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    start = loop.time()
    try:
        await ctx.admin.resources.store.children("/admin")
    except MagnetarError as error:
        return {"url": ctx.metadata_url, "healthy": False, "error": str(error)}
    return {"url": ctx.metadata_url, "healthy": True, "latencyMs": round((loop.time() - start) * 1000, 2)}


def _history(samples: list[Any]) -> list[dict[str, float | int]]:
    return [s.to_json() for s in samples]


def routes(ctx: ConsoleContext) -> list[BaseRoute]:
    return [*_overview_routes(ctx), *_topic_routes(ctx)]


def _overview_routes(ctx: ConsoleContext) -> list[BaseRoute]:
    admin = ctx.admin

    @api_route("/overview", ["GET"], "Brokers, bookies, metadata store, totals and rates over time")
    async def overview(request: Request) -> Response:
        topics = list(admin.service.topics.values())
        stats = [topic_stats(t) for t in topics]
        under = await UnderReplicationMarkers(admin.resources.store).ledger_ids()
        return json_response({
            "version": __version__, "cluster": admin.cluster, "sampleIntervalMs": ctx.sample_interval_ms,
            "brokers": await _brokers(ctx, request), "bookies": await _bookies(ctx), "metadata": await _metadata(ctx),
            "totals": {
                "topics": len(topics),
                "producers": sum(len(s["publishers"]) for s in stats),
                "subscriptions": sum(len(s["subscriptions"]) for s in stats),
                "consumers": sum(len(sub["consumers"]) for s in stats for sub in s["subscriptions"].values()),
                "backlog": sum(sub["msgBacklog"] for s in stats for sub in s["subscriptions"].values()),
                "storageSize": sum(s["storageSize"] for s in stats),
                "msgInCounter": sum(s["msgInCounter"] for s in stats),
            },
            "underReplicatedLedgers": under,
            "history": _history(ctx.history.broker()),
        })

    @api_route("/tree", ["GET"], "Tenants, namespaces and their topics")
    async def tree(_: Request) -> Response:
        out: list[dict[str, Any]] = []
        for tenant in sorted(await admin.resources.tenants()):
            namespaces: list[dict[str, Any]] = []
            for namespace in sorted(await admin.resources.namespaces(tenant)):
                partitioned = sorted(await admin.resources.store.children(
                    f"{PARTITIONED_TOPICS_ROOT}/{namespace}/persistent"))
                rows: list[dict[str, Any]] = []
                for local in partitioned[:CONSOLE_TREE_TOPICS_COUNT_MAX]:
                    name = TopicName.parse(f"persistent://{namespace}/{local}")
                    rows.append({"name": str(name), "local": name.local_name,
                                 "partitions": await admin.service.partitioned.partitions(name)})
                for full in (await admin.service.topics_of_namespace(namespace))[:CONSOLE_TREE_TOPICS_COUNT_MAX]:
                    name = TopicName.parse(full)
                    if name.is_partition:
                        continue  # shown under its partitioned topic
                    rows.append({"name": full, "local": name.local_name, "partitions": 0})
                namespaces.append({"name": namespace, "topics": sorted(rows, key=lambda r: r["name"])})
            out.append({"name": tenant, "namespaces": namespaces})
        return json_response({"tenants": out})

    @api_route("/whoami", ["GET"], "The role this request was authenticated as (null without authentication)")
    async def whoami(request: Request) -> Response:
        role = getattr(request.state, "role", None)  # set by the authentication middleware when it is on
        return json_response({"role": role if role is None else str(role)})

    @api_route("/cluster", ["GET"], "Brokers and the bundles each owns")
    async def cluster(request: Request) -> Response:
        return json_response({"cluster": admin.cluster, "brokers": await _brokers(ctx, request)})

    return [overview, tree, whoami, cluster]


def _peek_routes(ctx: ConsoleContext, base: str) -> list[BaseRoute]:
    admin = ctx.admin

    @api_route(f"{base}/peek", ["GET"], "The next messages of a subscription (its cursor does not move)",
               query=(("subscription", "string"), ("count", "integer")))
    async def peek(request: Request) -> Response:
        sub_name = request.query_params.get("subscription", "")
        count = query_int(request, "count") or 10
        if not 1 <= count <= CONSOLE_PEEK_COUNT_MAX:
            raise AdminError(412, f"count must be 1..{CONSOLE_PEEK_COUNT_MAX}")
        messages: list[dict[str, Any]] = []
        for n in await targets(admin, topic_of(request)):
            topic = await load(admin, n)
            if is_system_cursor(sub_name) or sub_name not in topic.subscription_names():
                raise AdminError(404, f"Subscription {sub_name} not found")
            subscription = topic.subscriptions.get(sub_name) or await topic.subscription(
                sub_name, durable=True, initial_mark_delete=topic.log.last_position)
            messages += await _peek(topic, subscription.cursor, count - len(messages))
            if len(messages) >= count:
                break
        return json_response({"subscription": sub_name, "messages": messages})

    return [peek]


def _topic_routes(ctx: ConsoleContext) -> list[BaseRoute]:
    admin = ctx.admin
    ledgers_store = LedgerMetadataStore(MetadataStoreAdapter(admin.resources.store))

    base = "/topic/{tenant}/{namespace}/{topic}"

    @api_route(base, ["GET"], "A topic (or partitioned topic) with producers, subscriptions, partitions, rates")
    async def topic_page(request: Request) -> Response:
        name = topic_of(request)
        names = await targets(admin, name)
        loaded = [await load(admin, n) for n in names]
        for topic in loaded:
            await _open_subscriptions(topic)
        per = [topic_stats(t) for t in loaded]
        partitioned = names != [name]
        summary = partitioned_stats(per, len(names)) if partitioned else per[0]
        subscriptions: dict[str, dict[str, Any]] = {}
        for n, stats in zip(names, per, strict=True):
            for sub_name, sub in stats["subscriptions"].items():
                merged = subscriptions.setdefault(sub_name, {
                    "name": sub_name, "type": sub["type"], "msgBacklog": 0, "unackedMessages": 0,
                    "msgRateOut": 0.0, "msgOutCounter": 0, "consumers": []})
                for key in ("msgBacklog", "unackedMessages", "msgRateOut", "msgOutCounter"):
                    merged[key] += sub[key]
                merged["consumers"] += [dict(c, partition=str(n)) for c in sub["consumers"]]
        partitions = []
        for n, stats in zip(names, per, strict=True):
            recent = ctx.history.topic(str(n))
            partitions.append({
                "name": str(n), "msgInCounter": stats["msgInCounter"], "storageSize": stats["storageSize"],
                "backlog": sum(s["msgBacklog"] for s in stats["subscriptions"].values()),
                "producers": len(stats["publishers"]), "subscriptions": len(stats["subscriptions"]),
                "msgRateIn": recent[-1].msg_rate_in if recent else 0.0,
                "msgRateOut": recent[-1].msg_rate_out if recent else 0.0})
        return json_response({
            "name": str(name), "partitions": len(names) if partitioned else 0,
            "storageSize": summary["storageSize"], "backlogSize": summary["backlogSize"],
            "msgInCounter": summary["msgInCounter"], "msgOutCounter": summary["msgOutCounter"],
            "publishers": [p for s in per for p in s["publishers"]],
            "subscriptions": sorted(subscriptions.values(), key=lambda s: s["name"]),
            "partitionRows": partitions,
            "history": _history(ctx.history.topics([str(n) for n in names])),
            "sampleIntervalMs": ctx.sample_interval_ms,
        })

    @api_route(f"{base}/ledgers", ["GET"], "The durability view: ledgers, ensembles, quorums, LAC, state")
    async def ledgers(request: Request) -> Response:
        name = topic_of(request)
        names = await targets(admin, name)
        directory = MetadataBookieDirectory(admin.resources.store)
        writable = frozenset(await directory.available_bookies())
        read_only = frozenset(await directory.read_only_bookies())
        markers = UnderReplicationMarkers(admin.resources.store)
        out = []
        for n in names:
            topic = await load(admin, n)
            out.append(await _topic_ledgers(ledgers_store, topic, writable | read_only, read_only, markers))
        return json_response({"name": str(name), "topics": out,
                              "bookies": {"writable": sorted(map(str, writable)),
                                          "readOnly": sorted(map(str, read_only))}})

    return [topic_page, ledgers, *_peek_routes(ctx, base)]


async def _open_subscriptions(topic: Topic) -> None:
    """Open the durable subscriptions that no consumer attached since the topic loaded, so their
    backlog is shown (their cursors keep their persisted positions; as the admin API does)."""
    for name in topic.subscription_names():
        if name not in topic.subscriptions and not is_system_cursor(name):
            await topic.subscription(name, durable=True, initial_mark_delete=topic.log.last_position)


def _log_state(topic: Topic) -> str:
    log_ = topic.log
    if isinstance(log_, ManagedTopicLog):
        return log_.managed_ledger.state.value
    return "memory"


async def _peek(topic: Topic, cursor: Any, count: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    position = cursor.mark_delete_position.next()
    last = topic.log.last_position
    scanned = 0
    while len(out) < count and not last < position and scanned < CONSOLE_PEEK_SCAN_ENTRIES_MAX:
        entries = await topic.log.read(position, min(count, CONSOLE_PEEK_COUNT_MAX))
        if not entries:
            break
        scanned += len(entries)
        for entry in entries:
            position = entry.position.next()
            if cursor.is_acked(entry.position):
                continue
            metadata, payload = split_stored_entry(entry.payload)
            for index, message in enumerate(decode_entry(metadata, payload)):
                single = message.metadata
                key = single.partition_key if single is not None and single.HasField("partition_key") else (
                    metadata.partition_key if metadata.HasField("partition_key") else None)
                props = single.properties if single is not None else metadata.properties
                out.append({
                    "messageId": f"{entry.position.ledger_id}:{entry.position.entry_id}"
                                 + (f":{index}" if single is not None else ""),
                    "topic": str(topic.name), "publishTime": metadata.publish_time, "key": key,
                    "properties": {p.key: p.value for p in props}, "producer": metadata.producer_name,
                    "size": len(message.payload), "payload": base64.b64encode(message.payload).decode(),
                })
                if len(out) >= count:
                    return out
    return out


async def _topic_ledgers(ledgers_store: LedgerMetadataStore, topic: Topic, registered: frozenset[BookieId],
                         read_only: frozenset[BookieId], markers: UnderReplicationMarkers) -> dict[str, Any]:
    log_ = topic.log
    storage = log_.storage_stats()
    fenced = False
    current_id = -1
    lac = None
    if isinstance(log_, ManagedTopicLog):
        ml = log_.managed_ledger
        fenced = ml.state is MLState.FENCED
        current_id = ml.current_ledger_id
        confirmed = ml.last_confirmed_entry
        lac = confirmed.entry_id if confirmed.ledger_id == current_id else None
    rows = []
    for stats in list(storage.ledgers)[-CONSOLE_LEDGERS_COUNT_MAX:]:
        try:
            metadata = (await ledgers_store.read(stats.ledger_id)).metadata
        except MagnetarError:
            metadata = None
        marker = await markers.get(stats.ledger_id)
        lost = marker.marker.lost if marker is not None else frozenset()
        rows.append(ledger_view(
            LedgerFacts(stats.ledger_id, stats.entries_count, stats.size_bytes, stats.timestamp_ms), metadata,
            registered=registered, read_only=read_only, lost=lost,
            lac=lac if stats.ledger_id == current_id else None, fenced=fenced and stats.ledger_id == current_id))
    return {"name": str(topic.name), "state": _log_state(topic), "ledgers": rows,
            "ledgersShown": len(rows), "ledgersCount": len(storage.ledgers)}
