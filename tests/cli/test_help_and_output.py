"""What a new user sees from the CLI when output is piped: whole names, plain help, no surprises."""

from __future__ import annotations

from typing import Any

import pytest

from magnetar.cli.main import cli_command
from magnetar.faults import REGISTRY


@pytest.fixture(scope="module")
def command() -> Any:
    return cli_command()


def run(command: Any, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = command.main(list(args), prog_name="magnetar", standalone_mode=False)
    captured = capsys.readouterr()
    return code or 0, captured.out + captured.err


def test_faults_list_piped_is_plain_and_keeps_every_name_whole(command: Any, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(command, capsys, "faults", "list")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "code\tname\tseed\tmeaning"
    names = {line.split("\t")[1] for line in lines[1:]}
    assert names == {point.name for point in REGISTRY.values()}
    assert max(len(n) for n in names) > 28  # the longest names were cut at 80 columns before
    assert "…" not in out and "┃" not in out


@pytest.mark.parametrize(("args", "usage"), [
    (("admin", "topics", "stats", "--help"), "Usage: magnetar admin topics stats [OPTIONS] TOPIC"),
    (("admin", "namespaces", "set-policy", "--help"), "NAMESPACE POLICY VALUE"),
    (("consume", "--help"), "Usage: magnetar consume [OPTIONS] TOPIC"),
])
def test_help_is_plain(command: Any, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], usage: str) -> None:
    code, out = run(command, capsys, *args)
    assert code == 0
    assert usage in out
    assert "<bool>" not in out and "{" + "topic}" not in out and "``" not in out and "╭" not in out


def test_help_keeps_brackets_and_defaults_whole(command: Any, capsys: pytest.CaptureFixture[str]) -> None:
    _, out = run(command, capsys, "standalone", "--help")
    assert "TOML file with a [standalone] section" in out  # was eaten as rich markup
    _, out = run(command, capsys, "consume", "--help")
    assert "pulsar://127.0.0.1:6650" in out
    _, out = run(command, capsys, "admin", "namespaces", "set-policy", "--help")
    assert "(e.g. `deduplication true`)" in out


def test_sim_list_needs_no_seed_and_a_run_does(command: Any, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONHASHSEED", "0")  # no re-exec of the test process
    code, out = run(command, capsys, "sim", "--list")
    assert code == 0 and "durable-log" in out and "ledger-matrix" in out
    code, out = run(command, capsys, "sim")
    assert code == 2 and "--seed is required" in out
