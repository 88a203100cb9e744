"""Consumer requests a ``Session`` answers that are not on the message path (SEEK,
GET_LAST_MESSAGE_ID): handlers in ``broker.session``'s table, each ``(session, body)``, kept out of
``session.py`` (its size bound) and out of the compiled hot path (they run once per request)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.base.limits import BROKER_SEEK_SCAN_ENTRIES_COUNT_MAX
from magnetar.base.types import EARLIEST
from magnetar.broker.errors import BrokerError
from magnetar.broker.ids import before, is_earliest, is_latest, to_position
from magnetar.protocol.pulsar import commands, pb

if TYPE_CHECKING:
    from magnetar.broker.session import Session


async def seek(session: Session, body: pb.CommandSeek) -> None:
    """SEEK to a message id or a publish time: the subscription's cursor reset there; its
    consumers are detached (CLOSE_CONSUMER before the SUCCESS, as Java does)."""
    from magnetar.broker.session import Session

    found = session._consumer(body.consumer_id)
    if found is None:
        raise BrokerError(pb.ConsumerNotFound, f"consumer {body.consumer_id} not found")
    subscription = found[1]
    topic_log = subscription.log
    if body.HasField("message_id"):
        target = body.message_id
        if is_earliest(target):
            mark_delete = EARLIEST
        elif is_latest(target):
            mark_delete = topic_log.last_position
        else:
            mark_delete = before(to_position(target))
    elif body.HasField("message_publish_time"):
        topic = session.service.topics.get(topic_log.name)
        position = None if topic is None else await topic.find_by_publish_time(
            body.message_publish_time, BROKER_SEEK_SCAN_ENTRIES_COUNT_MAX)
        mark_delete = topic_log.last_position if position is None else before(position)
    else:
        raise BrokerError(pb.UnknownError, "SEEK needs a message id or a publish time")
    detached = await subscription.reset(mark_delete)
    for consumer in detached:  # CLOSE_CONSUMER went out before the SUCCESS below, as Java does
        channel = consumer.connection_key
        if isinstance(channel, Session):
            channel.consumers.pop(consumer.consumer_id, None)
    session.connection.send_success(body.request_id)


async def get_last_message_id(session: Session, body: pb.CommandGetLastMessageId) -> None:
    """The topic's last message id and the subscription's mark-delete position."""
    found = session._consumer(body.consumer_id)
    if found is None:
        raise BrokerError(pb.ConsumerNotFound, f"consumer {body.consumer_id} not found")
    subscription = found[1]
    topic = session.service.topics.get(subscription.log.name)
    if topic is None:
        raise BrokerError(pb.ServiceNotReady, "topic is being unloaded")
    last = await topic.last_message_id()
    mark_delete = subscription.cursor.mark_delete_position
    session.connection.send_get_last_message_id_response(
        body.request_id, last,
        commands.message_id(mark_delete.ledger_id, mark_delete.entry_id, partition=topic.partition_index),
    )
