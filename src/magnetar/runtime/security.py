"""The runtime half of authentication: reads the key and htpasswd files ``BrokerConfig`` names and
builds the broker's ``security.Authenticator``; ``CredentialFiles`` reloads them when they change.

The broker and ``magnetar.security`` never open files; this module does, once at start and then
whenever ``CredentialFiles.reload_if_changed`` sees a file's modification time or size move (the
broker's HTTP/binary TLS reload is ``runtime.tls``). A file that fails to parse on reload keeps the
previous material and logs why: a half-written file must not lock every client out.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
from typing import TYPE_CHECKING

from magnetar.base.clock import Clock
from magnetar.base.errors import InvalidArgumentError
from magnetar.broker.config import BrokerConfig
from magnetar.security import Authenticator
from magnetar.security.keys import parse_key_reference

if TYPE_CHECKING:
    from magnetar.security.htpasswd import Htpasswd
    from magnetar.security.tokens import TokenVerifier

log = logging.getLogger(__name__)


def read_key(reference: str) -> bytes:
    """The bytes a Pulsar key reference names (``file:///p``, ``data:;base64,...``, a bare path)."""
    parsed = parse_key_reference(reference)
    if parsed.data is not None:
        return parsed.data
    assert parsed.path is not None
    try:
        with open(parsed.path, "rb") as handle:
            return handle.read()
    except OSError as error:
        raise InvalidArgumentError(f"cannot read key {parsed.path!r}: {error.strerror}") from None


def read_htpasswd(reference: str) -> Htpasswd:
    """The htpasswd named by ``basic_auth_conf_path``: a file path, ``data:;base64,...``, or (as
    Pulsar's ``basicAuthConf`` also allows) the file's content in base64."""
    from magnetar.security.htpasswd import Htpasswd  # bcrypt: imported when basic auth is on

    text = _htpasswd_text(reference)
    htpasswd = Htpasswd(text)
    for user in htpasswd.unsupported_users():
        log.warning("htpasswd %s: user %r has a hash scheme Magnetar does not support; they cannot log in",
                    reference[:64], user)
    return htpasswd


def _htpasswd_text(reference: str) -> str:
    if reference.startswith("data:") or reference.startswith("file:"):
        raw = read_key(reference)
    elif os.path.exists(reference):
        try:
            with open(reference, "rb") as handle:
                raw = handle.read()
        except OSError as error:
            raise InvalidArgumentError(f"cannot read htpasswd file {reference!r}: {error.strerror}") from None
    else:
        try:
            raw = base64.b64decode(reference, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidArgumentError(f"htpasswd file {reference!r} does not exist (nor is it base64 content)") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidArgumentError("the htpasswd content is not UTF-8") from None


def token_verifier(config: BrokerConfig, clock: Clock) -> TokenVerifier:
    from magnetar.security.keys import load_public_key  # pyjwt, cryptography: when tokens are on
    from magnetar.security.tokens import TokenVerifier

    secret = read_key(config.token_secret_key) if config.token_secret_key else None
    public = load_public_key(read_key(config.token_public_key)) if config.token_public_key else None
    return TokenVerifier(clock=clock, secret_key=secret, public_key=public, auth_claim=config.token_auth_claim,
                         audience_claim=config.token_audience_claim, audience=config.token_audience,
                         clock_skew_s=config.token_allowed_clock_skew_s)


def _stamp(path: str) -> tuple[int, int] | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return (status.st_mtime_ns, status.st_size)


class CredentialFiles:
    """The files behind an ``Authenticator``; ``reload_if_changed()`` swaps in new material."""

    def __init__(self, config: BrokerConfig, clock: Clock) -> None:
        self.config = config
        self.clock = clock
        self.authenticator: Authenticator | None = None
        self._stamps: dict[str, tuple[int, int] | None] = {}
        if not config.authentication_enabled:
            return
        providers = config.authentication_providers
        tokens = token_verifier(config, clock) if "token" in providers else None
        htpasswd = None
        if "basic" in providers:
            assert config.basic_auth_conf_path is not None  # BrokerConfig checks it
            htpasswd = read_htpasswd(config.basic_auth_conf_path)
        self.authenticator = Authenticator(providers, anonymous_role=config.anonymous_user_role,
                                           tokens=tokens, htpasswd=htpasswd)
        for path in self._watched():
            self._stamps[path] = _stamp(path)

    def _watched(self) -> list[str]:
        paths = []
        basic = self.config.basic_auth_conf_path
        if basic and "basic" in self.config.authentication_providers and os.path.exists(basic):
            paths.append(basic)
        if "token" in self.config.authentication_providers:
            for reference in (self.config.token_secret_key, self.config.token_public_key):
                if reference:
                    path = parse_key_reference(reference).path
                    if path is not None:
                        paths.append(path)
        return paths

    def reload_if_changed(self) -> bool:
        """Re-read any changed file; True when the authenticator got new material."""
        if self.authenticator is None:
            return False
        changed = [p for p in self._watched() if _stamp(p) != self._stamps.get(p)]
        if not changed:
            return False
        for path in changed:
            self._stamps[path] = _stamp(path)
        try:
            if self.config.basic_auth_conf_path in changed:
                self.authenticator.set_htpasswd(read_htpasswd(self.config.basic_auth_conf_path or ""))
            if any(p != self.config.basic_auth_conf_path for p in changed):
                self.authenticator.set_tokens(token_verifier(self.config, self.clock))
        except InvalidArgumentError as error:
            log.warning("credential files changed but could not be loaded (keeping the old ones): %s", error)
            return False
        log.info("reloaded credential files %s", changed)
        return True
