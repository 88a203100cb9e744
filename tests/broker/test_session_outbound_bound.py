"""A session is writable while its queued outgoing bytes (the protocol's queue plus what the
runtime handed to the socket and did not drain) stay below ``connection_outbound_bytes_high``,
and always with ``connection_outbound_bound_enabled`` off. Session 19 reads that bound once per
connection (``BrokerConfig.outbound_bytes_bound``) instead of two config fields by name per call.

Negative controls: with the bound on, the session stops being writable at the high mark (a
``writable`` that ignored the bound fails the first test); with the bound off it never does (a
bound that ignored the switch fails the second).
"""

from __future__ import annotations

import asyncio

from magnetar.broker.config import BrokerConfig
from magnetar.broker.session import Session
from tests.admin.harness import AdminWorld
from tests.broker.test_session_authorization import _connected

HIGH = 64 * 1024  # the least high mark BrokerConfig accepts


async def _writable_at(config: BrokerConfig, backlogs: list[int]) -> list[bool]:
    world = await AdminWorld(config).start()
    try:
        session = Session(world.service, _connected(), lambda: None)
        seen = []
        for backlog in backlogs:
            session.set_transport_backlog(backlog)
            seen.append(session.writable())
        await session.close()
        return seen
    finally:
        await world.close()


def test_a_session_stops_being_writable_at_the_high_mark() -> None:
    config = BrokerConfig(connection_outbound_bytes_high=HIGH)
    assert config.outbound_bytes_bound == HIGH
    assert asyncio.run(_writable_at(config, [0, HIGH - 1, HIGH, 10 * HIGH, 0])) == [True, True, False, False, True]


def test_negative_control_with_the_bound_off_a_session_stays_writable() -> None:
    config = BrokerConfig(connection_outbound_bytes_high=HIGH, connection_outbound_bound_enabled=False)
    assert config.outbound_bytes_bound > 1 << 60
    assert asyncio.run(_writable_at(config, [0, HIGH, 1 << 40])) == [True, True, True]
