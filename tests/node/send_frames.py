"""One producer's SEND frames as a client writes them (the broker's direct-read and turn tests)."""

from __future__ import annotations

from magnetar.protocol.pulsar import pb
from magnetar.protocol.pulsar.frames import encode_payload_command


def send_frame(producer_name: str, sequence_id: int, payload: bytes) -> bytes:
    """A SEND of one message from producer 1 (``producer_name``), its metadata and ``payload``."""
    command = pb.BaseCommand(type=pb.BaseCommand.SEND,
                             send=pb.CommandSend(producer_id=1, sequence_id=sequence_id, num_messages=1))
    metadata = pb.MessageMetadata(producer_name=producer_name, sequence_id=sequence_id,
                                  publish_time=1_700_000_000_000 + sequence_id)
    return encode_payload_command(command, metadata, payload)
