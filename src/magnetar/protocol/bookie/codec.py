"""The bookie wire protocol: message types, frame layout, encoder and a sans-IO decoder.

Every integer is big-endian. A frame is::

    u32 frame_len            bytes that follow this field; 10 <= frame_len <= BOOKIE_FRAME_BYTES_MAX
    u8  version              PROTOCOL_VERSION (1)
    u8  op                   request op, or request op | 0x80 for its response
    u64 request_id           chosen by the client, echoed in the response
    ... body                 op-specific, must end exactly at the end of the frame

An *entry* (carried by ADD requests and READ responses, and stored verbatim by the bookie)::

    u64 ledger_id  i64 entry_id  i64 lac  u32 payload_len  u32 digest  payload[payload_len]

``digest`` is CRC32C over ``ledger_id, entry_id, lac`` (as the 24 bytes above) followed by the
payload. The writer computes it, the bookie verifies it before storing (``BAD_DIGEST``), and a
reader verifies it again, so corruption anywhere between writer and reader is detected.

Bodies (``mk`` = master key: ``u8 len`` + bytes, at most ``BOOKIE_MASTER_KEY_BYTES_MAX``)::

    0x01 ADD               u8 flags (0x01 RECOVERY), mk, entry
    0x81 ADD resp          u16 status, u64 ledger_id, i64 entry_id
    0x02 READ              u8 flags (0x01 FENCE), mk, u64 ledger_id, i64 entry_id
    0x82 READ resp         u16 status, u64 ledger_id, i64 entry_id, i64 known_lac, u8 has_entry, [entry]
    0x03 READ_LAC          u64 ledger_id
    0x83 READ_LAC resp     u16 status, u64 ledger_id, i64 lac
    0x04 READ_LAST_ENTRY   u8 flags (0x01 FENCE), mk, u64 ledger_id
    0x84 READ_LAST resp    same layout as READ resp; entry_id is the highest entry stored (or -1)
    0x05 GET_INFO          (empty)
    0x85 GET_INFO resp     u16 status, u8 flags (0x01 READ_ONLY), u64 free_bytes, u64 ledger_count
    0x06 WRITE_LAC         mk, u64 ledger_id, i64 lac          explicit LAC for an idle ledger
    0x86 WRITE_LAC resp    u16 status, u64 ledger_id, i64 lac  (the bookie's known LAC afterwards)

A reader that receives each READ answer into a buffer of its own (the Spark connector's
``runtime.bookie_reads``) decodes its fixed head with ``decode_read_response_head`` and its entry
with ``entry_view``: a ``ReadViewResponse`` whose ``EncodedEntryView`` refers to that buffer instead of
copying it. The bookie server answers reads with ``ServedReadResponse`` (the stored entry as the
storage core gave it) and hands the socket ``encode_parts``: the bytes of the equal
``ReadResponse``, with the entry as a buffer of its own instead of copied into one joined frame.

Invariants: ``FrameDecoder`` never holds more than one partial frame plus one read chunk; a
length above ``BOOKIE_FRAME_BYTES_MAX`` raises ``LimitExceededError`` before any body is buffered;
any other malformed frame raises ``CorruptDataError``. After either error the stream is out of sync
and the connection must be closed (the decoder refuses further input).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from magnetar.base.checksum import crc32c, crc32c_update
from magnetar.base.errors import CorruptDataError, InvalidArgumentError, LimitExceededError
from magnetar.base.io import Bytes
from magnetar.base.limits import BOOKIE_FRAME_BYTES_MAX, BOOKIE_MASTER_KEY_BYTES_MAX, ENTRY_BYTES_MAX

PROTOCOL_VERSION = 1
RESPONSE_BIT = 0x80
FLAG_RECOVERY = 0x01
FLAG_FENCE = 0x01
FLAG_READ_ONLY = 0x01
LEDGER_ID_MAX: Final = (1 << 63) - 1

# ``Final``: compiled, each is a C static, not a lookup in the module's dict per use (per entry).
_LEN: Final = struct.Struct(">I")
_HEADER: Final = struct.Struct(">BBQ")  # version, op, request id
_ENTRY_HEADER: Final = struct.Struct(">QqqII")  # ledger, entry, lac, payload length, digest
_DIGEST_FIELDS: Final = struct.Struct(">Qqq")  # the header's first 24 bytes, the digest's start
_LENGTH_DIGEST: Final = struct.Struct(">II")  # the header's last 8 bytes: payload length, digest
_ADD_RESP: Final = struct.Struct(">HQq")
_READ_TAIL: Final = struct.Struct(">Qq")
_READ_RESP: Final = struct.Struct(">HQqqB")
_LEDGER: Final = struct.Struct(">Q")
_LAC_RESP: Final = struct.Struct(">HQq")
_INFO_RESP: Final = struct.Struct(">HBQQ")
# A READ answer's length prefix, header and fixed fields packed at once (``encode_parts``).
_READ_RESP_FRAME_HEAD: Final = struct.Struct(">IBBQHQqqB")

# Literal ``Final`` sizes (checked below): compiled, each use is a constant, not a lookup in this
# module's dict (or the importer's) per entry (``payload_bytes``, the journal's framing; session 23).
HEADER_BYTES: Final = 10
ENTRY_HEADER_BYTES: Final = 32
assert _HEADER.size == HEADER_BYTES and _ENTRY_HEADER.size == ENTRY_HEADER_BYTES, "the sizes match the layouts"
_FRAME_MIN_BYTES = HEADER_BYTES
_READ_RESP_HEAD_BYTES = HEADER_BYTES + _READ_RESP.size


class Op(enum.IntEnum):
    ADD = 0x01
    READ = 0x02
    READ_LAC = 0x03
    READ_LAST_ENTRY = 0x04
    GET_INFO = 0x05
    WRITE_LAC = 0x06


class Status(enum.IntEnum):
    """Result of a request; every non-OK value is an operating error the client must handle."""

    OK = 0
    NO_SUCH_ENTRY = 1  # the bookie never stored this entry (it is sure of that)
    NO_SUCH_LEDGER = 2  # the bookie knows nothing of the ledger, or it was deleted
    FENCED = 3  # a normal add to a fenced ledger
    BAD_DIGEST = 4  # the entry's CRC32C does not match its fields
    TOO_LARGE = 5  # the entry exceeds ENTRY_BYTES_MAX
    READ_ONLY = 6  # the bookie's disk is nearly full; adds are refused, reads served
    UNAUTHORIZED = 7  # the master key differs from the ledger's
    BAD_REQUEST = 8  # a well-formed frame with invalid field values
    UNAVAILABLE = 9  # the bookie is starting, stopping or overloaded; retry elsewhere


def entry_digest(ledger_id: int, entry_id: int, lac: int, payload: bytes | bytearray | memoryview) -> int:
    """CRC32C over (ledger, entry, LAC, payload): what the writer sends and readers verify."""
    return _digest_of(_DIGEST_FIELDS.pack(ledger_id, entry_id, lac), payload)


def _digest_of(fields: bytes, payload: bytes | bytearray | memoryview) -> int:
    """``entry_digest`` of the packed (ledger, entry, LAC) ``fields``."""
    return crc32c_update(crc32c(fields), payload)


# ``EncodedEntry`` (one per add), ``AddRequest`` and ``AddResponse`` (one per add over a socket)
# are plain classes with ``__slots__``, not frozen dataclasses: compiled (mypyc), a frozen
# dataclass's generated ``__init__`` runs interpreted (``object.__setattr__`` per field); this one
# is native (docs/performance.md, session 13). Immutable (``Final`` fields), equal and hashed by
# their fields as the dataclasses were.


class EncodedEntry:
    """One ledger entry encoded for the bookie wire and the bookie's storage (``raw``), with its
    header parsed. Not a second entry type: above the ledger client an entry is
    ``base.entry.Entry`` (position and payload); this is how that entry travels and is stored.

    ``raw`` is exactly the encoded entry; the bookie stores and returns it unchanged, so a
    reader checks the writer's digest end to end.
    """

    __slots__ = ("_digest_checked", "digest", "entry_id", "lac", "ledger_id", "raw")

    def __init__(self, ledger_id: int, entry_id: int, lac: int, digest: int, raw: bytes) -> None:
        self.ledger_id: Final = ledger_id
        self.entry_id: Final = entry_id
        self.lac: Final = lac
        self.digest: Final = digest
        self.raw: Final = raw
        #: The outcome of the first ``digest_ok()`` (``raw`` never changes, so one CRC pass is enough
        #: however many layers check: the bookie client and the ledger reader both do).
        self._digest_checked: bool | None = None

    def _fields(self) -> tuple[int, int, int, int, bytes]:
        return self.ledger_id, self.entry_id, self.lac, self.digest, self.raw

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EncodedEntry):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return "EncodedEntry(ledger_id={!r}, entry_id={!r}, lac={!r}, digest={!r}, raw={!r})".format(*self._fields())

    @classmethod
    def build(cls, ledger_id: int, entry_id: int, lac: int, payload: bytes | bytearray | memoryview) -> EncodedEntry:
        """Encode an entry as a writer does, computing its digest. The digest is known to match
        (it was just computed over these bytes): ``digest_ok`` of the built entry makes no CRC
        pass, so a bookie in the writer's own process (``LocalFirstTransport``) checks it for
        free. An entry that crossed a wire or a disk is a parsed one and is checked for real."""
        # ``_check_ledger`` and ``_digest_of`` written out: two calls less per entry (session 23).
        if not 0 <= ledger_id <= LEDGER_ID_MAX:
            raise InvalidArgumentError(f"ledger id {ledger_id} out of range")
        if entry_id < 0 or lac < -1:
            raise InvalidArgumentError(f"invalid entry {ledger_id}:{entry_id} with lac {lac}")
        # The digest's 24 bytes are the header's first 24: packed once, for the CRC and the
        # header both (``entry_digest`` then the whole header packed the three fields twice and
        # took two calls more; session 21: 1.47 -> 1.15 us per 1 KiB entry, compiled).
        fields = _DIGEST_FIELDS.pack(ledger_id, entry_id, lac)
        digest = crc32c_update(crc32c(fields), payload)
        # One copy of the payload whatever its type (``header + bytes(view)`` made two), and no
        # tuple for a join (``bytes + buffer`` takes any buffer; session 23).
        raw = fields + _LENGTH_DIGEST.pack(len(payload), digest) + payload
        # ``EncodedEntry``, not ``cls``: a native class has no subclasses, and a call of ``cls``
        # is a generic call of the type where this one is the native constructor.
        entry = EncodedEntry(ledger_id, entry_id, lac, digest, raw)
        entry._digest_checked = True
        return entry

    @classmethod
    def parse(cls, raw: bytes) -> EncodedEntry:
        """Parse a stored or received entry; raises ``CorruptDataError`` if the lengths disagree."""
        if len(raw) < ENTRY_HEADER_BYTES:
            raise CorruptDataError(f"entry of {len(raw)} bytes is shorter than its header")
        ledger_id, entry_id, lac, length, digest = _ENTRY_HEADER.unpack_from(raw, 0)
        if length != len(raw) - ENTRY_HEADER_BYTES:
            raise CorruptDataError(f"entry payload length {length} != {len(raw) - ENTRY_HEADER_BYTES}")
        return cls(ledger_id, entry_id, lac, digest, raw)

    @property
    def payload(self) -> bytes:
        return self.raw[ENTRY_HEADER_BYTES:]

    @property
    def payload_bytes(self) -> int:
        return len(self.raw) - ENTRY_HEADER_BYTES

    def digest_ok(self) -> bool:
        checked = self._digest_checked
        if checked is None:
            view = memoryview(self.raw)[ENTRY_HEADER_BYTES:]
            checked = entry_digest(self.ledger_id, self.entry_id, self.lac, view) == self.digest
            self._digest_checked = checked
        return checked


# --- requests ----------------------------------------------------------------------------------


class AddRequest:
    __slots__ = ("entry", "master_key", "recovery", "request_id")

    def __init__(self, request_id: int, entry: EncodedEntry, master_key: bytes = b"", recovery: bool = False) -> None:
        self.request_id: Final = request_id
        self.entry: Final = entry
        self.master_key: Final = master_key
        self.recovery: Final = recovery

    def _fields(self) -> tuple[int, EncodedEntry, bytes, bool]:
        return self.request_id, self.entry, self.master_key, self.recovery

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AddRequest):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return "AddRequest(request_id={!r}, entry={!r}, master_key={!r}, recovery={!r})".format(*self._fields())


@dataclass(frozen=True, slots=True)
class ReadRequest:
    """Read one entry; ``fence`` also fences the ledger (journaled before the reply)."""

    request_id: int
    ledger_id: int
    entry_id: int
    fence: bool = False
    master_key: bytes = b""


@dataclass(frozen=True, slots=True)
class ReadLacRequest:
    request_id: int
    ledger_id: int


@dataclass(frozen=True, slots=True)
class ReadLastEntryRequest:
    """Read the highest entry the bookie stores for the ledger (optionally fencing first)."""

    request_id: int
    ledger_id: int
    fence: bool = False
    master_key: bytes = b""


@dataclass(frozen=True, slots=True)
class GetInfoRequest:
    request_id: int


@dataclass(frozen=True, slots=True)
class WriteLacRequest:
    """Raise the bookie's known LAC of an idle ledger (no later entry will carry it)."""

    request_id: int
    ledger_id: int
    lac: int
    master_key: bytes = b""


Request = AddRequest | ReadRequest | ReadLacRequest | ReadLastEntryRequest | GetInfoRequest | WriteLacRequest


# --- responses ---------------------------------------------------------------------------------


class AddResponse:
    __slots__ = ("entry_id", "ledger_id", "request_id", "status")

    def __init__(self, request_id: int, status: Status, ledger_id: int, entry_id: int) -> None:
        self.request_id: Final = request_id
        self.status: Final = status
        self.ledger_id: Final = ledger_id
        self.entry_id: Final = entry_id

    def _fields(self) -> tuple[int, Status, int, int]:
        return self.request_id, self.status, self.ledger_id, self.entry_id

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AddResponse):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return "AddResponse(request_id={!r}, status={!r}, ledger_id={!r}, entry_id={!r})".format(*self._fields())


@dataclass(frozen=True, slots=True)
class ReadResponse:
    """Answer to READ and READ_LAST_ENTRY (``op`` tells which); ``entry`` only when OK."""

    request_id: int
    status: Status
    ledger_id: int
    entry_id: int
    known_lac: int
    entry: EncodedEntry | None = None
    op: Op = Op.READ


@dataclass(frozen=True, slots=True)
class ServedReadResponse:
    """A READ/READ_LAST_ENTRY answer as a bookie serves it (``encode_parts`` only): the same frame
    as ``ReadResponse``, with the stored entry in wire form as is — ``bytes`` or a read-only view
    of an entry log mapped into memory — neither parsed nor copied on its way to the socket."""

    request_id: int
    status: Status
    ledger_id: int
    entry_id: int
    known_lac: int
    raw: Bytes | None = None
    op: Op = Op.READ


@dataclass(frozen=True, slots=True)
class EncodedEntryView:
    """An ``EncodedEntry`` as received, not copied: ``raw`` is a read-only view into the buffer
    the reader received it in (``entry_view``), valid as long as that reader leaves the buffer
    alone. For readers that drop entries soon after use; anything that keeps entries (a cache)
    takes ``to_encoded_entry()``, a copy. The digest is checked when the entry is decoded, while
    its bytes were just received (still in the CPU's caches), not later when the reader gets to
    it: ``digest_valid``."""

    ledger_id: int
    entry_id: int
    lac: int
    digest: int
    raw: memoryview
    digest_valid: bool

    @property
    def payload(self) -> memoryview:
        return self.raw[ENTRY_HEADER_BYTES:]

    @property
    def payload_bytes(self) -> int:
        return len(self.raw) - ENTRY_HEADER_BYTES

    def digest_ok(self) -> bool:
        return self.digest_valid

    def to_encoded_entry(self) -> EncodedEntry:
        return EncodedEntry(self.ledger_id, self.entry_id, self.lac, self.digest, bytes(self.raw))


@dataclass(frozen=True, slots=True)
class ReadViewResponse:
    """``ReadResponse`` with its entry as an ``EncodedEntryView`` (``decode_read_response_head`` + ``entry_view``)."""

    request_id: int
    status: Status
    ledger_id: int
    entry_id: int
    known_lac: int
    entry: EncodedEntryView | None = None
    op: Op = Op.READ

    def copied(self) -> ReadResponse:
        """The same answer with the entry copied out of the receive buffer."""
        entry = self.entry.to_encoded_entry() if self.entry is not None else None
        return ReadResponse(self.request_id, self.status, self.ledger_id, self.entry_id, self.known_lac, entry,
                            self.op)


@dataclass(frozen=True, slots=True)
class ReadLacResponse:
    request_id: int
    status: Status
    ledger_id: int
    lac: int


@dataclass(frozen=True, slots=True)
class WriteLacResponse:
    request_id: int
    status: Status
    ledger_id: int
    lac: int


@dataclass(frozen=True, slots=True)
class GetInfoResponse:
    request_id: int
    status: Status
    read_only: bool
    free_bytes: int
    ledger_count: int


Response = AddResponse | ReadResponse | ReadLacResponse | GetInfoResponse | WriteLacResponse
Message = Request | Response


def _check_ledger(ledger_id: int) -> None:
    if not 0 <= ledger_id <= LEDGER_ID_MAX:
        raise InvalidArgumentError(f"ledger id {ledger_id} out of range")


def _mk(master_key: bytes) -> bytes:
    if len(master_key) > BOOKIE_MASTER_KEY_BYTES_MAX:
        raise LimitExceededError("BOOKIE_MASTER_KEY_BYTES_MAX", len(master_key), BOOKIE_MASTER_KEY_BYTES_MAX)
    return bytes((len(master_key),)) + master_key


def _frame(op: int, request_id: int, *parts: bytes) -> bytes:
    body_len = HEADER_BYTES + sum(len(p) for p in parts)
    if body_len > BOOKIE_FRAME_BYTES_MAX:
        raise LimitExceededError("BOOKIE_FRAME_BYTES_MAX", body_len, BOOKIE_FRAME_BYTES_MAX)
    return b"".join((_LEN.pack(body_len), _HEADER.pack(PROTOCOL_VERSION, op, request_id), *parts))


def encode_adds(adds: Sequence[tuple[int, EncodedEntry]], master_key: bytes, recovery: bool) -> bytes:
    """The ADD frames of ``(request_id, entry)`` pairs back to back in one buffer, for one write:
    equal to joining ``encode(AddRequest(request_id, entry, master_key, recovery))`` of each,
    without building the requests (the flags and master key are encoded once)."""
    key_flags = bytes((FLAG_RECOVERY if recovery else 0,)) + _mk(master_key)
    fixed = HEADER_BYTES + len(key_flags)
    parts: list[bytes] = []
    for request_id, entry in adds:
        raw = entry.raw
        body_len = fixed + len(raw)
        if body_len > BOOKIE_FRAME_BYTES_MAX:
            raise LimitExceededError("BOOKIE_FRAME_BYTES_MAX", body_len, BOOKIE_FRAME_BYTES_MAX)
        parts += (_LEN.pack(body_len), _HEADER.pack(PROTOCOL_VERSION, Op.ADD, request_id), key_flags, raw)
    return b"".join(parts)


def encode_parts(message: Message | ServedReadResponse) -> tuple[Bytes, ...]:
    """The frame of ``message`` as buffers to be written back to back, for a writer that hands
    several buffers to the socket at once (``writelines``): a ``ServedReadResponse``'s entry is
    its own part, never copied into a joined frame (the parts join to ``encode`` of the equal
    ``ReadResponse``); any other message is one part, ``encode(message)``."""
    if not isinstance(message, ServedReadResponse):
        return (encode(message),)
    raw = message.raw
    if raw is None:
        return (encode(ReadResponse(message.request_id, message.status, message.ledger_id, message.entry_id,
                                    message.known_lac, None, message.op)),)
    body_len = _READ_RESP_HEAD_BYTES + len(raw)
    if body_len > BOOKIE_FRAME_BYTES_MAX:
        raise LimitExceededError("BOOKIE_FRAME_BYTES_MAX", body_len, BOOKIE_FRAME_BYTES_MAX)
    head = _READ_RESP_FRAME_HEAD.pack(body_len, PROTOCOL_VERSION, message.op | RESPONSE_BIT, message.request_id,
                                      message.status, message.ledger_id, message.entry_id, message.known_lac, 1)
    return head, raw


def encode(message: Message) -> bytes:
    """The complete frame (length prefix included) for ``message``."""
    if isinstance(message, AddRequest):
        flags = FLAG_RECOVERY if message.recovery else 0
        return _frame(Op.ADD, message.request_id, bytes((flags,)), _mk(message.master_key), message.entry.raw)
    if isinstance(message, AddResponse):
        body = _ADD_RESP.pack(message.status, message.ledger_id, message.entry_id)
        return _frame(Op.ADD | RESPONSE_BIT, message.request_id, body)
    if isinstance(message, ReadRequest):
        flags = FLAG_FENCE if message.fence else 0
        tail = _READ_TAIL.pack(message.ledger_id, message.entry_id)
        return _frame(Op.READ, message.request_id, bytes((flags,)), _mk(message.master_key), tail)
    if isinstance(message, ReadResponse):
        has_entry = message.entry is not None
        head = _READ_RESP.pack(message.status, message.ledger_id, message.entry_id, message.known_lac, has_entry)
        raw = message.entry.raw if message.entry is not None else b""
        return _frame(message.op | RESPONSE_BIT, message.request_id, head, raw)
    if isinstance(message, ReadLacRequest):
        return _frame(Op.READ_LAC, message.request_id, _LEDGER.pack(message.ledger_id))
    if isinstance(message, ReadLacResponse):
        body = _LAC_RESP.pack(message.status, message.ledger_id, message.lac)
        return _frame(Op.READ_LAC | RESPONSE_BIT, message.request_id, body)
    if isinstance(message, ReadLastEntryRequest):
        flags = FLAG_FENCE if message.fence else 0
        tail = _LEDGER.pack(message.ledger_id)
        return _frame(Op.READ_LAST_ENTRY, message.request_id, bytes((flags,)), _mk(message.master_key), tail)
    if isinstance(message, GetInfoRequest):
        return _frame(Op.GET_INFO, message.request_id)
    if isinstance(message, WriteLacRequest):
        tail = _READ_TAIL.pack(message.ledger_id, message.lac)
        return _frame(Op.WRITE_LAC, message.request_id, _mk(message.master_key), tail)
    if isinstance(message, WriteLacResponse):
        body = _LAC_RESP.pack(message.status, message.ledger_id, message.lac)
        return _frame(Op.WRITE_LAC | RESPONSE_BIT, message.request_id, body)
    flags = FLAG_READ_ONLY if message.read_only else 0
    body = _INFO_RESP.pack(message.status, flags, message.free_bytes, message.ledger_count)
    return _frame(Op.GET_INFO | RESPONSE_BIT, message.request_id, body)


# --- decoding ----------------------------------------------------------------------------------


#: Every status by its code (the codes are 0..n-1): a tuple index, not ``Status(value)`` (the
#: enum's interpreted ``__call__``), once per response.
_STATUS_BY_CODE: Final = tuple(Status)
assert all(status.value == code for code, status in enumerate(_STATUS_BY_CODE)), "status codes are 0..n-1"


def _status(value: int) -> Status:
    if 0 <= value < len(_STATUS_BY_CODE):
        return _STATUS_BY_CODE[value]
    raise CorruptDataError(f"unknown status code {value}")


def _read_mk(body: bytes | memoryview, offset: int) -> tuple[bytes, int]:
    if offset >= len(body):
        raise CorruptDataError("frame ends inside the master key length")
    length = body[offset]
    if length > BOOKIE_MASTER_KEY_BYTES_MAX:
        raise CorruptDataError(f"master key of {length} bytes exceeds {BOOKIE_MASTER_KEY_BYTES_MAX}")
    end = offset + 1 + length
    if end > len(body):
        raise CorruptDataError("frame ends inside the master key")
    return bytes(body[offset + 1 : end]), end


def _exact(body: bytes | memoryview, offset: int, struct_: struct.Struct) -> tuple[int, ...]:
    if offset + struct_.size != len(body):
        raise CorruptDataError(f"frame body of {len(body) - offset} bytes, expected {struct_.size}")
    return struct_.unpack_from(body, offset)


def _entry_at(body: bytes | memoryview, offset: int) -> EncodedEntry:
    raw = bytes(body[offset:])  # the one copy of an entry out of the receive buffer
    if len(raw) - ENTRY_HEADER_BYTES > ENTRY_BYTES_MAX:
        raise CorruptDataError(f"entry payload exceeds ENTRY_BYTES_MAX ({ENTRY_BYTES_MAX})")
    entry = EncodedEntry.parse(raw)
    if entry.ledger_id > LEDGER_ID_MAX:
        raise CorruptDataError(f"ledger id {entry.ledger_id} out of range")
    return entry


def _read_response_head(frame: bytes | memoryview, at: int) -> tuple[Status, int, int, int, bool]:
    """A READ/READ_LAST_ENTRY response's fixed fields at ``at`` (its entry, if any, follows)."""
    if len(frame) < at + _READ_RESP.size:
        raise CorruptDataError("READ response shorter than its fixed fields")
    status, ledger_id, entry_id, lac, has_entry = _READ_RESP.unpack_from(frame, at)
    if not has_entry and at + _READ_RESP.size != len(frame):
        raise CorruptDataError("READ response without an entry has trailing bytes")
    return _status(status), ledger_id, entry_id, lac, bool(has_entry)


def decode_frame(frame: bytes | memoryview) -> Message:
    """Decode one frame body (everything after the length prefix).

    ``frame`` may be a view into a receive buffer: every field kept in the message is copied
    out as ``bytes``, so no message refers to the buffer."""
    if len(frame) < HEADER_BYTES:
        raise CorruptDataError(f"frame of {len(frame)} bytes is shorter than the header")
    version, op, request_id = _HEADER.unpack_from(frame, 0)
    if version != PROTOCOL_VERSION:
        raise CorruptDataError(f"unsupported bookie protocol version {version}")
    at = HEADER_BYTES
    if op == Op.ADD:
        if at >= len(frame):
            raise CorruptDataError("ADD frame ends before its flags")
        flags = frame[at]
        master_key, at = _read_mk(frame, at + 1)
        return AddRequest(request_id, _entry_at(frame, at), master_key, bool(flags & FLAG_RECOVERY))
    if op == Op.ADD | RESPONSE_BIT:
        status, ledger_id, entry_id = _exact(frame, at, _ADD_RESP)
        return AddResponse(request_id, _status(status), ledger_id, entry_id)
    if op == Op.READ:
        if at >= len(frame):
            raise CorruptDataError("READ frame ends before its flags")
        flags = frame[at]
        master_key, at = _read_mk(frame, at + 1)
        ledger_id, entry_id = _exact(frame, at, _READ_TAIL)
        return ReadRequest(request_id, ledger_id, entry_id, bool(flags & FLAG_FENCE), master_key)
    if op in (Op.READ | RESPONSE_BIT, Op.READ_LAST_ENTRY | RESPONSE_BIT):
        # (not ``status``: that name holds the raw int of the other branches, and a ``Status`` stored
        # in an int variable is a plain int once compiled, magnetar/_compiled.py)
        read_status, ledger_id, entry_id, lac, has_entry = _read_response_head(frame, at)
        entry = _entry_at(frame, at + _READ_RESP.size) if has_entry else None
        return ReadResponse(request_id, read_status, ledger_id, entry_id, lac, entry, Op(op & ~RESPONSE_BIT))
    if op == Op.READ_LAC:
        (ledger_id,) = _exact(frame, at, _LEDGER)
        return ReadLacRequest(request_id, ledger_id)
    if op == Op.READ_LAC | RESPONSE_BIT:
        status, ledger_id, lac = _exact(frame, at, _LAC_RESP)
        return ReadLacResponse(request_id, _status(status), ledger_id, lac)
    if op == Op.READ_LAST_ENTRY:
        if at >= len(frame):
            raise CorruptDataError("READ_LAST_ENTRY frame ends before its flags")
        flags = frame[at]
        master_key, at = _read_mk(frame, at + 1)
        (ledger_id,) = _exact(frame, at, _LEDGER)
        return ReadLastEntryRequest(request_id, ledger_id, bool(flags & FLAG_FENCE), master_key)
    if op == Op.GET_INFO:
        if at != len(frame):
            raise CorruptDataError("GET_INFO request has a body")
        return GetInfoRequest(request_id)
    if op == Op.GET_INFO | RESPONSE_BIT:
        status, flags, free_bytes, ledger_count = _exact(frame, at, _INFO_RESP)
        return GetInfoResponse(request_id, _status(status), bool(flags & FLAG_READ_ONLY), free_bytes, ledger_count)
    if op == Op.WRITE_LAC:
        master_key, at = _read_mk(frame, at)
        ledger_id, lac = _exact(frame, at, _READ_TAIL)
        return WriteLacRequest(request_id, ledger_id, lac, master_key)
    if op == Op.WRITE_LAC | RESPONSE_BIT:
        status, ledger_id, lac = _exact(frame, at, _LAC_RESP)
        return WriteLacResponse(request_id, _status(status), ledger_id, lac)
    raise CorruptDataError(f"unknown bookie op 0x{op:02x}")


def _checked_frame_len(source: bytes | bytearray | memoryview, at: int, max_frame_bytes: int) -> int:
    """The length prefix at ``at``, within ``max_frame_bytes`` and long enough for a header."""
    frame_len: int = _LEN.unpack_from(source, at)[0]
    if frame_len > max_frame_bytes:
        raise LimitExceededError("BOOKIE_FRAME_BYTES_MAX", frame_len, max_frame_bytes)
    if frame_len < _FRAME_MIN_BYTES:
        raise CorruptDataError(f"frame length {frame_len} below the header size")
    return frame_len


class FrameDecoder:
    """Feed bytes, get messages. Sans-IO; one per connection direction.

    ``max_frame_bytes`` bounds what one frame may claim (default ``BOOKIE_FRAME_BYTES_MAX``);
    the buffer holds at most one partial frame (frames are decoded from the fed bytes).
    """

    __slots__ = ("_broken", "_buffer", "_max_frame_bytes")

    def __init__(self, max_frame_bytes: int = BOOKIE_FRAME_BYTES_MAX) -> None:
        self._buffer = bytearray()
        self._max_frame_bytes = max_frame_bytes
        self._broken = False

    @property
    def buffered_bytes(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Message]:
        """Append ``data``; return every complete message, in order.

        Raises ``LimitExceededError`` (frame too large) or ``CorruptDataError`` (malformed); afterwards
        the decoder is broken and raises ``CorruptDataError`` on any further input.
        """
        if self._broken:
            raise CorruptDataError("decoder is out of sync after an earlier error")
        messages: list[Message] = []
        # Frames are decoded straight from a view of ``data``; only a frame split across feeds
        # is assembled in the buffer (and only its own bytes are copied there). An entry is
        # then copied once, by ``decode_frame``.
        view = memoryview(data)
        try:
            at = self._complete_buffered(view, messages)
            while len(view) - at >= 4:
                frame_len = self._frame_len(view, at)
                end = at + 4 + frame_len
                if end > len(view):
                    break
                messages.append(decode_frame(view[at + 4 : end]))
                at = end
            if at < len(view):
                self._buffer += view[at:]
        except (CorruptDataError, LimitExceededError):
            self._broken = True
            self._buffer = bytearray()
            raise
        finally:
            view.release()
        return messages

    def _frame_len(self, source: bytes | bytearray | memoryview, at: int) -> int:
        return _checked_frame_len(source, at, self._max_frame_bytes)

    def _complete_buffered(self, view: memoryview, messages: list[Message]) -> int:
        """Move bytes of ``view`` into the buffered partial frame until it is whole (then decode
        it and empty the buffer) or ``view`` is used up; returns how many bytes were taken."""
        buffer = self._buffer
        if not buffer:
            return 0
        at = 0
        if len(buffer) < 4:
            at = min(4 - len(buffer), len(view))
            buffer += view[:at]
            if len(buffer) < 4:
                return at
        end = 4 + self._frame_len(buffer, 0)
        take = min(end - len(buffer), len(view) - at)
        buffer += view[at : at + take]
        at += take
        if len(buffer) == end:
            with memoryview(buffer) as frame:
                messages.append(decode_frame(frame[4:]))
            self._buffer = bytearray()
        return at


# --- decoding responses without copying entries (readers) --------------------------------------

_READ_RESPONSE_OPS = (Op.READ | RESPONSE_BIT, Op.READ_LAST_ENTRY | RESPONSE_BIT)


#: Bytes of a READ/READ_LAST_ENTRY response frame up to its entry: length prefix, header, fixed fields.
READ_RESPONSE_HEAD_BYTES = _READ_RESP_FRAME_HEAD.size


def decode_read_response_head(head: bytes | bytearray | memoryview,
                              max_frame_bytes: int = BOOKIE_FRAME_BYTES_MAX) -> tuple[ReadViewResponse, int]:
    """A READ/READ_LAST_ENTRY response from its first ``READ_RESPONSE_HEAD_BYTES`` bytes (length
    prefix included), for a reader that receives the entry into a buffer of its own: the answer
    without its entry, and how many entry bytes follow (0 when it has none). Checks what
    ``decode_frame`` checks of these fields; the entry is checked with ``entry_view`` once
    received. Raises ``CorruptDataError`` (``LimitExceededError`` for a frame over ``max_frame_bytes``):
    any other frame, or a length that disagrees with ``has_entry``."""
    if len(head) != READ_RESPONSE_HEAD_BYTES:
        raise CorruptDataError(f"READ response head of {len(head)} bytes, expected {READ_RESPONSE_HEAD_BYTES}")
    frame_len = _checked_frame_len(head, 0, max_frame_bytes)
    version, op = head[4], head[5]
    if version != PROTOCOL_VERSION:
        raise CorruptDataError(f"unsupported bookie protocol version {version}")
    if op not in _READ_RESPONSE_OPS:
        raise CorruptDataError(f"expected a READ response, got op {op:#x}")
    entry_bytes = frame_len - _READ_RESP_HEAD_BYTES
    if entry_bytes < 0:
        raise CorruptDataError(f"READ response frame of {frame_len} bytes is shorter than its fixed fields")
    _, _, _, request_id, status, ledger_id, entry_id, lac, has_entry = _READ_RESP_FRAME_HEAD.unpack_from(head, 0)
    if has_entry not in (0, 1) or (has_entry == 0) != (entry_bytes == 0):
        raise CorruptDataError(f"READ response with has_entry={has_entry} carries {entry_bytes} entry bytes")
    answer = ReadViewResponse(request_id, _status(status), ledger_id, entry_id, lac, None, Op(op & ~RESPONSE_BIT))
    return answer, entry_bytes


def entry_view(raw: memoryview) -> EncodedEntryView:
    """``raw`` (an entry in wire form, received into the caller's buffer) checked and parsed as
    ``decode_frame`` does, its digest computed now (while its bytes were just received); the view
    refers to ``raw``."""
    if len(raw) < ENTRY_HEADER_BYTES:
        raise CorruptDataError(f"entry of {len(raw)} bytes is shorter than its header")
    if len(raw) - ENTRY_HEADER_BYTES > ENTRY_BYTES_MAX:
        raise CorruptDataError(f"entry payload exceeds ENTRY_BYTES_MAX ({ENTRY_BYTES_MAX})")
    ledger_id, entry_id, lac, length, digest = _ENTRY_HEADER.unpack_from(raw, 0)
    if length != len(raw) - ENTRY_HEADER_BYTES:
        raise CorruptDataError(f"entry payload length {length} != {len(raw) - ENTRY_HEADER_BYTES}")
    if ledger_id > LEDGER_ID_MAX:
        raise CorruptDataError(f"ledger id {ledger_id} out of range")
    valid = entry_digest(ledger_id, entry_id, lac, raw[ENTRY_HEADER_BYTES:]) == digest
    return EncodedEntryView(ledger_id, entry_id, lac, digest, raw, valid)
