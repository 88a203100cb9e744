"""CRC32C (Castagnoli), as Pulsar frames and BookKeeper digests use it.

Backed by the ``crc32c`` package (hardware-accelerated where the CPU allows).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import crc32c as _crc32c_mod

# Bound once: compiled, a ``Final`` module global is a C static, so a call is one vectorcall of
# the package's function, not a lookup of ``crc32c`` in its module's dict first (per frame, per
# entry, twice per message on the publish path).
_CRC32C: Final[Callable[..., int]] = _crc32c_mod.crc32c


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """CRC32C of ``data`` as an unsigned 32-bit integer."""
    return _CRC32C(data)


def crc32c_update(crc: int, data: bytes | bytearray | memoryview) -> int:
    """Extend a running CRC32C ``crc`` with ``data``."""
    return _CRC32C(data, crc)
