"""Quorum arithmetic of a replicated ledger: pure functions, no I/O.

A ledger stripes entries over an *ensemble* of E bookies. Entry e is sent to its *write set*:
the Qw bookie indexes ``(e + w) mod E`` for ``w`` in ``0..Qw-1`` (BookKeeper's
``RoundRobinDistributionSchedule``). It is durable once any Qa of them acknowledged it.

Invariants these functions encode (see ``shared/reference/bookkeeper_replication.md`` 1.2, 1.7):

* ``E >= Qw >= Qa >= 1`` for every ledger (``validate_quorum``).
* An ensemble has exactly ``E`` distinct write sets when ``Qw < E`` and one when ``Qw == E``.
* An add fails its ack quorum once more than ``Qw - Qa`` bookies of its write set failed.
* Fencing is *covered* when every write set has at least ``Qw - Qa + 1`` valid answers: the
  unfenced rest of each write set is then at most ``Qa - 1`` bookies, too few for the old writer
  to complete any add.
* A recovery read may call an entry *missing* once ``Qw - Qa + 1`` bookies of its write set said
  "no such entry": the entry then cannot be on ``Qa`` bookies, so it was never acknowledged.

Bookies are named here by their index in the ensemble (0..E-1); callers map indexes to ids.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterable

from magnetar.base.errors import InvalidArgumentError
from magnetar.base.limits import LEDGER_WRITE_SETS_CACHED_COUNT_MAX


def validate_quorum(ensemble_size: int, write_quorum_size: int, ack_quorum_size: int) -> None:
    """Raise ``InvalidArgumentError`` unless ``E >= Qw >= Qa >= 1``."""
    if not ensemble_size >= write_quorum_size >= ack_quorum_size >= 1:
        raise InvalidArgumentError(
            "ledger quorums must satisfy ensemble >= write quorum >= ack quorum >= 1, got "
            f"E={ensemble_size} Qw={write_quorum_size} Qa={ack_quorum_size}"
        )


def write_set(entry_id: int, ensemble_size: int, write_quorum_size: int) -> tuple[int, ...]:
    """Indexes of the bookies that store ``entry_id``, in send order (the first is the "primary")."""
    if entry_id < 0:
        raise InvalidArgumentError(f"entry id must be >= 0, got {entry_id}")
    if not ensemble_size >= write_quorum_size >= 1:
        raise InvalidArgumentError(f"need ensemble >= write quorum >= 1, got E={ensemble_size} Qw={write_quorum_size}")
    return _write_set(entry_id % ensemble_size, ensemble_size, write_quorum_size)


@functools.lru_cache(maxsize=LEDGER_WRITE_SETS_CACHED_COUNT_MAX)
def _write_set(start: int, ensemble_size: int, write_quorum_size: int) -> tuple[int, ...]:
    # Computed on every add (send, count, quorum check): a handful of distinct answers, cached.
    return tuple((start + w) % ensemble_size for w in range(write_quorum_size))


def stores_entry(bookie_index: int, entry_id: int, ensemble_size: int, write_quorum_size: int) -> bool:
    """Whether the bookie at ``bookie_index`` is in the write set of ``entry_id``."""
    return bookie_index in write_set(entry_id, ensemble_size, write_quorum_size)


def distinct_write_sets(ensemble_size: int, write_quorum_size: int) -> tuple[frozenset[int], ...]:
    """Every distinct write set of an ensemble (entries 0..E-1 cover them all)."""
    seen: list[frozenset[int]] = []
    for entry_id in range(ensemble_size):
        members = frozenset(write_set(entry_id, ensemble_size, write_quorum_size))
        if members not in seen:
            seen.append(members)
    return tuple(seen)


def _count_in_write_set(indexes: Iterable[int], entry_id: int, ensemble_size: int, write_quorum_size: int) -> int:
    members = set(write_set(entry_id, ensemble_size, write_quorum_size))
    return len(members.intersection(indexes))


def ack_quorum_reached(
    acked: Collection[int], entry_id: int, ensemble_size: int, write_quorum_size: int, ack_quorum_size: int
) -> bool:
    """Whether at least Qa bookies of the write set of ``entry_id`` acknowledged it.

    Acks from bookies outside the write set do not count (they cannot have been asked).
    """
    return _count_in_write_set(acked, entry_id, ensemble_size, write_quorum_size) >= ack_quorum_size


def ack_quorum_lost(failed_count: int, write_quorum_size: int, ack_quorum_size: int) -> bool:
    """Whether an add can no longer reach Qa: more than ``Qw - Qa`` of its write set failed."""
    return failed_count > write_quorum_size - ack_quorum_size


def quorum_coverage(write_quorum_size: int, ack_quorum_size: int) -> int:
    """``Qw - Qa + 1``: answers per write set that make fencing (or a negative read) conclusive."""
    return write_quorum_size - ack_quorum_size + 1


def ensemble_coverage(ensemble_size: int, ack_quorum_size: int) -> int:
    """``E - Qa + 1`` (BP-46's EC): the same threshold over the whole ensemble when ``Qw == E``."""
    return ensemble_size - ack_quorum_size + 1


def fencing_covered(
    answered: Collection[int], ensemble_size: int, write_quorum_size: int, ack_quorum_size: int
) -> bool:
    """Whether fencing replies from ``answered`` bookie indexes stop the old writer for good.

    ``answered`` holds the bookies that gave a *valid* answer to a fencing read (OK, no such
    entry, no such ledger). True when every write set has ``Qw - Qa + 1`` of them.
    """
    needed = quorum_coverage(write_quorum_size, ack_quorum_size)
    answered_set = set(answered)
    return all(
        len(members & answered_set) >= needed for members in distinct_write_sets(ensemble_size, write_quorum_size)
    )


def entry_missing(
    negatives: Collection[int], entry_id: int, ensemble_size: int, write_quorum_size: int, ack_quorum_size: int
) -> bool:
    """Whether ``Qw - Qa + 1`` bookies of the write set of ``entry_id`` said "no such entry".

    With fencing recovery reads those negatives are stable, so the entry was never acknowledged
    and recovery may end the ledger before it.
    """
    counted = _count_in_write_set(negatives, entry_id, ensemble_size, write_quorum_size)
    return counted >= quorum_coverage(write_quorum_size, ack_quorum_size)


def read_order(entry_id: int, ensemble_size: int, write_quorum_size: int) -> tuple[int, ...]:
    """The bookies a reader tries for ``entry_id``, in order: its write set from the primary on."""
    return write_set(entry_id, ensemble_size, write_quorum_size)
