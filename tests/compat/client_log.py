"""The official client's own log, captured and checked: a compat test fails when the client logs
an ERROR line that a real Pulsar broker would not cause.

The python client forwards its C++ log lines to a ``logging.Logger`` given as ``logger=``. The
autouse fixture in ``conftest.py`` makes every ``pulsar.Client`` of a compat test log into one
``ClientLog`` (a ``logger=`` the test passes is replaced by it), and fails
the test on ERROR lines at teardown, after the test's clients were closed.

The allow-list is per test, with ``@pytest.mark.client_errors(pattern, ...)``, for the lines
a real Pulsar broker causes too in that test: a refusal the test provokes on purpose (a fenced or
busy producer, an incompatible schema, a missing topic: the client logs each refusal it is given,
against Pulsar as against us), or a broker the test kills (the client logs its failed
reconnects). Nothing is allowed for every test.
"""

from __future__ import annotations

import logging
import re
import threading


class ClientLog(logging.Handler):
    """Collects the client's log lines at ERROR and above (thread-safe: the client logs from its
    own threads).

    There is one, for the process: the C++ client's logger factory is process-wide and its
    threads keep the logger they first made, so every client must log into the same
    ``logging.Logger``; each test starts with ``forget()``.
    """

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self._lock_lines = threading.Lock()
        self._errors: list[str] = []
        self.logger = logging.getLogger("magnetar.tests.pulsar-client")
        self.logger.setLevel(logging.WARNING)
        self.logger.propagate = False
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        with self._lock_lines:
            self._errors.append(record.getMessage())

    def errors(self) -> list[str]:
        with self._lock_lines:
            return list(self._errors)

    def unexpected(self, allowed: tuple[str, ...] = ()) -> list[str]:
        """ERROR lines matching none of the ``allowed`` patterns."""
        patterns = [re.compile(p) for p in allowed]
        return [line for line in self.errors() if not any(p.search(line) for p in patterns)]

    def forget(self) -> None:
        with self._lock_lines:
            self._errors.clear()


CLIENT_LOG = ClientLog()
