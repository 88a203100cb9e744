"""Presenting a check: the rich summary table and the files a run leaves behind."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from magnetar.sim.checker import AnomalyKind, CheckResult
from magnetar.sim.history import History

HISTORY_FILE = "history.json"
RESULT_FILE = "result.json"
EXAMPLES_SHOWN_MAX = 10


def summary_table(result: CheckResult, title: str = "chaos check") -> Table:
    table = Table(title=f"{title}: {'VALID' if result.valid else 'INVALID'}")
    table.add_column("anomaly")
    table.add_column("violations", justify="right")
    table.add_column("total", justify="right")
    for kind in AnomalyKind:
        table.add_row(kind.value, str(result.count(kind, violations_only=True)), str(result.count(kind)))
    return table


def counts_table(result: CheckResult) -> Table:
    table = Table(title="counts")
    table.add_column("what")
    table.add_column("count", justify="right")
    for name, value in result.counts.items():
        table.add_row(name, str(value))
    return table


def print_summary(console: Console, result: CheckResult, title: str = "chaos check") -> None:
    console.print(counts_table(result))
    console.print(summary_table(result, title))
    for anomaly in result.anomalies[:EXAMPLES_SHOWN_MAX]:
        tag = "VIOLATION" if anomaly.violation else "note"
        console.print(f"  {tag} {anomaly.kind.value} {anomaly.value} on {anomaly.topic}: {anomaly.detail}")


def write_outputs(out_dir: Path, history: History, result: CheckResult) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / HISTORY_FILE).write_text(history.to_json())
    (out_dir / RESULT_FILE).write_text(json.dumps(result.to_dict(), indent=2))
