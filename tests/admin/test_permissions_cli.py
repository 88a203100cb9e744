"""``magnetar admin namespaces|topics grant-permission|revoke-permission|permissions`` against a real
broker HTTP endpoint with authorization on.

The CLI authenticates with ``--token`` (a JWT for the superuser ``admin`` unless a case says
otherwise).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from magnetar.broker import BrokerConfig
from magnetar.cli.admin import admin_app
from magnetar.metadata.memory import MemoryMetadataServer
from magnetar.node.broker_generation import bootstrap_cluster
from magnetar.runtime.clock import SystemClock
from magnetar.runtime.http import start_broker_http
from magnetar.security import create_token
from tests.admin.conftest import HttpBroker
from tests.compat.harness import BrokerThread

runner = CliRunner()
SECRET = b"permissions-cli-secret-key-32-b!"


def _broker(authorization: bool) -> Iterator[HttpBroker]:
    config = BrokerConfig(advertised_port=0, authentication_enabled=True, authentication_providers=("token",),
                          token_secret_key="data:;base64," + base64.b64encode(SECRET).decode(),
                          authorization_enabled=authorization,
                          superuser_roles=("admin",))
    thread = BrokerThread(config)
    try:
        thread.metadata = thread.call(MemoryMetadataServer(SystemClock()).connect())
        thread.start()
        assert thread.server is not None
        thread.call(bootstrap_cluster(thread.server.service, web_url="http://127.0.0.1:0"))
        http = thread.call(start_broker_http("127.0.0.1", 0, service=thread.server.service, health=dict))
        try:
            yield HttpBroker(thread, http)
        finally:
            thread.call(http.stop())
    finally:
        thread.stop()


@pytest.fixture
def secured_http() -> Iterator[HttpBroker]:
    yield from _broker(True)


@pytest.fixture
def open_http() -> Iterator[HttpBroker]:
    yield from _broker(False)


def admin(broker: HttpBroker, *args: str, code: int = 0, role: str = "admin") -> str:
    token = create_token(role, secret_key=SECRET)
    result = runner.invoke(admin_app, ["--url", broker.http_url, "--token", token, *args])
    assert result.exit_code == code, (args, result.output)
    return result.output


def admin_json(broker: HttpBroker, *args: str) -> Any:
    return json.loads(admin(broker, *args))


def test_cli_grants_and_revokes_namespace_topic_and_subscription_permissions(secured_http: HttpBroker) -> None:
    b = secured_http
    admin(b, "tenants", "create", "acme", "--admin-roles", "ops")
    admin(b, "namespaces", "create", "acme/ns")
    admin(b, "namespaces", "grant-permission", "acme/ns", "--role", "app", "--actions", "produce,consume")
    admin(b, "namespaces", "grant-subscription-permission", "acme/ns", "--subscription", "s", "--roles", "app,bi")
    assert admin_json(b, "namespaces", "permissions", "acme/ns") == {
        "permissions": {"app": ["consume", "produce"]}, "subscription_permissions": {"s": ["app", "bi"]}}
    admin(b, "topics", "grant-permission", "persistent://acme/ns/t", "--role", "bi", "--actions", "consume")
    assert admin_json(b, "topics", "permissions", "persistent://acme/ns/t") == {
        "app": ["consume", "produce"], "bi": ["consume"]}
    assert "teleport" in admin(b, "namespaces", "grant-permission", "acme/ns", "--role", "app", "--actions",
                               "teleport", code=1)
    admin(b, "topics", "revoke-permission", "persistent://acme/ns/t", "--role", "bi")
    assert "error 412" in admin(b, "topics", "revoke-permission", "persistent://acme/ns/t", "--role", "bi", code=1)
    admin(b, "namespaces", "revoke-subscription-permission", "acme/ns", "--subscription", "s", "--role", "bi")
    admin(b, "namespaces", "revoke-permission", "acme/ns", "--role", "app")
    assert admin_json(b, "namespaces", "permissions", "acme/ns") == {
        "permissions": {}, "subscription_permissions": {"s": ["app"]}}
    # a tenant admin may grant in its tenant; a role with grants only may not
    admin(b, "namespaces", "grant-permission", "acme/ns", "--role", "app", "--actions", "consume", role="ops")
    refused = admin(b, "namespaces", "grant-permission", "acme/ns", "--role", "app", "--actions", "produce",
                    role="app", code=1)
    assert "error 403" in refused and "app" in refused
    admin(b, "namespaces", "revoke-permission", "acme/ns", "--role", "app", role="ops")
    # the grants are part of the namespace's policies, as Pulsar returns them
    assert admin_json(b, "namespaces", "policies", "acme/ns")["auth_policies"]["subscription_auth_roles"] == {
        "s": ["app"]}


def test_cli_grant_is_refused_with_501_while_authorization_is_off(open_http: HttpBroker) -> None:
    out = admin(open_http, "namespaces", "grant-permission", "public/default", "--role", "app", "--actions",
                "produce", code=1)
    assert "error 501: Authorization is not enabled" in out
    assert admin_json(open_http, "namespaces", "permissions", "public/default")["permissions"] == {}
