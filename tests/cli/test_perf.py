"""``magnetar perf`` against an in-process broker (memory log), driven through the CLI."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from magnetar.base.errors import InvalidArgumentError
from magnetar.base.limits import PERF_LATENCY_US_MAX
from magnetar.cli.main import _register_commands, app
from magnetar.cli.perf import Latency, PerfSettings
from magnetar.cli.perf.settings import PERCENTILES
from tests.compat.harness import BrokerThread

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerThread]:
    running = BrokerThread().start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def runner() -> CliRunner:
    if not any(group.name == "perf" for group in app.registered_groups):
        _register_commands()
    return CliRunner()


def perf(runner: CliRunner, *args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["perf", *args])
    return result.exit_code, result.output


def test_produce_bounded_by_messages_writes_json(broker: BrokerThread, runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "produce.json"
    code, output = perf(runner, "produce", "p1", "-u", broker.url, "--messages", "3000", "--duration", "20",
                        "--topics", "2", "--partitions", "2", "--json", str(out))
    assert code == 0, output
    result = json.loads(out.read_text())
    assert result["topics_addressed"] == 4
    publish = result["publish"]
    assert publish["sent"] == 3000 and publish["count"] == 3000 and publish["failed"] == 0
    latency = publish["latency_ms"]
    assert latency["count"] == 3000
    assert 0 < latency["p50"] <= latency["p95"] <= latency["p99"] <= latency["p99_9"] <= latency["max"]
    assert "publish latency ms: p50" in output
    assert "send_lag_ms" not in publish and "sender late" not in output  # not paced: no schedule


def test_e2e_at_a_rate_receives_everything_with_latency(broker: BrokerThread, runner: CliRunner,
                                                         tmp_path: Path) -> None:
    out = tmp_path / "e2e.json"
    code, output = perf(runner, "e2e", "e1", "-u", broker.url, "--rate", "500", "--duration", "2.2",
                        "--no-batching", "--json", str(out))
    assert code == 0, output
    result = json.loads(out.read_text())
    sent = result["publish"]["sent"]
    assert 800 <= sent <= 1200  # 500/s for ~2.2 s, paced
    assert sent - 50 <= result["publish"]["count"] <= sent  # acknowledged within the window
    assert result["receive"]["count"] == sent  # and every one received by the end of the drain
    assert result["receive"]["latency_ms"]["count"] == sent
    # The sender's lateness against its schedule, one value per send (0 when on time).
    lag = result["publish"]["send_lag_ms"]
    assert lag["count"] == sent and 0 <= lag["p50"] <= lag["max"]
    assert "sender late ms: p50" in output
    assert len(result["publish"]["per_second"]) == 2  # one live line per whole second
    assert output.count("receive ") >= 2


def test_consume_reads_what_produce_wrote(broker: BrokerThread, runner: CliRunner, tmp_path: Path) -> None:
    code, output = perf(runner, "produce", "c1", "-u", broker.url, "--messages", "400", "--duration", "20")
    assert code == 0, output
    out = tmp_path / "consume.json"
    code, output = perf(runner, "consume", "c1", "-u", broker.url, "--earliest", "--messages", "400",
                        "--duration", "20", "--json", str(out))
    assert code == 0, output
    assert json.loads(out.read_text())["receive"]["count"] == 400


def test_duration_bounds_an_unthrottled_run(broker: BrokerThread, runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "bounded.json"
    code, output = perf(runner, "produce", "d1", "-u", broker.url, "--duration", "0.6", "--windows", "2",
                        "--json", str(out))
    assert code == 0, output
    result = json.loads(out.read_text())
    assert 1.2 <= result["elapsed_s"] < 5
    assert result["publish"]["count"] > 0
    assert len(result["windows"]) == 2 and all(w["publish_msgs_s"] > 0 for w in result["windows"])


def test_invalid_settings_are_refused(runner: CliRunner) -> None:
    code, output = perf(runner, "produce", "x", "--topics", "0")
    assert code == 2 and "topics must be" in output
    with pytest.raises(InvalidArgumentError, match="duration"):
        PerfSettings(duration_s=0)
    assert PerfSettings(topic="a", topics=2, partitions=2).topic_names() == [
        "a-0-partition-0", "a-0-partition-1", "a-1-partition-0", "a-1-partition-1"]


def test_unreachable_broker_fails_cleanly(runner: CliRunner) -> None:
    code, output = perf(runner, "produce", "x", "-u", "pulsar://127.0.0.1:1", "--duration", "1",
                        "--operation-timeout", "3")
    assert code == 1 and "error" in output


def test_latency_summary_percentiles() -> None:
    latency = Latency()
    for micros in range(1, 10_001):
        latency.record(micros)
    summary = Latency.summary(latency.total)
    assert summary["count"] == 10_000
    assert summary["p50"] == pytest.approx(5.0, rel=0.01)
    assert summary["p99"] == pytest.approx(9.9, rel=0.01)
    assert summary["max"] == pytest.approx(10.0, rel=0.01)
    assert Latency.summary(latency.take_interval())["count"] == 10_000
    assert Latency.summary(latency.interval)["count"] == 0


class _CountingHistogram:
    """A histogram whose per-bucket Python accessors are counted (everything else passes through)."""

    def __init__(self, histogram: Any) -> None:
        self._histogram = histogram
        self.bucket_calls = 0

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._histogram, name)
        if name in ("get_count_at_index", "get_recorded_iterator", "get_value_at_percentile", "get_mean_value"):
            self.bucket_calls += 1
        return attribute


def test_latency_summary_is_hdrh_s_own_figures_without_a_python_pass_per_bucket() -> None:
    # The once-a-second line summarises two histograms per second: hdrh's own methods walk its
    # 17,408 buckets in Python (100-300 ms with the GIL held, a stall of the client's callbacks).
    rng = random.Random(22)
    for values in ([1], [PERF_LATENCY_US_MAX], [rng.randint(1, 10) for _ in range(7)],
                   [int(rng.lognormvariate(7, 3)) + 1 for _ in range(5_000)]):
        latency = Latency()
        for micros in values:
            latency.record(micros)
        histogram = latency.total
        expected = {name: histogram.get_value_at_percentile(q) / 1000 for name, q in PERCENTILES}
        expected.update(max=histogram.get_max_value() / 1000, mean=histogram.get_mean_value() / 1000,
                        count=histogram.get_total_count())
        counting = _CountingHistogram(histogram)
        assert Latency.summary(counting) == expected
        assert counting.bucket_calls == 0
    # Control: the counting wrapper does see hdrh's per-bucket methods when they are used.
    counting = _CountingHistogram(latency.total)
    counting.get_value_at_percentile(99.0)
    assert counting.bucket_calls == 1


def test_bursts_and_a_bound_over_all_producers(broker: BrokerThread, runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "burst.json"
    code, output = perf(runner, "produce", "b1", "-u", broker.url, "--topics", "3", "--burst", "10",
                        "--max-outstanding", "5", "--messages", "300", "--duration", "20", "--json", str(out))
    assert code == 0, output
    result = json.loads(out.read_text())
    assert result["publish"]["count"] == 300 and result["publish"]["pending_at_end"] == 0
    assert result["settings"]["max_outstanding"] == 5


def test_client_tuning_sets_the_switch_interval_and_gc_for_a_run_and_restores_them() -> None:
    import gc
    import sys

    from magnetar.cli.perf.run import PERF_SWITCH_INTERVAL_S, _client_tuning
    from magnetar.runtime.gc_tuning import SERVER_GC_THRESHOLDS

    before = (sys.getswitchinterval(), gc.get_threshold(), gc.get_freeze_count())
    with _client_tuning(True):
        assert sys.getswitchinterval() == pytest.approx(PERF_SWITCH_INTERVAL_S)
        assert gc.get_threshold() == SERVER_GC_THRESHOLDS and gc.get_freeze_count() > 0
    assert (sys.getswitchinterval(), gc.get_threshold(), gc.get_freeze_count()) == before
    # Control: ``--no-client-tuning`` leaves the interpreter as it is.
    with _client_tuning(False):
        assert (sys.getswitchinterval(), gc.get_threshold(), gc.get_freeze_count()) == before
