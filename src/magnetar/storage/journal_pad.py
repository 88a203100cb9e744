"""The journal's PAD record (``storage.journal``): a group is padded with one so it ends on a
multiple of the file's ``write_alignment_bytes``; replay skips it."""

from __future__ import annotations

import struct
from typing import Final

from magnetar.base.checksum import crc32c
from magnetar.base.invariant import invariant
from magnetar.base.io import Bytes
from magnetar.base.limits import DISK_DIRECT_ALIGNMENT_BYTES

KIND_PAD = 4
#: The journal's record framing: u32 body length, u32 CRC32C of the body.
_RECORD_HEADER: Final = struct.Struct(">II")

#: A PAD record's body, as long as any PAD needs (kind then zeros; a PAD's body is a prefix of it,
#: sliced without a copy), and each PAD record made so far by its size (at most one alignment's
#: worth of sizes, each a header and a view): a group's PAD is one dict lookup, with no
#: allocation, zero fill, CRC pass or packing (``Final``: compiled, a C static, not a lookup in
#: the module's dict; session 23).
_PAD_BODY: Final = bytes((KIND_PAD,)) + bytes(2 * DISK_DIRECT_ALIGNMENT_BYTES)
_PADS: Final[dict[int, tuple[bytes, Bytes]]] = {}


def pad_record(size: int) -> tuple[bytes, Bytes]:
    """A PAD record of exactly ``size`` bytes (``size`` > the record header) as (header, body)."""
    record = _PADS.get(size)
    if record is not None:
        return record
    invariant(size > _RECORD_HEADER.size, "a PAD record needs room for its header and kind")
    body_len = size - _RECORD_HEADER.size
    if body_len > len(_PAD_BODY):  # a file aligned to more than twice the direct I/O alignment
        long_body = bytes((KIND_PAD,)) + bytes(body_len - 1)
        return _RECORD_HEADER.pack(body_len, crc32c(long_body)), long_body
    body = memoryview(_PAD_BODY)[:body_len]
    record = _PADS[size] = (_RECORD_HEADER.pack(body_len, crc32c(body)), body)
    return record


def padding_for(end: int, alignment: int) -> int:
    """Bytes of PAD record that make a group ending at ``end`` end on a multiple of ``alignment``
    (0 when it already does; one alignment more when the gap is too small for a record)."""
    gap = -end % alignment
    if gap and gap <= _RECORD_HEADER.size:
        gap += alignment
    return gap
