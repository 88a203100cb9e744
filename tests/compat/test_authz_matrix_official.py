"""The authorization matrix (``authz_matrix``) against a real broker: token authentication with an
anonymous role, authorization on, the official ``pulsar`` client on the binary protocol and
``urllib`` on the admin API (``Authorization: Bearer``; the anonymous role sends nothing).

Allowed exactly when granted: 0 leaks and 0 over-denials over every case. The negative control
restarts the same broker over the same metadata with authorization switched off and runs the same
matrix: it must report leaks (so the matrix can see one).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pulsar
import pytest

from magnetar.admin import ADMIN_PATH
from magnetar.admin.lookup import LOOKUP_PATH
from magnetar.broker import BrokerConfig
from magnetar.client.client import PulsarClient
from magnetar.client.config import ClientOptions
from magnetar.client.errors import BrokerError as ClientBrokerError
from magnetar.faults import breaks
from magnetar.metadata.memory import MemoryMetadataServer
from magnetar.node.broker_generation import bootstrap_cluster
from magnetar.protocol.pulsar import pb
from magnetar.runtime import TcpNetwork, system_rng
from magnetar.runtime.clock import SystemClock
from magnetar.runtime.http import HttpEndpoint, start_broker_http
from magnetar.security import create_token
from tests.compat import authz_matrix as matrix
from tests.compat.harness import BrokerThread

SECRET = b"authz-matrix-secret-key-32-bytes"
#: The C++ client logs every refusal at ERROR; hundreds of expected refusals would drown the output.
_QUIET = logging.getLogger("authz-matrix.pulsar-client")
_QUIET.setLevel(logging.CRITICAL)
T = pb.BaseCommand
HTTP_TIMEOUT_S = 10.0
CLIENT_TIMEOUT_S = 5

CONFIG = BrokerConfig(advertised_port=0, authentication_enabled=True, authentication_providers=("token",),
                      token_secret_key="data:;base64," + base64.b64encode(SECRET).decode(),
                      anonymous_user_role=matrix.ANONYMOUS, authorization_enabled=True,
                      superuser_roles=(matrix.ROOT,))


def _token(role: str) -> str:
    return create_token(role, secret_key=SECRET)


@dataclass
class SecuredBroker:
    thread: BrokerThread
    http: HttpEndpoint | None = None

    def start_http(self) -> None:
        assert self.thread.server is not None
        self.http = self.thread.call(start_broker_http("127.0.0.1", 0, service=self.thread.server.service,
                                                       health=lambda: {"status": "ok"}))

    def stop_http(self) -> None:
        if self.http is not None:
            http, self.http = self.http, None
            self.thread.call(http.stop())

    def call_http(self, role: str | None, method: str, path: str, body: Any) -> tuple[int, Any]:
        assert self.http is not None
        headers = {"Content-Type": "application/json"}
        if role is not None and role != matrix.ANONYMOUS:
            headers["Authorization"] = f"Bearer {_token(role)}"
        data = None if body is None else json.dumps(body).encode()
        prefix = "" if path.startswith((LOOKUP_PATH, "/console/")) else ADMIN_PATH
        request = urllib.request.Request(f"http://127.0.0.1:{self.http.port}{prefix}{path}", data=data,
                                         method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as reply:
                raw = reply.read()
                return reply.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as error:
            raw = error.read()
            try:
                return error.code, json.loads(raw)
            except ValueError:
                return error.code, raw

    def call_binary(self, clients: dict[str, Any], role: str | None, name: str, topic: str,
                    subscription: str) -> bool:
        assert role is not None and self.http is not None
        over_http = name.endswith("http service URL")
        key = f"{role} http" if over_http else role
        client = clients.get(key)
        if client is None:
            auth = None if role == matrix.ANONYMOUS else pulsar.AuthenticationToken(_token(role))
            url = f"http://127.0.0.1:{self.http.port}" if over_http else self.thread.url
            client = clients[key] = pulsar.Client(url, authentication=auth,
                                                   operation_timeout_seconds=CLIENT_TIMEOUT_S,
                                                   logger=_QUIET)
        try:
            if name.startswith("lookup"):
                assert len(client.get_topic_partitions(topic)) == (2 if topic.endswith("solo") else 1)
            elif name.startswith("produce"):
                producer = client.create_producer(topic, send_timeout_millis=CLIENT_TIMEOUT_S * 1000)
                producer.send(b"matrix")
                producer.close()
            elif name == "reader":
                client.create_reader(topic, pulsar.MessageId.earliest).close()

            else:
                client.subscribe(topic, subscription).close()
        except pulsar.AuthorizationError:
            return False
        except pulsar.ConnectError:
            # Over HTTP the C++ client reports any refused lookup request (here 403) as ConnectError.
            # Counting it as "refused" cannot hide a leak: a leak is a success.
            if over_http:
                return False
            raise
        return True


async def _raw_command(url: str, role: str, name: str, topic: str) -> bool:
    """One protocol command as ``role`` with Magnetar's client: False when refused with
    AuthorizationError (any other failure raises)."""
    auth = {} if role == matrix.ANONYMOUS else {"auth_method_name": "token", "auth_data": _token(role).encode()}
    client = PulsarClient(url, network=TcpNetwork(), clock=SystemClock(), rng=system_rng(),
                          options=ClientOptions(operation_timeout_ms=CLIENT_TIMEOUT_S * 1000, **auth))
    try:
        cnx = await client.pool.get(url)
        request_id = cnx.new_request_id()
        if name == "LOOKUP":
            await client.lookup(topic)
        elif name == "PARTITIONED_METADATA":
            await client._partition_count(topic)
        elif name == "GET_TOPICS_OF_NAMESPACE":
            body = pb.CommandGetTopicsOfNamespace(request_id=request_id, namespace=topic.split("/")[2] + "/ns")
            reply = await cnx.request(T(type=T.GET_TOPICS_OF_NAMESPACE, getTopicsOfNamespace=body), request_id, name)
            assert topic in reply.body.topics  # type: ignore[union-attr]
        else:
            reply = await cnx.request(T(type=T.GET_SCHEMA, getSchema=pb.CommandGetSchema(
                request_id=request_id, topic=topic)), request_id, name)
            code = reply.body.error_code  # type: ignore[union-attr]
            if code == pb.AuthorizationError:
                return False
            assert code == pb.TopicNotFound, code  # let through: the topic has no schema
    except ClientBrokerError as error:
        if error.code == pb.AuthorizationError:
            return False
        raise
    finally:
        await client.close()
    return True


def _run(broker: SecuredBroker) -> matrix.Report:
    report = matrix.Report()
    matrix.run_http(broker.call_http, report)
    matrix.run_raw(lambda role, name, topic, _sub: broker.thread.call(
        _raw_command(broker.thread.url, role or "", name, topic)), report)
    clients: dict[str, Any] = {}
    try:
        matrix.run_binary(lambda role, name, topic, sub: broker.call_binary(clients, role, name, topic, sub), report)
    finally:
        for client in clients.values():
            client.close()
    return report


# The official client's ERROR lines for the refusals the matrix checks (a 403 over http:// is a
# ConnectError). A partitioned topic's consumer subscribes to its partitions at once; the broker
# answers them concurrently (as Pulsar's does), so when one partition's refusal closes the
# consumer first, the client logs the other partition's answer as "AlreadyClosed".
REFUSAL_LINES = (r"AuthorizationError", r"Failed to create (producer|consumer|reader)", r"Failed to (subscribe|get)",
                 r"Failed to close producer: AlreadyClosed", r"Closing the producer failed for partition",
                 r"Unable to create Consumer - .* Error - AlreadyClosed", r"-- ConnectError", r"returned error: 403")


@pytest.fixture(scope="module")
def secured() -> Iterator[SecuredBroker]:
    thread = BrokerThread(CONFIG)
    broker = SecuredBroker(thread)
    try:
        thread.metadata = thread.call(MemoryMetadataServer(SystemClock()).connect())
        thread.start()
        assert thread.server is not None
        thread.call(bootstrap_cluster(thread.server.service, web_url="http://127.0.0.1:0"))
        broker.start_http()
        matrix.build_world(broker.call_http)
        yield broker
    finally:
        broker.stop_http()
        thread.stop()


@pytest.mark.client_errors(*REFUSAL_LINES)
def test_every_role_may_do_exactly_what_it_was_granted(secured: SecuredBroker) -> None:
    report = _run(secured)
    print(f"authorization matrix: {report.summary()}")
    assert report.cases == len(matrix.ROLES) * 2 * (len(matrix.http_ops()) + len(matrix.BINARY_OPS)
                                                   + len(matrix.RAW_OPS))
    assert report.cases > 500
    assert not report.leaks, "\n".join(report.leaks)
    assert not report.over_denials, "\n".join(report.over_denials)


@pytest.mark.client_errors(*REFUSAL_LINES)
def test_negative_control_authorization_off_leaks(secured: SecuredBroker) -> None:
    """The same broker and world with authorization switched off: the matrix must see leaks."""
    thread = secured.thread
    secured.stop_http()
    thread.config = dataclasses.replace(CONFIG, authorization_enabled=False)
    try:
        thread.restart()
        secured.start_http()
        report = _run(secured)
    finally:
        secured.stop_http()
        thread.config = CONFIG
        thread.restart()
        secured.start_http()
    print(f"negative control (authorization off): {report.summary()}")
    assert len(report.leaks) > 100, report.summary()
    assert not report.over_denials
    # every kind of operation leaks for some role: binary and admin, own and other tenant
    assert {line.split(" on ")[0].split(" ", 1)[1] for line in report.leaks} >= {
        "produce", "subscribe", "lookup", "delete tenant", "grant namespace permission", "delete subscription",
        "LOOKUP", "GET_TOPICS_OF_NAMESPACE", "GET_SCHEMA"}


@pytest.mark.client_errors(*REFUSAL_LINES)
def test_negative_control_one_check_removed_is_seen(secured: SecuredBroker) -> None:
    """With only the subscription role lists ignored (``no-subscription-auth``), the matrix reports
    exactly the cases that rely on them, and nothing else."""
    breaks.enable(breaks.Break.NO_SUBSCRIPTION_AUTH)
    try:
        report = _run(secured)
    finally:
        breaks.disable_all()
    print(f"negative control (no-subscription-auth): {report.summary()}")
    assert report.leaks and not report.over_denials
    assert all("locked subscription" in line for line in report.leaks), report.leaks
    assert {line.split(" ", 1)[0] for line in report.leaks} == {matrix.CONSUMER, matrix.ANONYMOUS}
