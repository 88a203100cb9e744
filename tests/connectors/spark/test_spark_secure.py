"""Spark reads with only the broker's URLs and a token, against a real ``magnetar standalone`` with
authentication and authorization on (``--pulsar-conf``), part of the topic offloaded and its bookie
copies deleted: ``format("magnetar")`` and ``read_topic`` plan through the admin API's
``readLayout`` (no ``metadataUrl``), as the reading role; a role without ``consume`` and a read
without credentials are refused with errors that say why. Negative control: revoking the reading
role's permission makes the very read that worked fail."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar.base.errors import MagnetarError
from magnetar.connectors.spark.fetch import run
from magnetar.connectors.spark.lakehouse import read_topic
from magnetar.connectors.spark.options import WriteOptions
from magnetar.connectors.spark.sink import OutMessage, write_messages
from magnetar.runtime.processes import StandaloneProcess
from magnetar.security import create_token
from tests.cluster.helpers import wait_until

pytestmark = pytest.mark.integration

SECRET = b"spark-secure-secret-spark-secure!"
TOPIC = "persistent://public/default/secure-tiered"
PATH = "/persistent/public/default/secure-tiered"


def _token(role: str) -> str:
    return create_token(role, secret_key=SECRET)


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    directory: Path = tmp_path_factory.mktemp("secure-spark")
    (directory / "secret.key").write_bytes(SECRET)
    conf = directory / "standalone.conf"
    conf.write_text("\n".join([
        "clusterName=standalone",
        "authenticationEnabled=true",
        "authenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
        f"tokenSecretKey=file://{directory / 'secret.key'}",
        "authorizationEnabled=true",
        "superUserRoles=admin",
        "managedLedgerDefaultEnsembleSize=1",
        "",
    ]))
    env = dict(os.environ, MAGNETAR_MANAGED_LEDGER_MAX_ENTRIES_PER_LEDGER="40",
               MAGNETAR_BROKER_OFFLOAD_DELETION_LAG_MS="0",
               MAGNETAR_BROKER_RETENTION_TIME_S="-1", MAGNETAR_BROKER_RETENTION_SIZE_BYTES="-1",
               MAGNETAR_MANAGED_LEDGER_RETENTION_TIME_S="-1", MAGNETAR_MANAGED_LEDGER_RETENTION_SIZE_BYTES="-1")
    process = StandaloneProcess(str(directory / "data"), env=env, extra_args=("--pulsar-conf", str(conf)))
    try:
        yield process
    finally:
        process.terminate()


def _admin(secure: StandaloneProcess, method: str, path: str, body: Any = None, role: str = "admin") -> Any:
    request = urllib.request.Request(f"http://{secure.fields['http']}/admin/v2{path}", method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json",
                                              "Authorization": f"Bearer {_token(role)}"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        raw = reply.read()
    return json.loads(raw) if raw else None


def _produce(secure: StandaloneProcess, values: list[bytes]) -> None:
    client = pulsar.Client(secure.broker_url, authentication=pulsar.AuthenticationToken(_token("admin")),
                           operation_timeout_seconds=30, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(TOPIC, batching_enabled=False)
        for value in values:
            producer.send(value)
    finally:
        client.close()


def _options(secure: StandaloneProcess, role: str | None) -> dict[str, str]:
    options = {"serviceUrl": secure.broker_url, "adminUrl": f"http://{secure.fields['http']}", "topic": TOPIC}
    if role is not None:
        options["token"] = _token(role)
    return options


def _values(df: Any) -> list[bytes]:
    ordered = df.orderBy("messageId.ledger", "messageId.entry", "messageId.batchIndex")
    return [bytes(r.value) for r in ordered.select("value", "messageId").collect()]


def test_url_and_token_are_enough_and_authorization_holds(secure: StandaloneProcess, spark: Any) -> None:
    history = [f"history-{i}".encode() for i in range(200)]
    _produce(secure, history)
    _admin(secure, "PUT", f"{PATH}/offload")
    wait_until(lambda: _admin(secure, "GET", f"{PATH}/offload")["status"] != "RUNNING", 60, "the offload")
    assert _admin(secure, "GET", f"{PATH}/offload")["status"] == "SUCCESS"
    ledgers = _admin(secure, "GET", f"{PATH}/internalStats")["ledgers"]
    assert sum(1 for lg in ledgers if lg["offloaded"] and lg.get("bookieCopyDeleted")) >= 3
    tail = [f"tail-{i}".encode() for i in range(30)]
    _produce(secure, tail)
    _admin(secure, "POST", "/namespaces/public/default/permissions/reader", ["consume"])

    # the reading role: every message, the offloaded history (lakehouse named by the broker) and
    # the live tail (ensembles and confirmed end from the broker), without metadataUrl
    reader = _options(secure, "reader")
    assert _values(spark.read.format("magnetar").options(**reader).load()) == history + tail
    native = read_topic(spark, **reader)
    assert _values(native) == history + tail
    assert "FileScan parquet" in native._jdf.queryExecution().executedPlan().toString()

    # a role without consume, and no credentials at all: refused, saying why
    with pytest.raises(Exception, match=r"HTTP 403.*consume permission"):
        spark.read.format("magnetar").options(**_options(secure, "stranger")).load().count()
    with pytest.raises(Exception, match=r"HTTP 401.*require authentication"):
        spark.read.format("magnetar").options(**_options(secure, None)).load().count()

    # negative control: the same read that worked fails once the role loses the permission
    _admin(secure, "DELETE", "/namespaces/public/default/permissions/reader")
    with pytest.raises(urllib.error.HTTPError, match="403"):
        _admin(secure, "GET", f"{PATH}/readLayout", role="reader")
    with pytest.raises(Exception, match=r"HTTP 403.*consume permission"):
        spark.read.format("magnetar").options(**reader).load().count()


def test_the_connectors_client_authenticates_with_the_credentials(secure: StandaloneProcess) -> None:
    # what the sink and the broker fallback reader use: the binary protocol as the given role
    topic = "persistent://public/default/secure-writes"
    rows = [OutMessage(topic, f"w-{i}".encode(), None, {}, None) for i in range(3)]
    options = WriteOptions.parse({"serviceUrl": secure.broker_url, "topic": topic, "token": _token("admin")})
    assert options.credentials is not None
    auth = (options.credentials.method, options.credentials.data.encode())
    assert run(write_messages(secure.broker_url, rows, name="w", batch_id=0, exactly_once=False, batching=False,
                              auth=auth)) == 3
    # negative control: the same write without credentials is refused by the broker
    with pytest.raises(MagnetarError):
        run(write_messages(secure.broker_url, rows, name="w2", batch_id=0, exactly_once=False, batching=False))
