"""Negative-control switches ("breaks"): each one disables a mechanism behind an invariant, so a
checker can show that it catches the loss the mechanism prevents (``docs/faults.md``).

Production never sets them. A real process reads ``MAGNETAR_BREAK=name[,name...]`` once at
start (``enable_from_env``, called by ``faults.arm_from_env`` from the composition root), the
same way it reads ``MAGNETAR_FAULTS``; cores only ask ``active(Break.X)``, never the
environment.

* ``ack-before-fsync``  the bookie journal runs an add's reply before the group is even written
  (not only before the fsync: a kill -9 keeps the OS page cache, so "written, not synced" would
  survive it; "replied, still in the process's buffers" does not).
* ``no-fencing``        ledger recovery neither fences the bookies nor reads with fencing
  (``RecoveryMode.NO_FENCING``): a zombie writer keeps getting acknowledgements.
* ``truncate-to-lac``   ledger recovery closes the ledger at the highest LAC it was told instead
  of reading forward (``RecoveryMode.TRUNCATE_TO_LAC``): the last acknowledged entries vanish.
* ``no-dedup``          the broker's message deduplication is off whatever the configuration says:
  a producer's resends after a reconnect are stored twice.
* ``no-repl-dedup``     the receiving broker's replication deduplication (by source position) is
  off: a geo-replicator that restarts and resends what it had sent is stored twice.
* ``no-rebase-check``   the broker judges every message of a reconnected producer by its sequence id
  alone: the new messages the 4.2.0 client sends under ids it reused after re-basing on
  PRODUCER_SUCCESS.last_sequence_id are answered as duplicates, acknowledged with (-1,-1), lost.
* ``no-subscription-auth`` authorization ignores subscription role lists: any role with consume
  may use a subscription that was limited to other roles.
* ``serial-close``      a topic closes its subscriptions, compaction and dedup states one after
  another, and a managed ledger its cursors (before issue 24's fix): an unload costs a round trip
  per part instead of a few in all.
* ``close-waits-for-flush`` a managed cursor's close queues behind the flush under way (its
  cursor-ledger add can take seconds on a busy bookie) instead of CASing its state at once.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from typing import Final

from magnetar.base.errors import InvalidArgumentError

ENV_VAR = "MAGNETAR_BREAK"


class Break(enum.Enum):
    ACK_BEFORE_FSYNC = "ack-before-fsync"
    NO_FENCING = "no-fencing"
    TRUNCATE_TO_LAC = "truncate-to-lac"
    NO_DEDUP = "no-dedup"
    NO_REPL_DEDUP = "no-repl-dedup"
    NO_REBASE_CHECK = "no-rebase-check"
    NO_SUBSCRIPTION_AUTH = "no-subscription-auth"
    SERIAL_CLOSE = "serial-close"
    CLOSE_WAITS_FOR_FLUSH = "close-waits-for-flush"


#: ``Final`` (only changed in place): compiled, a static reference, not a globals lookup per ``active``.
_active: Final[set[Break]] = set()


def parse(text: str) -> set[Break]:
    out: set[Break] = set()
    for raw in filter(None, (part.strip() for part in text.split(","))):
        try:
            out.add(Break(raw))
        except ValueError:
            names = ", ".join(b.value for b in Break)
            raise InvalidArgumentError(f"unknown break {raw!r}; known: {names}") from None
    return out


def enable(which: Break) -> None:
    _active.add(which)


def disable_all() -> None:
    _active.clear()


def active(which: Break) -> bool:
    """Whether the negative control ``which`` is on in this process. Asked per record on the
    journal's path: with none on (production) it answers without hashing ``which`` (an ``Enum``
    member's ``__hash__`` is an interpreted call, ~0.9 per message at a steady 2,000 msg/s)."""
    return bool(_active) and which in _active


def enable_from_env(environ: Mapping[str, str] | None = None) -> set[Break]:
    """Turn on what ``MAGNETAR_BREAK`` names; returns the set that is now on."""
    text = (environ if environ is not None else os.environ).get(ENV_VAR, "")
    for which in parse(text):
        enable(which)
    return set(_active)
