"""CRC32C (Castagnoli), as Pulsar frames and BookKeeper digests use it.

Backed by the ``crc32c`` package (hardware-accelerated where the CPU allows).
"""

from __future__ import annotations

import crc32c as _crc32c_mod


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """CRC32C of ``data`` as an unsigned 32-bit integer."""
    return int(_crc32c_mod.crc32c(data))


def crc32c_update(crc: int, data: bytes | bytearray | memoryview) -> int:
    """Extend a running CRC32C ``crc`` with ``data``."""
    return int(_crc32c_mod.crc32c(data, crc))
