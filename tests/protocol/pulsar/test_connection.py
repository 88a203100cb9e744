"""The broker-side connection state machine, driven in memory with a virtual clock."""

from __future__ import annotations

import pytest

from magnetar.base.errors import LimitExceededError
from magnetar.base.invariant import InvariantViolationError
from magnetar.protocol.pulsar import (
    ClientConnected,
    CommandReceived,
    ConnectionClosedError,
    ConnectionTerminated,
    CorruptSend,
    FlowReceived,
    FrameDecoder,
    FrameTooLargeError,
    MalformedFrameError,
    ProtocolViolationError,
    SendReceived,
    ServerConfig,
    ServerConnection,
    State,
    UnsupportedCommand,
    commands,
    encode_command,
    encode_payload_command,
    pb,
)
from magnetar.protocol.pulsar.connection import _TRANSITIONS, Trigger
from magnetar.protocol.pulsar.frames import MessagePayload

T = pb.BaseCommand
INTERVAL_MS = 30_000


def connect_frame(version: int = 20, auth: tuple[str, bytes] | None = None) -> bytes:
    body = pb.CommandConnect(
        client_version="Pulsar-CPP-v4.2.0", protocol_version=version,
        feature_flags=pb.FeatureFlags(supports_auth_refresh=True, supports_broker_entry_metadata=True),
    )
    if auth:
        body.auth_method_name, body.auth_data = auth
    else:
        body.auth_method_name = "none"
    return encode_command(T(type=T.CONNECT, connect=body))


def replies(conn: ServerConnection) -> list[pb.BaseCommand]:
    decoder = FrameDecoder()
    for chunk in conn.data_to_send():
        decoder.feed(bytes(chunk))
    out = []
    while (frame := decoder.next_frame()) is not None:
        out.append(frame.command)
    return out


def connected(now_ms: int = 0, version: int = 20) -> ServerConnection:
    conn = ServerConnection(now_ms=now_ms)
    conn.receive_data(connect_frame(version), now_ms)
    conn.data_to_send()
    return conn


def request(body: pb.BaseCommand) -> bytes:
    return encode_command(body)


def lookup(request_id: int = 1) -> bytes:
    return request(T(type=T.LOOKUP, lookupTopic=pb.CommandLookupTopic(topic="persistent://a/b/c", request_id=request_id)))


def test_connect_is_answered_with_connected_at_min_version() -> None:
    conn = ServerConnection(now_ms=0)
    assert conn.state is State.AWAITING_CONNECT
    [event] = conn.receive_data(connect_frame(20), 0)
    assert isinstance(event, ClientConnected) and event.protocol_version == 20
    assert event.features.supports_auth_refresh and event.auth_method_name == "none"
    assert conn.state is State.CONNECTED
    [reply] = replies(conn)
    assert reply.type == T.CONNECTED
    assert reply.connected.protocol_version == 20 and reply.connected.max_message_size == 5 * 1024 * 1024
    assert reply.connected.server_version


@pytest.mark.parametrize(("client", "negotiated"), [(5, 5), (12, 12), (20, 20), (99, 20), (0, 0)])
def test_protocol_version_is_min_of_both(client: int, negotiated: int) -> None:
    conn = ServerConnection(now_ms=0)
    conn.receive_data(connect_frame(client), 0)
    assert replies(conn)[0].connected.protocol_version == negotiated


def test_commands_before_connect_are_violations_and_close() -> None:
    conn = ServerConnection(now_ms=0)
    with pytest.raises(ProtocolViolationError, match="before CONNECT"):
        conn.receive_data(lookup(), 0)
    assert conn.state is State.CLOSED
    with pytest.raises(ConnectionClosedError):
        conn.receive_data(connect_frame(), 0)
    with pytest.raises(ConnectionClosedError):
        conn.send_success(1)


def test_second_connect_is_a_violation() -> None:
    conn = connected()
    with pytest.raises(ProtocolViolationError, match="second CONNECT"):
        conn.receive_data(connect_frame(), 1)
    assert conn.state is State.CLOSED


def test_server_only_command_from_client_is_a_violation() -> None:
    conn = connected()
    with pytest.raises(ProtocolViolationError, match="server-to-client"):
        conn.receive_data(encode_command(commands.success(1)), 1)


def test_requests_become_typed_events() -> None:
    conn = connected()
    flow = request(T(type=T.FLOW, flow=pb.CommandFlow(consumer_id=3, messagePermits=1000)))
    events = conn.receive_data(lookup(9) + flow, 1)
    assert [type(e) for e in events] == [CommandReceived, FlowReceived]
    assert isinstance(events[0], CommandReceived) and isinstance(events[0].body, pb.CommandLookupTopic)
    assert events[0].body.request_id == 9
    assert events[1] == FlowReceived(3, 1000)


def test_request_without_its_body_is_a_violation() -> None:
    conn = connected()
    with pytest.raises(ProtocolViolationError, match="without its body"):
        conn.receive_data(encode_command(T(type=T.LOOKUP)), 1)


def test_send_becomes_send_received_with_its_message() -> None:
    conn = connected()
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=4, publish_time=1)
    frame = encode_payload_command(T(type=T.SEND, send=pb.CommandSend(producer_id=2, sequence_id=4)), metadata, b"x")
    [event] = conn.receive_data(frame, 1)
    assert isinstance(event, SendReceived) and isinstance(event.message, MessagePayload)
    assert event.command.sequence_id == 4 and bytes(event.message.payload) == b"x"


def test_corrupt_send_is_an_event_and_the_connection_survives() -> None:
    conn = connected()
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=4, publish_time=1)
    bad = bytearray(encode_payload_command(T(type=T.SEND, send=pb.CommandSend(producer_id=2, sequence_id=4)),
                                           metadata, b"x"))
    bad[-1] ^= 1
    events = conn.receive_data(bytes(bad) + lookup(), 1)
    assert isinstance(events[0], CorruptSend) and events[0].command.sequence_id == 4
    assert isinstance(events[1], CommandReceived)
    conn.send_send_error(2, 4, pb.ChecksumError, "checksum")
    assert replies(conn)[0].send_error.error == pb.ChecksumError
    assert conn.state is State.CONNECTED


def test_ping_is_answered_with_pong_and_not_surfaced() -> None:
    conn = connected()
    assert conn.receive_data(encode_command(commands.ping()), 5) == []
    assert [c.type for c in replies(conn)] == [T.PONG]


def test_keep_alive_pings_when_idle_then_closes_without_answer() -> None:
    conn = connected(now_ms=0)
    assert conn.next_deadline_ms() == INTERVAL_MS
    assert conn.tick(INTERVAL_MS - 1) == [] and conn.data_to_send() == []
    assert conn.tick(INTERVAL_MS) == []
    assert [c.type for c in replies(conn)] == [T.PING]
    assert conn.next_deadline_ms() == 2 * INTERVAL_MS
    assert conn.tick(2 * INTERVAL_MS - 1) == []
    [event] = conn.tick(2 * INTERVAL_MS)
    assert isinstance(event, ConnectionTerminated) and "keep-alive" in event.reason
    assert conn.state is State.CLOSED and conn.next_deadline_ms() is None


def test_any_frame_resets_keep_alive() -> None:
    conn = connected(now_ms=0)
    conn.tick(INTERVAL_MS)
    replies(conn)
    conn.receive_data(encode_command(commands.pong()), INTERVAL_MS + 10)
    assert conn.next_deadline_ms() == 2 * INTERVAL_MS + 10
    assert conn.tick(2 * INTERVAL_MS) == [] and conn.state is State.CONNECTED


def test_no_ping_below_protocol_v1() -> None:
    conn = connected(now_ms=0, version=0)
    conn.tick(INTERVAL_MS)
    assert conn.data_to_send() == []


def test_handshake_timeout() -> None:
    conn = ServerConnection(now_ms=100)
    assert conn.next_deadline_ms() == 100 + 10_000
    assert conn.tick(10_099) == []
    [event] = conn.tick(10_100)
    assert isinstance(event, ConnectionTerminated) and conn.state is State.CLOSED


def test_manual_accept_and_reject() -> None:
    config = ServerConfig(auto_accept_connect=False)
    conn = ServerConnection(now_ms=0, config=config)
    [event] = conn.receive_data(connect_frame(auth=("token", b"tok")), 0)
    assert isinstance(event, ClientConnected) and event.auth_data == b"tok"
    assert conn.state is State.CONNECTING and conn.data_to_send() == []
    with pytest.raises(ProtocolViolationError):
        conn.send_success(1)  # nothing but CONNECTED may precede the handshake's end
    conn.accept_connect()
    assert conn.state is State.CONNECTED and replies(conn)[0].type == T.CONNECTED

    other = ServerConnection(now_ms=0, config=config)
    other.receive_data(connect_frame(auth=("token", b"bad")), 0)
    other.reject_connect(pb.AuthenticationError, "bad token")
    assert other.state is State.CLOSED and replies(other)[0].error.error == pb.AuthenticationError


def test_unsupported_transaction_command_is_an_event() -> None:
    conn = connected()
    [event] = conn.receive_data(encode_command(T(type=T.NEW_TXN)), 1)
    assert event == UnsupportedCommand(T.NEW_TXN) and conn.state is State.CONNECTED


def test_oversized_and_malformed_input_close_the_connection() -> None:
    conn = connected()
    with pytest.raises(FrameTooLargeError):
        conn.receive_data(b"\x7f\xff\xff\xff", 1)
    assert conn.state is State.CLOSED
    conn = connected()
    with pytest.raises(MalformedFrameError):
        conn.receive_data(b"\x00\x00\x00\x06\x00\x00\x00\x02\xff\xff", 1)
    assert conn.state is State.CLOSED


def test_broker_replies_decode_as_the_client_expects() -> None:
    conn = connected()
    conn.send_partitioned_metadata(1, 0)
    conn.send_lookup_connect(2, "pulsar://127.0.0.1:6650")
    conn.send_producer_success(0, "standalone-0-1")
    conn.send_receipt(0, 0, 7, 0)
    conn.send_message(3, 7, 0, b"\x00\x00\x00\x00", partition=-1)
    conn.send_get_last_message_id_response(4, commands.message_id(-1, -1), commands.message_id(7, 0))
    conn.send_close_consumer(3)
    decoder = FrameDecoder()
    frames = []
    for chunk in conn.data_to_send():
        decoder.feed(bytes(chunk))
        while (frame := decoder.next_frame()) is not None:
            frames.append(frame.command)
    pm, lk, ps, rc, _msg, last, close = frames
    assert pm.partitionMetadataResponse.HasField("response") and pm.partitionMetadataResponse.partitions == 0
    assert lk.lookupTopicResponse.response == pb.CommandLookupTopicResponse.Connect
    assert lk.lookupTopicResponse.authoritative
    assert ps.producer_success.producer_name == "standalone-0-1" and ps.producer_success.last_sequence_id == -1
    assert (rc.send_receipt.message_id.ledgerId, rc.send_receipt.message_id.entryId) == (7, 0)
    assert last.getLastMessageIdResponse.last_message_id.ledgerId == 0xFFFF_FFFF_FFFF_FFFF
    assert last.getLastMessageIdResponse.HasField("consumer_mark_delete_position")
    assert close.type == T.CLOSE_CONSUMER


def test_commands_the_client_rejects_cannot_be_sent() -> None:
    conn = connected()
    with pytest.raises(InvariantViolationError, match="drops the connection"):
        conn.send_command(T(type=T.REACHED_END_OF_TOPIC,
                            reachedEndOfTopic=pb.CommandReachedEndOfTopic(consumer_id=1)))
    conn.send_command(commands.active_consumer_change(1, True))  # accepted kinds go through


def test_auth_challenge_needs_the_client_feature() -> None:
    conn = connected()
    conn.send_auth_challenge("token", b"PulsarAuthRefresh")
    assert replies(conn)[0].authChallenge.challenge.auth_data == b"PulsarAuthRefresh"
    old = ServerConnection(now_ms=0)
    old.receive_data(encode_command(T(type=T.CONNECT, connect=pb.CommandConnect(client_version="x",
                                                                                 protocol_version=20))), 0)
    with pytest.raises(ProtocolViolationError):
        old.send_auth_challenge("token", b"x")


def test_outbound_queue_is_bounded() -> None:
    conn = connected()
    entry = b"\x00" * (1024 * 1024)
    with pytest.raises(LimitExceededError):
        for i in range(100):
            conn.send_message(1, 1, i, entry, partition=None)
    assert conn.outbound_bytes <= 4 * (5 * 1024 * 1024 + 10 * 1024)


def test_transition_table_shape() -> None:
    # every state can be closed; nothing leaves CLOSED; only CONNECTED carries traffic
    for state in State:
        assert _TRANSITIONS[(state, Trigger.CLOSE)] is State.CLOSED
    assert {target for (source, _t), target in _TRANSITIONS.items() if source is State.CLOSED} == {State.CLOSED}
    carriers = {source for (source, trigger) in _TRANSITIONS if trigger in (Trigger.RECEIVE_COMMAND,
                                                                            Trigger.SEND_COMMAND)}
    assert carriers == {State.CONNECTED}
