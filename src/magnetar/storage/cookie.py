"""Bookie identity (the cookie): a wiped or foreign data directory cannot pose as the old bookie.

The cookie (bookie id, random instance id, format version) lives in the data directory
(``cookie``) and in the metadata store (through a ``CookieRegistry``). Rules at start:

* local cookie present: its bookie id must be ours, and the registered cookie (if any) must be
  identical; if none is registered yet (crash between the two writes), register it.
* no local cookie, but journal/entry-log/index data present: refuse (someone removed it).
* no local cookie, empty directory, but a cookie registered for this bookie id: refuse. The
  bookie stored data before; an empty disk means that data is gone and the bookie must not
  answer "no such entry" for what it acknowledged (apache/bookkeeper#4812). An operator must
  decommission the old identity (delete the registered cookie) first.
* otherwise a new bookie: write the cookie locally (synced, atomically renamed), then register.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol

from magnetar.base.errors import CorruptDataError, MagnetarError
from magnetar.base.io import Disk
from magnetar.base.rng import Rng

COOKIE_PATH = "cookie"
COOKIE_FORMAT_VERSION = 1
COOKIE_BYTES_MAX = 4096


class CookieMismatchError(MagnetarError):
    """The data directory does not belong to this bookie identity: refusing to start."""


class CookieRegistry(Protocol):
    """Where cookies are registered (the metadata store, keyed by bookie id)."""

    async def get_cookie(self, bookie_id: str) -> bytes | None: ...

    async def put_cookie(self, bookie_id: str, cookie: bytes) -> None: ...


@dataclass(frozen=True, slots=True)
class Cookie:
    bookie_id: str
    instance_id: str
    format_version: int = COOKIE_FORMAT_VERSION

    def encode(self) -> bytes:
        return json.dumps(
            {"bookie_id": self.bookie_id, "instance_id": self.instance_id, "format_version": self.format_version},
            sort_keys=True,
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> Cookie:
        try:
            fields = json.loads(data)
            return cls(str(fields["bookie_id"]), str(fields["instance_id"]), int(fields["format_version"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptDataError(f"unreadable cookie: {exc}") from None


def read_local_cookie(disk: Disk) -> Cookie | None:
    if not disk.exists(COOKIE_PATH):
        return None
    file = disk.open(COOKIE_PATH, create=False)
    try:
        return Cookie.decode(file.read_at(0, COOKIE_BYTES_MAX))
    finally:
        file.close()


async def _write_local_cookie(disk: Disk, cookie: Cookie) -> None:
    tmp = COOKIE_PATH + ".tmp"
    file = disk.open(tmp)
    try:
        file.truncate(0)
        file.append(cookie.encode())
        await file.sync()
    finally:
        file.close()
    disk.rename(tmp, COOKIE_PATH)
    await disk.sync_dir("")  # the data directory itself


async def verify_or_create_cookie(
    disk: Disk, registry: CookieRegistry | None, bookie_id: str, rng: Rng, *, has_data: bool
) -> Cookie:
    """Return this bookie's cookie or raise ``CookieMismatchError`` (see the module docstring)."""
    local = read_local_cookie(disk)
    remote_bytes = await registry.get_cookie(bookie_id) if registry is not None else None
    remote = Cookie.decode(remote_bytes) if remote_bytes is not None else None
    if local is None:
        if has_data:
            raise CookieMismatchError(f"data directory holds bookie data but no cookie; refusing to start as {bookie_id}")
        if remote is not None:
            raise CookieMismatchError(
                f"bookie {bookie_id} was registered with instance {remote.instance_id} but this data directory is "
                "empty (wiped or new disk); decommission the old identity before reusing the address"
            )
        cookie = Cookie(bookie_id, rng.randbytes(16).hex())
        await _write_local_cookie(disk, cookie)
        if registry is not None:
            await registry.put_cookie(bookie_id, cookie.encode())
        return cookie
    if local.bookie_id != bookie_id:
        raise CookieMismatchError(f"data directory belongs to bookie {local.bookie_id}, not {bookie_id}")
    if remote is None:
        if registry is not None:
            await registry.put_cookie(bookie_id, local.encode())
    elif remote != local:
        raise CookieMismatchError(
            f"data directory has instance {local.instance_id} but bookie {bookie_id} is registered as "
            f"instance {remote.instance_id}"
        )
    return local
