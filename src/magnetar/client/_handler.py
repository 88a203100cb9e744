"""The lifecycle a producer and a consumer share (Pulsar's HandlerBase states).

IDLE -> CONNECTING -> READY; READY -> CONNECTING when the connection is lost or the broker
closes the handler; CLOSING -> CLOSED on a clean close; FAILED on a non-retryable error.
Each handler extends ``HANDLER_TRANSITIONS`` with what only it allows.
"""

from __future__ import annotations

import enum


class HandlerState(enum.Enum):
    IDLE = "idle"
    CONNECTING = "connecting"
    READY = "ready"
    CLOSING = "closing"
    CLOSED = "closed"
    FAILED = "failed"


HANDLER_TRANSITIONS: dict[HandlerState, frozenset[HandlerState]] = {
    HandlerState.IDLE: frozenset({HandlerState.CONNECTING, HandlerState.CLOSED, HandlerState.FAILED}),
    HandlerState.CONNECTING: frozenset(
        {HandlerState.READY, HandlerState.CLOSING, HandlerState.CLOSED, HandlerState.FAILED}
    ),
    HandlerState.READY: frozenset({HandlerState.CONNECTING, HandlerState.CLOSING, HandlerState.CLOSED, HandlerState.FAILED}),
    HandlerState.CLOSING: frozenset({HandlerState.CLOSED, HandlerState.FAILED}),
    HandlerState.FAILED: frozenset({HandlerState.CLOSED}),
    HandlerState.CLOSED: frozenset(),
}
