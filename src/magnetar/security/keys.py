"""Pulsar's key references: ``file:///path`` (the file's raw bytes) or ``data:;base64,<b64>``.

``parse_key_reference`` only parses; the runtime reads the file a ``KeyReference`` names. Public
keys may be DER (what ``pulsar tokens create-key-pair`` writes) or PEM.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse

from magnetar.base.errors import InvalidArgumentError


@dataclass(frozen=True, slots=True)
class KeyReference:
    """Either ``path`` (read the file) or ``data`` (the key itself)."""

    path: str | None = None
    data: bytes | None = None


def parse_key_reference(text: str) -> KeyReference:
    """``file:///p`` / ``file:p`` → path; ``data:[mime];base64,X`` → bytes; a bare path → path."""
    if text.startswith("data:"):
        header, sep, payload = text[len("data:"):].partition(",")
        if not sep:
            raise InvalidArgumentError("a data: key reference needs a ',' before the key")
        if header.endswith(";base64"):
            try:
                return KeyReference(data=base64.b64decode(payload, validate=True))
            except (binascii.Error, ValueError):
                raise InvalidArgumentError("the data: key reference is not valid base64") from None
        return KeyReference(data=unquote(payload).encode())
    if text.startswith("file:"):
        parsed = urlparse(text)
        path = unquote(parsed.path) if parsed.netloc in ("", "localhost") else None
        if not path:
            raise InvalidArgumentError(f"bad file: key reference {text!r}")
        return KeyReference(path=path)
    if not text:
        raise InvalidArgumentError("empty key reference")
    return KeyReference(path=text)


def load_public_key(data: bytes) -> Any:
    """An RSA or EC public key from DER or PEM bytes (an X.509 certificate's key is not accepted)."""
    from cryptography.hazmat.primitives import serialization  # heavy: only when keys are used
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    try:
        if data.lstrip().startswith(b"-----BEGIN"):
            key = serialization.load_pem_public_key(data)
        else:
            key = serialization.load_der_public_key(data)
    except (ValueError, TypeError) as error:
        raise InvalidArgumentError(f"not a DER or PEM public key: {error}") from None
    if not isinstance(key, rsa.RSAPublicKey | ec.EllipticCurvePublicKey):
        raise InvalidArgumentError(f"unsupported public key type {type(key).__name__}: use RSA or EC")
    return key


def load_private_key(data: bytes) -> Any:
    """An RSA or EC private key from DER (PKCS#8) or PEM bytes, unencrypted."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    try:
        if data.lstrip().startswith(b"-----BEGIN"):
            key = serialization.load_pem_private_key(data, password=None)
        else:
            key = serialization.load_der_private_key(data, password=None)
    except (ValueError, TypeError) as error:
        raise InvalidArgumentError(f"not a DER or PEM private key: {error}") from None
    if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
        raise InvalidArgumentError(f"unsupported private key type {type(key).__name__}: use RSA or EC")
    return key


def algorithms_for_public_key(key: Any) -> tuple[str, ...]:
    """JWT algorithms a public key may verify: RSA → RS*/PS*, EC → the curve's ES*."""
    from cryptography.hazmat.primitives.asymmetric import rsa

    if isinstance(key, rsa.RSAPublicKey):
        return ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")
    curve = key.curve.name
    return {"secp256r1": ("ES256",), "secp384r1": ("ES384",), "secp521r1": ("ES512",)}.get(curve, ())


def algorithm_for_private_key(key: Any) -> str:
    """The JWT algorithm a private key signs with (RS256 for RSA, ES256/384/512 by curve)."""
    from cryptography.hazmat.primitives.asymmetric import rsa

    if isinstance(key, rsa.RSAPrivateKey):
        return "RS256"
    algorithms = algorithms_for_public_key(key.public_key())
    if not algorithms:
        raise InvalidArgumentError(f"unsupported EC curve {key.curve.name}")
    return algorithms[0]
