"""``runtime.startup_checks``: one data directory per standalone, ports checked before anything starts."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from magnetar.runtime.startup_checks import DataDirLock, StartupConflictError, check_ports_free


def test_the_lock_names_its_holder_and_is_released(tmp_path: Path) -> None:
    first = DataDirLock(str(tmp_path / "d"))
    first.acquire()
    assert (tmp_path / "d" / "standalone.pid").read_text() == f"{os.getpid()}\n"
    with pytest.raises(StartupConflictError, match=rf"a standalone already runs on .*/d \(PID {os.getpid()}\)"):
        DataDirLock(str(tmp_path / "d")).acquire()
    first.release()
    again = DataDirLock(str(tmp_path / "d"))
    again.acquire()  # released: the next one gets it (a stale file alone never blocks)
    again.release()


def test_a_taken_port_is_named_with_the_option_that_moves_it() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(StartupConflictError, match=rf"port {port} \(bookie-1\) .* choose another with --bookie-port"):
            check_ports_free("127.0.0.1", [("HTTP", 0, "--web-port"), ("bookie-1", port, "--bookie-port")])
