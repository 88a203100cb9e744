"""Geo-replication commands of ``magnetar admin`` (``pulsar-admin``'s names) and ``magnetar cluster link``.

* ``admin clusters create|update NAME --url --broker-url [--url-tls --broker-url-tls
  --auth-plugin --auth-params]``, ``admin clusters delete NAME``;
* ``admin namespaces set-clusters NS --clusters A,B`` / ``get-clusters NS``;
* ``admin topics set-replication-clusters TOPIC --clusters A,B`` / ``get-replication-clusters`` /
  ``remove-replication-clusters``;
* ``cluster link NAME=HTTP_URL NAME=HTTP_URL ... [--namespace public/default]``: what a user does to
  make clusters replicate to each other — on each cluster, register every other one (its
  ``brokerServiceUrl`` read from that cluster's own registration), allow all of them for the
  namespace's tenant and set them as the namespace's replication clusters.

The commands attach to the groups of ``cli/admin.py`` and ``cli/cluster.py`` when this module is
imported (``commands.py`` imports it).
"""

from __future__ import annotations

import dataclasses
from typing import Any
from urllib.parse import quote

import typer

from magnetar.cli.admin import _api, _done, _json, _ns, _topic, clusters_app, namespaces_app, topics_app
from magnetar.cli.cluster import cluster_app


def _cluster_data(url: str | None, broker_url: str | None, url_tls: str | None, broker_url_tls: str | None,
                  auth_plugin: str | None, auth_params: str | None) -> dict[str, str]:
    fields = {"serviceUrl": url, "brokerServiceUrl": broker_url, "serviceUrlTls": url_tls,
              "brokerServiceUrlTls": broker_url_tls, "authenticationPlugin": auth_plugin,
              "authenticationParameters": auth_params}
    return {k: v for k, v in fields.items() if v}


_URL = typer.Option(None, "--url", help="the cluster's HTTP service URL (http://host:8080)")
_BROKER_URL = typer.Option(None, "--broker-url", help="the cluster's broker service URL (pulsar://host:6650)")
_URL_TLS = typer.Option(None, "--url-tls", help="https://host:8443")
_BROKER_URL_TLS = typer.Option(None, "--broker-url-tls", help="pulsar+ssl://host:6651")
_AUTH_PLUGIN = typer.Option(None, "--auth-plugin", help="how replicators authenticate to it (e.g. token)")
_AUTH_PARAMS = typer.Option(None, "--auth-params", help="the plugin's parameters (e.g. token:<jwt>)")


@clusters_app.command("create")
def clusters_create(cluster: str, url: str = _URL, broker_url: str = _BROKER_URL, url_tls: str = _URL_TLS,
                    broker_url_tls: str = _BROKER_URL_TLS, auth_plugin: str = _AUTH_PLUGIN,
                    auth_params: str = _AUTH_PARAMS) -> None:
    """Register a cluster (a geo-replication remote)."""
    _api().call("PUT", f"/clusters/{quote(cluster, safe='')}",
                _cluster_data(url, broker_url, url_tls, broker_url_tls, auth_plugin, auth_params))
    _done(f"created cluster {cluster}")


@clusters_app.command("update")
def clusters_update(cluster: str, url: str = _URL, broker_url: str = _BROKER_URL, url_tls: str = _URL_TLS,
                    broker_url_tls: str = _BROKER_URL_TLS, auth_plugin: str = _AUTH_PLUGIN,
                    auth_params: str = _AUTH_PARAMS) -> None:
    """Replace a cluster's configuration."""
    _api().call("POST", f"/clusters/{quote(cluster, safe='')}",
                _cluster_data(url, broker_url, url_tls, broker_url_tls, auth_plugin, auth_params))
    _done(f"updated cluster {cluster}")


@clusters_app.command("delete")
def clusters_delete(cluster: str) -> None:
    """Delete a cluster that no tenant allows."""
    _api().call("DELETE", f"/clusters/{quote(cluster, safe='')}")
    _done(f"deleted cluster {cluster}")


def _clusters(text: str) -> list[str]:
    names = [c.strip() for c in text.split(",") if c.strip()]
    if not names:
        typer.echo("error: --clusters needs at least one cluster name", err=True)
        raise typer.Exit(2)
    return names


_CLUSTERS = typer.Option(..., "--clusters", help="comma-separated cluster names")


@namespaces_app.command("set-clusters")
def namespaces_set_clusters(namespace: str, clusters: str = _CLUSTERS) -> None:
    """Set the clusters a namespace replicates to."""
    _api().call("POST", f"{_ns(namespace)}/replication", _clusters(clusters))
    _done(f"{namespace} replicates to {clusters}")


@namespaces_app.command("get-clusters")
def namespaces_get_clusters(namespace: str) -> None:
    """Show the clusters a namespace replicates to."""
    _json(_api().call("GET", f"{_ns(namespace)}/replication"))


@topics_app.command("set-replication-clusters")
def topics_set_replication_clusters(topic: str, clusters: str = _CLUSTERS) -> None:
    """Set a topic's own replication clusters (over the namespace's)."""
    _api().call("POST", f"{_topic(topic)}/replication", _clusters(clusters))
    _done(f"{topic} replicates to {clusters}")


@topics_app.command("get-replication-clusters")
def topics_get_replication_clusters(topic: str) -> None:
    """Show a topic's own replication clusters (null: the namespace's apply)."""
    _json(_api().call("GET", f"{_topic(topic)}/replication"))


@topics_app.command("remove-replication-clusters")
def topics_remove_replication_clusters(topic: str) -> None:
    """Remove a topic's own replication clusters (the namespace's apply again)."""
    _api().call("DELETE", f"{_topic(topic)}/replication")
    _done(f"{topic} follows its namespace's replication clusters")


def link_clusters(members: dict[str, str], namespace: str) -> None:
    """Link clusters ``name -> HTTP URL`` for ``namespace`` (see the module docstring)."""
    tenant = namespace.partition("/")[0]
    apis = {name: dataclasses.replace(_api(), url=url) for name, url in members.items()}
    own: dict[str, Any] = {name: api.call("GET", f"/clusters/{quote(name, safe='')}") for name, api in apis.items()}
    names = list(members)
    for name, api in apis.items():
        known = set(api.call("GET", "/clusters"))
        for other in names:
            if other == name:
                continue
            data = {"serviceUrl": members[other], **{k: v for k, v in own[other].items() if k != "serviceUrl"}}
            method = "POST" if other in known else "PUT"
            api.call(method, f"/clusters/{quote(other, safe='')}", data)
        info = api.call("GET", f"/tenants/{quote(tenant, safe='')}")
        allowed = list(dict.fromkeys([*info.get("allowedClusters", []), *names]))
        api.call("POST", f"/tenants/{quote(tenant, safe='')}", {**info, "allowedClusters": allowed})
        api.call("POST", f"{_ns(namespace)}/replication", names)


@cluster_app.command("link")
def cluster_link(members: list[str] = typer.Argument(..., help="NAME=HTTP_URL of each cluster (two or more)"),
                 namespace: str = typer.Option("public/default", "--namespace",
                                               help="the namespace to replicate")) -> None:
    """Make clusters replicate a namespace to each other (register, allow, set clusters)."""
    parsed: dict[str, str] = {}
    for member in members:
        name, sep, url = member.partition("=")
        if not sep or not name or not url.startswith(("http://", "https://")):
            typer.echo(f"error: expected NAME=http://host:port, got {member!r}", err=True)
            raise typer.Exit(2)
        parsed[name] = url
    if len(parsed) < 2:
        typer.echo("error: link needs at least two clusters", err=True)
        raise typer.Exit(2)
    link_clusters(parsed, namespace)
    _done(f"linked {', '.join(parsed)} for {namespace}")
