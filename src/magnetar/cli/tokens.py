"""``magnetar tokens``: keys and JWTs in the shape of Pulsar's ``pulsar tokens`` tool.

* ``create-secret-key [--output F] [--base64]``: 32 random bytes for HS256 (raw, or base64 text).
* ``create-key-pair [-a RS256|ES256] --output-private-key F --output-public-key F``: DER keys
  (PKCS#8 private, X.509 public), as Pulsar writes them.
* ``create --subject ROLE (--secret-key REF | --private-key REF) [--expiry-time 1h]``: a token;
  REF is ``file:///path`` or ``data:;base64,...``; expiry ``30s``, ``10m``, ``1h``, ``2d``, ``1w``, ``1y``.
* ``show TOKEN``: header and claims, unverified. ``validate TOKEN (--secret-key|--public-key) REF``:
  checks signature and expiry now, prints the role, exits 1 when invalid.
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import sys

import typer

from magnetar.base.errors import InvalidArgumentError

SECRET_KEY_BYTES = 32  # 256 bits, HS256's key size
_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}

tokens_app = typer.Typer(help="Create and check authentication tokens (like `pulsar tokens`).", no_args_is_help=True)


def parse_duration_s(text: str) -> int:
    match = re.fullmatch(r"\s*(\d+)\s*([smhdwy]?)\s*", text)
    if match is None:
        raise InvalidArgumentError(f"expiry must look like 30s, 10m, 1h, 2d, 1w or 1y, got {text!r}")
    return int(match.group(1)) * _UNITS_S[match.group(2) or "s"]


def _write_private(path: str, data: bytes) -> None:
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as handle:
        handle.write(data)


def _fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


@tokens_app.command("create-secret-key")
def create_secret_key(
    output: str = typer.Option(None, "--output", "-o", help="file to write (default: stdout)"),
    base64_text: bool = typer.Option(False, "--base64", "-b", help="write the key as base64 text"),
) -> None:
    """A new HS256 secret key."""
    key = secrets.token_bytes(SECRET_KEY_BYTES)
    data = base64.b64encode(key) if base64_text else key
    if output is None:
        sys.stdout.buffer.write(data + (b"\n" if base64_text else b""))
        sys.stdout.flush()
    else:
        _write_private(output, data)


@tokens_app.command("create-key-pair")
def create_key_pair(
    output_private_key: str = typer.Option(..., "--output-private-key"),
    output_public_key: str = typer.Option(..., "--output-public-key"),
    algorithm: str = typer.Option("RS256", "--signature-algorithm", "-a", help="RS256 or ES256"),
) -> None:
    """A new key pair: the broker gets the public key, whoever issues tokens the private one."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    if algorithm == "RS256":
        private: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey = rsa.generate_private_key(65537, 2048)
    elif algorithm == "ES256":
        private = ec.generate_private_key(ec.SECP256R1())
    else:
        raise _fail(f"unsupported algorithm {algorithm!r}: use RS256 or ES256")
    _write_private(output_private_key, private.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    with open(output_public_key, "wb") as handle:
        handle.write(private.public_key().public_bytes(serialization.Encoding.DER,
                                                       serialization.PublicFormat.SubjectPublicKeyInfo))


@tokens_app.command("create")
def create(
    subject: str = typer.Option(..., "--subject", "-s", help="the role the token gives"),
    secret_key: str = typer.Option(None, "--secret-key", "-sk", help="file:///path or data:;base64,..."),
    private_key: str = typer.Option(None, "--private-key", "-pk", help="file:///path or data:;base64,..."),
    expiry_time: str = typer.Option(None, "--expiry-time", "-e", help="e.g. 1h, 2d, 1y (default: never)"),
    algorithm: str = typer.Option(None, "--signature-algorithm", "-a", help="HS256/384/512, RS256, ES256..."),
    header: list[str] = typer.Option(None, "--headers", "-h", help="extra header key=value (repeatable)"),
) -> None:
    """Print a signed token for ``--subject``."""
    import time

    from magnetar.runtime.security import read_key
    from magnetar.security import create_token
    from magnetar.security.keys import load_private_key

    if (secret_key is None) == (private_key is None):
        raise _fail("give exactly one of --secret-key or --private-key")
    try:
        expires = int(time.time()) + parse_duration_s(expiry_time) if expiry_time else None
        headers = dict(item.split("=", 1) for item in header or [] if "=" in item)
        if secret_key is not None:
            token = create_token(subject, secret_key=read_key(secret_key), expires_at_s=expires,
                                 algorithm=algorithm, headers=headers or None)
        else:
            token = create_token(subject, private_key=load_private_key(read_key(private_key)), expires_at_s=expires,
                                 algorithm=algorithm, headers=headers or None)
    except InvalidArgumentError as error:
        raise _fail(str(error)) from None
    typer.echo(token)


def _token_text(token: str | None, token_file: str | None) -> str:
    if token_file is not None:
        with open(token_file, encoding="ascii") as handle:
            return handle.read().strip()
    if token is None or token == "-":
        return sys.stdin.read().strip()
    return token.strip()


@tokens_app.command("show")
def show(token: str = typer.Argument(None, help="the token (default: stdin)"),
         token_file: str = typer.Option(None, "--token-file", "-f")) -> None:
    """Print a token's header and claims, without checking its signature."""
    from magnetar.security import decode_unverified

    try:
        header, claims = decode_unverified(_token_text(token, token_file))
    except InvalidArgumentError as error:
        raise _fail(str(error), 1) from None
    typer.echo(json.dumps({"header": header, "claims": claims}, indent=2, sort_keys=True))


@tokens_app.command("validate")
def validate(
    token: str = typer.Argument(None, help="the token (default: stdin)"),
    token_file: str = typer.Option(None, "--token-file", "-f"),
    secret_key: str = typer.Option(None, "--secret-key", "-sk"),
    public_key: str = typer.Option(None, "--public-key", "-pk"),
    auth_claim: str = typer.Option("sub", "--auth-claim", help="claim naming the role (tokenAuthClaim)"),
) -> None:
    """Check a token's signature and expiry now; print its role."""
    from magnetar.runtime.clock import SystemClock
    from magnetar.runtime.security import read_key
    from magnetar.security import AuthenticationFailedError, TokenVerifier
    from magnetar.security.keys import load_public_key

    if (secret_key is None) == (public_key is None):
        raise _fail("give exactly one of --secret-key or --public-key")
    try:
        verifier = TokenVerifier(clock=SystemClock(), auth_claim=auth_claim,
                                 secret_key=read_key(secret_key) if secret_key else None,
                                 public_key=load_public_key(read_key(public_key)) if public_key else None)
        verified = verifier.verify(_token_text(token, token_file))
    except InvalidArgumentError as error:
        raise _fail(str(error)) from None
    except AuthenticationFailedError as error:
        raise _fail(f"invalid token: {error.reason}", 1) from None
    typer.echo(json.dumps({"role": verified.role, "expires_at_ms": verified.expires_at_ms}))


def register(app: typer.Typer) -> None:
    app.add_typer(tokens_app, name="tokens")
