"""TLS for the broker's listeners: one server ``ssl.SSLContext`` from the files ``BrokerConfig``
names, shared by the binary TLS listener (``pulsar+ssl://``, Pulsar's ``brokerServicePortTls``) and
HTTPS (``webServicePortTls``), reloaded when the files change.

* Certificate chain and key: ``tls_certificate_file_path`` / ``tls_key_file_path`` (PEM).
* Trusted CAs for client certificates: ``tls_trust_certs_file_path``. With
  ``tls_require_trusted_client_cert`` a client without a certificate signed by them fails the
  handshake (mTLS); otherwise a certificate is asked for but optional, and when given and
  verified its CN is the role of the ``tls`` authentication provider.
* Reload: ``TlsFiles.reload_if_changed()`` (the runtime calls it every
  ``tls_cert_refresh_check_interval_s``) loads a changed certificate/key into the same context,
  so new handshakes use it and established connections keep theirs. A pair that fails to load
  (half-written, key not matching) is logged and the previous one stays. New CAs are added to the
  trust store; a CA removed from the file stays trusted until restart (OpenSSL cannot drop one).
* A handshake that does not finish within ``TLS_HANDSHAKE_TIMEOUT_S`` is aborted by the event
  loop (``ssl_handshake_timeout``); a failed handshake costs only that connection.
"""

from __future__ import annotations

import logging
import os
import ssl
from typing import Any

from magnetar.base.errors import InvalidArgumentError

log = logging.getLogger(__name__)


def peer_cn(ssl_object: Any) -> str | None:
    """The commonName of a verified client certificate, or None."""
    if ssl_object is None:
        return None
    try:
        cert = ssl_object.getpeercert()
    except (ValueError, ssl.SSLError):
        return None
    if not cert:
        return None
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName" and isinstance(value, str) and value:
                return value
    return None


def _stamp(path: str) -> tuple[int, int] | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return (status.st_mtime_ns, status.st_size)


class TlsFiles:
    """The server context and the files behind it."""

    def __init__(self, certificate_path: str, key_path: str, trust_path: str | None = None, *,
                 require_client_cert: bool = False) -> None:
        if require_client_cert and not trust_path:
            raise InvalidArgumentError("requiring client certificates needs a trusted CA file")
        self.certificate_path = certificate_path
        self.key_path = key_path
        self.trust_path = trust_path
        self.require_client_cert = require_client_cert
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.context = context
        self._load_pair()
        if trust_path:
            self._load_trust()
            context.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
        else:
            context.verify_mode = ssl.CERT_NONE
        self._stamps = self._current_stamps()

    def _current_stamps(self) -> dict[str, tuple[int, int] | None]:
        paths = [self.certificate_path, self.key_path] + ([self.trust_path] if self.trust_path else [])
        return {path: _stamp(path) for path in paths}

    def _load_pair(self) -> None:
        try:
            self.context.load_cert_chain(self.certificate_path, self.key_path)
        except FileNotFoundError as error:
            raise InvalidArgumentError(f"TLS certificate or key file missing: {error.filename}") from None
        except (ssl.SSLError, OSError) as error:
            raise InvalidArgumentError(
                f"TLS certificate {self.certificate_path!r} and key {self.key_path!r} do not load as a pair: "
                f"{error}") from None

    def _load_trust(self) -> None:
        assert self.trust_path is not None
        try:
            self.context.load_verify_locations(cafile=self.trust_path)
        except FileNotFoundError:
            raise InvalidArgumentError(f"TLS trusted CA file missing: {self.trust_path!r}") from None
        except (ssl.SSLError, OSError) as error:
            raise InvalidArgumentError(f"TLS trusted CA file {self.trust_path!r} does not load: {error}") from None

    def reload_if_changed(self) -> bool:
        """Load changed files into the context; True when something new took effect."""
        now = self._current_stamps()
        changed = [path for path, stamp in now.items() if stamp != self._stamps.get(path)]
        if not changed:
            return False
        self._stamps = now
        try:
            if self.certificate_path in changed or self.key_path in changed:
                self._load_pair()
            if self.trust_path in changed:
                self._load_trust()
        except InvalidArgumentError as error:
            log.warning("TLS files changed but could not be loaded (keeping the previous ones): %s", error)
            return False
        log.info("reloaded TLS files %s", changed)
        return True


def client_context(trust_path: str, certificate_path: str | None = None,
                   key_path: str | None = None) -> ssl.SSLContext:
    """A client context trusting ``trust_path`` (host names verified), presenting a certificate
    when given one (a broker or AutoRecovery talking to TLS bookies)."""
    try:
        context = ssl.create_default_context(cafile=trust_path)
        if certificate_path is not None and key_path is not None:
            context.load_cert_chain(certificate_path, key_path)
    except (ssl.SSLError, OSError) as error:
        raise InvalidArgumentError(f"TLS client files {trust_path!r}, {certificate_path!r}: {error}") from None
    return context


def bookie_client_network(trust_path: str | None, certificate_path: str | None = None,
                          key_path: str | None = None) -> Any:
    """The network a ledger client reaches the bookies over: TLS when a CA is given."""
    from magnetar.runtime.network import TcpNetwork

    if trust_path is None:
        return TcpNetwork()
    return TcpNetwork(client_ssl_context=client_context(trust_path, certificate_path, key_path))


def tls_files_from_config(config: Any) -> TlsFiles | None:
    """``TlsFiles`` for a ``BrokerConfig`` with ``tls_enabled``, else None."""
    if not config.tls_enabled:
        return None
    return TlsFiles(config.tls_certificate_file_path, config.tls_key_file_path, config.tls_trust_certs_file_path,
                    require_client_cert=config.tls_require_trusted_client_cert)
