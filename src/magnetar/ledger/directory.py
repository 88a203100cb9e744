"""``MetadataBookieDirectory``: the live writable bookies, read from the metadata store.

Bookies register themselves (``node/bookie.py``) with ephemeral nodes in BookKeeper's layout::

    /ledgers/available/<host:port>            writable (JSON {"address", "read_only": false})
    /ledgers/available/readonly/<host:port>   read-only instead

``available_bookies`` lists the children of ``/ledgers/available``, skipping the child named
``readonly`` (and any name that is not a ``host:port``), so read-only bookies are never chosen
for new ensembles or as replacements. A registration disappears when its bookie's session ends,
so the list follows crashes within one session timeout. Invariant: the answer is sorted and
holds at most ``LEDGER_DIRECTORY_BOOKIES_COUNT_MAX`` bookies. A registration's name gives the
same ``BookieId`` instance from one listing to the next while it stays registered: every ledger's
ensemble then shares it (at 100,000 topics one instance and one host string per bookie, not one
per ledger), and the local transport finds it by identity, not by ``BookieId.__eq__`` per run.
"""

from __future__ import annotations

from magnetar.base.errors import InvalidArgumentError, LimitExceededError, MagnetarError
from magnetar.base.limits import LEDGER_DIRECTORY_BOOKIES_COUNT_MAX
from magnetar.base.types import BookieId
from magnetar.ledger.errors import NotEnoughBookiesError
from magnetar.metadata.api import MetadataStore

AVAILABLE_PATH = "/ledgers/available"
READONLY_CHILD = "readonly"


class MetadataBookieDirectory:
    """``BookieDirectory`` over ``/ledgers/available`` registrations (writable bookies only)."""

    def __init__(self, store: MetadataStore, path: str = AVAILABLE_PATH) -> None:
        self._store = store
        self._path = path
        #: The last listing's bookies by registration name (the next listing reuses them).
        self._known: dict[str, BookieId] = {}

    async def available_bookies(self) -> list[BookieId]:
        try:
            names = await self._store.children(self._path)
        except MagnetarError as exc:
            raise NotEnoughBookiesError(f"cannot list bookies at {self._path}: {exc}") from exc
        bookies: list[BookieId] = []
        known = self._known
        listed: dict[str, BookieId] = {}  # only the names listed now: bounded by the registrations
        for name in names:
            if name == READONLY_CHILD:
                continue
            bookie = known.get(name)
            if bookie is None:
                try:
                    bookie = BookieId.parse(name)
                except InvalidArgumentError:
                    continue  # not a registration (a stray node): ignore it rather than fail placement
            listed[name] = bookie
            bookies.append(bookie)
        self._known = listed
        if len(bookies) > LEDGER_DIRECTORY_BOOKIES_COUNT_MAX:
            raise LimitExceededError("LEDGER_DIRECTORY_BOOKIES_COUNT_MAX", len(bookies), LEDGER_DIRECTORY_BOOKIES_COUNT_MAX)
        return sorted(bookies, key=str)

    async def read_only_bookies(self) -> list[BookieId]:
        """Bookies registered read-only (they still serve reads)."""
        names = await self._store.children(f"{self._path}/{READONLY_CHILD}")
        return sorted((BookieId.parse(n) for n in names), key=str)
