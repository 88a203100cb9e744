"""``magnetar perf --processes``, the merging of client processes' results, and the cheap
receipt path (one callback per producer over a FIFO of send times)."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import queue
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from magnetar.base.errors import InvalidArgumentError
from magnetar.cli.main import _register_commands, app
from magnetar.cli.perf import (
    Latency,
    MultiRun,
    PerfRun,
    PerfSettings,
    Share,
    split_settings,
    split_shares,
)
from magnetar.cli.perf import processes as perf_processes
from magnetar.cli.perf.client import _pin_thread_state, _Receipts
from tests.compat.harness import BrokerThread

pytestmark = pytest.mark.timeout(120)


# --- dealing the load to processes -------------------------------------------------------------
def test_one_producer_per_process_on_a_single_topic() -> None:
    shares = split_shares(PerfSettings(topic="t", processes=3))
    assert shares == [Share(("t",), ())] * 3


def test_producers_and_consumers_dealt_round_robin_consumers_not_repeated() -> None:
    shares = split_shares(PerfSettings(mode="e2e", topic="t", topics=3, processes=2))
    assert [s.producers for s in shares] == [("t-0", "t-2"), ("t-1",)]
    assert [s.consumers for s in shares] == [("t-0", "t-2"), ("t-1",)]
    # an exclusive subscription has one consumer: with fewer consumers than processes, some get none
    shares = split_shares(PerfSettings(mode="e2e", topic="t", processes=2))
    assert [s.producers for s in shares] == [("t",), ("t",)]
    assert [s.consumers for s in shares] == [("t",), ()]
    assert split_shares(PerfSettings(mode="consume", topic="t", topics=2, processes=2)) == [
        Share((), ("t-0",)), Share((), ("t-1",))]


def test_split_puts_every_producer_in_one_process_and_every_consumer_in_the_other() -> None:
    settings = PerfSettings(mode="e2e", topic="t", topics=2, rate=2000, messages=10, split=True, processes=2)
    assert split_shares(settings) == [Share(("t-0", "t-1"), ()), Share((), ("t-0", "t-1"))]
    producing, consuming = split_settings(settings)
    assert (producing.rate, producing.messages, producing.processes, producing.split) == (2000, 10, 1, False)
    assert (consuming.messages, consuming.processes, consuming.split) == (0, 1, False)
    # Control: without split, each process gets a producer and half the rate.
    plain = dataclasses.replace(settings, split=False)
    assert [s.producers for s in split_shares(plain)] == [("t-0",), ("t-1",)]
    assert [c.rate for c in split_settings(plain)] == [1000, 1000]
    with pytest.raises(InvalidArgumentError, match="split"):
        PerfSettings(mode="produce", split=True, processes=2)
    with pytest.raises(InvalidArgumentError, match="split"):
        PerfSettings(mode="e2e", split=True, processes=1)


def test_every_producer_and_consumer_is_dealt_once() -> None:
    settings = PerfSettings(mode="e2e", topic="t", topics=5, partitions=2, producers=3, consumers=2, processes=4)
    shares = split_shares(settings)
    assert sorted(n for s in shares for n in s.producers) == sorted(settings.topic_names() * 3)
    assert sorted(n for s in shares for n in s.consumers) == sorted(settings.topic_names() * 2)
    one = split_shares(PerfSettings(mode="e2e", topic="t", topics=5, partitions=2, producers=3, consumers=2))[0]
    assert sorted(one.producers) == sorted(n for s in shares for n in s.producers)


def test_rate_messages_and_outstanding_are_shared() -> None:
    children = split_settings(PerfSettings(rate=3000, messages=10, max_outstanding=9, processes=3))
    assert [c.rate for c in children] == [1000, 1000, 1000]
    assert [c.messages for c in children] == [4, 3, 3]
    assert [c.max_outstanding for c in children] == [3, 3, 3]
    assert all(c.processes == 1 for c in children)
    # consume: the parent stops every process once the total is received
    assert [c.messages for c in split_settings(PerfSettings(mode="consume", messages=10, processes=2))] == [0, 0]


def test_process_settings_are_checked() -> None:
    with pytest.raises(InvalidArgumentError, match="processes"):
        PerfSettings(processes=0)
    with pytest.raises(InvalidArgumentError, match="processes"):
        PerfSettings(processes=65)
    with pytest.raises(InvalidArgumentError, match="one per process"):
        PerfSettings(messages=1, processes=2)  # a process with a share of 0 would run to the duration
    PerfSettings(messages=2, processes=2)


# --- latency histograms ------------------------------------------------------------------------
def test_total_counts_every_value_once_across_intervals() -> None:
    latency = Latency()
    for micros in (100, 200, 300):
        latency.record(micros)
    assert latency.take_interval().get_total_count() == 3
    latency.record(400)
    assert latency.total.get_total_count() == 4  # taken intervals and the current one
    assert latency.total.get_total_count() == 4  # reading the total takes nothing
    assert latency.interval.get_total_count() == 1
    latency.record(-5)
    latency.record(10**12)
    assert latency.total.get_min_value() == 1 and latency.total.get_max_value() >= 59_000_000


def test_merged_encodings_equal_one_histogram_of_all_values() -> None:
    a, b, both = Latency(), Latency(), Latency()
    for micros in range(1, 5001):
        (a if micros % 3 else b).record(micros)
        both.record(micros)
    merged = Latency.merged([a.total.encode().decode("ascii"), b.total.encode().decode("ascii")])
    assert Latency.summary(merged) == Latency.summary(both.total)
    assert Latency.summary(a.total) != Latency.summary(both.total)  # a part alone is not the whole


# --- receipts ----------------------------------------------------------------------------------
class _Ok:
    pass


OK, FAILED = _Ok(), "TimeOut"


def _receipt_run() -> PerfRun:
    return PerfRun(PerfSettings())


def test_one_callback_per_producer_matches_receipts_to_sends_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    run = _receipt_run()
    receipts = _Receipts(run, OK, None)
    now = 10**18
    monkeypatch.setattr(time, "time_ns", lambda: now)  # the clock perf reads
    for age_ms in (30, 20, 10):  # sends made 30, 20 and 10 ms before their receipts
        receipts.push(now - age_ms * 1_000_000)
    receipts.done(OK, None)  # the first receipt is the first send's
    assert Latency.summary(run.published.latency.total)["max"] == pytest.approx(30, rel=0.01)
    receipts.done(OK, None)
    receipts.done(OK, None)
    latency = Latency.summary(run.published.latency.total)
    assert run.published.count == 3 and latency["count"] == 3
    assert latency["max"] == pytest.approx(30, rel=0.01) and latency["p50"] == pytest.approx(20, rel=0.01)


def test_failures_and_abandoned_sends_are_told_apart() -> None:
    run = _receipt_run()
    outstanding = threading.BoundedSemaphore(2)
    receipts = _Receipts(run, OK, outstanding)
    for _ in range(2):
        outstanding.acquire()
        receipts.push(time.time_ns())
    receipts.done(FAILED, None)
    run.closing = True
    receipts.done(FAILED, None)
    assert (run.published.count, run.published.failed, run.abandoned, run.errors) == (0, 1, 1, ["TimeOut"])
    assert outstanding.acquire(blocking=False) and outstanding.acquire(blocking=False)  # both released


def test_stray_receipts_never_raise_out_of_the_callback() -> None:
    run = _receipt_run()
    _Receipts(run, OK, None).done(OK, None)  # a receipt without a send: counted, no IndexError
    assert run.published.count == 1
    receipts = _Receipts(run, OK, threading.BoundedSemaphore(1))
    receipts.push(time.time_ns())
    receipts.done(OK, None)  # releases past the bound: the ValueError is reported, not raised
    assert run.published.count == 1
    assert [e for e in run.errors if e.startswith("receipt: ValueError")]


def test_pinning_a_python_thread_is_harmless() -> None:
    done: list[bool] = []

    def pin() -> None:
        _pin_thread_state()
        done.append(True)

    thread = threading.Thread(target=pin)
    thread.start()
    thread.join(5)
    assert done == [True] and not thread.is_alive()


# --- merging the processes' reports ------------------------------------------------------------
def _encoded(*micros: int) -> str:
    latency = Latency()
    for value in micros:
        latency.record(value)
    return str(latency.total.encode().decode("ascii"))


def _child_result(count: int, sent: int, micros: list[int], elapsed: float, cpu: float) -> dict[str, Any]:
    return {"elapsed_s": elapsed, "client_cpu_s": cpu, "windows": [{"publish_msgs_s": count / elapsed,
                                                                     "receive_msgs_s": 0.0}],
            "publish": {"sent": sent, "pending_at_end": sent - count, "count": count, "failed": 0},
            "histograms": {"publish": _encoded(*micros), "receive": _encoded()}, "errors": []}


def test_reports_merge_into_one_live_line_and_one_result() -> None:
    lines: list[str] = []
    run = MultiRun(PerfSettings(size=1024, processes=2), on_tick=lines.append)
    run._handle(("tick", 0, 1, {"publish": (100.0, _encoded(*[1000] * 100))}, 0))
    run._emit_ticks(final=False)
    assert lines == []  # waits for the other process's second 1
    run._handle(("tick", 1, 1, {"publish": (300.0, _encoded(*[3000] * 300))}, 2))
    run._emit_ticks(final=False)
    assert len(lines) == 1 and "publish       400 msg/s" in lines[0] and "failed 2" in lines[0]
    assert run.per_second["publish"][0]["p50_ms"] == pytest.approx(3.0, rel=0.01)
    assert run.per_second["publish"][0]["msgs_s"] == 400
    run.results = {0: _child_result(1000, 1100, [1000] * 1000, 2.0, 0.5),
                   1: _child_result(3000, 3000, [5000] * 3000, 2.1, 1.5)}
    merged = run._merge()
    publish = merged["publish"]
    assert (publish["count"], publish["sent"], publish["pending_at_end"]) == (4000, 4100, 100)
    assert publish["msgs_s"] == pytest.approx(4000 / 2.1)  # over the longest measured phase
    assert publish["latency_ms"]["count"] == 4000 and publish["latency_ms"]["p50"] == pytest.approx(5.0, rel=0.01)
    assert merged["windows"][0]["publish_msgs_s"] == pytest.approx(500 + 3000 / 2.1)
    assert merged["client_cpu_s"] == 2.0 and merged["client_cpu_us_per_msg"] == pytest.approx(500)
    assert merged["processes"] == 2 and "receive" not in merged


def test_a_silent_process_does_not_hold_the_live_line() -> None:
    lines: list[str] = []
    run = MultiRun(PerfSettings(processes=2), on_tick=lines.append)
    run._handle(("tick", 0, 1, {"publish": (10.0, _encoded(5))}, 0))
    run.tick_first_seen[1] -= 1.0  # reported a second ago: the other one is late
    run._emit_ticks(final=False)
    assert len(lines) == 1 and "10 msg/s" in lines[0]


def test_the_e2e_drain_waits_for_every_process_to_receive_what_all_sent() -> None:
    run = MultiRun(PerfSettings(mode="e2e", processes=2))
    reports: queue.Queue[tuple[Any, ...]] = queue.Queue()
    reports.put(("progress", 0, 100, 100, 100, True))  # received as many as it sent, from both
    reports.put(("progress", 1, 50, 50, 0, False))  # still sending: its count of sends is not final

    def later() -> None:
        time.sleep(0.3)
        reports.put(("progress", 1, 80, 80, 30, True))  # 100 + 30 of 180 received
        time.sleep(0.3)
        reports.put(("progress", 0, 100, 100, 150, True))  # 150 + 30 = 180: all received

    feeder = threading.Thread(target=later)
    started = time.monotonic()
    feeder.start()
    run._drain(reports, [])
    elapsed = time.monotonic() - started
    feeder.join()
    assert 0.55 <= elapsed < 1.5


def _sleep_ignoring_sigterm(handler_set: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    handler_set.set()
    time.sleep(60)


def test_processes_that_do_not_exit_are_terminated_then_killed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(perf_processes, "CHILD_STOP_S", 0.5)
    context = multiprocessing.get_context("spawn")
    reports = context.Queue()
    handler_set = context.Event()
    processes = [context.Process(target=time.sleep, args=(60,), daemon=True),
                 context.Process(target=_sleep_ignoring_sigterm, args=(handler_set,), daemon=True)]
    for process in processes:
        process.start()
    # The second child must ignore SIGTERM before it is stopped (a loaded machine can take seconds
    # to start a spawned interpreter): wait for it to say so rather than for a fixed time.
    assert handler_set.wait(timeout=60)
    started = time.monotonic()
    MultiRun(PerfSettings(processes=2))._stop(reports, processes)
    assert [p.is_alive() for p in processes] == [False, False]
    assert [p.exitcode for p in processes] == [-signal.SIGTERM, -signal.SIGKILL]
    assert time.monotonic() - started < 10


# --- real runs (spawned client processes against an in-process broker) --------------------------
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


def test_the_client_thread_keeps_one_thread_state_across_callbacks(broker: BrokerThread) -> None:
    """A thread-local value outlives a callback only if its thread state does: without the pin,
    every callback of the client's thread starts with a new one (and maps a new frame stack)."""
    import pulsar

    client = pulsar.Client(broker.url, io_threads=1, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer("pin-check", batching_enabled=False)
        local = threading.local()
        fresh: list[bool] = []
        answered = threading.Event()

        def callback(_result: Any, _msg_id: Any) -> None:
            fresh.append(not hasattr(local, "seen"))
            local.seen = True
            _Receipts.done(receipts, _result, _msg_id)  # the run's callback pins its thread
            if len(fresh) == 50:
                answered.set()

        receipts = _Receipts(_receipt_run(), pulsar.Result.Ok, None)
        for _ in range(50):
            receipts.push(time.time_ns())
            producer.send_async(b"x", callback)
        assert answered.wait(20)
        assert sum(fresh) == 1  # one new thread state (the first callback's), kept since
    finally:
        client.close()


@pytest.mark.integration
def test_produce_with_two_processes_counts_every_message(broker: BrokerThread, runner: CliRunner,
                                                         tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    code, output = perf(runner, "produce", "mp1", "-u", broker.url, "--processes", "2", "--messages", "3001",
                        "--duration", "30", "--topics", "3", "--json", str(out))
    assert code == 0, output
    result = json.loads(out.read_text())
    publish = result["publish"]
    assert result["processes"] == 2 and result["errors"] == []
    assert publish["sent"] == 3001 and publish["count"] == 3001 and publish["failed"] == 0
    assert publish["latency_ms"]["count"] == 3001 and 0 < publish["latency_ms"]["p50"] <= publish["latency_ms"]["max"]
    assert result["client_cpu_s"] > 0 and "2 process(es)" in output
    assert multiprocessing.active_children() == []  # the client processes are gone


@pytest.mark.integration
def test_e2e_with_two_processes_at_a_rate(broker: BrokerThread, runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "e.json"
    code, output = perf(runner, "e2e", "mp2", "-u", broker.url, "--processes", "2", "--rate", "400",
                        "--duration", "2.2", "--no-batching", "--json", str(out))
    assert code == 0, output
    result = json.loads(out.read_text())
    sent = result["publish"]["sent"]
    assert 700 <= sent <= 1100  # 400/s over both processes for ~2.2 s
    assert result["receive"]["count"] == sent  # one process's consumer receives both producers' messages
    assert result["receive"]["latency_ms"]["count"] == sent
    assert len(result["publish"]["per_second"]) == 2 and output.count("receive ") >= 2
    assert multiprocessing.active_children() == []


@pytest.mark.integration
def test_e2e_split_sends_from_one_process_and_receives_in_the_other(broker: BrokerThread, runner: CliRunner,
                                                                    tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    code, output = perf(runner, "e2e", "mp3", "-u", broker.url, "--split", "--rate", "400",
                        "--duration", "2.2", "--no-batching", "--json", str(out))
    assert code == 0, output
    result = json.loads(out.read_text())
    sent = result["publish"]["sent"]
    assert 700 <= sent <= 1100 and result["processes"] == 2  # the whole rate from the producing process
    assert result["receive"]["count"] == sent and result["receive"]["latency_ms"]["count"] == sent
    assert result["publish"]["send_lag_ms"]["count"] == sent  # merged over the processes: one per send
    assert multiprocessing.active_children() == []


@pytest.mark.integration
def test_a_process_that_cannot_connect_fails_the_run_and_all_stop(runner: CliRunner) -> None:
    started = time.monotonic()
    code, output = perf(runner, "produce", "x", "-u", "pulsar://127.0.0.1:1", "--processes", "2",
                        "--duration", "1", "--operation-timeout", "3")
    assert code == 1 and "error" in output and "did not start" in output
    assert time.monotonic() - started < 60
    assert multiprocessing.active_children() == []


# --- --blast ------------------------------------------------------------------------------------
def test_blast_template_frames_decode_to_their_sequence_ids_with_a_valid_checksum() -> None:
    from magnetar.cli.blast import SendTemplate, wide_varint
    from magnetar.protocol.pulsar.errors import FrameChecksumMismatchError
    from magnetar.protocol.pulsar.frames import decode_frame

    assert len(wide_varint(0)) == len(wide_varint(2**64 - 1)) == 10
    template = SendTemplate(3, "blaster", b"payload-bytes" * 10)
    for sequence_id in (0, 1, 300, 2**40):
        frame = decode_frame(memoryview(template.frame(sequence_id)))
        assert frame.command.send.producer_id == 3
        assert frame.command.send.sequence_id == sequence_id
        assert frame.message is not None and frame.message.metadata.sequence_id == sequence_id
        assert bytes(frame.message.payload) == b"payload-bytes" * 10
    broken = bytearray(template.frame(5))
    broken[-1] ^= 0xFF  # control: a payload changed after the CRC was computed is refused
    with pytest.raises(FrameChecksumMismatchError):
        decode_frame(memoryview(bytes(broken)))


@pytest.mark.integration
def test_blast_with_two_processes_stores_every_acknowledged_message(broker: BrokerThread, runner: CliRunner,
                                                                    tmp_path: Path) -> None:
    out = tmp_path / "b.json"
    code, output = perf(runner, "produce", "blast1", "-u", broker.url, "--blast", "--processes", "2",
                        "--duration", "1", "--max-pending", "50", "--size", "64", "--json", str(out))
    assert code == 0, output
    result = json.loads(out.read_text())
    assert result["failed"] == 0 and result["acked"] == result["sent"] > 0, result
    assert "2 process(es)" in output and multiprocessing.active_children() == []
    assert _stored_sizes(broker, "blast1") == [64] * result["acked"]


@pytest.mark.integration
def test_blast_batched_counts_and_stores_every_message_of_each_batch(broker: BrokerThread, runner: CliRunner,
                                                                      tmp_path: Path) -> None:
    out = tmp_path / "b.json"
    code, output = perf(runner, "produce", "blast-batched", "-u", broker.url, "--blast", "--blast-batch", "10",
                        "--duration", "1", "--max-pending", "20", "--size", "32", "--json", str(out))
    assert code == 0, output
    result = json.loads(out.read_text())
    assert result["batch"] == 10 and result["failed"] == 0 and result["acked"] == result["sent"] > 0, result
    assert result["acked"] % 10 == 0 and 0 < result["client_cpu_pct_max"] <= 100 * 1.5, result
    assert "10 message(s) per SEND" in output
    assert _stored_sizes(broker, "blast-batched") == [32] * result["acked"]  # every message of every batch


def test_blast_refuses_other_modes_and_tls(runner: CliRunner) -> None:
    code, output = perf(runner, "consume", "x", "--blast")
    assert code != 0 and "--blast is a produce option" in output
    code, output = perf(runner, "produce", "x", "--blast", "-u", "pulsar+ssl://127.0.0.1:6651")
    assert code != 0 and "plain pulsar://" in output
    code, output = perf(runner, "produce", "x", "--blast", "--blast-batch", "0")
    assert code != 0 and "a batch of 1-10000" in output


def _stored_sizes(broker: BrokerThread, topic: str) -> list[int]:
    """The sizes of every message stored on ``topic``, read back with the official client."""
    import pulsar

    client = pulsar.Client(broker.url)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        sizes = []
        while reader.has_message_available():
            sizes.append(len(reader.read_next(timeout_millis=10_000).data()))
        return sizes
    finally:
        client.close()
