"""``magnetar produce`` / ``magnetar consume`` against the fake broker on a loopback socket."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from magnetar.cli.consume import trim_note
from magnetar.cli.main import _register_commands, app
from magnetar.client import Message
from magnetar.client.message import MessageId
from tests.client.fake_broker import FakeBroker
from tests.client.tcp_broker import ThreadedBroker

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    threaded = ThreadedBroker()
    try:
        yield threaded.start()
    finally:
        threaded.stop()


@pytest.fixture(scope="module")
def runner() -> CliRunner:
    if not any(c.name == "produce" for c in app.registered_commands):
        _register_commands()
    return CliRunner()


def test_produce_then_consume(broker: FakeBroker, runner: CliRunner) -> None:
    produced = runner.invoke(app, ["produce", "t", "-m", "hello", "-m", "world", "-n", "2", "--service-url", broker.url,
                                   "--key", "K", "-p", "a=1", "--timeout-s", "10"])
    assert produced.exit_code == 0, produced.output
    assert "4 messages produced" in produced.output
    topic = broker.topics["persistent://public/default/t"]
    assert [e.metadata.partition_key for e in topic.entries] == ["K"] * 4
    consumed = runner.invoke(app, ["consume", "t", "-s", "sub", "-n", "4", "--service-url", broker.url,
                                   "--type", "shared", "--timeout-s", "10"])
    assert consumed.exit_code == 0, consumed.output
    assert consumed.output.count("hello") == 2 and consumed.output.count("world") == 2
    assert "key=K" in consumed.output and "4 messages consumed" in consumed.output
    assert broker.subscribes[0].subType == 1  # shared


def test_consume_is_bounded_by_its_timeout(broker: FakeBroker, runner: CliRunner) -> None:
    result = runner.invoke(app, ["consume", "empty", "-s", "sub", "-n", "1", "--service-url", broker.url,
                                 "--timeout-s", "0.5"])
    assert result.exit_code == 1
    assert "0 messages consumed" in result.output


def test_produce_to_an_unreachable_broker_fails_cleanly(runner: CliRunner) -> None:
    result = runner.invoke(app, ["produce", "t", "-m", "x", "--service-url", "pulsar://127.0.0.1:1", "--timeout-s", "1"])
    assert result.exit_code == 1
    assert "error" in result.output


def test_consume_short_of_its_count_says_why(broker: FakeBroker, runner: CliRunner) -> None:
    produced = runner.invoke(app, ["produce", "few", "-m", "m", "-n", "3", "--service-url", broker.url, "--timeout-s", "10"])
    assert produced.exit_code == 0, produced.output
    # 2 s: all three must arrive within it (a loaded 2-core machine once delivered 1 in 0.5 s).
    result = runner.invoke(app, ["consume", "few", "-s", "sub", "-n", "20", "--service-url", broker.url,
                                 "--timeout-s", "2"])
    assert result.exit_code == 1
    assert "received 3 of 20 messages within the timeout (2 s)" in result.output


def test_consume_resuming_a_subscription_is_no_trim(broker: FakeBroker, runner: CliRunner) -> None:
    produced = runner.invoke(app, ["produce", "older", "-m", "m", "-n", "5", "--service-url", broker.url,
                                   "--timeout-s", "10"])
    assert produced.exit_code == 0, produced.output
    first = runner.invoke(app, ["consume", "older", "-s", "sub", "-n", "2", "--service-url", broker.url,
                                "--timeout-s", "10"])
    assert first.exit_code == 0, first.output
    rest = runner.invoke(app, ["consume", "older", "-s", "sub", "-n", "3", "--service-url", broker.url,
                               "--timeout-s", "10"])
    assert rest.exit_code == 0, rest.output
    assert "3 messages consumed" in rest.output
    assert "trimmed" not in rest.output  # sequence ids 2..4, but 0 and 1 are still stored: acknowledged, not lost


def _message(ledger: int, entry: int, sequence_id: int) -> Message:
    return Message("persistent://public/default/t", MessageId(ledger, entry), b"x", None, {}, 0, None, "p-1",
                   sequence_id, 0)


def test_trim_note_only_when_the_subscription_starts_at_a_trimmed_producers_later_message() -> None:
    later = _message(7, 0, 120)
    assert "older messages were trimmed" in (trim_note(later, later) or "")
    assert "120 earlier message(s)" in (trim_note(later, later) or "")
    assert trim_note(later, _message(3, 0, 0)) is None  # the topic still holds older messages
    assert trim_note(later, None) is None
    assert trim_note(_message(7, 0, 0), _message(7, 0, 0)) is None  # the producer's first: nothing missing
