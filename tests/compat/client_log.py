"""The official client's own log, captured and checked: a compat test fails when the client logs
an ERROR line that a real Pulsar broker would not cause.

The python client forwards its C++ log lines to a ``logging.Logger`` given as ``logger=``, but
the C++ client has one logger factory per process and the first client made sets it for good
(later ``logger=`` arguments are ignored). So ``install()`` runs when the compat conftest loads,
before any test made a client: from then on every client of the process logs into
``CLIENT_LOG``, whatever logger it was given. The autouse fixture in ``conftest.py`` empties it
before each compat test and fails the test on ERROR lines at teardown, after the test's clients
were closed.

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

#: ERROR lines kept between two ``forget()`` calls (tests outside ``compat`` never call it).
LINES_KEPT_COUNT_MAX = 10_000


class ClientLog(logging.Handler):
    """Collects the client's log lines at ERROR and above (thread-safe: the client logs from its
    own threads).

    There is one, for the process (see the module docstring); each test starts with
    ``forget()``. Lines propagate to the root logger too, so pytest shows them with a failure.
    """

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self._lock_lines = threading.Lock()
        self._errors: list[str] = []
        self.logger = logging.getLogger("magnetar.tests.pulsar-client")
        self.logger.setLevel(logging.WARNING)
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        with self._lock_lines:
            if len(self._errors) < LINES_KEPT_COUNT_MAX:
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


def install() -> None:
    """Make ``CLIENT_LOG`` the process's client logger: a first client, never connected."""
    import pulsar

    pulsar.Client("pulsar://127.0.0.1:1", logger=CLIENT_LOG.logger).close()
