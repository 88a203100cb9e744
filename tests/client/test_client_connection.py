"""The sans-IO client connection state machine: golden bytes and scripted sequences, no sockets."""

from __future__ import annotations

import pytest

from magnetar.base.checksum import crc32c
from magnetar.protocol.pulsar import ProtocolViolationError, commands, decode_frame, encode_command, pb
from magnetar.protocol.pulsar.client_connection import (
    ClientConfig,
    ClientConnection,
    Connected,
    ConnectionTerminated,
    ConsumerClosedByBroker,
    CorruptMessage,
    MessageReceived,
    Response,
    SendReceipt,
    State,
    connect_command,
)
from magnetar.protocol.pulsar.frames import encode_payload_command, payload_frame_parts

T = pb.BaseCommand


def _sent(conn: ClientConnection) -> list[pb.BaseCommand]:
    data = b"".join(bytes(p) for p in conn.data_to_send())
    out, offset = [], 0
    while offset < len(data):
        size = int.from_bytes(data[offset:offset + 4], "big") + 4
        out.append(decode_frame(memoryview(data[offset:offset + size])).command)
        offset += size
    return out


def _connected(version: int = 20) -> ClientConnection:
    conn = ClientConnection(0)
    conn.data_to_send()
    events = conn.receive_data(encode_command(commands.connected("test-broker", version, 1 << 20)), 0)
    assert events == [Connected("test-broker", version, 1 << 20)]
    return conn


def test_connect_golden_bytes_match_the_official_layout() -> None:
    # The official client's CONNECT with its version string replaced by ours: same fields, same order.
    config = ClientConfig(client_version="Pulsar-CPP-v4.2.0")
    golden = bytes.fromhex("00000029000000250802122 10a11".replace(" ", "")) + b"Pulsar-CPP-v4.2.0" + bytes.fromhex(
        "20142a046e6f6e6552040801 1001".replace(" ", ""))
    assert encode_command(connect_command(config)) == golden
    conn = ClientConnection(0, config)
    assert b"".join(bytes(p) for p in conn.data_to_send()) == golden


def test_handshake_then_requests_and_replies() -> None:
    conn = _connected()
    assert conn.state is State.CONNECTED and conn.checksum_enabled
    conn.send_command(T(type=T.LOOKUP, lookupTopic=pb.CommandLookupTopic(topic="t", request_id=1)))
    assert [c.type for c in _sent(conn)] == [T.LOOKUP]
    events = conn.receive_data(encode_command(commands.lookup_connect(1, "pulsar://b:6650")), 5)
    assert len(events) == 1 and isinstance(events[0], Response) and events[0].request_id == 1
    receipt = encode_command(commands.send_receipt(3, 9, 7, 11))
    close = encode_command(commands.close_consumer(4))
    events = conn.receive_data(receipt + close, 6)
    assert isinstance(events[0], SendReceipt) and (events[0].producer_id, events[0].sequence_id) == (3, 9)
    assert events[1] == ConsumerClosedByBroker(4, None)


def test_ping_is_answered_and_auth_challenge_gets_a_response() -> None:
    conn = _connected()
    assert conn.receive_data(encode_command(commands.ping()), 1) == []
    assert conn.receive_data(encode_command(commands.auth_challenge("b", "token", b"refresh", 20)), 1) == []
    sent = _sent(conn)
    assert [c.type for c in sent] == [T.PONG, T.AUTH_RESPONSE]
    assert sent[1].authResponse.response.auth_method_name == "none"


def test_anything_but_connected_before_the_handshake_is_a_violation() -> None:
    conn = ClientConnection(0)
    with pytest.raises(ProtocolViolationError):
        conn.receive_data(encode_command(commands.ping()), 0)
    assert conn.state is State.CLOSED


def test_connected_without_server_version_is_a_violation() -> None:
    conn = ClientConnection(0)
    bad = T(type=T.CONNECTED, connected=pb.CommandConnected(protocol_version=20))
    with pytest.raises(ProtocolViolationError):
        conn.receive_data(_raw(bad), 0)
    assert conn.state is State.CLOSED


def _raw(command: pb.BaseCommand) -> bytes:
    body = command.SerializePartialToString()
    return (len(body) + 4).to_bytes(4, "big") + len(body).to_bytes(4, "big") + body


def test_commands_a_client_never_receives_close_the_connection() -> None:
    conn = _connected()
    flow = T(type=T.FLOW, flow=pb.CommandFlow(consumer_id=1, messagePermits=5))
    with pytest.raises(ProtocolViolationError):
        conn.receive_data(encode_command(flow), 0)
    assert conn.state is State.CLOSED


def test_send_has_a_checksum_only_from_protocol_version_6() -> None:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    encoded = metadata.SerializeToString()
    body = len(encoded).to_bytes(4, "big") + encoded + b"payload"
    send = T(type=T.SEND, send=pb.CommandSend(producer_id=0, sequence_id=0))
    for version, expect_checksum in ((20, True), (5, False)):
        conn = _connected(version)
        conn.send_message(send, body)
        frame = decode_frame(memoryview(b"".join(bytes(p) for p in conn.data_to_send())))
        assert frame.message is not None and bytes(frame.message.payload) == b"payload"
        assert (frame.message.checksum is not None) is expect_checksum
        if expect_checksum:
            assert frame.message.checksum == crc32c(body)
    golden = encode_payload_command(send, metadata, b"payload")
    conn = _connected(20)
    conn.send_message(send, body)
    assert b"".join(bytes(p) for p in conn.data_to_send()) == golden


def test_message_with_a_bad_checksum_becomes_corrupt_message() -> None:
    conn = _connected()
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    frame = bytearray(encode_payload_command(commands.message(2, commands.message_id(7, 1)), metadata, b"data"))
    good = conn.receive_data(bytes(frame), 0)
    assert isinstance(good[0], MessageReceived) and good[0].consumer_id == 2
    frame[-1] ^= 0xFF
    events = conn.receive_data(bytes(frame), 0)
    assert isinstance(events[0], CorruptMessage) and events[0].message_id.entryId == 1
    assert conn.state is State.CONNECTED


def test_keep_alive_pings_then_terminates_when_nothing_arrives() -> None:
    conn = _connected()
    assert conn.next_deadline_ms() == 30_000
    assert conn.tick(29_999) == []
    assert conn.tick(30_000) == []
    assert [c.type for c in _sent(conn)] == [T.PING]
    assert conn.next_deadline_ms() == 60_000
    assert conn.tick(60_000) == [ConnectionTerminated("keep-alive timeout")]
    assert conn.state is State.CLOSED


def test_keep_alive_is_reset_by_any_received_frame() -> None:
    conn = _connected()
    conn.tick(30_000)
    conn.data_to_send()
    conn.receive_data(encode_command(commands.pong()), 40_000)
    assert conn.tick(60_000) == []  # negative control for the test above: a reply keeps it open
    assert conn.state is State.CONNECTED
    assert conn.next_deadline_ms() == 70_000


def test_handshake_timeout() -> None:
    conn = ClientConnection(0, ClientConfig(handshake_timeout_ms=500))
    assert conn.tick(499) == []
    assert conn.tick(500) == [ConnectionTerminated("handshake timeout")]


def test_a_message_frame_passes_stored_bytes_through() -> None:
    conn = _connected()
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=3, publish_time=1, num_messages_in_batch=2)
    stored = encode_payload_command(T(type=T.SEND, send=pb.CommandSend(producer_id=0, sequence_id=3)), metadata, b"xy")
    stored_tail = stored[-(len(stored) - 8 - len(T(type=T.SEND, send=pb.CommandSend(producer_id=0, sequence_id=3)).SerializeToString())):]
    header, body = payload_frame_parts(commands.message(1, commands.message_id(7, 0)), stored_tail)
    events = conn.receive_data(header + bytes(body), 0)
    assert isinstance(events[0], MessageReceived)
    assert events[0].message.metadata.num_messages_in_batch == 2
