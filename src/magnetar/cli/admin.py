"""``magnetar admin``: the admin REST API (``/admin/v2``) from the command line, like ``pulsar-admin``.

Groups: ``clusters``, ``tenants``, ``namespaces``, ``topics``. Lists print as rich tables, documents
(policies, stats) as JSON. The broker's HTTP address comes from ``--url`` or
``MAGNETAR_ADMIN_URL`` (default ``http://127.0.0.1:8080``, a standalone's); ``--cluster-dir DIR``
takes the first live broker of the ``magnetar cluster up --dir DIR`` cluster. A refused request prints the broker's
``reason`` and exits with 1 (2 when the broker cannot be reached). Topics may be given short
(``my-topic`` is ``persistent://public/default/my-topic``), as the clients accept them.
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import typer
from rich.console import Console

from magnetar.base.errors import InvalidArgumentError
from magnetar.base.types import TopicName
from magnetar.cli.credentials import Credentials
from magnetar.cli.output import print_table

DEFAULT_URL = "http://127.0.0.1:8080"
REQUEST_TIMEOUT_S = 30.0

admin_app = typer.Typer(help="Manage clusters, tenants, namespaces, topics and policies (REST /admin/v2).",
                        no_args_is_help=True)
clusters_app = typer.Typer(help="Clusters.", no_args_is_help=True)
tenants_app = typer.Typer(help="Tenants.", no_args_is_help=True)
namespaces_app = typer.Typer(help="Namespaces and namespace policies.", no_args_is_help=True)
topics_app = typer.Typer(help="Persistent topics, partitions, subscriptions, topic policies.", no_args_is_help=True)
for _name, _group in (("clusters", clusters_app), ("tenants", tenants_app), ("namespaces", namespaces_app),
                      ("topics", topics_app)):
    admin_app.add_typer(_group, name=_name)

console = Console(soft_wrap=True)  # long names and URLs stay on one line, whole


class _KeepMethodRedirects(urllib.request.HTTPRedirectHandler):
    """Follows 307/308 (a broker that does not own a topic sends the request to its owner) with
    the same method and body, as HTTP defines them; urllib alone follows them for GET only."""

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> urllib.request.Request | None:
        if code in (307, 308):
            return urllib.request.Request(newurl, data=req.data, method=req.get_method(),
                                          headers=dict(req.header_items()), origin_req_host=req.origin_req_host,
                                          unverifiable=True)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _opener(context: ssl.SSLContext | None) -> urllib.request.OpenerDirector:
    """Follows 307/308 keeping method and body; ``context`` verifies https:// brokers."""
    if context is None:
        return urllib.request.build_opener(_KeepMethodRedirects)
    return urllib.request.build_opener(_KeepMethodRedirects, urllib.request.HTTPSHandler(context=context))


@dataclass
class _Api:
    url: str
    credentials: Credentials

    def call(self, method: str, path: str, body: Any = None, query: str = "") -> Any:
        raw = self.exchange(method, path, body, query)[1]
        return json.loads(raw) if raw else None

    def exchange(self, method: str, path: str, body: Any = None, query: str = "") -> tuple[dict[str, str], bytes]:
        """The reply's headers and raw body (a refusal is printed and ends the command)."""
        data = None if body is None else json.dumps(body).encode()
        target = f"{self.url.rstrip('/')}/admin/v2{path}" + (f"?{query}" if query else "")
        headers = {"Content-Type": "application/json"}
        authorization = self.credentials.authorization_header()
        if authorization is not None:
            headers["Authorization"] = authorization
        request = urllib.request.Request(target, data=data, method=method, headers=headers)
        context = self.credentials.ssl_context() if self.url.startswith("https://") else None
        try:
            with _opener(context).open(request, timeout=REQUEST_TIMEOUT_S) as reply:
                return dict(reply.headers), reply.read()
        except urllib.error.HTTPError as error:
            raw = error.read()
            try:
                reason = json.loads(raw)["reason"]
            except (ValueError, KeyError, TypeError):
                reason = raw.decode(errors="replace") or error.reason
            typer.echo(f"error {error.code}: {reason}", err=True)
            raise typer.Exit(1) from None
        except (urllib.error.URLError, OSError) as error:
            hint = ("; for a `magnetar cluster up` cluster give --cluster-dir DIR (or --url from "
                    "`magnetar cluster status`)") if self.url == DEFAULT_URL else ""
            typer.echo(f"error: cannot reach {self.url}: {error}{hint}", err=True)
            raise typer.Exit(2) from None


_state: dict[str, Any] = {"url": os.environ.get("MAGNETAR_ADMIN_URL", DEFAULT_URL), "credentials": Credentials()}


def _api() -> _Api:
    return _Api(_state["url"], _state["credentials"])


@admin_app.callback()
def _options(
    url: str = typer.Option(None, "--url", help=f"broker HTTP URL (default $MAGNETAR_ADMIN_URL or {DEFAULT_URL})"),
    cluster_dir: str = typer.Option(None, "--cluster-dir",
                                    help="a `magnetar cluster up --dir` directory: use its brokers' URLs"),
    token: str = typer.Option(None, "--token", envvar="MAGNETAR_TOKEN", help="JWT, or file:///path to one"),
    auth_plugin: str = typer.Option(None, "--auth-plugin", help="token, basic or tls (or Pulsar's class names)"),
    auth_params: str = typer.Option(None, "--auth-params", help="token:JWT, user:password, tlsCertFile:..,tlsKeyFile:.."),
    tls_trust_cert: str = typer.Option(None, "--tls-trust-cert", help="CA file for https:// URLs"),
    tls_cert: str = typer.Option(None, "--tls-cert", help="client certificate (mTLS)"),
    tls_key: str = typer.Option(None, "--tls-key", help="client certificate's key"),
) -> None:
    if url:
        _state["url"] = url
    elif cluster_dir:
        _state["url"] = _cluster_admin_url(cluster_dir)
    try:
        _state["credentials"] = Credentials.from_options(token=token, auth_plugin=auth_plugin, auth_params=auth_params,
                                                         tls_trust_cert=tls_trust_cert, tls_cert=tls_cert,
                                                         tls_key=tls_key)
    except InvalidArgumentError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None


def _cluster_admin_url(directory: str) -> str:
    """The HTTP URL of the first live broker of the local cluster in ``directory`` (cluster.json)."""
    from pathlib import Path

    from magnetar.runtime.cluster import STATE_FILE, LocalCluster

    if not (Path(directory) / STATE_FILE).exists():
        typer.echo(f"error: no cluster in {directory} (no {STATE_FILE}); start one with "
                   f"`magnetar cluster up --dir {directory}`", err=True)
        raise typer.Exit(2)
    brokers = LocalCluster.load(Path(directory)).of_kind("broker")
    for broker in brokers:
        if broker.alive():
            return f"http://127.0.0.1:{broker.http_port}"
    typer.echo(f"error: no broker of the cluster in {directory} is running (`magnetar cluster status --dir "
               f"{directory}`)", err=True)
    raise typer.Exit(2)


def _table(title: str, column: str, rows: list[str]) -> None:
    print_table(console, title, (column,), [(row,) for row in rows])


def _json(value: Any) -> None:
    if console.is_terminal:
        console.print_json(json.dumps(value))
    else:  # piped: plain JSON for jq, never re-wrapped
        typer.echo(json.dumps(value, indent=2))


def _done(what: str) -> None:
    typer.echo(what)


def _ns(namespace: str) -> str:
    tenant, sep, local = namespace.partition("/")
    if not sep or not tenant or not local or "/" in local:
        typer.echo(f"error: namespace must be tenant/namespace, got {namespace!r}", err=True)
        raise typer.Exit(2)
    return f"/namespaces/{tenant}/{local}"


def _topic(topic: str) -> str:
    try:
        name = TopicName.parse(topic)
    except InvalidArgumentError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
    return f"/persistent/{name.namespace}/{quote(name.local_name, safe='')}"


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        typer.echo(f"error: not JSON: {text!r}", err=True)
        raise typer.Exit(2) from None


# --- clusters --------------------------------------------------------------------------------------


@clusters_app.command("list")
def clusters_list() -> None:
    """List the clusters."""
    _table("clusters", "cluster", _api().call("GET", "/clusters"))


@clusters_app.command("get")
def clusters_get(cluster: str) -> None:
    """Show a cluster's configuration."""
    _json(_api().call("GET", f"/clusters/{quote(cluster, safe='')}"))


# --- tenants ---------------------------------------------------------------------------------------


@tenants_app.command("list")
def tenants_list() -> None:
    """List the tenants."""
    _table("tenants", "tenant", _api().call("GET", "/tenants"))


@tenants_app.command("get")
def tenants_get(tenant: str) -> None:
    """Show a tenant's admin roles and allowed clusters."""
    _json(_api().call("GET", f"/tenants/{quote(tenant, safe='')}"))


def _tenant_info(admin_roles: str, allowed_clusters: str) -> dict[str, list[str]]:
    return {"adminRoles": [r for r in admin_roles.split(",") if r],
            "allowedClusters": [c for c in allowed_clusters.split(",") if c]}


@tenants_app.command("create")
def tenants_create(tenant: str,
                   admin_roles: str = typer.Option("", "--admin-roles", "-r", help="comma-separated roles"),
                   allowed_clusters: str = typer.Option("standalone", "--allowed-clusters", "-c",
                                                        help="comma-separated clusters")) -> None:
    """Create a tenant."""
    _api().call("PUT", f"/tenants/{quote(tenant, safe='')}", _tenant_info(admin_roles, allowed_clusters))
    _done(f"created tenant {tenant}")


@tenants_app.command("update")
def tenants_update(tenant: str,
                   admin_roles: str = typer.Option("", "--admin-roles", "-r"),
                   allowed_clusters: str = typer.Option("standalone", "--allowed-clusters", "-c")) -> None:
    """Replace a tenant's admin roles and allowed clusters."""
    _api().call("POST", f"/tenants/{quote(tenant, safe='')}", _tenant_info(admin_roles, allowed_clusters))
    _done(f"updated tenant {tenant}")


@tenants_app.command("delete")
def tenants_delete(tenant: str) -> None:
    """Delete a tenant (it must have no namespaces)."""
    _api().call("DELETE", f"/tenants/{quote(tenant, safe='')}")
    _done(f"deleted tenant {tenant}")


# --- namespaces ------------------------------------------------------------------------------------


@namespaces_app.command("list")
def namespaces_list(tenant: str) -> None:
    """List a tenant's namespaces."""
    _table(f"namespaces of {tenant}", "namespace", _api().call("GET", f"/namespaces/{quote(tenant, safe='')}"))


@namespaces_app.command("create")
def namespaces_create(namespace: str) -> None:
    """Create a namespace (tenant/namespace)."""
    _api().call("PUT", _ns(namespace))
    _done(f"created namespace {namespace}")


@namespaces_app.command("delete")
def namespaces_delete(namespace: str, force: bool = typer.Option(False, "--force", help="delete its topics too")) -> None:
    """Delete a namespace."""
    _api().call("DELETE", _ns(namespace), query="force=true" if force else "")
    _done(f"deleted namespace {namespace}")


@namespaces_app.command("policies")
def namespaces_policies(namespace: str) -> None:
    """Show every policy of a namespace."""
    _json(_api().call("GET", _ns(namespace)))


@namespaces_app.command("topics")
def namespaces_topics(namespace: str) -> None:
    """List the topics of a namespace."""
    _table(f"topics of {namespace}", "topic", _api().call("GET", f"{_ns(namespace)}/topics"))


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


@namespaces_app.command("permissions")
def namespaces_permissions(namespace: str) -> None:
    """Show the roles granted actions on a namespace (and the subscriptions' role lists)."""
    _json({"permissions": _api().call("GET", f"{_ns(namespace)}/permissions"),
           "subscription_permissions": _api().call("GET", f"{_ns(namespace)}/permissions/subscription")})


@namespaces_app.command("grant-permission")
def namespaces_grant_permission(namespace: str, role: str = typer.Option(..., "--role"),
                                actions: str = typer.Option(..., "--actions",
                                                            help="comma-separated: produce,consume,functions")) -> None:
    """Grant a role actions on a namespace (replacing what it had)."""
    _api().call("POST", f"{_ns(namespace)}/permissions/{quote(role, safe='')}", _csv(actions))
    _done(f"granted {role} {actions} on {namespace}")


@namespaces_app.command("revoke-permission")
def namespaces_revoke_permission(namespace: str, role: str = typer.Option(..., "--role")) -> None:
    """Revoke a role's permissions on a namespace."""
    _api().call("DELETE", f"{_ns(namespace)}/permissions/{quote(role, safe='')}")
    _done(f"revoked {role} on {namespace}")


@namespaces_app.command("grant-subscription-permission")
def namespaces_grant_subscription_permission(namespace: str, subscription: str = typer.Option(..., "--subscription"),
                                             roles: str = typer.Option(..., "--roles", help="comma-separated")) -> None:
    """Let only these roles (with consume) use a subscription."""
    _api().call("POST", f"{_ns(namespace)}/permissions/subscription/{quote(subscription, safe='')}", _csv(roles))
    _done(f"subscription {subscription} of {namespace} limited to {roles}")


@namespaces_app.command("revoke-subscription-permission")
def namespaces_revoke_subscription_permission(namespace: str,
                                              subscription: str = typer.Option(..., "--subscription"),
                                              role: str = typer.Option(..., "--role")) -> None:
    """Remove a role from a subscription's role list."""
    _api().call("DELETE", f"{_ns(namespace)}/permissions/{quote(subscription, safe='')}/{quote(role, safe='')}")
    _done(f"revoked {role} on subscription {subscription} of {namespace}")


def _retention(time_minutes: int, size_mb: int) -> dict[str, int]:
    return {"retentionTimeInMinutes": time_minutes, "retentionSizeInMB": size_mb}


def _quota(limit_size: int | None, limit_time: int | None, policy: str) -> dict[str, Any]:
    return {"limitSize": limit_size, "limitTime": limit_time, "policy": policy}


_QUOTA_POLICY_HELP = "producer_request_hold | producer_exception | consumer_backlog_eviction"
_QUOTA_TYPE_HELP = "destination_storage (size) | message_age (time)"


@namespaces_app.command("set-retention")
def namespaces_set_retention(namespace: str,
                             time_minutes: int = typer.Option(..., "--time-minutes", "-t", help="-1: forever"),
                             size_mb: int = typer.Option(..., "--size-mb", "-s", help="-1: no bound")) -> None:
    """Keep consumed messages this long / up to this size."""
    _api().call("POST", f"{_ns(namespace)}/retention", _retention(time_minutes, size_mb))
    _done(f"retention of {namespace} set")


@namespaces_app.command("set-message-ttl")
def namespaces_set_message_ttl(namespace: str, seconds: int) -> None:
    """Expire unacknowledged messages older than this (0: never)."""
    _api().call("POST", f"{_ns(namespace)}/messageTTL", seconds)
    _done(f"message TTL of {namespace} set to {seconds} s")


@namespaces_app.command("set-backlog-quota")
def namespaces_set_backlog_quota(namespace: str,
                                 limit_size: int = typer.Option(None, "--limit-size", help="bytes"),
                                 limit_time: int = typer.Option(None, "--limit-time", help="seconds"),
                                 policy: str = typer.Option("producer_request_hold", "--policy", help=_QUOTA_POLICY_HELP),
                                 quota_type: str = typer.Option("destination_storage", "--type",
                                                                help=_QUOTA_TYPE_HELP)) -> None:
    """Set a backlog quota and what happens when it is reached."""
    _api().call("POST", f"{_ns(namespace)}/backlogQuota", _quota(limit_size, limit_time, policy),
                query=f"backlogQuotaType={quota_type}")
    _done(f"backlog quota ({quota_type}) of {namespace} set")


@namespaces_app.command("remove-backlog-quota")
def namespaces_remove_backlog_quota(namespace: str, quota_type: str = typer.Option("destination_storage", "--type",
                                                                                   help=_QUOTA_TYPE_HELP)) -> None:
    """Remove a backlog quota."""
    _api().call("DELETE", f"{_ns(namespace)}/backlogQuota", query=f"backlogQuotaType={quota_type}")
    _done(f"backlog quota ({quota_type}) of {namespace} removed")


_NS_POLICIES = ("retention, messageTTL, backlogQuotaMap, deduplication, maxProducersPerTopic, maxConsumersPerTopic, "
                "publishRate, delayedDelivery, autoTopicCreation")


@namespaces_app.command("get-policy")
def namespaces_get_policy(namespace: str, policy: str = typer.Argument(..., help=_NS_POLICIES)) -> None:
    """Show one namespace policy (null: not set)."""
    _json(_api().call("GET", f"{_ns(namespace)}/{policy}"))


@namespaces_app.command("set-policy")
def namespaces_set_policy(namespace: str, policy: str = typer.Argument(..., help=_NS_POLICIES),
                          value: str = typer.Argument(..., help="JSON, e.g. true, 5 or {...}")) -> None:
    """Set one namespace policy to a JSON value (e.g. ``deduplication true``)."""
    _api().call("POST", f"{_ns(namespace)}/{policy}", _value(value))
    _done(f"{policy} of {namespace} set")


@namespaces_app.command("remove-policy")
def namespaces_remove_policy(namespace: str, policy: str = typer.Argument(..., help=_NS_POLICIES)) -> None:
    """Remove one namespace policy (the broker default applies)."""
    _api().call("DELETE", f"{_ns(namespace)}/{policy}")
    _done(f"{policy} of {namespace} removed")


# --- topics ----------------------------------------------------------------------------------------


@topics_app.command("list")
def topics_list(namespace: str) -> None:
    """List the non-partitioned topics and partitions of a namespace."""
    tenant, _, local = namespace.partition("/")
    _ns(namespace)
    _table(f"topics of {namespace}", "topic", _api().call("GET", f"/persistent/{tenant}/{local}"))


@topics_app.command("list-partitioned")
def topics_list_partitioned(namespace: str) -> None:
    """List the partitioned topics of a namespace."""
    tenant, _, local = namespace.partition("/")
    _ns(namespace)
    _table(f"partitioned topics of {namespace}", "topic", _api().call("GET", f"/persistent/{tenant}/{local}/partitioned"))


@topics_app.command("create")
def topics_create(topic: str) -> None:
    """Create a non-partitioned topic."""
    _api().call("PUT", _topic(topic))
    _done(f"created {topic}")


@topics_app.command("delete")
def topics_delete(topic: str, force: bool = typer.Option(False, "--force", help="disconnect its clients")) -> None:
    """Delete a non-partitioned topic."""
    _api().call("DELETE", _topic(topic), query="force=true" if force else "")
    _done(f"deleted {topic}")


@topics_app.command("create-partitioned")
def topics_create_partitioned(topic: str, partitions: int) -> None:
    """Create a partitioned topic."""
    _api().call("PUT", f"{_topic(topic)}/partitions", partitions)
    _done(f"created {topic} with {partitions} partitions")


@topics_app.command("update-partitioned")
def topics_update_partitioned(topic: str, partitions: int) -> None:
    """Raise the partition count of a partitioned topic."""
    _api().call("POST", f"{_topic(topic)}/partitions", partitions)
    _done(f"{topic} now has {partitions} partitions")


@topics_app.command("get-partitions")
def topics_get_partitions(topic: str) -> None:
    """Show the partition count (0: not partitioned)."""
    _json(_api().call("GET", f"{_topic(topic)}/partitions"))


@topics_app.command("delete-partitioned")
def topics_delete_partitioned(topic: str, force: bool = typer.Option(False, "--force")) -> None:
    """Delete a partitioned topic and its partitions."""
    _api().call("DELETE", f"{_topic(topic)}/partitions", query="force=true" if force else "")
    _done(f"deleted {topic}")


@topics_app.command("stats")
def topics_stats(topic: str, as_json: bool = typer.Option(False, "--json", help="the whole document")) -> None:
    """Rates, backlog, storage, publishers and subscriptions of a topic."""
    stats = _api().call("GET", f"{_topic(topic)}/stats")
    if as_json:
        _json(stats)
        return
    print_table(console, f"stats of {topic}",
                ("msgRateIn", "msgRateOut", "msgInCounter", "storageSize", "backlogSize", "publishers"),
                [(f"{stats['msgRateIn']:.1f}", f"{stats['msgRateOut']:.1f}", str(stats["msgInCounter"]),
                  str(stats["storageSize"]), str(stats["backlogSize"]), str(len(stats["publishers"])))])
    print_table(console, "subscriptions", ("subscription", "type", "msgBacklog", "msgRateOut", "consumers"),
                [(name, str(sub.get("type", "")), str(sub["msgBacklog"]), f"{sub['msgRateOut']:.1f}",
                  str(len(sub["consumers"]))) for name, sub in stats["subscriptions"].items()])
    if stats.get("replication"):
        print_table(console, "replication", ("remote", "connected", "backlog", "msgRateOut", "delay s", "last error"),
                    [(remote, str(r["connected"]), str(r["replicationBacklog"]), f"{r['msgRateOut']:.1f}",
                      f"{r['replicationDelayInSeconds']:.3f}", r.get("lastError", "")) for remote, r in
                     stats["replication"].items()])


@topics_app.command("internal-stats")
def topics_internal_stats(topic: str) -> None:
    """Ledgers and cursors of a topic (one partition of a partitioned topic)."""
    _json(_api().call("GET", f"{_topic(topic)}/internalStats"))


@topics_app.command("unload")
def topics_unload(topic: str) -> None:
    """Unload a topic: clients reconnect and it loads again."""
    _api().call("PUT", f"{_topic(topic)}/unload")
    _done(f"unloaded {topic}")


@topics_app.command("subscriptions")
def topics_subscriptions(topic: str) -> None:
    """List the subscriptions of a topic."""
    _table(f"subscriptions of {topic}", "subscription", _api().call("GET", f"{_topic(topic)}/subscriptions"))


def _message_id(text: str) -> dict[str, int] | None:
    if text == "latest":
        return None
    if text == "earliest":
        return {"ledgerId": -1, "entryId": -1}
    ledger, sep, entry = text.partition(":")
    if not sep or not ledger.lstrip("-").isdigit() or not entry.lstrip("-").isdigit():
        typer.echo(f"error: message id must be earliest, latest or ledger:entry, got {text!r}", err=True)
        raise typer.Exit(2)
    return {"ledgerId": int(ledger), "entryId": int(entry)}


@topics_app.command("create-subscription")
def topics_create_subscription(topic: str, subscription: str,
                               message_id: str = typer.Option("latest", "--message-id", "-m",
                                                              help="earliest | latest | ledger:entry")) -> None:
    """Create a durable subscription."""
    _api().call("PUT", f"{_topic(topic)}/subscription/{quote(subscription, safe='')}", _message_id(message_id))
    _done(f"created subscription {subscription} on {topic}")


@topics_app.command("unsubscribe")
def topics_unsubscribe(topic: str, subscription: str, force: bool = typer.Option(False, "--force")) -> None:
    """Delete a subscription."""
    _api().call("DELETE", f"{_topic(topic)}/subscription/{quote(subscription, safe='')}",
                query="force=true" if force else "")
    _done(f"deleted subscription {subscription} of {topic}")


@topics_app.command("skip")
def topics_skip(topic: str, subscription: str, count: int) -> None:
    """Skip the next COUNT unacknowledged messages of a subscription."""
    _api().call("POST", f"{_topic(topic)}/subscription/{quote(subscription, safe='')}/skip/{count}")
    _done(f"skipped {count} on {subscription}")


@topics_app.command("clear-backlog")
def topics_clear_backlog(topic: str, subscription: str) -> None:
    """Acknowledge everything in a subscription's backlog."""
    _api().call("POST", f"{_topic(topic)}/subscription/{quote(subscription, safe='')}/skip_all")
    _done(f"cleared the backlog of {subscription}")


@topics_app.command("expire-messages")
def topics_expire(topic: str, seconds: int,
                  subscription: str = typer.Option(None, "--subscription", "-s", help="default: all subscriptions")) -> None:
    """Expire messages older than SECONDS."""
    if subscription:
        path = f"{_topic(topic)}/subscription/{quote(subscription, safe='')}/expireMessages/{seconds}"
    else:
        path = f"{_topic(topic)}/all_subscription/expireMessages/{seconds}"
    _api().call("POST", path)
    _done(f"expired messages older than {seconds} s")


@topics_app.command("reset-cursor")
def topics_reset_cursor(topic: str, subscription: str,
                        time_ms: int = typer.Option(None, "--time", "-t", help="publish time, ms since the epoch"),
                        message_id: str = typer.Option(None, "--message-id", "-m", help="earliest | ledger:entry")) -> None:
    """Move a subscription to a publish time or a message id (consumers reconnect there)."""
    base = f"{_topic(topic)}/subscription/{quote(subscription, safe='')}/resetcursor"
    if (time_ms is None) == (message_id is None):
        typer.echo("error: give exactly one of --time and --message-id", err=True)
        raise typer.Exit(2)
    if time_ms is not None:
        _api().call("POST", f"{base}/{time_ms}")
    else:
        _api().call("POST", base, _message_id(message_id) or {"ledgerId": 2**63 - 1, "entryId": 2**63 - 1})
    _done(f"reset {subscription}")


@topics_app.command("permissions")
def topics_permissions(topic: str) -> None:
    """Show the roles granted actions on a topic (its namespace's grants included)."""
    _json(_api().call("GET", f"{_topic(topic)}/permissions"))


@topics_app.command("grant-permission")
def topics_grant_permission(topic: str, role: str = typer.Option(..., "--role"),
                            actions: str = typer.Option(..., "--actions", help="comma-separated: produce,consume")) -> None:
    """Grant a role actions on a topic (in addition to its namespace grants)."""
    _api().call("POST", f"{_topic(topic)}/permissions/{quote(role, safe='')}", _csv(actions))
    _done(f"granted {role} {actions} on {topic}")


@topics_app.command("revoke-permission")
def topics_revoke_permission(topic: str, role: str = typer.Option(..., "--role")) -> None:
    """Revoke a role's topic-level permissions."""
    _api().call("DELETE", f"{_topic(topic)}/permissions/{quote(role, safe='')}")
    _done(f"revoked {role} on {topic}")


_TOPIC_POLICIES = ("retention, messageTTL, backlogQuotaMap, deduplicationEnabled, maxProducers, maxConsumers, "
                   "publishRate, maxMessageSize, delayedDelivery")


@topics_app.command("set-retention")
def topics_set_retention(topic: str, time_minutes: int = typer.Option(..., "--time-minutes", "-t"),
                         size_mb: int = typer.Option(..., "--size-mb", "-s")) -> None:
    """Topic-level retention (overrides the namespace's)."""
    _api().call("POST", f"{_topic(topic)}/retention", _retention(time_minutes, size_mb))
    _done(f"retention of {topic} set")


@topics_app.command("set-message-ttl")
def topics_set_message_ttl(topic: str, seconds: int) -> None:
    """Topic-level message TTL."""
    _api().call("POST", f"{_topic(topic)}/messageTTL", query=f"messageTTL={seconds}")
    _done(f"message TTL of {topic} set to {seconds} s")


@topics_app.command("set-backlog-quota")
def topics_set_backlog_quota(topic: str, limit_size: int = typer.Option(None, "--limit-size"),
                             limit_time: int = typer.Option(None, "--limit-time"),
                             policy: str = typer.Option("producer_request_hold", "--policy", help=_QUOTA_POLICY_HELP),
                             quota_type: str = typer.Option("destination_storage", "--type", help=_QUOTA_TYPE_HELP)) -> None:
    """Topic-level backlog quota."""
    _api().call("POST", f"{_topic(topic)}/backlogQuota", _quota(limit_size, limit_time, policy),
                query=f"backlogQuotaType={quota_type}")
    _done(f"backlog quota ({quota_type}) of {topic} set")


@topics_app.command("get-policy")
def topics_get_policy(topic: str, policy: str = typer.Argument(..., help=_TOPIC_POLICIES)) -> None:
    """Show one topic-level policy (null: inherited)."""
    _json(_api().call("GET", f"{_topic(topic)}/{policy}"))


@topics_app.command("set-policy")
def topics_set_policy(topic: str, policy: str = typer.Argument(..., help=_TOPIC_POLICIES),
                      value: str = typer.Argument(..., help="JSON value")) -> None:
    """Set one topic-level policy to a JSON value (e.g. ``maxMessageSize 1024``)."""
    _api().call("POST", f"{_topic(topic)}/{policy}", _value(value))
    _done(f"{policy} of {topic} set")


@topics_app.command("remove-policy")
def topics_remove_policy(topic: str, policy: str = typer.Argument(..., help=_TOPIC_POLICIES)) -> None:
    """Remove one topic-level policy (the namespace's applies)."""
    _api().call("DELETE", f"{_topic(topic)}/{policy}")
    _done(f"{policy} of {topic} removed")


# --- bookies (racks) and brokers (load balancer), as pulsar-admin names them ---------------------

bookies_app = typer.Typer(help="Bookie racks (racks-info).", no_args_is_help=True)
brokers_app = typer.Typer(help="Brokers: the load balancer's leader and decisions.", no_args_is_help=True)
admin_app.add_typer(bookies_app, name="bookies")
admin_app.add_typer(brokers_app, name="brokers")


@bookies_app.command("racks-placement")
def bookies_racks_placement() -> None:
    """Show the rack of every bookie, by group."""
    _json(_api().call("GET", "/bookies/racks-info"))


@bookies_app.command("get-bookie-rack")
def bookies_get_rack(bookie: str = typer.Option(..., "--bookie", help="host:port")) -> None:
    """Show one bookie's rack."""
    _json(_api().call("GET", f"/bookies/racks-info/{quote(bookie, safe=':')}"))


@bookies_app.command("set-bookie-rack")
def bookies_set_rack(bookie: str = typer.Option(..., "--bookie", help="host:port"),
                     rack: str = typer.Option(..., "--rack", help="/rack or /region/rack"),
                     hostname: str = typer.Option("", "--hostname"),
                     group: str = typer.Option("default", "--group"),
                     region: str = typer.Option("", "--region", help="the region, when --rack does not name it")) -> None:
    """Put a bookie in a rack (and region): new ledgers spread each write set over distinct
    regions, then distinct racks."""
    _api().call("POST", f"/bookies/racks-info/{quote(bookie, safe=':')}",
                {"rack": rack, "hostname": hostname, "region": region}, query=f"group={quote(group, safe='')}")
    _done(f"bookie {bookie} is in rack {rack}")


@bookies_app.command("delete-bookie-rack")
def bookies_delete_rack(bookie: str = typer.Option(..., "--bookie", help="host:port")) -> None:
    """Forget a bookie's rack."""
    _api().call("DELETE", f"/bookies/racks-info/{quote(bookie, safe=':')}")
    _done(f"rack of bookie {bookie} removed")


@brokers_app.command("leader-broker")
def brokers_leader() -> None:
    """Show the load balancer's leader broker."""
    _json(_api().call("GET", "/brokers/leaderBroker"))


@brokers_app.command("load-report")
def brokers_load_report() -> None:
    """Show the load report of the broker at --url."""
    _json(_api().call("GET", "/broker-stats/load-report"))


def register(app: typer.Typer) -> None:
    app.add_typer(admin_app, name="admin")


from magnetar.cli import admin_compaction, admin_offload  # noqa: E402,F401  (add their commands to the groups above)

# Commands registered on ``topics_app`` by their own module (peek, get by id, examine, terminate, trim).
from magnetar.cli import admin_messages as _admin_messages  # noqa: E402, F401
