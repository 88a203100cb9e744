"""Checks a process makes before it starts, so that a conflict is one clear line, not a traceback.

``DataDirLock``: one standalone per data directory. The lock is an exclusive ``flock`` on
``<data_dir>/standalone.pid``, which holds the owner's PID; the kernel releases it when the
process exits however it exits (even SIGKILL), so a stale file never blocks a restart. A second
process finds the lock held and raises ``StartupConflictError`` naming the PID.

``check_ports_free``: every port the process will listen on, tried before anything starts (the
metadata store, a bookie's journal replay), with the same ``SO_REUSEADDR`` the servers use, so
that "port 3181 (bookie-0) is in use" is said up front, and which option moves it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
from collections.abc import Iterable

from magnetar.base.errors import MagnetarError

PID_FILE = "standalone.pid"


class StartupConflictError(MagnetarError):
    """Another process holds what this one needs (a data directory, a port)."""


class DataDirLock:
    """The exclusive lock of one data directory, held from ``acquire`` to ``release``."""

    def __init__(self, data_dir: str) -> None:
        self.path = os.path.join(os.path.abspath(data_dir), PID_FILE)
        self._fd: int | None = None

    def acquire(self) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            owner = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise StartupConflictError(
                    f"a standalone already runs on {os.path.dirname(self.path)} (PID {owner}); stop it "
                    f"(kill {owner}) or give another --data-dir") from None
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
        os.close(self._fd)  # closing drops the flock
        self._fd = None


def check_ports_free(host: str, ports: Iterable[tuple[str, int, str]]) -> None:
    """Raise ``StartupConflictError`` for the first of ``(what, port, option)`` that cannot be bound."""
    for what, port, option in ports:
        if port == 0:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
            except OSError as error:
                if error.errno == errno.EADDRINUSE:
                    raise StartupConflictError(
                        f"port {port} ({what}) on {host} is already in use by another process "
                        f"(another standalone, broker or bookie?); choose another with {option}") from None
                raise StartupConflictError(f"cannot listen on {host}:{port} ({what}): {error.strerror}") from None
