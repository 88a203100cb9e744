"""``magnetar admin`` geo-replication commands against a broker's real HTTP endpoint."""

from __future__ import annotations

import json
from typing import Any

from typer.testing import CliRunner

import magnetar.cli.admin_geo  # noqa: F401  (attaches the commands under test)
from magnetar.cli.admin import admin_app
from tests.admin.conftest import HttpBroker

runner = CliRunner()


def admin(broker: HttpBroker, *args: str, code: int = 0) -> str:
    result = runner.invoke(admin_app, ["--url", broker.http_url, *args])
    assert result.exit_code == code, (args, result.output)
    return result.output


def admin_json(broker: HttpBroker, *args: str) -> Any:
    return json.loads(admin(broker, *args))


def test_cli_clusters_namespace_and_topic_replication_clusters(http_broker: HttpBroker) -> None:
    b = http_broker
    admin(b, "clusters", "create", "east", "--url", "http://east:8080", "--broker-url", "pulsar://east:6650",
          "--auth-plugin", "token", "--auth-params", "token:abc")
    assert admin_json(b, "clusters", "get", "east") == {
        "serviceUrl": "http://east:8080", "brokerServiceUrl": "pulsar://east:6650",
        "authenticationPlugin": "token", "authenticationParameters": "token:abc"}
    admin(b, "clusters", "update", "east", "--broker-url", "pulsar://east2:6650")
    assert admin_json(b, "clusters", "get", "east") == {"brokerServiceUrl": "pulsar://east2:6650"}
    assert "error 403" in admin(b, "namespaces", "set-clusters", "public/default", "--clusters",
                                "standalone,east", code=1)
    admin(b, "tenants", "update", "public", "--allowed-clusters", "standalone,east")
    admin(b, "namespaces", "set-clusters", "public/default", "--clusters", "standalone,east")
    assert admin_json(b, "namespaces", "get-clusters", "public/default") == ["standalone", "east"]
    admin(b, "topics", "create", "geo-cli")
    assert admin_json(b, "topics", "get-replication-clusters", "geo-cli") is None
    admin(b, "topics", "set-replication-clusters", "geo-cli", "--clusters", "standalone")
    assert admin_json(b, "topics", "get-replication-clusters", "geo-cli") == ["standalone"]
    admin(b, "topics", "remove-replication-clusters", "geo-cli")
    assert "error 412" in admin(b, "clusters", "delete", "east", code=1)  # still allowed for public
    admin(b, "namespaces", "set-clusters", "public/default", "--clusters", "standalone")
    admin(b, "tenants", "update", "public", "--allowed-clusters", "standalone")
    admin(b, "clusters", "delete", "east")
    assert "east" not in admin(b, "clusters", "list")
