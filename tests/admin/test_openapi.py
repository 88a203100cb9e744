"""The served OpenAPI spec matches the routes, and schemathesis finds no 5xx in generated requests
(with a negative control: an endpoint that fails is caught)."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from magnetar.admin import ADMIN_PATH, AdminContext, api_route, build_admin_app
from magnetar.admin.openapi import api_routes
from magnetar.metadata.memory import MemoryMetadataServer
from magnetar.runtime.clock import SystemClock
from magnetar.runtime.http import start_http
from tests.admin.conftest import HttpBroker, running_http_broker
from tests.admin.harness import AdminWorld
from tests.compat.harness import BrokerThread

#: Generated requests per operation (about 110 operations: about 20 s in all, hence integration).
EXAMPLES_PER_OPERATION = 4


def fuzz(http_url: str, examples: int) -> tuple[int, list[str]]:
    """(operations exercised, requests answered with a 5xx) for the spec served at ``http_url``."""
    spec = json.loads(urllib.request.urlopen(f"{http_url}{ADMIN_PATH}/openapi.json", timeout=10).read())
    schema = schemathesis.openapi.from_dict(spec)
    schema.config.update(base_url=f"{http_url}{ADMIN_PATH}")
    failures: list[str] = []
    operations = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1

        @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy())
        def check(case: schemathesis.Case) -> None:
            response = case.call(timeout=10)
            # 501 is an answer, not a crash: Pulsar's "Authorization is not enabled" on grants
            if response.status_code >= 500 and response.status_code != 501:
                failures.append(f"{case.method} {case.formatted_path} -> {response.status_code} {response.text[:200]}")

        check()
    return operations, failures


def test_spec_lists_exactly_the_routes() -> None:
    async def main() -> None:
        world = await AdminWorld().start()
        try:
            spec = (await world.call("GET", "/openapi.json")).json()
            documented = {(path, method.upper()) for path, ops in spec["paths"].items() for method in ops}
            served = {(path.replace(":int}", "}"), method) for path, route, _ in api_routes(world.app.routes)
                      for method in route.methods or () if method != "HEAD"}
            assert documented == served and len(served) > 80
            assert spec["paths"]["/tenants/{tenant}"]["put"]["requestBody"]["content"]["application/json"]
        finally:
            await world.close()

    asyncio.run(main())


def _broken_router(ctx: AdminContext) -> list[BaseRoute]:
    @api_route("/broken/{name}", ["GET"], "fails on every input")
    async def broken(request: Request) -> Response:
        raise RuntimeError(f"bug on {request.path_params['name']!r}")

    return [broken]


def test_fuzz_catches_a_server_error() -> None:
    """Negative control: the same check over an app with one failing endpoint reports it."""
    thread = BrokerThread()
    try:
        thread.metadata = thread.call(MemoryMetadataServer(SystemClock()).connect())
        thread.start()
        assert thread.server is not None
        app = build_admin_app(AdminContext(thread.server.service, "standalone"), routers=[_broken_router])
        http = thread.call(start_http("127.0.0.1", 0, health=dict, mounts={ADMIN_PATH: app}))
        try:
            operations, failures = fuzz(f"http://127.0.0.1:{http.port}", 2)
        finally:
            thread.call(http.stop())
    finally:
        thread.stop()
    assert operations == 1 and failures and "-> 500" in failures[0]


@pytest.fixture(scope="module")
def fuzz_broker() -> Iterator[HttpBroker]:
    with running_http_broker() as running:
        yield running


@pytest.mark.integration
def test_schemathesis_finds_no_server_errors(fuzz_broker: HttpBroker) -> None:
    operations, failures = fuzz(fuzz_broker.http_url, EXAMPLES_PER_OPERATION)
    assert operations > 80
    assert not failures, "\n".join(failures[:20])
