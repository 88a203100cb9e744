"""Value types shared by every layer.

``LedgerId`` and ``EntryId`` are plain ints with a distinct type for the checker; ``Position``
is (ledger id, entry id) with a total order; ``BookieId`` is a bookie's "host:port";
``TopicName`` parses the forms Pulsar users write (``persistent://tenant/ns/topic``,
``tenant/ns/topic``, ``topic`` -> ``public/default``, ``...-partition-N``).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Final, NewType

from magnetar.base.errors import InvalidArgumentError
from magnetar.base.limits import TOPIC_NAME_BYTES_MAX

LedgerId = NewType("LedgerId", int)
EntryId = NewType("EntryId", int)

#: An entry id meaning "no entry": the LAC of an empty ledger, the last entry of an empty ledger.
NO_ENTRY: EntryId = EntryId(-1)


class Position:
    """A point in a topic's log: ordered by ledger id, then entry id.

    Ledger ids of one topic only grow, so this order is the log's order. ``Position(l, -1)``
    stands before the first entry of ledger ``l``.

    A plain class with ``__slots__`` and hand-written ``__init__`` and comparisons, not a frozen
    dataclass: compiled (mypyc), a frozen dataclass's generated ``__init__`` runs interpreted
    (``object.__setattr__`` per field), ~20x the cost of this one's native constructor, and
    positions are made and compared several times per message (docs/performance.md, session 12).
    Immutable all the same: the fields are ``Final`` (mypy refuses an assignment; compiled, the
    attributes are read-only).
    """

    __slots__ = ("entry_id", "ledger_id")

    def __init__(self, ledger_id: int, entry_id: int) -> None:
        if ledger_id < -1 or entry_id < -1:
            raise InvalidArgumentError(f"invalid position {ledger_id}:{entry_id}")
        self.ledger_id: Final = ledger_id
        self.entry_id: Final = entry_id

    # Pickled by value through the constructor (Spark ships positions to its workers).
    def __reduce__(self) -> tuple[type[Position], tuple[int, int]]:
        return (Position, (self.ledger_id, self.entry_id))

    def __repr__(self) -> str:
        return f"Position(ledger_id={self.ledger_id}, entry_id={self.entry_id})"

    # Comparisons written out field by field (no tuples built, no ``total_ordering`` chain).
    def __eq__(self, other: object) -> bool:
        if other.__class__ is not Position:
            return NotImplemented
        return self.ledger_id == other.ledger_id and self.entry_id == other.entry_id

    def __ne__(self, other: object) -> bool:
        if other.__class__ is not Position:
            return NotImplemented
        return self.ledger_id != other.ledger_id or self.entry_id != other.entry_id

    def __hash__(self) -> int:
        return hash((self.ledger_id, self.entry_id))

    def __lt__(self, other: Position) -> bool:
        if other.__class__ is not Position:
            return NotImplemented
        if self.ledger_id != other.ledger_id:
            return self.ledger_id < other.ledger_id
        return self.entry_id < other.entry_id

    def __le__(self, other: Position) -> bool:
        if other.__class__ is not Position:
            return NotImplemented
        if self.ledger_id != other.ledger_id:
            return self.ledger_id < other.ledger_id
        return self.entry_id <= other.entry_id

    def __gt__(self, other: Position) -> bool:
        if other.__class__ is not Position:
            return NotImplemented
        if self.ledger_id != other.ledger_id:
            return self.ledger_id > other.ledger_id
        return self.entry_id > other.entry_id

    def __ge__(self, other: Position) -> bool:
        if other.__class__ is not Position:
            return NotImplemented
        if self.ledger_id != other.ledger_id:
            return self.ledger_id > other.ledger_id
        return self.entry_id >= other.entry_id

    def next(self) -> Position:
        """The position of the following entry in the same ledger."""
        return Position(self.ledger_id, self.entry_id + 1)

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"

    @classmethod
    def parse(cls, text: str) -> Position:
        """Parse ``"ledger:entry"``."""
        ledger, sep, entry = text.partition(":")
        if not sep:
            raise InvalidArgumentError(f"position must be 'ledger:entry', got {text!r}")
        try:
            return cls(int(ledger), int(entry))
        except ValueError:
            raise InvalidArgumentError(f"position must be 'ledger:entry', got {text!r}") from None


#: Before every entry of every ledger.
EARLIEST = Position(-1, -1)

_HOST_PORT = re.compile(r"^(?P<host>[A-Za-z0-9._\-]+|\[[0-9a-fA-F:]+\]):(?P<port>\d{1,5})$")


class BookieId:
    """A bookie's identity: the ``host:port`` it registered with.

    A plain class like ``Position`` (a key of the bookie clients' dicts, hashed and compared per
    add: a frozen dataclass's generated ``__eq__``/``__hash__`` run interpreted when compiled)."""

    __slots__ = ("host", "port")

    def __init__(self, host: str, port: int) -> None:
        if not host or not 0 < port < 65536:
            raise InvalidArgumentError(f"invalid bookie address {host}:{port}")
        self.host: Final = host
        self.port: Final = port

    def __repr__(self) -> str:
        return f"BookieId(host={self.host!r}, port={self.port})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not BookieId:
            return NotImplemented
        return self.port == other.port and self.host == other.host

    def __hash__(self) -> int:
        return hash((self.host, self.port))

    def __lt__(self, other: BookieId) -> bool:
        if other.__class__ is not BookieId:
            return NotImplemented
        return (self.host, self.port) < (other.host, other.port)

    def __le__(self, other: BookieId) -> bool:
        if other.__class__ is not BookieId:
            return NotImplemented
        return (self.host, self.port) <= (other.host, other.port)

    def __gt__(self, other: BookieId) -> bool:
        if other.__class__ is not BookieId:
            return NotImplemented
        return (self.host, self.port) > (other.host, other.port)

    def __ge__(self, other: BookieId) -> bool:
        if other.__class__ is not BookieId:
            return NotImplemented
        return (self.host, self.port) >= (other.host, other.port)

    def __reduce__(self) -> tuple[type[BookieId], tuple[str, int]]:
        return (BookieId, (self.host, self.port))  # by value, as ``Position``

    @classmethod
    def parse(cls, text: str) -> BookieId:
        match = _HOST_PORT.match(text)
        if match is None:
            raise InvalidArgumentError(f"bookie id must be 'host:port', got {text!r}")
        return cls(match["host"], int(match["port"]))

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


class TopicDomain(enum.Enum):
    PERSISTENT = "persistent"
    NON_PERSISTENT = "non-persistent"


_NAME_PART = re.compile(r"^[-=:.\w]+$")
_PARTITION_SUFFIX = "-partition-"
DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "default"


@dataclass(frozen=True, slots=True)
class TopicName:
    """A fully qualified topic name.

    ``namespace`` is ``tenant/ns`` (or ``tenant/cluster/ns`` for the legacy four-part form).
    ``partition_index`` is the N of a ``-partition-N`` suffix, or -1.
    """

    domain: TopicDomain
    tenant: str
    namespace_portion: str
    local_name: str
    cluster: str | None = None

    def __reduce__(self) -> tuple[type[TopicName], tuple[TopicDomain, str, str, str, str | None]]:
        return (TopicName, (self.domain, self.tenant, self.namespace_portion, self.local_name,
                            self.cluster))  # by value, as ``Position``

    def __hash__(self) -> int:
        # Written out (dataclass keeps an explicit ``__hash__``), so that compiled it is native: the
        # generated one is an interpreted frame that also calls the interpreted ``Enum.__hash__``
        # of ``domain`` (~570 ns; a topic's policies are looked up by name once per publish run).
        # Equal names hash equal: the hash covers the same fields as ``__eq__``.
        return hash((self.local_name, self.namespace_portion, self.tenant, self.cluster,
                     self.domain is TopicDomain.PERSISTENT))

    @classmethod
    def parse(cls, text: str) -> TopicName:
        if not text or len(text.encode()) > TOPIC_NAME_BYTES_MAX:
            raise InvalidArgumentError(f"topic name must be 1..{TOPIC_NAME_BYTES_MAX} bytes")
        domain = TopicDomain.PERSISTENT
        rest = text
        if "://" in text:
            scheme, _, rest = text.partition("://")
            try:
                domain = TopicDomain(scheme)
            except ValueError:
                raise InvalidArgumentError(f"unknown topic domain {scheme!r} in {text!r}") from None
        elif "/" not in text:
            rest = f"{DEFAULT_TENANT}/{DEFAULT_NAMESPACE}/{text}"
        parts = rest.split("/", 3)
        if len(parts) == 3:
            tenant, namespace, local = parts
            cluster = None
        elif len(parts) == 4:
            tenant, cluster, namespace, local = parts
        else:
            raise InvalidArgumentError(
                f"invalid topic name {text!r}: expected [persistent://]tenant/namespace/topic or a short name"
            )
        for label, part in (("tenant", tenant), ("namespace", namespace), ("cluster", cluster)):
            if part is not None and not _NAME_PART.match(part):
                raise InvalidArgumentError(f"invalid {label} {part!r} in topic name {text!r}")
        if not local or local.strip() != local or "/" in local:
            raise InvalidArgumentError(f"invalid local topic name {local!r} in {text!r}")
        return cls(domain, tenant, namespace, local, cluster)

    @property
    def namespace(self) -> str:
        if self.cluster is not None:
            return f"{self.tenant}/{self.cluster}/{self.namespace_portion}"
        return f"{self.tenant}/{self.namespace_portion}"

    @property
    def partition_index(self) -> int:
        head, sep, tail = self.local_name.rpartition(_PARTITION_SUFFIX)
        if sep and head and tail.isdigit():
            return int(tail)
        return -1

    @property
    def is_partition(self) -> bool:
        return self.partition_index >= 0

    @property
    def partitioned_topic_name(self) -> TopicName:
        """The parent partitioned topic of a ``-partition-N`` name (itself otherwise)."""
        if not self.is_partition:
            return self
        head = self.local_name.rpartition(_PARTITION_SUFFIX)[0]
        return TopicName(self.domain, self.tenant, self.namespace_portion, head, self.cluster)

    def partition(self, index: int) -> TopicName:
        if index < 0:
            raise InvalidArgumentError(f"partition index must be >= 0, got {index}")
        base = self.partitioned_topic_name
        return TopicName(
            self.domain, self.tenant, self.namespace_portion, f"{base.local_name}{_PARTITION_SUFFIX}{index}", self.cluster
        )

    @property
    def is_persistent(self) -> bool:
        return self.domain is TopicDomain.PERSISTENT

    @property
    def persistence_path(self) -> str:
        """``tenant/ns/persistent/local`` with the local name URL-encoded, as managed ledgers key it."""
        from urllib.parse import quote

        return f"{self.namespace}/{self.domain.value}/{quote(self.local_name, safe='')}"

    def __str__(self) -> str:
        return f"{self.domain.value}://{self.namespace}/{self.local_name}"
