"""The one error of authentication."""

from __future__ import annotations

from magnetar.base.errors import MagnetarError


class AuthenticationFailedError(MagnetarError):
    """Credentials missing, malformed, wrongly signed, expired or unknown.

    ``reason`` is what the client is told (an ERROR's message, an HTTP 401's ``reason``); it never
    echoes the credential itself.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
