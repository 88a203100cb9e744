"""The provider chain: credentials in, a ``Principal`` (role) out, or ``AuthenticationFailedError``.

Binary protocol (``authenticate``), as Pulsar's broker decides on CONNECT and AUTH_RESPONSE:
the provider named by ``auth_method_name`` checks ``auth_data`` ("token": the JWT; "basic":
``user:password``; "tls": nothing, the role is the client certificate's CN). A method no
configured provider serves ("none", absent, unknown) gets ``anonymous_role`` when one is
configured, else fails. A configured provider that rejects the credential fails: a bad credential
never falls back to the anonymous role.

HTTP (``authenticate_http``): ``Authorization: Bearer <jwt>`` goes to the token provider,
``Basic <base64 user:password>`` to the basic provider. Without the header, a TLS client
certificate (when the "tls" provider is on), else the anonymous role, else failure. A header that
is present but malformed or rejected fails (401), as on the binary protocol.

Every input is bounded (``AUTH_DATA_BYTES_MAX``) and every failure is ``AuthenticationFailedError``;
nothing a client sends raises anything else.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import TYPE_CHECKING

from magnetar.base.errors import InvalidArgumentError
from magnetar.base.limits import AUTH_DATA_BYTES_MAX
from magnetar.security.errors import AuthenticationFailedError

if TYPE_CHECKING:  # the providers' material is built by the runtime; named here for types only
    from magnetar.security.htpasswd import Htpasswd
    from magnetar.security.tokens import TokenVerifier

PROVIDERS = ("token", "basic", "tls")
ANONYMOUS = "anonymous"  # Principal.method of an anonymous client


@dataclass(frozen=True, slots=True)
class Principal:
    role: str
    method: str  # the provider that vouched for the role: "token", "basic", "tls" or "anonymous"
    expires_at_ms: int | None = None  # wall-clock ms after which the credential is no longer valid


class Authenticator:
    """Holds the providers' current material; the runtime swaps it on file changes (``set_*``)."""

    def __init__(self, providers: tuple[str, ...], *, anonymous_role: str | None = None,
                 tokens: TokenVerifier | None = None, htpasswd: Htpasswd | None = None) -> None:
        unknown = [p for p in providers if p not in PROVIDERS]
        if unknown:
            raise InvalidArgumentError(f"unknown authentication providers {unknown}; known: {list(PROVIDERS)}")
        if "token" in providers and tokens is None:
            raise InvalidArgumentError("the token provider needs a token verifier")
        if "basic" in providers and htpasswd is None:
            raise InvalidArgumentError("the basic provider needs an htpasswd file")
        self.providers = tuple(providers)
        self.anonymous_role = anonymous_role
        self._tokens = tokens
        self._htpasswd = htpasswd

    def set_htpasswd(self, htpasswd: Htpasswd) -> None:
        self._htpasswd = htpasswd

    def set_tokens(self, tokens: TokenVerifier) -> None:
        self._tokens = tokens

    # --- binary protocol --------------------------------------------------------------------

    def authenticate(self, method_name: str | None, auth_data: bytes | None,
                     tls_peer_cn: str | None = None) -> Principal:
        """The role of a CONNECT (or AUTH_RESPONSE) carrying ``method_name`` and ``auth_data``."""
        data = auth_data or b""
        if len(data) > AUTH_DATA_BYTES_MAX:
            raise AuthenticationFailedError(f"auth data larger than {AUTH_DATA_BYTES_MAX} bytes")
        method = method_name or "none"
        if method not in self.providers:
            return self._anonymous(f"no authentication provider for method {method[:64]!r}")
        if method == "token":
            return self._token(data)
        if method == "basic":
            user, password = _split_basic(_text(data))
            return self._basic(user, password)
        return self._tls(tls_peer_cn)

    # --- HTTP -------------------------------------------------------------------------------

    def authenticate_http(self, authorization: str | None, tls_peer_cn: str | None = None) -> Principal:
        """The role of an HTTP request with this ``Authorization`` header (None when absent)."""
        if authorization is None:
            if tls_peer_cn is not None and "tls" in self.providers:
                return self._tls(tls_peer_cn)
            return self._anonymous("authentication required")
        if len(authorization) > AUTH_DATA_BYTES_MAX:
            raise AuthenticationFailedError(f"Authorization header larger than {AUTH_DATA_BYTES_MAX} bytes")
        scheme, _, credential = authorization.strip().partition(" ")
        scheme = scheme.lower()
        if scheme == "bearer" and "token" in self.providers:
            return self._token(credential.strip().encode("ascii", "replace"))
        if scheme == "basic" and "basic" in self.providers:
            try:
                decoded = base64.b64decode(credential.strip(), validate=True)
            except (binascii.Error, ValueError):
                raise AuthenticationFailedError("Basic credentials are not valid base64") from None
            user, password = _split_basic(_text(decoded))
            return self._basic(user, password)
        raise AuthenticationFailedError(f"unsupported Authorization scheme {scheme[:32]!r}")

    # --- providers --------------------------------------------------------------------------

    def _anonymous(self, reason: str) -> Principal:
        if self.anonymous_role is None:
            raise AuthenticationFailedError(reason)
        return Principal(self.anonymous_role, ANONYMOUS)

    def _token(self, data: bytes) -> Principal:
        assert self._tokens is not None  # checked in __init__
        verified = self._tokens.verify(data)
        return Principal(verified.role, "token", verified.expires_at_ms)

    def _basic(self, user: str, password: str) -> Principal:
        assert self._htpasswd is not None  # checked in __init__
        if not self._htpasswd.verify(user, password):
            raise AuthenticationFailedError("unknown user or wrong password")
        return Principal(user, "basic")

    def _tls(self, tls_peer_cn: str | None) -> Principal:
        if not tls_peer_cn:
            raise AuthenticationFailedError("the tls method needs a TLS connection with a client certificate")
        return Principal(tls_peer_cn, "tls")


def _text(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise AuthenticationFailedError("credentials are not UTF-8") from None


def _split_basic(text: str) -> tuple[str, str]:
    user, sep, password = text.partition(":")
    if not sep or not user:
        raise AuthenticationFailedError("basic credentials must be user:password")
    return user, password
