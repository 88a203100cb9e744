"""The pure logic of ``bench/peers/run.py`` (issue 22): ``/proc`` and ``perf stat`` parsing, the
targets' ratios and verdicts, what bound a blast phase, and the markdown. No server is started."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "bench" / "peers"))

import measures
import tables
import targets
from targets import Target


def test_a_stat_line_is_read_after_the_last_parenthesis() -> None:
    fields = " ".join(["S", "77"] + ["0"] * 9 + ["250", "150"] + ["0"] * 30)
    parent, name, cpu = measures.parse_stat_line(f"4242 (odd (name) x) {fields}")
    assert (parent, name) == (77, "odd (name) x")
    assert cpu == pytest.approx(400 / measures.CLOCK_TICKS_S)


def test_perf_csv_counts_and_unsupported_events() -> None:
    text = ("# started on Thu\n\n"
            "0.50,msec,task-clock,495001,100.00,0.459,CPUs utilized\n"
            "1234,,context-switches,495001,100.00,0.000,/sec\n"
            "<not supported>,,instructions,0,100.00,,\n"
            "<not counted>,,cycles,0,0.00,,\n"
            "garbage line\n")
    assert measures.parse_perf_csv(text) == {"task-clock": 0.5, "context-switches": 1234.0,
                                             "instructions": None, "cycles": None}
    assert measures.parse_perf_csv("") == {}


def test_the_perf_probe_says_why_without_perf(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no perf on the path
    assert measures.perf_probe(("instructions",)) == {"instructions": "perf is not installed (Debian: linux-perf)"}
    stat = measures.PerfStat(("instructions",))
    stat.start([os.getpid()])
    stat.stop()
    assert stat.counts == {} and stat.error == "perf is not installed"


def test_fsync_bandwidth_is_bounded_by_bytes_and_leaves_no_file(tmp_path: Path) -> None:
    figures = measures.fsync_bandwidth(str(tmp_path), 4096, seconds=30.0, max_bytes=8 * 4096)
    assert figures["block_bytes"] == 4096 and figures["mb_s"] > 0
    assert figures["fsyncs_s"] * 4096 / measures.MIB == pytest.approx(figures["mb_s"])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not hasattr(os, "RWF_DSYNC"), reason="pwritev(RWF_DSYNC) needs Linux >= 4.7")
def test_the_sync_latency_probe_is_paced_bounded_and_leaves_no_file(tmp_path: Path) -> None:
    started = time.perf_counter()
    figures = measures.dsync_latency(str(tmp_path), 4096, rate=200.0, seconds=0.05)  # 10 syncs
    assert time.perf_counter() - started >= 0.04  # paced: 10 writes at 200/s take >= 45 ms
    assert 0 < figures["p50_ms"] <= figures["p99_ms"]
    assert list(tmp_path.iterdir()) == []


def test_the_process_tree_holds_this_process_and_its_busiest_thread_is_found() -> None:
    assert os.getpid() in measures.descendants([os.getpid()])
    assert measures.descendants([2**22 + 12345]) == []  # no such process
    before = measures.CpuSample({1: 1.0, 2: 5.0}, {"1/1": 1.0, "2/2": 3.0, "2/3": 2.0}, {})
    after = measures.CpuSample({1: 1.9, 2: 5.5}, {"1/1": 1.9, "2/2": 3.2, "2/3": 2.3},
                               {"1/1": "loop", "2/2": "a", "2/3": "b"})
    top = measures.busiest(before, after, elapsed_s=1.0)
    assert top["busiest_process"] == "1" and top["busiest_process_pct"] == pytest.approx(90.0)
    assert top["busiest_thread"] == "1/1 loop" and top["busiest_thread_pct"] == pytest.approx(90.0)


def test_server_cpu_splits_the_main_thread_from_the_others_and_counts_context_switches() -> None:
    server = measures.ServerCpu([os.getpid()])
    server("start")
    deadline = time.perf_counter() + 0.05
    while time.perf_counter() < deadline:  # some CPU on this (the main) thread
        pass
    # Block this thread on a condition (start() waits until the new thread signals it runs, join()
    # until it ends): a thread that blocks is switched out, which the kernel counts as the
    # voluntary context switch this test checks is read.
    waited = threading.Thread(target=lambda: None)
    waited.start()
    waited.join()
    server("end")
    loop_s, others_s = server.thread_seconds(os.getpid())
    assert loop_s >= 0 and others_s >= 0
    assert server.switches["end"] > server.switches["start"]
    # The split is by thread id: another pid's main thread is none of this tree's (control).
    server.samples = {"start": measures.CpuSample({}, {"7/7": 1.0, "7/8": 2.0}, {}),
                      "end": measures.CpuSample({}, {"7/7": 1.5, "7/8": 2.25, "7/9": 0.5}, {})}
    assert server.thread_seconds(7) == (pytest.approx(0.5), pytest.approx(0.75))
    assert server.thread_seconds(8) == (0.0, pytest.approx(1.25))
    assert measures.context_switches([2**22 + 12345]) == 0  # no such process


def _system(**medians: float) -> dict[str, Any]:
    return {"rows": [{"repeat": 0, **medians}],
            "stats": {k: {"min": v, "median": v, "max": v} for k, v in medians.items()}}


def _run() -> dict[str, dict[str, Any]]:
    return {
        "nats": _system(unbatched_server_us_msg=8.0, unbatched_msgs_s=10_000.0, e2e_p99_ms=4.0),
        "magnetar-1-bookie/compiled": _system(batched_server_us_msg=1.5, unbatched_server_us_msg=40.0,
                                              unbatched_msgs_s=10_000.0, e2e_p99_ms=5.0,
                                              blast_batched_mb_s=100.0, disk_fsync_mb_s=200.0),
        "magnetar-3-bookies/compiled": _system(unbatched_server_us_msg=61.0),
    }


def test_targets_are_ratios_of_the_same_runs_medians_with_verdicts() -> None:
    found = {t.name: t for t in targets.targets(_run(), ["compiled"])}
    assert len(found) == 6
    batched = found["batched server CPU per message <= 2 us"]
    assert (batched.ratio, batched.verdict) == (0.75, "met")
    blast = found["--blast durable ingest >= 40% of the disk's fsync'd bandwidth"]
    assert (blast.ratio, blast.verdict) == (0.5, "met")
    bookies = found["3 bookies (3,3,2): unbatched server CPU <= 1.5x 1 bookie"]
    assert (bookies.ratio, bookies.verdict) == (61.0 / 40.0, "missed")  # 1.525 > 1.5
    assert found["unbatched server CPU per durable message <= 3x NATS"].verdict == "missed"  # 5x
    assert found["unbatched throughput >= 1x NATS"].verdict == "met"  # exactly 1: the bound is met
    assert found["e2e p99 at the paced rate <= NATS p99"].ratio == 1.25


def test_ratios_per_repeat_pair_rows_of_the_same_repeat_only() -> None:
    systems: dict[str, Any] = {
        "a": {"rows": [{"repeat": 0, "x": 10.0}, {"repeat": 1, "x": 30.0}, {"repeat": 2, "x": 50.0}]},
        "b": {"rows": [{"repeat": 2, "y": 10.0}, {"repeat": 0, "y": 5.0}, {"repeat": 1, "y": 0.0}]},
    }
    assert targets.paired(systems, "a", "x", "b", "y") == (2.0, 5.0)  # repeat 1: a zero reference
    assert targets.paired(systems, "a", "x", None, "", 10.0) == (1.0, 3.0, 5.0)
    assert targets.paired(systems, "a", "x", "missing", "y") == ()
    found = Target("x", "pure", 3.0, 1.0, "r", 2.0, True, "us", (1.0, 2.0, 2.5))
    assert found.pairs_met() == 2 and found.verdict == "missed"  # the verdict is the ratio of medians
    assert "1.000, 2.000, 2.500 (2/3)" in targets.targets_markdown([found])[2]


def test_a_target_without_its_reference_is_not_measured_never_met() -> None:
    run = _run()
    del run["nats"]
    del run["magnetar-3-bookies/compiled"]
    found = {t.name: t.verdict for t in targets.targets(run, ["compiled"])}
    assert found["unbatched throughput >= 1x NATS"] == "not measured"
    assert found["3 bookies (3,3,2): unbatched server CPU <= 1.5x 1 bookie"] == "not measured"
    assert targets.targets(run, ["pure"])[0].verdict == "not measured"  # no pure system in the run
    zero = Target("x", "pure", 1.0, 0.0, "zero", 1.0, True, "")
    assert zero.ratio is None and zero.verdict == "not measured"


def test_a_targets_direction_decides_met_or_missed() -> None:
    at_most = Target("x", "pure", 3.0, 1.0, "r", 2.0, True, "us")
    at_least = Target("x", "pure", 3.0, 1.0, "r", 2.0, False, "us")
    assert (at_most.verdict, at_least.verdict) == ("missed", "met")
    assert at_most.as_dict()["ratio"] == 3.0 and at_most.as_dict()["verdict"] == "missed"


def test_what_bound_a_blast_phase() -> None:
    assert targets.bound_by(20.0, 95.0, 200.0, 2).startswith("broker")
    assert targets.bound_by(95.0, 50.0, 150.0, 2).startswith("generator")
    assert targets.bound_by(30.0, 50.0, 195.0, 2).startswith("machine")
    assert targets.bound_by(30.0, 50.0, 100.0, 2).startswith("neither")


def test_stats_skip_text_and_missing_values() -> None:
    rows: list[dict[str, Any]] = [{"a": 3.0, "why": "machine"}, {"a": 1.0}, {"a": 2.0}, {}]
    assert targets.stats(rows, "a") == {"min": 1.0, "median": 2.0, "max": 3.0}
    assert targets.stats(rows, "why") is None
    assert targets.cell({"min": 1.0, "median": 2.0, "max": 3.5}, 1) == "2.0 (1.0..3.5)"
    assert targets.per_message(None, 10) is None and targets.per_message(50.0, 10) == 5.0
    assert targets.per_message(50.0, 0) is None


def test_the_markdown_has_every_target_the_blast_and_the_unavailable() -> None:
    systems = _run()
    systems["magnetar-1-bookie/compiled"]["rows"][0]["blast_bound_by"] = "machine"
    systems["redis"] = {"unavailable": "redis-server is not installed", "rows": []}
    result = {"command": "run.py", "size": 1024, "repeats": 1, "seconds": 5.0, "clients": 1, "rate": 2000.0,
              "blast": {"seconds": 5.0, "processes": 2, "window": 1000, "batch": 100},
              "perf": {"instructions": "not supported here"}, "systems": systems,
              "targets": [t.as_dict() for t in targets.targets(systems, ["compiled"])]}
    text = tables.markdown(result)
    assert "| redis | not available here: redis-server is not installed |" in text
    assert ("| batched server CPU per message <= 2 us | compiled | 1.50 us | 2.00 (2 us) | 0.750 | <= 1 | **met** "
            "| 0.750 (1/1) |") in text
    assert "| 3 bookies (3,3,2): unbatched server CPU <= 1.5x 1 bookie | compiled | 61.0 us |" in text
    assert "**missed**" in text and "`instructions`: not supported here" in text
    assert "| magnetar-1-bookie/compiled | - | - | - | 100.0 (100.0..100.0) |" in text  # the blast row
    tables_found: list[list[str]] = [[]]
    for line in text.splitlines():
        if line.startswith("|"):
            tables_found[-1].append(line)
        elif tables_found[-1]:
            tables_found.append([])
    assert len([t for t in tables_found if t]) == 5  # main, per message, blast, disk, targets
    for rows in tables_found:  # every row of a table has the header's number of columns
        assert len({row.count("|") for row in rows}) <= 1, rows
