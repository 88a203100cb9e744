"""The bookie server's reply writes: replies of one event-loop pass go out in one write; over TCP
that write is a ``writelines`` of the replies' ``encode_parts`` (a READ answer's entry handed to
the socket as the stored bytes object, not copied), elsewhere one joined ``write``. The bytes on
the wire are the same either way, through a real socket under uvloop too."""

from __future__ import annotations

import asyncio
import random

import uvloop

from magnetar.node.bookie import _ConnectionState
from magnetar.protocol.bookie import (
    AddResponse,
    Entry,
    FrameDecoder,
    Op,
    ReadResponse,
    Status,
    encode,
    encode_parts,
)
from magnetar.protocol.bookie.codec import Message, ServedReadResponse
from magnetar.runtime.network import TcpConnection, TcpNetwork, _ConnectionProtocol

ENTRIES = [Entry.build(9, i, i - 1, random.Random(i).randbytes(1000 + i)) for i in range(3)]
ANSWERS = [
    ReadResponse(1, Status.OK, 9, 0, -1, ENTRIES[0]),
    AddResponse(2, Status.OK, 9, 5),
    ReadResponse(3, Status.OK, 9, 1, 0, ENTRIES[1], Op.READ_LAST_ENTRY),
    ReadResponse(4, Status.NO_SUCH_ENTRY, 9, 7, 1, None),
    ReadResponse(5, Status.OK, 9, 2, 1, ENTRIES[2]),
]
WIRE = b"".join(encode(answer) for answer in ANSWERS)


def served(answer: Message) -> Message | ServedReadResponse:
    """A read answer as the server sends it: the stored entry's bytes object as is."""
    if not isinstance(answer, ReadResponse):
        return answer
    raw = answer.entry.raw if answer.entry is not None else None
    return ServedReadResponse(answer.request_id, answer.status, answer.ledger_id, answer.entry_id, answer.known_lac,
                              raw, answer.op)


REPLIES = [served(answer) for answer in ANSWERS]


class _RecordingTransport:
    """What ``TcpConnection`` calls on its transport, recorded (no socket)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def set_write_buffer_limits(self, high: int) -> None:
        pass

    def get_extra_info(self, name: str) -> object:
        return ("127.0.0.1", 1) if name == "peername" else None

    def is_closing(self) -> bool:
        return False

    def write(self, data: bytes) -> None:
        self.calls.append(("write", data))

    def writelines(self, parts: list[bytes]) -> None:
        self.calls.append(("writelines", list(parts)))


class _PlainConnection:
    """A connection without ``writelines`` (as the simulator's)."""

    peer = "sim:1"

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return False


async def _one_pass(state: _ConnectionState) -> None:
    for reply in REPLIES:
        state.send_parts(encode_parts(reply))
    await asyncio.sleep(0)  # the flush scheduled by the first reply runs
    await asyncio.sleep(0)


def _tcp_connection(transport: _RecordingTransport) -> TcpConnection:
    protocol = _ConnectionProtocol()
    protocol.connection_made(transport)  # type: ignore[arg-type]
    return TcpConnection(protocol)


def test_read_answers_of_one_pass_go_to_the_tcp_transport_as_parts_without_a_copy() -> None:
    transport = _RecordingTransport()

    async def run() -> None:
        await _one_pass(_ConnectionState(_tcp_connection(transport), 0))

    asyncio.run(run())
    assert [kind for kind, _ in transport.calls] == ["writelines"]  # one write for the pass
    parts = transport.calls[0][1]
    assert isinstance(parts, list)
    assert b"".join(parts) == WIRE
    assert all(any(part is entry.raw for part in parts) for entry in ENTRIES)


def test_negative_control_a_connection_without_writelines_gets_the_pass_joined() -> None:
    connection = _PlainConnection()

    async def run() -> None:
        await _one_pass(_ConnectionState(connection, 0))  # type: ignore[arg-type]

    asyncio.run(run())
    assert connection.writes == [WIRE]
    # The identity check of the test above fails on a joined write: it can tell the two apart.
    assert not any(connection.writes[0] is entry.raw for entry in ENTRIES)


def test_read_answers_written_as_parts_arrive_intact_through_a_uvloop_socket() -> None:
    # Entries of 128 KiB, more than a socket buffer holds per pass: uvloop's writev is partial and
    # the rest goes out later from the same part objects. Every other entry is a memoryview, as an
    # entry log mapped into memory gives it.
    entries = [Entry.build(4, i, i - 1, random.Random(100 + i).randbytes(128 * 1024)) for i in range(64)]
    replies = [ReadResponse(i + 1, Status.OK, 4, i, i - 1, entry) for i, entry in enumerate(entries)]
    sent = [ServedReadResponse(i + 1, Status.OK, 4, i, i - 1, memoryview(entry.raw) if i % 2 else entry.raw)
            for i, entry in enumerate(entries)]

    async def run() -> list[object]:
        network = TcpNetwork()
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def serve(connection: object) -> None:
            assert isinstance(connection, TcpConnection)
            state = _ConnectionState(connection, 0)
            for reply in sent:
                state.send_parts(encode_parts(reply))
            await done

        listener = await network.listen("127.0.0.1", 0, serve)
        client = await network.connect("127.0.0.1", listener.port)
        decoder = FrameDecoder()
        got: list[object] = []
        while len(got) < len(replies):
            chunk = await client.read(256 * 1024)
            assert chunk
            got += decoder.feed(chunk)
        done.set_result(None)
        client.close()
        listener.close()
        return got

    got = uvloop.run(asyncio.wait_for(run(), timeout=20))
    assert got == replies
