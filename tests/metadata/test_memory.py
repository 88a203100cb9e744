"""Memory store specifics: session expiry driven by the injected clock (as the simulator does)."""

from __future__ import annotations

from magnetar.metadata import MemoryMetadataServer, SessionState
from tests.manual_clock import ManualClock
from tests.metadata.conftest import run


def test_suspended_session_expires_after_its_timeout_on_the_injected_clock() -> None:
    async def body() -> None:
        clock = ManualClock()
        server = MemoryMetadataServer(clock)
        owner, observer = await server.connect(session_timeout_ms=5_000), await server.connect()
        states: list[SessionState] = []
        owner.session.add_listener(states.append)
        await owner.create("/e", b"", ephemeral=True)

        server.suspend_session(owner.session.session_id)
        await clock.advance(4_999 / 1000)
        assert owner.session.state is SessionState.SUSPENDED and await observer.exists("/e")
        server.resume_session(owner.session.session_id)
        await clock.advance(10_000 / 1000)
        assert owner.session.state is SessionState.CONNECTED and await observer.exists("/e")

        server.suspend_session(owner.session.session_id)
        await clock.advance(5_000 / 1000)
        assert owner.session.state is SessionState.EXPIRED
        assert not await observer.exists("/e")
        assert states == [SessionState.SUSPENDED, SessionState.CONNECTED, SessionState.SUSPENDED, SessionState.EXPIRED]

    run(body)


def test_node_times_come_from_the_injected_clock() -> None:
    async def body() -> None:
        clock = ManualClock()
        server = MemoryMetadataServer(clock)
        store = await server.connect()
        await store.put("/t", b"", -1)
        await clock.advance(1_500 / 1000)
        await store.put("/t", b"x", 0)
        node = server.node("/t")
        assert node is not None and node.mtime_ms - node.ctime_ms == 1_500

    run(body)
