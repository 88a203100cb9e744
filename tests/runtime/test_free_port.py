"""``free_port``: ports for nodes restarted on the same address come from below the kernel's
ephemeral range, where no outbound connection can take them while the node is down."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from magnetar.runtime import processes


def test_ports_come_from_below_the_ephemeral_range() -> None:
    low = processes._ephemeral_low()
    if low <= processes.FIXED_PORT_FLOOR:
        pytest.skip("this machine's ephemeral range starts too low")
    ports = [processes.free_port() for _ in range(20)]
    assert all(processes.FIXED_PORT_FLOOR <= port < low for port in ports), ports
    with socket.socket() as sock:  # free a moment ago: it can be bound now
        sock.bind(("127.0.0.1", ports[-1]))


def test_without_a_known_range_the_os_picks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The control: with no range to read, the port is the OS's pick (inside its ephemeral range
    on Linux), which the test above would reject."""
    monkeypatch.setattr(processes, "_EPHEMERAL_RANGE", str(tmp_path / "absent"))
    assert processes._ephemeral_low() == 0
    port = processes.free_port()
    with open("/proc/sys/net/ipv4/ip_local_port_range") as file:
        low, high = (int(part) for part in file.read().split())
    assert low <= port <= high
