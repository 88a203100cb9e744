"""Which rack (and region) each bookie is in: Pulsar's bookie rack configuration.

Stored, as Pulsar's ``BookieRackAffinityMapping`` reads it, in the node ``/bookies`` as JSON
``{"<group>": {"<host:port>": {"rack": "/region-a/rack-1", "hostname": "..."}}}`` (the group is
``default`` unless the admin names another). A rack is a network location: ``/rack`` or
``/region/rack``; the region is the first part of a two-part location. A bookie with no entry is
in ``DEFAULT_RACK``, as in BookKeeper.

``RackedBookieDirectory`` wraps a ``BookieDirectory``: every ``available_bookies()`` also reads
``/bookies`` so the rack-aware placement (``ledger.rack_placement``) decides with the racks of
that moment (one extra read per ledger created or bookie replaced).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from magnetar.base.errors import BadVersionError, InvalidArgumentError, NotFoundError
from magnetar.base.types import BookieId
from magnetar.ledger.placement import BookieDirectory
from magnetar.metadata.api import MetadataStore

RACKS_PATH = "/bookies"
DEFAULT_GROUP = "default"
DEFAULT_RACK = "/default-rack"
#: Compare-and-set attempts of one rack change before giving up (others changing it at once).
RACK_CAS_RETRY_COUNT_MAX = 16


def normalize_rack(rack: str) -> str:
    """``rack-1`` -> ``/rack-1``; at most two parts (region, rack); no empty parts."""
    parts = [p for p in rack.strip().split("/") if p]
    if not parts or len(parts) > 2 or len(rack) > 256:
        raise InvalidArgumentError(f"a rack is /rack or /region/rack, got {rack!r}")
    return "/" + "/".join(parts)


def region_of(rack: str) -> str:
    """The region of a network location: the first part of ``/region/rack``, else ``""``."""
    parts = [p for p in rack.split("/") if p]
    return parts[0] if len(parts) == 2 else ""


def rack_with_region(rack: str, region: str) -> str:
    """The stored location of a bookie registered with ``rack`` and ``region`` (either may be
    empty, not both): ``/region/rack``; a rack that names its own region must name this one."""
    region = region.strip().strip("/")
    if "/" in region or len(region) > 128:
        raise InvalidArgumentError(f"a region is one name, got {region!r}")
    if not region:
        return normalize_rack(rack)
    if not rack.strip().strip("/"):
        return f"/{region}/default-rack"
    location = normalize_rack(rack)
    parts = location.strip("/").split("/")
    if len(parts) == 2:
        if parts[0] != region:
            raise InvalidArgumentError(f"rack {location} is in region {parts[0]}, not {region}")
        return location
    return f"/{region}/{parts[0]}"


@dataclass(frozen=True, slots=True)
class BookieRack:
    rack: str
    hostname: str = ""

    @property
    def region(self) -> str:
        return region_of(self.rack)

    def to_json(self) -> dict[str, str]:
        """As stored (Pulsar's ``BookieInfo``: rack and hostname)."""
        return {"rack": self.rack, "hostname": self.hostname}

    def to_admin_json(self) -> dict[str, str]:
        """As the admin API shows it: the stored fields plus the region."""
        return {"rack": self.rack, "hostname": self.hostname, "region": self.region}


@dataclass(frozen=True, slots=True)
class RackConfig:
    groups: dict[str, dict[str, BookieRack]] = field(default_factory=dict)

    def rack_of(self, bookie: BookieId | str) -> str | None:
        for members in self.groups.values():
            info = members.get(str(bookie))
            if info is not None:
                return info.rack
        return None

    def find(self, bookie: str) -> BookieRack | None:
        for members in self.groups.values():
            if bookie in members:
                return members[bookie]
        return None

    def to_json(self) -> dict[str, dict[str, dict[str, str]]]:
        return {g: {b: i.to_json() for b, i in sorted(m.items())} for g, m in sorted(self.groups.items())}

    def to_admin_json(self) -> dict[str, dict[str, dict[str, str]]]:
        return {g: {b: i.to_admin_json() for b, i in sorted(m.items())} for g, m in sorted(self.groups.items())}

    def encode(self) -> bytes:
        return json.dumps(self.to_json()).encode()

    @staticmethod
    def decode(value: bytes) -> RackConfig:
        try:
            data = json.loads(value) if value.strip() else {}
            groups = {str(g): {str(b): BookieRack(str(i["rack"]), str(i.get("hostname", "")))
                               for b, i in members.items()} for g, members in data.items()}
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise InvalidArgumentError(f"bad bookie rack configuration: {error}") from None
        return RackConfig(groups)


async def read_racks(store: MetadataStore) -> tuple[RackConfig, int]:
    """The rack configuration and its version (-1: none stored yet)."""
    found = await store.get(RACKS_PATH)
    if found is None:
        return RackConfig(), -1
    return RackConfig.decode(found.value), found.version


async def set_rack(store: MetadataStore, bookie: str, info: BookieRack, group: str = DEFAULT_GROUP) -> None:
    """Put ``bookie`` in ``info.rack`` (moving it out of any other group)."""
    BookieId.parse(bookie)
    placed = BookieRack(normalize_rack(info.rack), info.hostname)
    for _ in range(RACK_CAS_RETRY_COUNT_MAX):
        config, version = await read_racks(store)
        groups = {g: {b: i for b, i in m.items() if b != bookie} for g, m in config.groups.items()}
        groups.setdefault(group or DEFAULT_GROUP, {})[bookie] = placed
        try:
            await store.put(RACKS_PATH, RackConfig({g: m for g, m in groups.items() if m}).encode(), version)
            return
        except BadVersionError:
            continue
    raise BadVersionError(f"{RACKS_PATH} kept changing while setting the rack of {bookie}")


async def delete_rack(store: MetadataStore, bookie: str) -> None:
    """Forget ``bookie``'s rack; ``NotFoundError`` if it has none."""
    for _ in range(RACK_CAS_RETRY_COUNT_MAX):
        config, version = await read_racks(store)
        if config.find(bookie) is None:
            raise NotFoundError(f"bookie {bookie} has no rack information")
        groups = {g: {b: i for b, i in m.items() if b != bookie} for g, m in config.groups.items()}
        try:
            await store.put(RACKS_PATH, RackConfig({g: m for g, m in groups.items() if m}).encode(), version)
            return
        except BadVersionError:
            continue
    raise BadVersionError(f"{RACKS_PATH} kept changing while deleting the rack of {bookie}")


class RackedBookieDirectory:
    """A ``BookieDirectory`` that also refreshes ``racks`` (bookie -> rack) on every listing."""

    def __init__(self, inner: BookieDirectory, store: MetadataStore) -> None:
        self._inner = inner
        self._store = store
        self.racks: dict[BookieId, str] = {}
        self.configured = False  # any rack stored at all (placement warns only then)

    async def available_bookies(self) -> list[BookieId]:
        bookies = await self._inner.available_bookies()
        config, version = await read_racks(self._store)
        self.configured = version >= 0 and any(config.groups.values())
        self.racks = {b: config.rack_of(b) or DEFAULT_RACK for b in bookies}
        return bookies


__all__ = [
    "DEFAULT_GROUP",
    "DEFAULT_RACK",
    "RACKS_PATH",
    "BookieRack",
    "RackConfig",
    "RackedBookieDirectory",
    "delete_rack",
    "normalize_rack",
    "rack_with_region",
    "read_racks",
    "region_of",
    "set_rack",
]
