"""Authentication, pure: who a client is, from the credentials it presents.

What this package owns: verifying JWTs (``tokens``: HS256 with a secret key, RS256/ES256 with a
public key, the role from a configurable claim, audience, expiry against an injected clock with a
clock skew; ``alg: none`` refused), verifying htpasswd passwords (``htpasswd``: apr1, bcrypt,
{SHA}), Pulsar's key references (``keys``: ``file:///path`` and ``data:;base64,...``), and the
provider chain (``authenticator.Authenticator``) that turns a CONNECT's ``auth_method_name`` /
``auth_data``, an HTTP ``Authorization`` header or a TLS client certificate's CN into a role.

What it does not own: reading key or htpasswd files and the TLS handshake (``runtime`` reads the
files, terminates TLS and hands over bytes and the peer's CN), and authorization (what a role may
do). It imports only ``base``; ``broker`` and ``admin`` import it. Every failure is one typed
error, ``AuthenticationFailedError``, whose ``reason`` is safe to send to the client.
"""

from typing import TYPE_CHECKING, Any

from magnetar.security.authenticator import Authenticator, Principal
from magnetar.security.errors import AuthenticationFailedError

if TYPE_CHECKING:
    from magnetar.security.htpasswd import Htpasswd
    from magnetar.security.keys import KeyReference, parse_key_reference
    from magnetar.security.tokens import TokenVerifier, create_token, decode_unverified

# pyjwt, cryptography and bcrypt take a tenth of a second to import: loaded when first named, so
# importing the broker (every process, every test) does not pay for them when security is off.
_LAZY = {
    "Htpasswd": "magnetar.security.htpasswd",
    "KeyReference": "magnetar.security.keys",
    "parse_key_reference": "magnetar.security.keys",
    "TokenVerifier": "magnetar.security.tokens",
    "create_token": "magnetar.security.tokens",
    "decode_unverified": "magnetar.security.tokens",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'magnetar.security' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "AuthenticationFailedError",
    "Authenticator",
    "Htpasswd",
    "KeyReference",
    "Principal",
    "TokenVerifier",
    "create_token",
    "decode_unverified",
    "parse_key_reference",
]
