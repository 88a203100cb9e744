"""``magnetar admin`` commands for tiered storage, attached to the ``topics`` and ``namespaces``
groups (``cli/admin.py`` imports this module last, as ``admin_compaction``).

``topics offload TOPIC [--message-id L:E]`` offloads the sealed ledgers up to that message id
(all sealed ledgers without it; Pulsar's ``pulsar-admin topics offload``), ``topics offload-status
TOPIC [--wait]`` prints the status (``--wait`` polls until it is no longer RUNNING, exit 1 on
ERROR); ``namespaces set-offload-threshold NS BYTES`` / ``get-offload-threshold`` and
``set-offload-deletion-lag NS MS`` / ``get-offload-deletion-lag`` / ``clear-offload-deletion-lag``
manage the namespace policies.
"""

from __future__ import annotations

import time

import typer

from magnetar.cli.admin import _api, _done, _json, _ns, _topic, namespaces_app, topics_app

WAIT_POLL_INTERVAL_S = 0.2
WAIT_DEADLINE_S_DEFAULT = 600.0


def _message_id(text: str) -> dict[str, int]:
    try:
        ledger, entry = (int(part) for part in text.split(":"))
    except ValueError:
        raise typer.BadParameter(f"a message id is LEDGER:ENTRY, got {text!r}") from None
    return {"ledgerId": ledger, "entryId": entry}


@topics_app.command("offload")
def topics_offload(topic: str,
                   message_id: str = typer.Option("", "--message-id", "-m",
                                                  help="LEDGER:ENTRY; default: every sealed ledger")) -> None:
    """Offload TOPIC's sealed ledgers up to a message id to the tiered storage (409 if one runs)."""
    body = _message_id(message_id) if message_id else None
    _api().call("PUT", f"{_topic(topic)}/offload", body)
    _done(f"offload of {topic} started")


@topics_app.command("offload-status")
def topics_offload_status(topic: str,
                          wait: bool = typer.Option(False, "--wait", "-w", help="poll until it is no longer RUNNING"),
                          deadline_s: float = typer.Option(WAIT_DEADLINE_S_DEFAULT, "--deadline-s")) -> None:
    """Show the status of TOPIC's last offload: NOT_RUN, RUNNING, SUCCESS or ERROR."""
    status = _api().call("GET", f"{_topic(topic)}/offload")
    give_up = time.monotonic() + deadline_s
    while wait and status["status"] == "RUNNING" and time.monotonic() < give_up:
        time.sleep(WAIT_POLL_INTERVAL_S)  # a CLI polling a remote broker: real time is the point
        status = _api().call("GET", f"{_topic(topic)}/offload")
    _json(status)
    if status["status"] == "ERROR":
        raise typer.Exit(1)


@namespaces_app.command("set-offload-threshold")
def namespaces_set_offload_threshold(namespace: str, threshold_bytes: int) -> None:
    """Keep at most THRESHOLD_BYTES of each topic on bookies (0: offload at once; negative: never)."""
    _api().call("PUT", f"{_ns(namespace)}/offloadThreshold", threshold_bytes)
    _done(f"offloadThreshold of {namespace} set to {threshold_bytes}")


@namespaces_app.command("get-offload-threshold")
def namespaces_get_offload_threshold(namespace: str) -> None:
    """Show the namespace's offload threshold in bytes (-1: off)."""
    _json(_api().call("GET", f"{_ns(namespace)}/offloadThreshold"))


@namespaces_app.command("set-offload-deletion-lag")
def namespaces_set_offload_deletion_lag(namespace: str, lag_ms: int) -> None:
    """Delete bookie copies LAG_MS after their ledger was offloaded."""
    _api().call("PUT", f"{_ns(namespace)}/offloadDeletionLagMs", lag_ms)
    _done(f"offloadDeletionLagMs of {namespace} set to {lag_ms}")


@namespaces_app.command("get-offload-deletion-lag")
def namespaces_get_offload_deletion_lag(namespace: str) -> None:
    """Show the namespace's offload deletion lag in ms (null: the broker's default)."""
    _json(_api().call("GET", f"{_ns(namespace)}/offloadDeletionLagMs"))


@namespaces_app.command("clear-offload-deletion-lag")
def namespaces_clear_offload_deletion_lag(namespace: str) -> None:
    """Remove the namespace's offload deletion lag (the broker's default applies)."""
    _api().call("DELETE", f"{_ns(namespace)}/offloadDeletionLagMs")
    _done(f"offloadDeletionLagMs of {namespace} removed")
