"""CPU per SEND through the protocol and codec layers alone, no sockets, no loop (issue 22).

A deterministic view of the per-message objects in ``protocol/pulsar`` and ``protocol/bookie``
beside the whole-standalone figures (``bench/module_profile.py --cpu``, ``bench/steady_load.py``):
``--messages`` SEND frames as the official client writes them (1 KiB payload, a checksum block,
one message each; ``--batch N``: a batch of N messages per SEND, ``--size`` bytes each) are fed one
by one into a connected ``ServerConnection``; for each event the stored entry is copied out (as
``Session`` does), encoded for the bookie
(``EncodedEntry.build``) and a SEND_RECEIPT is queued and drained. Printed: the thread's CPU time
per SEND (``time.thread_time_ns``, so other processes on the machine move it little), min /
median / max over ``--repeats``, and the same for the pieces alone. Compiled or pure, whichever
``magnetar._compiled`` chose; compare two trees by running each with its ``src`` first on
``PYTHONPATH``.

Run: ``PYTHONPATH=src .venv/bin/python bench/send_path_cost.py``
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from magnetar import _compiled
from magnetar.protocol.bookie.codec import EncodedEntry
from magnetar.protocol.pulsar import SendReceived, ServerConnection, pb
from magnetar.protocol.pulsar.client_connection import ClientConfig, connect_command
from magnetar.protocol.pulsar.frames import (
    MessagePayload,
    decode_message,
    encode_command,
    encode_payload_command,
)


def send_frames(count: int, batch: int = 1, size: int = 1024) -> list[bytes]:
    """``count`` SEND frames of ``batch`` messages of ``size`` bytes each (one payload of
    ``batch * size`` bytes, as a batching client's entry)."""
    frames = []
    payload = bytes(range(256)) * (batch * size // 256) + b"x" * (batch * size % 256)
    for sequence_id in range(count):
        command = pb.BaseCommand(type=pb.BaseCommand.SEND,
                                 send=pb.CommandSend(producer_id=1, sequence_id=sequence_id, num_messages=batch))
        metadata = pb.MessageMetadata(producer_name="standalone-0-1", sequence_id=sequence_id,
                                      publish_time=1_700_000_000_000 + sequence_id, uncompressed_size=batch * size)
        if batch > 1:
            metadata.num_messages_in_batch = batch
        frames.append(encode_payload_command(command, metadata, payload))
    return frames


def stored_entry(message: MessagePayload) -> bytes:
    """The stored form as the tree's ``Session`` makes it (``stored_entry`` where the tree has it:
    session 14's branch ``crc``, measured and not merged; else a copy of the view), so two trees can be compared with this file."""
    method = getattr(message, "stored_entry", None)
    return method() if method is not None else bytes(message.headers_and_payload)


def whole_path(frames: list[bytes]) -> float:
    """ns of thread CPU per SEND: receive, copy out, entry built, receipt queued and drained."""
    connection = ServerConnection(0)
    connection.receive_data(encode_command(connect_command(ClientConfig())), 0)
    connection.data_to_send()
    started = time.thread_time_ns()
    for entry_id, frame in enumerate(frames):
        (event,) = connection.receive_data(frame, 0)
        assert isinstance(event, SendReceived)
        data = stored_entry(event.message)
        EncodedEntry.build(5, entry_id, entry_id - 1, data)
        connection.send_receipt(1, event.command.sequence_id, 5, entry_id, None)
        connection.data_to_send()
    return (time.thread_time_ns() - started) / len(frames)


def piece(frames: list[bytes], work: Callable[[memoryview], object]) -> float:
    views = [memoryview(frame)[8 + int.from_bytes(frame[4:8], "big"):] for frame in frames]
    started = time.thread_time_ns()
    for view in views:
        work(view)
    return (time.thread_time_ns() - started) / len(frames)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--batch", type=int, default=1, help="messages per SEND (a batch)")
    parser.add_argument("--size", type=int, default=1024, help="bytes per message")
    args = parser.parse_args()
    frames = send_frames(args.messages, args.batch, args.size)
    entry = bytes(decode_message(memoryview(frames[0])[8 + int.from_bytes(frames[0][4:8], "big"):]).headers_and_payload)
    rows: dict[str, Callable[[], float]] = {
        "whole SEND path": lambda: whole_path(frames),
        "decode_message": lambda: piece(frames, decode_message),
        "EncodedEntry.build": lambda: piece(frames, lambda _view: EncodedEntry.build(5, 7, 6, entry)),
    }
    print(f"{_compiled.MODE} ({_compiled.REASON}), {args.messages} SENDs of {args.batch} x {args.size} B"
          f" x {args.repeats}")
    for name, measure in rows.items():
        values = sorted(measure() for _ in range(args.repeats))
        print(f"{name:20s} ns/SEND min / median / max  {values[0]:8.0f} {statistics.median(values):8.0f} {values[-1]:8.0f}"
              f"   ns/message (median) {statistics.median(values) / args.batch:8.1f}")


if __name__ == "__main__":
    main()
