"""The web console in a real browser (headless Chromium driven by Playwright) against a real
``magnetar standalone``: pages load without console errors, a message produced with the official
client moves the topic's rate graph and backlog, clearing a backlog takes effect, the token login
sends the token as a header only, and each main page is written as a screenshot
(``build/test-artifacts/console/``; the copies in ``docs/console/`` come from here).

Chromium is Debian's ``chromium`` (``scripts/install-system-deps.sh`` installs it, as ``make test``
does); Playwright drives it through ``executable_path``: nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from magnetar.runtime.processes import StandaloneProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

CHROMIUM = os.environ.get("MAGNETAR_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "build" / "test-artifacts" / "console"
WAIT_MS = 30_000  # every wait for the page is bounded by this


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    # three bookies: ledgers replicated (E, Qw, Qa) = (3, 3, 2), as the durability view shows
    running = StandaloneProcess(str(tmp_path_factory.mktemp("console") / "data"), bookies_count=3)
    try:
        yield running
    finally:
        running.terminate()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if shutil.which(CHROMIUM) is None:
        pytest.fail(f"{CHROMIUM} is missing: run scripts/install-system-deps.sh (make test does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


class Page:
    """A browser tab on the console that records console errors and failed requests."""

    def __init__(self, browser: Any, base_url: str) -> None:
        # bypass_csp: Playwright evaluates its wait predicates as strings, which the page's CSP forbids
        self.context = browser.new_context(viewport={"width": 1360, "height": 900}, bypass_csp=True)
        self.page = self.context.new_page()
        self.page.set_default_timeout(WAIT_MS)
        self.base_url = base_url
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(f"console: {m.text}") if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"page: {e}"))

    def open(self, hash_route: str, ready: str) -> None:
        self.page.goto(f"{self.base_url}/#{hash_route}")
        self.page.wait_for_selector(ready)

    def wait_until(self, expression: str) -> None:
        """Poll ``expression`` in the page (every 250 ms, at most ``WAIT_MS``) until it is truthy."""
        try:
            self.page.wait_for_function(expression, polling=250, timeout=WAIT_MS)
        except Exception:
            self.shot("failed-wait")
            raise AssertionError(f"not true within {WAIT_MS} ms: {expression}; page errors {self.errors}; "
                                 f"status {self.page.inner_text('#status')!r}") from None

    def shot(self, name: str) -> Path:
        self.wait_until("getComputedStyle(document.getElementById('toast')).opacity === '0'")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def close(self) -> None:
        self.context.close()


def _admin(standalone: StandaloneProcess, path: str) -> Any:
    with urllib.request.urlopen(f"{standalone.http_url}/admin/v2{path}", timeout=10) as reply:
        return json.loads(reply.read())


def test_console_pages_graphs_and_clear_backlog(standalone: StandaloneProcess, browser: Any) -> None:
    import pulsar

    client = pulsar.Client(standalone.broker_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    tab = Page(browser, standalone.http_url)
    try:
        consumer = client.subscribe("console-topic", "console-sub", receiver_queue_size=1)
        tab.open("/", "[data-card=topics]")
        assert "Magnetar" in tab.page.title()
        tab.page.wait_for_selector("#bookies tr[data-bookie]")
        assert tab.page.locator("#bookies tr[data-bookie]").count() == 3
        assert "writable" in tab.page.inner_text("#bookies")

        tab.open("/topic/public/default/console-topic", "#subscriptions tr[data-subscription=console-sub]")
        # the graph's baseline: one sample of the idle topic (the broker samples every 2 s)
        tab.wait_until("Number(document.querySelector('#rate-chart svg')?.dataset.samples) >= 1")
        assert float(tab.page.get_attribute("#rate-chart svg", "data-max-in") or 0) == 0
        producer = client.create_producer("console-topic", batching_enabled=False)
        for i in range(20):
            producer.send(json.dumps({"order": i, "item": "tea"}).encode(), partition_key=f"k{i % 3}")
        # the graph moves at the broker's next rate sample; the page refreshes itself
        tab.wait_until(
            "document.querySelector('#rate-chart svg') && Number(document.querySelector('#rate-chart svg')"
            ".dataset.maxIn) > 0")
        backlog = "#subscriptions tr[data-subscription=console-sub] [data-field=backlog]"
        tab.wait_until(f"document.querySelector('{backlog}')?.textContent === '20'")
        assert "127.0.0.1:" in tab.page.inner_text("#subscriptions")  # the consumer's address
        tab.page.click("#subscriptions tr[data-subscription=console-sub] [data-action=peek]")
        tab.page.wait_for_selector("#peek-output .peeked")
        assert '"item": "tea"' in tab.page.inner_text("#peek-output") or '"item":"tea"' in tab.page.inner_text("#peek-output")
        tab.shot("topic")

        row = "#subscriptions tr[data-subscription=console-sub]"
        tab.page.once("dialog", lambda prompt: prompt.accept("5"))  # how many to skip
        tab.page.click(f"{row} [data-action=skip]")
        tab.page.click("#confirm-ok")
        tab.wait_until(f"document.querySelector('{backlog}')?.textContent === '15'")

        tab.page.click("#subscriptions tr[data-subscription=console-sub] [data-action=clear]")
        tab.page.wait_for_selector("#confirm[open]")
        assert "console-sub" in tab.page.inner_text("#confirm-text")
        tab.page.click("#confirm-ok")
        tab.wait_until(f"document.querySelector('{backlog}')?.textContent === '0'")
        stats = _admin(standalone, "/persistent/public/default/console-topic/stats")
        assert stats["subscriptions"]["console-sub"]["msgBacklog"] == 0  # the broker agrees, not just the page
        tab.page.once("dialog", lambda prompt: prompt.accept("10"))  # back to what was published 10 minutes ago
        tab.page.click(f"{row} [data-action=reset]")
        tab.page.click("#confirm-ok")
        tab.wait_until(f"document.querySelector('{backlog}')?.textContent === '20'")

        tab.open("/durability/public/default/console-topic", "table.ledgers tr[data-ledger]")
        assert "3 / 3 / 2" in tab.page.inner_text("table.ledgers")
        assert tab.page.locator("table.ledgers tr[data-ledger] .bookie").count() >= 3
        tab.shot("durability")

        tab.open("/", "[data-card=topics]")
        tab.wait_until("Number(document.querySelector('.chart').dataset.maxIn) > 0")
        tab.shot("overview")
        tab.open("/topics", ".tree a[data-topic='persistent://public/default/console-topic']")
        tab.page.fill("#search", "no-such-topic")
        tab.page.wait_for_selector(".tree li.muted")
        tab.open("/cluster", "main h1")

        # a namespace and a policy, each through its form and a confirmation
        tab.open("/topics", "#search")
        tab.page.fill("#search", "")  # the search above is remembered in the tab
        tab.page.wait_for_selector(".tree a[data-topic='persistent://public/default/console-topic']")
        tab.page.fill("#create-namespace input[name=namespace]", "public/console-ns")
        tab.page.click("#create-namespace button")
        tab.page.wait_for_selector("#confirm[open]")
        tab.page.click("#confirm-ok")
        tab.page.wait_for_selector("a.ns[href='#/namespace/public/console-ns']")
        tab.open("/namespace/public/console-ns", "form[data-policy=retention]")
        tab.page.fill("form[data-policy=retention] input[name=minutes]", "60")
        tab.page.fill("form[data-policy=retention] input[name=mb]", "100")
        tab.page.click("form[data-policy=retention] button")
        tab.page.click("#confirm-cancel")  # cancelled: nothing changes
        assert _admin(standalone, "/namespaces/public/console-ns").get("retention_policies") is None
        tab.page.click("form[data-policy=retention] button")
        tab.page.click("#confirm-ok")
        tab.page.wait_for_selector("text=60 min, 100 MB")
        assert _admin(standalone, "/namespaces/public/console-ns")["retention_policies"] == {
            "retentionTimeInMinutes": 60, "retentionSizeInMB": 100}
        assert tab.errors == []
        producer.close()
        consumer.close()
    finally:
        tab.close()
        client.close()


def test_console_token_login_sends_a_header_never_a_url(standalone: StandaloneProcess, browser: Any) -> None:
    tab = Page(browser, standalone.http_url)
    seen: list[tuple[str, str | None]] = []
    try:
        # The broker here runs without authentication: answer 401 for the overview until a
        # token comes, as an authenticating broker does, and record what the page sends.
        def overview(route: Any) -> None:
            header = route.request.headers.get("authorization")
            seen.append((route.request.url, header))
            if header == "Bearer s3cret-token":
                route.continue_()
            else:
                route.fulfill(status=401, content_type="application/json", body='{"reason": "token required"}')

        tab.page.route("**/console/api/overview", overview)
        tab.page.goto(f"{standalone.http_url}/#/")
        tab.page.wait_for_selector("#login[open]")
        tab.page.fill("#login-token", "s3cret-token")
        tab.page.click("#login-submit")
        tab.page.wait_for_selector("[data-card=topics]")
        assert seen[-1][1] == "Bearer s3cret-token"
        assert all("s3cret" not in url for url, _ in seen)
        assert "s3cret" not in tab.page.url
        assert tab.page.evaluate("sessionStorage.getItem('magnetar.token')") == "s3cret-token"
        tab.page.click("#logout")
        tab.page.wait_for_selector("#login[open]")  # signed out: asked again
    finally:
        tab.close()
