"""Session authentication on a virtual clock: CONNECT, expiry, AUTH_CHALLENGE / AUTH_RESPONSE."""

from __future__ import annotations

import asyncio
import base64
import struct

from magnetar.broker import BrokerConfig, MemoryLogStore
from magnetar.broker.service import BrokerService
from magnetar.broker.session import Session
from magnetar.protocol.pulsar import ServerConfig, ServerConnection, State, pb
from magnetar.protocol.pulsar.frames import encode_command
from magnetar.runtime.security import CredentialFiles
from magnetar.security import create_token
from tests.manual_clock import ManualClock

SECRET = b"session-secret-session-secret-se"
CONFIG = BrokerConfig(authentication_enabled=True, authentication_providers=("token",),
                      token_secret_key="data:;base64," + base64.b64encode(SECRET).decode())


def sent(connection: ServerConnection) -> list[int]:
    data = b"".join(bytes(chunk) for chunk in connection.data_to_send())
    kinds = []
    while data:
        total, size = struct.unpack(">II", data[:8])
        command = pb.BaseCommand()
        command.ParseFromString(data[8:8 + size])
        kinds.append(command.type)
        data = data[4 + total:]
    return kinds


class World:
    def __init__(self, *, refresh: bool = True) -> None:
        self.clock = ManualClock()
        self.service = BrokerService(CONFIG, MemoryLogStore(), clock=self.clock)
        self.service.authenticator = CredentialFiles(CONFIG, self.clock).authenticator
        self.connection = ServerConnection(0, ServerConfig(auto_accept_connect=False))
        self.session = Session(self.service, self.connection, lambda: None)
        self.refresh = refresh

    def now_s(self) -> int:
        return self.clock.now_ms() // 1000

    def token(self, role: str = "alice", lifetime_s: int = 10) -> bytes:
        return create_token(role, secret_key=SECRET, expires_at_s=self.now_s() + lifetime_s).encode()

    def feed(self, command: pb.BaseCommand) -> None:
        async def run() -> None:
            for event in self.connection.receive_data(encode_command(command), 0):
                await self.session.handle(event)
            await self.session.requests.settled()  # creations and lookups answer from their own tasks
        asyncio.run(run())

    def connect(self, data: bytes) -> None:
        command = pb.BaseCommand(type=pb.BaseCommand.CONNECT)
        command.connect.client_version = "test"
        command.connect.protocol_version = 20
        command.connect.auth_method_name = "token"
        command.connect.auth_data = data
        command.connect.feature_flags.supports_auth_refresh = self.refresh
        self.feed(command)

    def respond(self, data: bytes) -> None:
        command = pb.BaseCommand(type=pb.BaseCommand.AUTH_RESPONSE)
        command.authResponse.response.auth_method_name = "token"
        command.authResponse.response.auth_data = data
        self.feed(command)

    def check_after(self, seconds: float) -> None:
        self.clock._now_ns += int(seconds * 1e9)
        self.session.check_credentials(self.clock.now_ms())


def test_expired_token_is_challenged_and_renewed() -> None:
    world = World()
    world.connect(world.token())
    assert world.session.role == "alice" and sent(world.connection) == [pb.BaseCommand.CONNECTED]
    world.check_after(5)  # not expired yet
    assert sent(world.connection) == []
    world.check_after(6)
    assert sent(world.connection) == [pb.BaseCommand.AUTH_CHALLENGE]
    world.respond(world.token())
    assert world.session.refreshed_count == 1 and world.connection.state is State.CONNECTED
    world.check_after(1)  # renewed: nothing to do until the new expiry
    assert sent(world.connection) == [] and world.connection.state is State.CONNECTED


def test_unanswered_challenge_closes_at_the_next_check() -> None:
    world = World()
    world.connect(world.token())
    sent(world.connection)
    world.check_after(11)
    assert sent(world.connection) == [pb.BaseCommand.AUTH_CHALLENGE]
    world.check_after(1)
    assert world.connection.state is State.CLOSED and world.session.closed_for_credentials


def test_refresh_with_a_bad_token_or_another_role_closes() -> None:
    for answer in (b"junk", b"role-change"):
        world = World()
        world.connect(world.token())
        world.check_after(11)
        world.respond(world.token("mallory") if answer == b"role-change" else answer)
        assert world.connection.state is State.CLOSED and world.session.closed_for_credentials


def test_a_client_that_cannot_refresh_is_closed_on_expiry() -> None:
    world = World(refresh=False)
    world.connect(world.token())
    world.check_after(11)
    assert world.connection.state is State.CLOSED and world.session.closed_for_credentials


def test_a_token_without_expiry_is_never_challenged() -> None:
    world = World()
    world.connect(create_token("alice", secret_key=SECRET).encode())
    sent(world.connection)
    world.check_after(10 * 365 * 86400)
    assert sent(world.connection) == [] and world.connection.state is State.CONNECTED
