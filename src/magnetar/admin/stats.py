"""Topic stats and internal stats in Pulsar's JSON shapes (``TopicStats``, ``PersistentTopicInternalStats``).

Rates are the last samples taken by the broker's policy check (``broker.metrics.RateMeter``);
counters and sizes are read now. Partitioned stats add up the partitions' numbers and list each
partition under ``partitions``.
"""

from __future__ import annotations

from typing import Any

from magnetar.base.types import Position
from magnetar.broker.dedup import is_system_cursor
from magnetar.broker.managed_log import ManagedSubscriptionCursor, ManagedTopicLog
from magnetar.broker.subscription import Subscription
from magnetar.broker.topic import Topic
from magnetar.managed_ledger.read_only_cursors import read_only_cursors, read_only_holders

_SUB_TYPES = {0: "Exclusive", 1: "Shared", 2: "Failover", 3: "Key_Shared"}


def _address(channel: object) -> str:
    """The client's ``host:port`` (Pulsar's ``address``) when the channel is a connection that knows it."""
    return str(getattr(channel, "peer_address", "") or "")


def _position(position: Any) -> str:
    return f"{position.ledger_id}:{position.entry_id}"


def subscription_stats(topic: Topic, subscription: Subscription) -> dict[str, Any]:
    cursor = subscription.cursor
    out = subscription.dispatched
    return {
        "msgRateOut": out.msg_rate,
        "msgThroughputOut": out.byte_rate,
        "bytesOutCounter": out.byte_count,
        "msgOutCounter": out.msg_count,
        "msgRateExpired": subscription.expired.msg_rate,
        "totalMsgExpired": subscription.expired.msg_count,
        "lastExpireTimestamp": subscription.last_expire_ms,
        "msgBacklog": cursor.backlog_entries(),
        "backlogSize": topic.log.backlog_bytes(cursor.mark_delete_position),
        "unackedMessages": sum(c.pending_count for c in subscription.consumers),
        "type": _SUB_TYPES.get(int(subscription.sub_type), "Exclusive") if subscription.sub_type is not None
        else "Exclusive",
        "isDurable": subscription.durable,
        "consumers": [
            {"consumerName": c.name, "availablePermits": c.permits, "unackedMessages": c.pending_count,
             "address": _address(c.channel)}
            for c in subscription.consumers
        ],
    }


def topic_stats(topic: Topic) -> dict[str, Any]:
    storage = topic.log.storage_stats()
    subscriptions = {name: subscription_stats(topic, sub) for name, sub in sorted(topic.subscriptions.items())
                     if not is_system_cursor(name)}
    published = topic.published
    return {
        "msgRateIn": published.msg_rate,
        "msgThroughputIn": published.byte_rate,
        "msgRateOut": sum(s["msgRateOut"] for s in subscriptions.values()),
        "msgThroughputOut": sum(s["msgThroughputOut"] for s in subscriptions.values()),
        "bytesInCounter": published.byte_count,
        "msgInCounter": published.msg_count,
        "bytesOutCounter": sum(s["bytesOutCounter"] for s in subscriptions.values()),
        "msgOutCounter": sum(s["msgOutCounter"] for s in subscriptions.values()),
        "averageMsgSize": published.byte_count / published.msg_count if published.msg_count else 0.0,
        "storageSize": storage.size_bytes,
        "backlogSize": topic.backlog_bytes(),
        "publishers": [
            {"producerId": p.producer_id, "producerName": p.name, "accessMode": p.access_mode.name.title(),
             "address": _address(p.channel)}
            for p in topic.producers.values()
        ],
        "subscriptions": subscriptions,
        "replication": {remote: replicator.stats() for remote, replicator in sorted(topic.replicators.items())},
        "deduplicationStatus": "Enabled" if topic.policies().deduplication else "Disabled",
        "backlogQuotaExceeded": topic.quota_exceeded is not None,
    }


async def add_read_only_subscriptions(stats: dict[str, Any], topic: Topic) -> dict[str, Any]:
    """On the owner: the subscriptions read-only brokers serve (their persisted cursors) and which
    broker serves each now (``readOnlyBroker``; None while no broker has it open)."""
    log = topic.log
    if not isinstance(log, ManagedTopicLog) or getattr(log, "read_only_ledger", None) is not None:
        return stats
    ml = log.managed_ledger
    cursors = await read_only_cursors(ml.store, ml.name)
    holders = await read_only_holders(ml.store, ml.name)
    last = ml.last_confirmed_entry
    for name, info in sorted(cursors.items()):
        mark_delete = Position(info.mark_delete.ledger_id, info.mark_delete.entry_id)
        stats["subscriptions"].setdefault(name, {
            "msgRateOut": 0.0, "msgThroughputOut": 0.0, "bytesOutCounter": 0, "msgOutCounter": 0,
            "msgBacklog": ml.count_entries(mark_delete, last), "backlogSize": ml.estimated_size_after(mark_delete),
            "markDeletePosition": _position(mark_delete), "isDurable": True, "consumers": [],
            "readOnlyBroker": holders.get(name),
        })
    return stats


def partitioned_stats(partitions: list[dict[str, Any]], count: int) -> dict[str, Any]:
    total: dict[str, Any] = {"metadata": {"partitions": count}, "partitions": {}}
    for key in ("msgRateIn", "msgThroughputIn", "msgRateOut", "msgThroughputOut", "bytesInCounter",
                "msgInCounter", "bytesOutCounter", "msgOutCounter", "storageSize", "backlogSize"):
        total[key] = sum(p[key] for p in partitions)
    total["publishers"] = [pub for p in partitions for pub in p["publishers"]]
    subscriptions: dict[str, dict[str, Any]] = {}
    for p in partitions:
        for name, sub in p["subscriptions"].items():
            merged = subscriptions.setdefault(name, {"msgBacklog": 0, "msgRateOut": 0.0, "consumers": []})
            merged["msgBacklog"] += sub["msgBacklog"]
            merged["msgRateOut"] += sub["msgRateOut"]
            merged["consumers"].extend(sub["consumers"])
    total["subscriptions"] = subscriptions
    replication: dict[str, dict[str, Any]] = {}
    for p in partitions:
        for remote, r in p.get("replication", {}).items():
            merged = replication.setdefault(remote, {"msgRateOut": 0.0, "msgThroughputOut": 0.0,
                                                     "replicationBacklog": 0, "connected": True,
                                                     "replicationDelayInSeconds": 0.0})
            merged["msgRateOut"] += r["msgRateOut"]
            merged["msgThroughputOut"] += r["msgThroughputOut"]
            merged["replicationBacklog"] += r["replicationBacklog"]
            merged["connected"] = merged["connected"] and r["connected"]
            merged["replicationDelayInSeconds"] = max(merged["replicationDelayInSeconds"],
                                                      r["replicationDelayInSeconds"])
    total["replication"] = replication
    return total


def internal_stats(topic: Topic) -> dict[str, Any]:
    log = topic.log
    storage = log.storage_stats()
    ledgers: list[dict[str, Any]] = [{"ledgerId": lg.ledger_id, "entries": lg.entries_count, "size": lg.size_bytes, "offloaded": False}
               for lg in storage.ledgers]
    cursors: dict[str, Any] = {}
    for name, subscription in sorted(topic.subscriptions.items()):
        cursors[name] = _cursor_stats(subscription)
    stats: dict[str, Any] = {
        "entriesAddedCounter": topic.published.msg_count,
        "numberOfEntries": storage.entries_count,
        "totalSize": storage.size_bytes,
        "currentLedgerEntries": ledgers[-1]["entries"] if ledgers else 0,
        "currentLedgerSize": ledgers[-1]["size"] if ledgers else 0,
        "lastConfirmedEntry": _position(log.last_position),
        "state": "LedgerOpened",
        "ledgers": ledgers,
        "cursors": cursors,
    }
    if isinstance(log, ManagedTopicLog):
        offloads = {i.ledger_id: i.offload for i in log.managed_ledger.ledger_infos()}
        for ledger in ledgers:  # tiered storage: Pulsar's ``offloaded``, and whether bookies still hold it
            context = offloads.get(ledger["ledgerId"])
            ledger["offloaded"] = context is not None and context.complete
            if context is not None:
                ledger["offloadUid"] = context.uid
                ledger["offloadDriver"] = context.driver
                ledger["bookieCopyDeleted"] = context.bookie_deleted
        stats["state"] = "".join(w.title() for w in log.managed_ledger.state.value.split("_"))
        stats["lastLedgerCreatedTimestamp"] = storage.ledgers[-1].timestamp_ms if storage.ledgers else 0
    return stats


def _cursor_stats(subscription: Subscription) -> dict[str, Any]:
    cursor = subscription.cursor
    dispatcher = subscription.dispatcher
    read = dispatcher.read_position if dispatcher is not None else cursor.mark_delete_position.next()
    out: dict[str, Any] = {
        "markDeletePosition": _position(cursor.mark_delete_position),
        "readPosition": _position(read),
        "messagesConsumedCounter": subscription.dispatched.msg_count,
        "numberOfEntriesSinceFirstNotAckedMessage": cursor.backlog_entries(),
        "state": "Open" if subscription.durable else "NonDurable",
        "individuallyDeletedMessages": "[]",
    }
    if isinstance(cursor, ManagedSubscriptionCursor):
        managed = cursor.managed_cursor
        ranges = managed.individually_deleted_ranges()
        out["individuallyDeletedMessages"] = "[" + ", ".join(
            f"[{_position(a)}..{_position(b)}]" for a, b in ranges) + "]"
        out["cursorLedger"] = managed.cursor_ledger_id
        out["persistedMarkDeletePosition"] = _position(managed.persisted_mark_delete_position)
    return out
