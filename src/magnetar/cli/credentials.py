"""Client credentials and TLS options shared by ``magnetar admin``, ``produce``, ``consume`` and
``perf``, in the shapes Pulsar's own tools take.

* ``--token T``: a JWT, or ``file:///path`` / ``data:;base64,...`` naming one (as Pulsar's
  ``AuthenticationToken`` params do).
* ``--auth-plugin P --auth-params X``: P is ``token``/``basic``/``tls`` or Pulsar's class names
  (``org.apache.pulsar.client.impl.auth.AuthenticationToken|AuthenticationBasic|AuthenticationTls``);
  X is ``token:T`` / ``file:///path`` for tokens, ``{"userId":"u","password":"p"}`` or ``u:p`` for
  basic, ``tlsCertFile:C,tlsKeyFile:K`` for TLS.
* ``--tls-trust-cert CA``: the CA that signed the broker's certificate (host names are verified);
  ``--tls-cert C --tls-key K``: a client certificate (mTLS; its CN is the role with ``tls``).

``Credentials`` turns these into what each transport sends: the binary protocol's
``auth_method_name``/``auth_data``, the HTTP ``Authorization`` header, and an SSL context.
"""

from __future__ import annotations

import base64
import json
import ssl
from dataclasses import dataclass

from magnetar.base.errors import InvalidArgumentError

PLUGINS = {
    "token": "token", "org.apache.pulsar.client.impl.auth.AuthenticationToken": "token",
    "basic": "basic", "org.apache.pulsar.client.impl.auth.AuthenticationBasic": "basic",
    "tls": "tls", "org.apache.pulsar.client.impl.auth.AuthenticationTls": "tls",
}


def _read_reference(text: str) -> str:
    from magnetar.runtime.security import read_key

    if text.startswith(("file:", "data:")):
        return read_key(text).decode("ascii", errors="strict").strip()
    return text.strip()


@dataclass(frozen=True)
class Credentials:
    method: str = "none"  # "none", "token", "basic", "tls"
    data: bytes = b""
    tls_trust_cert: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None

    @classmethod
    def from_options(cls, *, token: str | None = None, auth_plugin: str | None = None,
                     auth_params: str | None = None, tls_trust_cert: str | None = None,
                     tls_cert: str | None = None, tls_key: str | None = None) -> Credentials:
        if (tls_cert is None) != (tls_key is None):
            raise InvalidArgumentError("--tls-cert and --tls-key go together")
        method, data = "none", b""
        if token is not None:
            method, data = "token", _read_reference(token).encode()
        elif auth_plugin is not None or auth_params is not None:
            plugin = PLUGINS.get(auth_plugin or "token")
            if plugin is None:
                raise InvalidArgumentError(f"unknown --auth-plugin {auth_plugin!r}; use token, basic or tls")
            method, data, tls_cert, tls_key = _parse_params(plugin, auth_params or "", tls_cert, tls_key)
        if method == "tls" and tls_cert is None:
            raise InvalidArgumentError("tls authentication needs a client certificate (--tls-cert, --tls-key)")
        return cls(method, data, tls_trust_cert, tls_cert, tls_key)

    def authorization_header(self) -> str | None:
        """The HTTP ``Authorization`` value (None for tls and none: the certificate speaks)."""
        if self.method == "token":
            return f"Bearer {self.data.decode()}"
        if self.method == "basic":
            return "Basic " + base64.b64encode(self.data).decode()
        return None

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.tls_trust_cert)
        if self.tls_cert is not None and self.tls_key is not None:
            try:
                context.load_cert_chain(self.tls_cert, self.tls_key)
            except (ssl.SSLError, OSError) as error:
                raise InvalidArgumentError(f"client certificate {self.tls_cert!r} / key {self.tls_key!r}: {error}") from None
        return context


def _parse_params(plugin: str, params: str, tls_cert: str | None,
                  tls_key: str | None) -> tuple[str, bytes, str | None, str | None]:
    if plugin == "token":
        text = params[len("token:"):] if params.startswith("token:") else params
        if not text:
            raise InvalidArgumentError("token --auth-params must be token:<jwt> or file:///path")
        return "token", _read_reference(text).encode(), tls_cert, tls_key
    if plugin == "basic":
        if params.lstrip().startswith("{"):
            try:
                parsed = json.loads(params)
                user, password = str(parsed["userId"]), str(parsed["password"])
            except (ValueError, KeyError, TypeError):
                raise InvalidArgumentError('basic --auth-params must be {"userId": ..., "password": ...}') from None
        else:
            user, sep, password = params.partition(":")
            if not sep:
                raise InvalidArgumentError("basic --auth-params must be user:password or JSON")
        return "basic", f"{user}:{password}".encode(), tls_cert, tls_key
    fields = dict(item.split(":", 1) for item in params.split(",") if ":" in item)
    return "tls", b"", fields.get("tlsCertFile", tls_cert), fields.get("tlsKeyFile", tls_key)
