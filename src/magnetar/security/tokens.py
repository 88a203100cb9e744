"""JSON Web Tokens, as Pulsar's token provider checks them.

``TokenVerifier.verify(token)`` returns the role (the ``auth_claim`` claim) and the expiry, or
raises ``AuthenticationFailedError``. The signature is checked by ``pyjwt`` with only the algorithms
the configured key can verify: HS256/384/512 with the secret key, RS*/PS* or ES* with the public
key; a token whose header names another algorithm (``none`` included) is refused before any
decoding. Time-based claims are checked here, against the injected clock, never by pyjwt (whose
check reads the real clock): ``exp`` and ``nbf`` with ``clock_skew_s`` of tolerance. The audience
is checked here too, because Pulsar lets the claim be named (``tokenAudienceClaim``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import jwt

from magnetar.base.clock import Clock
from magnetar.base.errors import InvalidArgumentError
from magnetar.base.limits import AUTH_DATA_BYTES_MAX
from magnetar.security.errors import AuthenticationFailedError
from magnetar.security.keys import algorithm_for_private_key, algorithms_for_public_key

HMAC_ALGORITHMS = ("HS256", "HS384", "HS512")


@dataclass(frozen=True, slots=True)
class VerifiedToken:
    role: str
    expires_at_ms: int | None  # None: the token never expires


class TokenVerifier:
    def __init__(self, *, clock: Clock, secret_key: bytes | None = None, public_key: Any = None,
                 auth_claim: str = "sub", audience_claim: str = "aud", audience: str | None = None,
                 clock_skew_s: int = 0) -> None:
        if secret_key is None and public_key is None:
            raise InvalidArgumentError("a token verifier needs a secret key or a public key")
        if secret_key is not None and not secret_key:
            raise InvalidArgumentError("the token secret key is empty")
        self._clock = clock
        self._secret_key = secret_key
        self._public_key = public_key
        self._public_algorithms = algorithms_for_public_key(public_key) if public_key is not None else ()
        self.auth_claim = auth_claim
        self.audience_claim = audience_claim
        self.audience = audience
        self.clock_skew_s = clock_skew_s

    def _key_for(self, algorithm: str) -> Any:
        if algorithm in HMAC_ALGORITHMS and self._secret_key is not None:
            return self._secret_key
        if algorithm in self._public_algorithms:
            return self._public_key
        raise AuthenticationFailedError(f"token algorithm {algorithm!r} is not accepted by this broker")

    def verify(self, token: str | bytes) -> VerifiedToken:
        if isinstance(token, bytes):
            if len(token) > AUTH_DATA_BYTES_MAX:
                raise AuthenticationFailedError(f"token larger than {AUTH_DATA_BYTES_MAX} bytes")
            try:
                token = token.decode("ascii")
            except UnicodeDecodeError:
                raise AuthenticationFailedError("token is not ASCII") from None
        if len(token) > AUTH_DATA_BYTES_MAX:
            raise AuthenticationFailedError(f"token larger than {AUTH_DATA_BYTES_MAX} bytes")
        token = token.strip()
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise AuthenticationFailedError("malformed token") from None
        algorithm = header.get("alg")
        if not isinstance(algorithm, str) or algorithm.lower() == "none":
            raise AuthenticationFailedError("unsigned tokens (alg none) are refused")
        key = self._key_for(algorithm)
        try:
            claims = jwt.decode(token, key, algorithms=[algorithm], options={
                "verify_signature": True, "verify_exp": False, "verify_nbf": False, "verify_iat": False,
                "verify_aud": False, "verify_iss": False, "require": [],
            })
        except jwt.InvalidSignatureError:
            raise AuthenticationFailedError("token signature does not verify") from None
        except (jwt.PyJWTError, ValueError, TypeError):
            raise AuthenticationFailedError("malformed token") from None
        return VerifiedToken(self._role(claims), self._check_time(claims))

    def _role(self, claims: dict[str, Any]) -> str:
        role = claims.get(self.auth_claim)
        if not isinstance(role, str) or not role:
            raise AuthenticationFailedError(f"token has no {self.auth_claim!r} claim naming a role")
        if self.audience is not None:
            audience = claims.get(self.audience_claim)
            audiences = [audience] if isinstance(audience, str) else audience if isinstance(audience, list) else []
            if self.audience not in audiences:
                raise AuthenticationFailedError("token is not meant for this audience")
        return role

    def _check_time(self, claims: dict[str, Any]) -> int | None:
        now_s = self._clock.now_ms() / 1000
        for name in ("exp", "nbf"):
            value = claims.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise AuthenticationFailedError(f"token claim {name!r} is not a number")
        not_before = claims.get("nbf")
        if not_before is not None and now_s + self.clock_skew_s < not_before:
            raise AuthenticationFailedError("token is not valid yet")
        expiry = claims.get("exp")
        if expiry is None:
            return None
        if now_s > expiry + self.clock_skew_s:
            raise AuthenticationFailedError("token has expired")
        return int((expiry + self.clock_skew_s) * 1000)


def create_token(subject: str, *, secret_key: bytes | None = None, private_key: Any = None,
                 expires_at_s: int | None = None, claim: str = "sub", algorithm: str | None = None,
                 headers: dict[str, Any] | None = None) -> str:
    """A signed JWT whose ``claim`` names ``subject`` (``magnetar tokens create`` and tests)."""
    if (secret_key is None) == (private_key is None):
        raise InvalidArgumentError("give exactly one of a secret key or a private key")
    payload: dict[str, Any] = {claim: subject}
    if expires_at_s is not None:
        payload["exp"] = int(expires_at_s)
    if secret_key is not None:
        alg = algorithm or "HS256"
        if alg not in HMAC_ALGORITHMS:
            raise InvalidArgumentError(f"a secret key signs with {HMAC_ALGORITHMS}, not {alg}")
        return jwt.encode(payload, secret_key, algorithm=alg, headers=headers)
    return jwt.encode(payload, private_key, algorithm=algorithm or algorithm_for_private_key(private_key),
                      headers=headers)


def decode_unverified(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(header, claims) without any check: ``magnetar tokens show``."""
    try:
        header = jwt.get_unverified_header(token)
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError as error:
        raise InvalidArgumentError(f"not a JWT: {error}") from None
    json.dumps(claims)  # claims are JSON by construction; fail loudly if not
    return header, claims
