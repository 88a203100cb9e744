"""``magnetar admin`` commands for topic compaction, attached to the ``topics`` and ``namespaces`` groups
(``cli/admin.py`` imports this module last, so the commands exist wherever ``admin_app`` does).

``topics compact TOPIC`` starts a compaction (Pulsar's ``pulsar-admin topics compact``),
``topics compaction-status TOPIC [--wait]`` prints its status (``--wait`` polls until it is no
longer RUNNING and exits 1 on ERROR), ``namespaces set-compaction-threshold NS BYTES`` /
``get-compaction-threshold`` / ``remove-compaction-threshold`` manage the automatic trigger.
"""

from __future__ import annotations

import time

import typer

from magnetar.cli.admin import _api, _done, _json, _ns, _topic, namespaces_app, topics_app

WAIT_POLL_INTERVAL_S = 0.2
WAIT_DEADLINE_S_DEFAULT = 600.0


@topics_app.command("compact")
def topics_compact(topic: str) -> None:
    """Start a compaction of TOPIC (409 if one is running)."""
    _api().call("PUT", f"{_topic(topic)}/compaction")
    _done(f"compaction of {topic} started")


@topics_app.command("compaction-status")
def topics_compaction_status(topic: str,
                             wait: bool = typer.Option(False, "--wait", help="poll until it is no longer RUNNING"),
                             deadline_s: float = typer.Option(WAIT_DEADLINE_S_DEFAULT, "--deadline-s")) -> None:
    """Show the status of TOPIC's last compaction: NOT_RUN, RUNNING, SUCCESS or ERROR."""
    status = _api().call("GET", f"{_topic(topic)}/compaction")
    give_up = time.monotonic() + deadline_s
    while wait and status["status"] == "RUNNING" and time.monotonic() < give_up:
        time.sleep(WAIT_POLL_INTERVAL_S)  # a CLI polling a remote broker: real time is the point
        status = _api().call("GET", f"{_topic(topic)}/compaction")
    _json(status)
    if status["status"] == "ERROR":
        raise typer.Exit(1)


@namespaces_app.command("set-compaction-threshold")
def namespaces_set_compaction_threshold(namespace: str, threshold_bytes: int) -> None:
    """Compact a topic automatically once more than THRESHOLD_BYTES follow its horizon (0: never)."""
    _api().call("PUT", f"{_ns(namespace)}/compactionThreshold", threshold_bytes)
    _done(f"compactionThreshold of {namespace} set to {threshold_bytes}")


@namespaces_app.command("get-compaction-threshold")
def namespaces_get_compaction_threshold(namespace: str) -> None:
    """Show the namespace's compaction threshold in bytes (null: not set)."""
    _json(_api().call("GET", f"{_ns(namespace)}/compactionThreshold"))


@namespaces_app.command("remove-compaction-threshold")
def namespaces_remove_compaction_threshold(namespace: str) -> None:
    """Remove the namespace's compaction threshold."""
    _api().call("DELETE", f"{_ns(namespace)}/compactionThreshold")
    _done(f"compactionThreshold of {namespace} removed")

