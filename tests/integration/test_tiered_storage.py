"""Tiered storage end to end on a real ``magnetar standalone`` and the official client.

Several ledgers' worth of messages (small ledgers: ``MAGNETAR_MANAGED_LEDGER_MAX_ENTRIES_PER_LEDGER``)
are offloaded through the admin API, the bookie copies deleted (deletion lag 0), then a consumer
from earliest, a reader, and seeks by message id and by time all get every message back —
same bytes, keys, properties, event times, message ids, in order — from the Parquet files, with the
filesystem driver (the default, under the data directory) and with the s3 driver against a real
S3-compatible endpoint (moto's server over HTTP, reached by s3fs and delta-rs). The lakehouse is
read back as an analyst would (pyarrow over the topic's directory; the Delta table) and the byte
counts of bookies vs lakehouse are printed for the report.

A second test kills the standalone (``MAGNETAR_FAULTS=<point>:crash``, a real SIGKILL) at each
offload fault point, restarts it on the same data, and checks 0 lost, 0 duplicated, orphan files
collected, and that the next offload completes.
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from magnetar.runtime.processes import StandaloneProcess, free_port
from tests.cluster.helpers import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
TOPIC = "persistent://public/default/tiered"
ENTRIES_PER_LEDGER = 40
STATUS_DEADLINE_S = 60.0
EXIT_DEADLINE_S = 60.0
RECEIVE_TIMEOUT_MS = 3000
POINTS = ["managed_ledger.offload.after_write_files", "managed_ledger.offload.after_manifest",
          "managed_ledger.offload.after_record", "managed_ledger.offload.after_delete_bookie_copy"]


@pytest.fixture
def moto_s3() -> Iterator[str]:
    """A real S3-compatible endpoint over HTTP on 127.0.0.1 (moto's server), with bucket ``lake``."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    try:
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                     aws_secret_access_key="testing").create_bucket(Bucket="lake")
        yield endpoint
    finally:
        server.stop()


@pytest.fixture
def launched() -> Iterator[list[StandaloneProcess]]:
    started: list[StandaloneProcess] = []
    yield started
    for standalone in started:
        standalone.kill()


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, MAGNETAR_MANAGED_LEDGER_MAX_ENTRIES_PER_LEDGER=str(ENTRIES_PER_LEDGER),
               MAGNETAR_BROKER_OFFLOAD_DELETION_LAG_MS="0",
               # keep every ledger (no subscription holds them; Pulsar trims those without retention)
               MAGNETAR_BROKER_RETENTION_TIME_S="-1", MAGNETAR_BROKER_RETENTION_SIZE_BYTES="-1",
               MAGNETAR_MANAGED_LEDGER_RETENTION_TIME_S="-1", MAGNETAR_MANAGED_LEDGER_RETENTION_SIZE_BYTES="-1")
    env.update(extra)
    return env


def _http(method: str, url: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    if method == "PUT" and data is None:
        data = b""
    request = urllib.request.Request(url, method=method, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as reply:
        raw = reply.read()
    return json.loads(raw) if raw else None


def _keep_forever(standalone: StandaloneProcess) -> None:
    """Infinite retention on the namespace: consumed ledgers stay (trimming one deletes its
    offloaded files too, which the unit tests cover)."""
    _http("POST", f"{standalone.http_url}/admin/v2/namespaces/public/default/retention",
          {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1})


def _topic_url(standalone: StandaloneProcess, what: str) -> str:
    return f"{standalone.http_url}/admin/v2/persistent/public/default/tiered/{what}"


def _offload(standalone: StandaloneProcess, expect: str = "SUCCESS") -> dict[str, Any]:
    _http("PUT", _topic_url(standalone, "offload"))
    url = _topic_url(standalone, "offload")
    wait_until(lambda: _http("GET", url)["status"] != "RUNNING", STATUS_DEADLINE_S, "the offload to end")
    status: dict[str, Any] = _http("GET", url)
    assert status["status"] == expect, status
    return status


def _client(url: str) -> pulsar.Client:
    return pulsar.Client(url, operation_timeout_seconds=15, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))


_SUBSCRIPTIONS: list[str] = []
Sent = tuple[str, bytes, str, dict[str, str], int]  # message id, data, key, properties, event time


def _produce(url: str, count: int, start: int = 0) -> list[Sent]:
    client = _client(url)
    try:
        plain = client.create_producer(TOPIC, batching_enabled=False)
        batched = client.create_producer(TOPIC, batching_enabled=True, batching_max_messages=5,
                                         batching_max_publish_delay_ms=50)
        out: list[Sent] = []
        for i in range(start, start + count):
            data = f"m{i}-".encode() + bytes(range(i % 7, i % 7 + 40))
            key, props, event = f"k{i % 9}", {"i": str(i)}, 1_600_000_000_000 + i
            if i % 4 == 3:  # a few rounds of five go into one batch each
                futures = []
                for j in range(5):
                    value = data + bytes([j])
                    futures.append((value, f"{key}-{j}", {"i": f"{i}.{j}"}))
                ids: list[Any] = [None] * 5
                for j, (value, k, p) in enumerate(futures):
                    batched.send_async(value, lambda res, mid, j=j, ids=ids: ids.__setitem__(j, mid), partition_key=k,
                                       properties=p, event_timestamp=event)
                batched.flush()
                out.extend((str(ids[j]), v, k, p, event) for j, (v, k, p) in enumerate(futures))
            else:
                mid = plain.send(data, partition_key=key, properties=props, event_timestamp=event)
                out.append((str(mid), data, key, props, event))
        return out
    finally:
        client.close()


def _message(m: Any) -> Sent:
    return (str(m.message_id()), m.data(), m.partition_key(), dict(m.properties()), m.event_timestamp())


def _consume_all(url: str) -> list[Sent]:
    client = _client(url)
    try:
        _SUBSCRIPTIONS.append(f"replay-{len(_SUBSCRIPTIONS)}")  # a new subscription starts at earliest
        consumer = client.subscribe(TOPIC, _SUBSCRIPTIONS[-1], initial_position=pulsar.InitialPosition.Earliest)
        out = []
        while True:
            try:
                message = consumer.receive(RECEIVE_TIMEOUT_MS)
            except pulsar.Timeout:
                return out
            out.append(_message(message))
            consumer.acknowledge(message)
    finally:
        client.close()


def _read_all(url: str, start: Any = None, *, by_time_ms: int | None = None) -> tuple[list[Sent], list[int]]:
    client = _client(url)
    try:
        reader = client.create_reader(TOPIC, start if start is not None else pulsar.MessageId.earliest)
        if by_time_ms is not None:
            reader.seek(by_time_ms)
        out, publish = [], []
        while True:
            try:
                message = reader.read_next(RECEIVE_TIMEOUT_MS)
            except pulsar.Timeout:
                return out, publish
            out.append(_message(message))
            publish.append(message.publish_timestamp())
    finally:
        client.close()


def _message_id(text: str) -> Any:
    ledger, entry, _partition, batch = (int(x) for x in text.strip("()").split(","))
    return pulsar.MessageId(-1, ledger, entry, batch)


def _ledgers(standalone: StandaloneProcess) -> list[dict[str, Any]]:
    return list(_http("GET", _topic_url(standalone, "internalStats"))["ledgers"])


def _check_everything_back(standalone: StandaloneProcess, sent: list[Sent], *, seek: bool = True) -> None:
    assert _consume_all(standalone.broker_url) == sent
    read, publish = _read_all(standalone.broker_url)
    assert read == sent
    if not seek:
        return
    from_id, _ = _read_all(standalone.broker_url, _message_id(sent[len(sent) // 3][0]))
    assert from_id == sent[len(sent) // 3 + 1:]  # a reader from an id in offloaded data (exclusive)
    middle = len(sent) // 2
    from_time, _ = _read_all(standalone.broker_url, by_time_ms=publish[middle])
    start = sent.index(from_time[0])
    assert from_time == sent[start:]  # a suffix, in order, nothing doubled
    assert (start <= middle and all(publish[i] < publish[middle] for i in range(start))) or start == middle
    assert all(publish[i] >= publish[middle] for i in range(start, len(sent)))


@pytest.mark.parametrize("driver", ["filesystem", "s3"])
def test_offloaded_ledgers_read_back_byte_identical(tmp_path: Path, launched: list[StandaloneProcess],
                                                    driver: str, request: pytest.FixtureRequest) -> None:
    extra: dict[str, str] = {}
    if driver == "s3":
        moto = request.getfixturevalue("moto_s3")
        extra = dict(MAGNETAR_BROKER_OFFLOAD_DRIVER="s3", MAGNETAR_BROKER_OFFLOAD_S3_BUCKET="lake/prefix",
                     MAGNETAR_BROKER_OFFLOAD_S3_ENDPOINT=moto, AWS_ACCESS_KEY_ID="testing",
                     AWS_SECRET_ACCESS_KEY="testing")
    ports = {"broker_port": free_port(), "bookie_port": free_port(), "web_port": free_port()}
    standalone = StandaloneProcess(str(tmp_path / "data"), env=_env(**extra), **ports)
    launched.append(standalone)
    _keep_forever(standalone)
    sent = _produce(standalone.broker_url, 220)
    ledgers = _ledgers(standalone)
    assert len(ledgers) >= 4
    bookie_bytes = sum(lg["size"] for lg in ledgers[:-1])
    _offload(standalone)
    after = _ledgers(standalone)
    assert all(lg["offloaded"] and lg["bookieCopyDeleted"] for lg in after[:-1]), after
    assert not after[-1]["offloaded"]
    _check_everything_back(standalone, sent)

    # a restart: the broker reopens the topic over ledgers that now exist only in the lakehouse
    standalone.terminate()
    standalone = StandaloneProcess(str(tmp_path / "data"), env=_env(**extra), **ports)
    launched.append(standalone)
    # (seeks after a restart on the same ports are left out: in one test process the official
    # client's third connection after the restart dials 0.0.0.0:0 — without tiered storage too)
    _check_everything_back(standalone, sent, seek=False)

    if driver == "filesystem":
        lake = tmp_path / "data" / "offload" / "public" / "default" / "tiered"
        table = ds.dataset(str(lake), format="parquet", partitioning="hive").to_table()
        offloaded_ids = {lg["ledgerId"] for lg in after[:-1]}
        in_lake = [s for s in sent if int(s[0].strip("()").split(",")[0]) in offloaded_ids]
        assert table.num_rows == len(in_lake)
        assert sorted(table.column("value").to_pylist()) == sorted(s[1] for s in in_lake)
        lake_bytes = sum(p.stat().st_size for p in lake.rglob("*.parquet"))
        print(f"\nstorage: {len(in_lake)} messages in {len(offloaded_ids)} ledgers: bookies "
              f"{bookie_bytes} B (entries), lakehouse {lake_bytes} B (Parquet, zstd, incl. raw entry column)")
        from deltalake import DeltaTable

        delta = DeltaTable(str(lake / "partition=-1"))
        assert delta.to_pyarrow_table().num_rows == len(in_lake)
        assert len(pa.table(delta.get_add_actions(flatten=True))) == len(offloaded_ids)
    else:
        import boto3

        s3 = boto3.client("s3", endpoint_url=request.getfixturevalue("moto_s3"), region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket="lake")["Contents"]]
        table_keys = [k for k in keys if k.startswith("prefix/public/default/tiered/partition=-1/")]
        assert len([k for k in table_keys if k.endswith(".parquet")]) == len(after) - 1
        assert any("/_delta_log/" in k for k in table_keys)
        assert not (tmp_path / "data" / "offload").exists()  # nothing went to the local default


def test_threshold_policy_offloads_on_rollover(tmp_path: Path, launched: list[StandaloneProcess]) -> None:
    standalone = StandaloneProcess(str(tmp_path / "data"), env=_env())
    launched.append(standalone)
    from typer.testing import CliRunner

    from magnetar.cli.admin import admin_app

    def cli(*args: str) -> str:
        result = CliRunner().invoke(admin_app, ["--url", standalone.http_url, *args])
        assert result.exit_code == 0, (args, result.output)
        return result.output

    assert json.loads(cli("namespaces", "get-offload-threshold", "public/default")) == -1
    cli("namespaces", "set-offload-threshold", "public/default", "0")
    assert json.loads(cli("namespaces", "get-offload-threshold", "public/default")) == 0
    sent = _produce(standalone.broker_url, 130)
    wait_until(lambda: all(lg.get("bookieCopyDeleted") for lg in _ledgers(standalone)[:-1]), STATUS_DEADLINE_S,
               "every sealed ledger offloaded on rollover")
    assert _consume_all(standalone.broker_url) == sent
    last = _ledgers(standalone)[-2]
    cli("topics", "offload", TOPIC, "--message-id", f"{last['ledgerId']}:{last['entries'] - 1}")
    status = json.loads(cli("topics", "offload-status", TOPIC, "--wait", "--deadline-s", "60"))
    assert status["status"] == "SUCCESS" and status["firstUnoffloadedMessage"]["ledgerId"] > last["ledgerId"]


@pytest.mark.parametrize("point", POINTS)
def test_crash_at_each_offload_point_loses_and_doubles_nothing(tmp_path: Path, launched: list[StandaloneProcess],
                                                                point: str) -> None:
    ports = {"broker_port": free_port(), "bookie_port": free_port(), "web_port": free_port()}
    data = str(tmp_path / "data")
    first = StandaloneProcess(data, env=_env(MAGNETAR_FAULTS=f"{point}:crash"), **ports)
    launched.append(first)
    _keep_forever(first)
    sent = _produce(first.broker_url, 130)
    _http("PUT", _topic_url(first, "offload"))
    assert first.process.wait(EXIT_DEADLINE_S) != 0  # killed at the fault point

    second = StandaloneProcess(data, env=_env(), **ports)
    launched.append(second)
    lake = Path(data) / "offload" / "public" / "default" / "tiered" / "partition=-1"

    def recorded() -> set[str]:
        return {lg["offloadUid"] for lg in _ledgers(second) if lg.get("offloaded")}

    def orphans() -> set[str]:
        files = {p.name.rsplit("-", 1)[1].removesuffix(".parquet") for p in lake.glob("*.parquet")}
        return files - recorded()

    wait_until(lambda: not orphans(), STATUS_DEADLINE_S, "orphans of the crashed attempt collected on open")
    read, _ = _read_all(second.broker_url)
    assert read == sent  # nothing lost, nothing twice
    _offload(second)
    assert all(lg["offloaded"] and lg["bookieCopyDeleted"] for lg in _ledgers(second)[:-1])
    assert not orphans()
    assert len(list(lake.glob("*.parquet"))) == len(recorded())
    assert _consume_all(second.broker_url) == sent
