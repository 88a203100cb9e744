"""Property tests: nothing a client puts in CONNECT's auth fields, AUTH_RESPONSE or the HTTP
``Authorization`` header crashes the broker. Each input ends in a role or a clean refusal."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from magnetar.broker import BrokerConfig, MemoryLogStore
from magnetar.broker.service import BrokerService
from magnetar.broker.session import Session
from magnetar.protocol.pulsar import ServerConfig, ServerConnection, State, pb
from magnetar.protocol.pulsar.frames import encode_command
from magnetar.runtime.security import CredentialFiles
from magnetar.security import AuthenticationFailedError, create_token
from tests.admin.harness import AdminWorld
from tests.manual_clock import ManualClock

SECRET = b"fuzz-secret-fuzz-secret-fuzz-sec"
CONFIG = BrokerConfig(authentication_enabled=True, authentication_providers=("token", "tls"),
                      anonymous_user_role=None,
                      token_secret_key="data:;base64," + base64.b64encode(SECRET).decode())
GOOD = create_token("alice", secret_key=SECRET)

methods = st.one_of(st.none(), st.sampled_from(["token", "basic", "tls", "none", "", "TOKEN"]),
                    st.text(max_size=300))
datas = st.one_of(st.none(), st.binary(max_size=2048), st.just(GOOD.encode()),
                  st.builds(lambda cut: GOOD.encode()[:cut], st.integers(0, len(GOOD))),
                  st.builds(lambda n: b"A" * n, st.integers(16 * 1024 - 2, 16 * 1024 + 2)))


def service() -> BrokerService:
    clock = ManualClock()
    result = BrokerService(CONFIG, MemoryLogStore(), clock=clock)
    result.authenticator = CredentialFiles(CONFIG, clock).authenticator
    return result


SERVICE = service()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(method=methods, data=datas, cn=st.one_of(st.none(), st.text(max_size=64)),
       response=st.one_of(st.none(), st.tuples(methods, datas)))
def test_connect_and_auth_response_never_crash(method: str | None, data: bytes | None, cn: str | None,
                                              response: tuple[str | None, bytes | None] | None) -> None:
    connection = ServerConnection(0, ServerConfig(auto_accept_connect=False))
    session = Session(SERVICE, connection, lambda: None, tls_peer_cn=cn)
    connect = pb.BaseCommand(type=pb.BaseCommand.CONNECT)
    connect.connect.client_version = "fuzz"
    connect.connect.protocol_version = 20
    connect.connect.feature_flags.supports_auth_refresh = True
    if method is not None:
        connect.connect.auth_method_name = method
    if data is not None:
        connect.connect.auth_data = data
    frames = [encode_command(connect)]
    if response is not None:
        auth = pb.BaseCommand(type=pb.BaseCommand.AUTH_RESPONSE)
        auth.authResponse.protocol_version = 20
        if response[0] is not None:
            auth.authResponse.response.auth_method_name = response[0]
        if response[1] is not None:
            auth.authResponse.response.auth_data = response[1]
        frames.append(encode_command(auth))

    async def run() -> None:
        for frame in frames:
            for event in connection.receive_data(frame, 0):
                await session.handle(event)
        await session.requests.settled()

    asyncio.run(run())
    assert connection.state in (State.CONNECTED, State.CLOSED)
    if session.refusal is not None:  # refused: no role, and every request will be refused
        assert session.role is None and session.principal is None
    else:  # authenticated: the token's subject or the certificate's CN
        assert session.role in ("alice", cn)


headers = st.one_of(
    st.text(max_size=200).filter(lambda h: h.isprintable() and h.isascii()),
    st.builds(lambda s, b: f"{s} {b}", st.sampled_from(["Bearer", "Basic", "bearer", "Digest", ""]),
              st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), max_size=300)),
    st.just(f"Bearer {GOOD}"),
    st.builds(lambda n: "Bearer " + "x" * n, st.integers(16 * 1024 - 10, 16 * 1024 + 10)),
)


@pytest.fixture(scope="module")
def admin_world() -> Iterator[tuple[asyncio.AbstractEventLoop, AdminWorld]]:
    """One admin app for every example: the property is about the header, not start-up, and a world
    per example cost a second each."""
    loop = asyncio.new_event_loop()
    world = loop.run_until_complete(AdminWorld(CONFIG).start())
    yield loop, world
    loop.run_until_complete(world.close())
    loop.close()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(header=headers)
def test_http_authorization_header_never_crashes(
        admin_world: tuple[asyncio.AbstractEventLoop, AdminWorld], header: str) -> None:
    loop, world = admin_world
    reply = loop.run_until_complete(world.call("GET", "/tenants", headers={"Authorization": header}))
    status = reply.status
    assert status in (200, 401), status
    assert (status == 200) == (header == f"Bearer {GOOD}" or header.strip() == f"Bearer {GOOD}")


@given(method=methods, data=datas, cn=st.one_of(st.none(), st.text(max_size=64)))
@settings(max_examples=300, deadline=None)
def test_authenticator_only_returns_a_role_or_refuses(method: str | None, data: bytes | None, cn: str | None) -> None:
    authenticator = SERVICE.authenticator
    assert authenticator is not None
    try:
        principal = authenticator.authenticate(method, data, cn)
    except AuthenticationFailedError as error:
        assert error.reason
    else:
        assert principal.role
