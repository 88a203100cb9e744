"""A managed-ledger topic's ``append_run`` (the ``TopicLog`` port's one append), compiled.

``ManagedTopicLog`` (``broker/managed_log.py``) stays interpreted: ``ReadOnlyTopicLog``, an
interpreted subclass, hands it a ``ReadOnlyManagedLedger`` where a ``ManagedLedger`` is declared,
which a native class would check. Its ``append_run`` is once per publish run, so at a modest rate
(one message per run) its interpreted frame was paid per message; this class is that method as
a native callable the log holds as its ``append_run`` (docs/performance.md, session 17).
"""

from __future__ import annotations

from collections.abc import Sequence

from magnetar.broker.errors import BrokerError
from magnetar.broker.log import AppendCallback
from magnetar.managed_ledger.errors import ManagedLedgerTerminatedError
from magnetar.managed_ledger.managed_ledger import ManagedLedger
from magnetar.protocol.pulsar import pb


class ManagedRunAppend:
    """``append_run`` of the topic ``name`` over ``ml``: the managed ledger's one append, the run
    and its callbacks as they are; a terminated topic refuses at once (termination waits for the
    appends in flight), as the ``TopicLog`` port's ``TopicTerminatedError``."""

    __slots__ = ("_ml", "_name")

    def __init__(self, name: str, ml: ManagedLedger) -> None:
        self._name = name
        self._ml = ml

    def __call__(self, run: Sequence[tuple[bytes, AppendCallback]]) -> None:
        try:
            self._ml.append_run(run)
        except ManagedLedgerTerminatedError as error:
            raise BrokerError(pb.TopicTerminatedError, f"topic {self._name} is terminated") from error
