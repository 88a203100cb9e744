"""Sans-IO codec for the Pulsar binary protocol, as the official clients speak it.

Owns: the wire schema (``pulsar_api.proto``, ours, with generated code in ``generated/``), the
frame codec (``frames``), the batch payload format and compression codecs (``batch``), builders
for the commands a broker sends (``commands``) and the per-connection state machine
(``connection``). No sockets, no clock, no asyncio: bytes in, typed frames and events out.

Invariants: frames never exceed ``PULSAR_FRAME_BYTES_MAX``; checksums are verified whenever the
0x0e01 magic is present; decompression is bounded by the declared size and the frame bound;
nothing the official 4.2.0 client would reject (REACHED_END_OF_TOPIC, commands before CONNECTED,
missing required fields) can be sent through ``ServerConnection``.
"""

from __future__ import annotations

from magnetar.protocol.pulsar import commands
from magnetar.protocol.pulsar.batch import (
    SingleMessage,
    compress,
    decode_batch,
    decode_entry,
    decompress,
    encode_batch,
    encode_entry,
    is_batch,
    message_count,
)
from magnetar.protocol.pulsar.connection import (
    PROTOCOL_VERSION_MAX,
    AckReceived,
    ClientConnected,
    ClientFeatures,
    CommandReceived,
    ConnectionTerminated,
    CorruptSend,
    Event,
    FlowReceived,
    SendReceived,
    ServerConfig,
    ServerConnection,
    State,
    UnsupportedCommand,
)
from magnetar.protocol.pulsar.errors import (
    CompressionError,
    ConnectionClosedError,
    FrameChecksumMismatchError,
    FrameTooLargeError,
    MalformedFrameError,
    ProtocolViolationError,
)
from magnetar.protocol.pulsar.fast_decode import AckCommand, AckedId, SendCommand
from magnetar.protocol.pulsar.frames import (
    MAGIC_CRC32C,
    Frame,
    FrameDecoder,
    MessagePayload,
    decode_frame,
    encode_command,
    encode_payload_command,
    headers_and_payload,
    payload_frame_parts,
    stored_entry_metadata,
    stored_entry_parts,
)
from magnetar.protocol.pulsar.generated import pulsar_api_pb2 as pb

__all__ = [
    "MAGIC_CRC32C",
    "PROTOCOL_VERSION_MAX",
    "AckCommand",
    "AckReceived",
    "AckedId",
    "ClientConnected",
    "ClientFeatures",
    "CommandReceived",
    "CompressionError",
    "ConnectionClosedError",
    "ConnectionTerminated",
    "CorruptSend",
    "Event",
    "FlowReceived",
    "Frame",
    "FrameChecksumMismatchError",
    "FrameDecoder",
    "FrameTooLargeError",
    "MalformedFrameError",
    "MessagePayload",
    "ProtocolViolationError",
    "SendCommand",
    "SendReceived",
    "ServerConfig",
    "ServerConnection",
    "SingleMessage",
    "State",
    "UnsupportedCommand",
    "commands",
    "compress",
    "decode_batch",
    "decode_entry",
    "decode_frame",
    "decompress",
    "encode_batch",
    "encode_command",
    "encode_entry",
    "encode_payload_command",
    "headers_and_payload",
    "is_batch",
    "message_count",
    "payload_frame_parts",
    "pb",
    "stored_entry_metadata",
    "stored_entry_parts",
]
