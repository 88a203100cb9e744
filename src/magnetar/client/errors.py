"""Typed errors of the client, and how broker error codes map onto them.

The classification follows the official client (shared/reference/pulsar_protocol.md, ServerError):
a *fatal* code fails a creation at once; every other code (and a broken connection) is
*retryable*: the client backs off and tries again until the operation deadline.
"""

from __future__ import annotations

from magnetar.base.errors import ClosedError, MagnetarError, NotFoundError
from magnetar.protocol.pulsar.generated import pulsar_api_pb2 as pb

FATAL_CODES = frozenset({
    pb.AuthenticationError, pb.AuthorizationError, pb.ConsumerBusy, pb.ProducerBlockedQuotaExceededError,
    pb.ProducerBlockedQuotaExceededException, pb.ChecksumError, pb.TopicNotFound, pb.TooManyRequests,
    pb.TopicTerminatedError, pb.ProducerBusy, pb.IncompatibleSchema, pb.ConsumerAssignError,
    pb.NotAllowedError, pb.ProducerFenced,
})


class ClientError(MagnetarError):
    """Base of the client's operating errors."""


class BrokerError(ClientError):
    """The broker answered a request with an error code (``pb.ServerError``)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code_name(code)}: {message}")
        self.code = code
        self.broker_message = message

    @property
    def retryable(self) -> bool:
        return self.code not in FATAL_CODES


class TopicNotFoundError(BrokerError, NotFoundError):
    """The topic does not exist (and the broker does not create it)."""

    def __str__(self) -> str:
        return f"{code_name(self.code)}: {self.broker_message}"


class ConnectError(ClientError):
    """No connection to the broker could be opened or the handshake failed (retryable)."""


class ConnectionLostError(ClientError, ClosedError):
    """The connection broke while a request was outstanding (retryable)."""


class TopicLookupError(ClientError):
    """A lookup failed without a broker error code (empty URL, too many redirects)."""


def code_name(code: int) -> str:
    try:
        return str(pb.ServerError.Name(code))
    except ValueError:
        return f"ServerError({code})"


def broker_error(code: int, message: str) -> BrokerError:
    """The typed error for a broker error code."""
    if code == pb.TopicNotFound:
        return TopicNotFoundError(code, message)
    return BrokerError(code, message)


def is_retryable(error: BaseException) -> bool:
    """Whether an operation that failed with ``error`` is worth retrying after a backoff."""
    if isinstance(error, BrokerError):
        return error.retryable
    return isinstance(error, ConnectError | ConnectionLostError)
