"""The server GC settings (``runtime/gc_tuning.py``): parsing of MAGNETAR_GC_TUNING and the effect."""

from __future__ import annotations

import gc
import time
from pathlib import Path

import pytest

from magnetar.runtime.gc_tuning import (
    SERVER_GC_THRESHOLDS,
    _CollectionLog,
    record_collections,
    server_gc_thresholds,
    tune_gc_for_server,
)


def test_default_off_and_explicit_thresholds() -> None:
    assert server_gc_thresholds(None) == SERVER_GC_THRESHOLDS
    assert server_gc_thresholds("") == SERVER_GC_THRESHOLDS
    assert server_gc_thresholds("off") is None
    assert server_gc_thresholds(" 700, 10,10 ") == (700, 10, 10)


@pytest.mark.parametrize("bad", ["1,2", "a,b,c", "0,10,10", "1,-1,3", "1,2,3,4"])
def test_bad_settings_are_refused_clearly(bad: str) -> None:
    with pytest.raises(ValueError, match="MAGNETAR_GC_TUNING"):
        server_gc_thresholds(bad)


def test_tuning_freezes_and_sets_thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
    before = gc.get_threshold()
    try:
        monkeypatch.setenv("MAGNETAR_GC_TUNING", "off")
        assert tune_gc_for_server() is None
        assert gc.get_threshold() == before  # negative control: off changes nothing
        monkeypatch.delenv("MAGNETAR_GC_TUNING")
        assert tune_gc_for_server() == SERVER_GC_THRESHOLDS
        assert gc.get_threshold() == SERVER_GC_THRESHOLDS
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_collection_log_records_each_collections_generation_and_pause(tmp_path: Path) -> None:
    """``record_collections``: one line per collection, its generation and its pause (within the
    time the two collections took). Negative control (shown): a ``_CollectionLog`` that times
    from ``stop`` instead of ``start`` writes a pause counted from 0 (hours), and one that is
    not appended writes nothing."""
    out = tmp_path / "gc.log"
    with out.open("a", buffering=1) as handle:
        record_collections(handle)
        try:
            began = time.perf_counter_ns()
            gc.collect(0)
            gc.collect(2)
            took_ms = (time.perf_counter_ns() - began) / 1e6
        finally:
            gc.callbacks[:] = [entry for entry in gc.callbacks if not isinstance(entry, _CollectionLog)]
    lines = [line.split() for line in out.read_text().splitlines()]
    assert [int(fields[1]) for fields in lines] == [0, 2]
    assert all(0 <= float(fields[3]) <= float(fields[2]) + 1 and len(fields) == 6 for fields in lines)
    assert all(0 <= float(fields[2]) <= took_ms for fields in lines)


def test_collection_log_is_kept_with_the_tuning_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``MAGNETAR_GC_LOG`` measures the interpreter's defaults too (``MAGNETAR_GC_TUNING=off``, the
    comparison a GC measurement needs). Negative control (shown): with the log installed after the
    tuning's early return for ``off`` (session 19's first version) the file stays empty."""
    out = tmp_path / "gc.log"
    monkeypatch.setenv("MAGNETAR_GC_TUNING", "off")
    monkeypatch.setenv("MAGNETAR_GC_LOG", str(out))
    before = list(gc.callbacks)
    try:
        assert tune_gc_for_server() is None
        gc.collect(1)
    finally:
        for entry in gc.callbacks:
            if entry not in before and isinstance(entry, _CollectionLog):
                entry.out.close()
        gc.callbacks[:] = before
    assert [line.split()[1] for line in out.read_text().splitlines()] == ["1"]
