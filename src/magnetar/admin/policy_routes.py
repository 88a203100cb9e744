"""Namespace and topic policy endpoints, from one table (``SPECS``).

Each ``PolicySpec`` names a Pulsar sub-resource and where its value lives in the namespace
``Policies`` and in the topic's ``TopicPolicies``. For each, the namespace form is
``GET|POST|DELETE /namespaces/{t}/{ns}/{segment}`` and the topic form
``GET|POST|DELETE /persistent/{t}/{ns}/{topic}/{topic_segment}``; GET answers the stored value
(JSON ``null`` when unset), POST stores the body, DELETE removes it (the next level applies).
Backlog quotas are keyed by ``?backlogQuotaType=destination_storage|message_age``
(``backlogQuotaMap`` to read them). A POST of an invalid value is refused with 412, as Pulsar does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from magnetar.admin.common import (
    AdminContext,
    AdminError,
    api_route,
    json_response,
    namespace_of,
    no_content,
    read_body,
    topic_of,
)
from magnetar.base.errors import InvalidArgumentError
from magnetar.catalog.policies import (
    AutoTopicCreationOverride,
    BacklogQuota,
    BacklogQuotaType,
    DelayedDeliveryPolicies,
    Policies,
    PublishRate,
    RetentionPolicies,
    TopicPolicies,
)


def _non_negative(name: str) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if value < 0:
            raise InvalidArgumentError(f"Invalid value for {name}: must be >= 0")

    return check


def _positive(name: str) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if value < 1:
            raise InvalidArgumentError(f"Invalid value for {name}: must be >= 1")

    return check


def _validate_struct(value: Any) -> None:
    value.validate()


def _no_check(value: Any) -> None:
    return None


@dataclass(frozen=True)
class PolicySpec:
    segment: str | None  # namespace sub-resource; None: topic level only
    topic_segment: str | None  # topic sub-resource; None: namespace level only
    body: Any
    validate: Callable[[Any], None]
    ns_get: Callable[[Policies, str], Any]
    ns_set: Callable[[Policies, str, Any], None]
    tp_get: Callable[[TopicPolicies], Any]
    tp_set: Callable[[TopicPolicies, Any], None]
    query: str | None = None  # topic POST may carry the value as this query parameter (Pulsar's messageTTL)


def _attr(name: str) -> tuple[Callable[[Any, str], Any], Callable[[Any, str, Any], None]]:
    return (lambda p, _c: getattr(p, name)), (lambda p, _c, v: setattr(p, name, v))


def _tattr(name: str) -> tuple[Callable[[Any], Any], Callable[[Any, Any], None]]:
    return (lambda p: getattr(p, name)), (lambda p, v: setattr(p, name, v))


def _set_rate(policies: Policies, cluster: str, value: PublishRate | None) -> None:
    if value is None:
        policies.publish_max_message_rate.pop(cluster, None)
    else:
        policies.publish_max_message_rate[cluster] = value


def _topic_delayed_get(p: TopicPolicies) -> DelayedDeliveryPolicies | None:
    if p.delayed_delivery_enabled is None:
        return None
    return DelayedDeliveryPolicies(active=p.delayed_delivery_enabled, tick_time=p.delayed_delivery_tick_time_millis or 1000)


def _topic_delayed_set(p: TopicPolicies, value: DelayedDeliveryPolicies | None) -> None:
    p.delayed_delivery_enabled = None if value is None else value.active
    p.delayed_delivery_tick_time_millis = None if value is None else value.tick_time


def _unsupported_ns_get(p: Policies, cluster: str) -> Any:
    raise AdminError(404, "not a namespace policy")


def _unsupported_ns_set(p: Policies, cluster: str, value: Any) -> None:
    raise AdminError(404, "not a namespace policy")


def _unsupported_tp_get(p: TopicPolicies) -> Any:
    raise AdminError(404, "not a topic policy")


def _unsupported_tp_set(p: TopicPolicies, value: Any) -> None:
    raise AdminError(404, "not a topic policy")


SPECS: tuple[PolicySpec, ...] = (
    PolicySpec("retention", "retention", RetentionPolicies, _validate_struct,
               *_attr("retention_policies"), *_tattr("retention_policies")),
    PolicySpec("messageTTL", "messageTTL", int, _non_negative("messageTTL"),
               *_attr("message_ttl_in_seconds"), *_tattr("message_ttl_in_seconds"), query="messageTTL"),
    PolicySpec("deduplication", "deduplicationEnabled", bool, _no_check,
               *_attr("deduplication_enabled"), *_tattr("deduplication_enabled")),
    PolicySpec("maxProducersPerTopic", "maxProducers", int, _non_negative("maxProducers"),
               *_attr("max_producers_per_topic"), *_tattr("max_producer_per_topic")),
    PolicySpec("maxConsumersPerTopic", "maxConsumers", int, _non_negative("maxConsumers"),
               *_attr("max_consumers_per_topic"), *_tattr("max_consumer_per_topic")),
    PolicySpec("publishRate", "publishRate", PublishRate, _validate_struct,
               lambda p, c: p.publish_max_message_rate.get(c), _set_rate, *_tattr("publish_rate")),
    PolicySpec(None, "maxMessageSize", int, _positive("maxMessageSize"),
               _unsupported_ns_get, _unsupported_ns_set, *_tattr("max_message_size")),
    PolicySpec("delayedDelivery", "delayedDelivery", DelayedDeliveryPolicies, _validate_struct,
               *_attr("delayed_delivery_policies"), _topic_delayed_get, _topic_delayed_set),
    PolicySpec("compactionThreshold", "compactionThreshold", int, _non_negative("compactionThreshold"),
               *_attr("compaction_threshold"), *_tattr("compaction_threshold")),
    PolicySpec("autoTopicCreation", None, AutoTopicCreationOverride, _validate_struct,
               *_attr("auto_topic_creation_override"), _unsupported_tp_get, _unsupported_tp_set),
)

_QUOTA_QUERY = (("backlogQuotaType", "string"),)


def _quota_type(request: Request) -> BacklogQuotaType:
    text = request.query_params.get("backlogQuotaType", BacklogQuotaType.DESTINATION_STORAGE.value)
    try:
        return BacklogQuotaType(text)
    except ValueError:
        raise AdminError(412, f"Invalid backlogQuotaType: {text!r}") from None


def namespace_routes(ctx: AdminContext) -> list[BaseRoute]:
    out: list[BaseRoute] = []
    base = "/namespaces/{tenant}/{namespace}"
    for spec in SPECS:
        if spec.segment is not None:
            out.extend(_namespace_spec_routes(ctx, base, spec))

    @api_route(f"{base}/backlogQuotaMap", ["GET"], "Get the namespace's backlog quotas")
    async def get_quota_map(request: Request) -> Response:
        return json_response((await ctx.resources.policies(namespace_of(request))).backlog_quota_map)

    @api_route(f"{base}/backlogQuota", ["POST"], "Set a backlog quota", body=BacklogQuota, query=_QUOTA_QUERY)
    async def set_quota(request: Request) -> Response:
        kind = _quota_type(request)
        quota = await read_body(request, BacklogQuota)
        assert quota is not None
        quota.validate()
        await ctx.resources.update_policies(namespace_of(request),
                                            lambda p: p.backlog_quota_map.__setitem__(kind.value, quota))
        return no_content()

    @api_route(f"{base}/backlogQuota", ["DELETE"], "Remove a backlog quota", query=_QUOTA_QUERY)
    async def remove_quota(request: Request) -> Response:
        kind = _quota_type(request)
        def change(p: Policies) -> None:
            p.backlog_quota_map.pop(kind.value, None)

        await ctx.resources.update_policies(namespace_of(request), change)
        return no_content()

    return [*out, get_quota_map, set_quota, remove_quota]


def _namespace_spec_routes(ctx: AdminContext, base: str, spec: PolicySpec) -> list[BaseRoute]:
    path = f"{base}/{spec.segment}"

    @api_route(path, ["GET"], f"Get the namespace's {spec.segment} policy")
    async def get_policy(request: Request) -> Response:
        policies = await ctx.resources.policies(namespace_of(request))
        return json_response(spec.ns_get(policies, ctx.cluster))

    @api_route(path, ["POST"], f"Set the namespace's {spec.segment} policy", body=spec.body)
    async def set_policy(request: Request) -> Response:
        value = await read_body(request, spec.body)
        spec.validate(value)
        await ctx.resources.update_policies(namespace_of(request), lambda p: spec.ns_set(p, ctx.cluster, value))
        return no_content()

    @api_route(path, ["DELETE"], f"Remove the namespace's {spec.segment} policy")
    async def remove_policy(request: Request) -> Response:
        await ctx.resources.update_policies(namespace_of(request), lambda p: spec.ns_set(p, ctx.cluster, None))
        return no_content()

    return [get_policy, set_policy, remove_policy]


async def _existing_topic(ctx: AdminContext, request: Request) -> Any:
    topic = topic_of(request)
    if not await ctx.resources.namespace_exists(topic.namespace):
        raise AdminError(404, f"Namespace {topic.namespace} does not exist")
    if not await ctx.service.topic_exists(topic) and not await ctx.service.partitioned.partitions(topic):
        raise AdminError(404, f"Topic {topic} not found")
    return topic


def topic_routes(ctx: AdminContext) -> list[BaseRoute]:
    out: list[BaseRoute] = []
    base = "/persistent/{tenant}/{namespace}/{topic}"
    for spec in SPECS:
        if spec.topic_segment is not None:
            out.extend(_topic_spec_routes(ctx, base, spec))

    @api_route(f"{base}/backlogQuotaMap", ["GET"], "Get the topic's backlog quotas")
    async def get_quota_map(request: Request) -> Response:
        topic = await _existing_topic(ctx, request)
        return json_response((await ctx.resources.topic_policies(topic)).back_log_quota_map or {})

    @api_route(f"{base}/backlogQuota", ["POST"], "Set a topic backlog quota", body=BacklogQuota, query=_QUOTA_QUERY)
    async def set_quota(request: Request) -> Response:
        kind = _quota_type(request)
        topic = await _existing_topic(ctx, request)
        quota = await read_body(request, BacklogQuota)
        assert quota is not None
        quota.validate()

        def change(p: TopicPolicies) -> None:
            p.back_log_quota_map = {**(p.back_log_quota_map or {}), kind.value: quota}

        await ctx.resources.update_topic_policies(topic, change)
        return no_content()

    @api_route(f"{base}/backlogQuota", ["DELETE"], "Remove a topic backlog quota", query=_QUOTA_QUERY)
    async def remove_quota(request: Request) -> Response:
        kind = _quota_type(request)
        topic = await _existing_topic(ctx, request)

        def change(p: TopicPolicies) -> None:
            remaining = {k: v for k, v in (p.back_log_quota_map or {}).items() if k != kind.value}
            p.back_log_quota_map = remaining or None

        await ctx.resources.update_topic_policies(topic, change)
        return no_content()

    return [*out, get_quota_map, set_quota, remove_quota]


def _topic_spec_routes(ctx: AdminContext, base: str, spec: PolicySpec) -> list[BaseRoute]:
    path = f"{base}/{spec.topic_segment}"
    query = ((spec.query, "integer"),) if spec.query else ()

    @api_route(path, ["GET"], f"Get the topic's {spec.topic_segment} override")
    async def get_policy(request: Request) -> Response:
        topic = await _existing_topic(ctx, request)
        return json_response(spec.tp_get(await ctx.resources.topic_policies(topic)))

    @api_route(path, ["POST"], f"Set the topic's {spec.topic_segment} override", body=spec.body, query=query,
               body_required=spec.query is None)
    async def set_policy(request: Request) -> Response:
        topic = await _existing_topic(ctx, request)
        text = request.query_params.get(spec.query) if spec.query else None
        if text is not None:
            try:
                value: Any = msgspec.json.decode(text.encode(), type=spec.body)
            except msgspec.MsgspecError as error:
                raise AdminError(400, f"Invalid {spec.query}: {error}") from None
        else:
            value = await read_body(request, spec.body)
        spec.validate(value)
        await ctx.resources.update_topic_policies(topic, lambda p: spec.tp_set(p, value))
        return no_content()

    @api_route(path, ["DELETE"], f"Remove the topic's {spec.topic_segment} override")
    async def remove_policy(request: Request) -> Response:
        topic = await _existing_topic(ctx, request)
        await ctx.resources.update_topic_policies(topic, lambda p: spec.tp_set(p, None))
        return no_content()

    return [get_policy, set_policy, remove_policy]
