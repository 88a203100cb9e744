"""Operating errors of the broker, each carrying the Pulsar ``ServerError`` code sent to the client.

Lower layers' errors are translated to these at the broker boundary (``to_broker_error``), so a
session answers every failed request with a code the official client classifies correctly
(fatal vs. retryable, see the protocol fact sheet, section 2.4 "ServerError").
"""

from __future__ import annotations

from magnetar.base.errors import (
    ClosedError,
    FencedError,
    InvalidArgumentError,
    LimitExceededError,
    MagnetarError,
    NotFoundError,
)
from magnetar.catalog.schema import SchemaRefusedError
from magnetar.protocol.pulsar import pb


class BrokerError(MagnetarError):
    """A request failed; ``code`` is the ``pb.ServerError`` value to report."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def topic_not_found(message: str) -> BrokerError:
    return BrokerError(pb.TopicNotFound, message)


def service_not_ready(message: str) -> BrokerError:
    return BrokerError(pb.ServiceNotReady, message)


def to_broker_error(error: BaseException) -> BrokerError:
    """Translate an error from below into the code the client should see."""
    if isinstance(error, BrokerError):
        return error
    if isinstance(error, SchemaRefusedError):
        return BrokerError(error.code, error.message)
    if isinstance(error, InvalidArgumentError):
        return BrokerError(pb.InvalidTopicName if "topic" in str(error) else pb.UnknownError, str(error))
    if isinstance(error, NotFoundError):
        return BrokerError(pb.TopicNotFound, str(error))
    if isinstance(error, FencedError | ClosedError):
        return BrokerError(pb.ServiceNotReady, f"topic is being unloaded: {error}")
    if isinstance(error, LimitExceededError):
        return BrokerError(pb.TooManyRequests, str(error))
    return BrokerError(pb.PersistenceError, f"{type(error).__name__}: {error}")
