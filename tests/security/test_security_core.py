"""magnetar.security: tokens, htpasswd, key references and the provider chain (no I/O)."""

from __future__ import annotations

import base64
import hashlib
import json

import bcrypt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from magnetar.base.errors import InvalidArgumentError
from magnetar.base.limits import AUTH_DATA_BYTES_MAX
from magnetar.security import (
    AuthenticationFailedError,
    Authenticator,
    Htpasswd,
    TokenVerifier,
    create_token,
    parse_key_reference,
)
from magnetar.security.htpasswd import md5_crypt, verify_hash
from magnetar.security.keys import load_public_key
from tests.manual_clock import ManualClock

SECRET = b"0123456789abcdef0123456789abcdef"
NOW_S = 1_700_000_000  # ManualClock's wall clock at its start


def verifier(**kwargs: object) -> TokenVerifier:
    return TokenVerifier(clock=ManualClock(), **{"secret_key": SECRET, **kwargs})  # type: ignore[arg-type]


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


# --- tokens ---------------------------------------------------------------------------------------


def test_hs256_token_gives_the_subject_as_role() -> None:
    result = verifier().verify(create_token("alice", secret_key=SECRET))
    assert result.role == "alice" and result.expires_at_ms is None


def test_wrong_secret_is_refused() -> None:
    with pytest.raises(AuthenticationFailedError, match="signature"):
        verifier().verify(create_token("alice", secret_key=b"another-secret-another-secret!!!"))


@pytest.mark.parametrize("alg", ["none", "None", "NONE"])
def test_unsigned_token_is_refused(alg: str) -> None:
    header = b64url(json.dumps({"alg": alg, "typ": "JWT"}).encode())
    body = b64url(json.dumps({"sub": "admin"}).encode())
    for token in (f"{header}.{body}.", f"{header}.{body}"):
        with pytest.raises(AuthenticationFailedError):
            verifier().verify(token)


def test_expiry_is_checked_against_the_injected_clock_with_skew() -> None:
    token = create_token("alice", secret_key=SECRET, expires_at_s=NOW_S + 10)
    clock = ManualClock()
    strict = TokenVerifier(clock=clock, secret_key=SECRET)
    lenient = TokenVerifier(clock=clock, secret_key=SECRET, clock_skew_s=30)
    assert strict.verify(token).expires_at_ms == (NOW_S + 10) * 1000
    clock._now_ns += 20 * 10**9  # 10 s past expiry
    with pytest.raises(AuthenticationFailedError, match="expired"):
        strict.verify(token)
    assert lenient.verify(token).role == "alice"
    clock._now_ns += 30 * 10**9
    with pytest.raises(AuthenticationFailedError, match="expired"):
        lenient.verify(token)


def test_a_token_expired_by_the_real_clock_is_valid_on_an_injected_clock_before_its_expiry() -> None:
    token = create_token("alice", secret_key=SECRET, expires_at_s=NOW_S + 60)  # long past in real time
    assert verifier().verify(token).role == "alice"  # pyjwt's real-clock check is not what decides


def test_configurable_role_claim_and_audience() -> None:
    token = create_token("bob", secret_key=SECRET, claim="user")
    assert verifier(auth_claim="user").verify(token).role == "bob"
    with pytest.raises(AuthenticationFailedError, match="'sub'"):
        verifier().verify(token)
    import jwt
    aud_token = jwt.encode({"sub": "bob", "svc": ["pulsar", "other"]}, SECRET, algorithm="HS256")
    assert verifier(audience_claim="svc", audience="pulsar").verify(aud_token).role == "bob"
    with pytest.raises(AuthenticationFailedError, match="audience"):
        verifier(audience_claim="svc", audience="kafka").verify(aud_token)
    with pytest.raises(AuthenticationFailedError, match="audience"):
        verifier(audience="pulsar").verify(create_token("bob", secret_key=SECRET))


@pytest.mark.parametrize("kind", ["rsa", "ec"])
def test_public_key_tokens_and_no_algorithm_confusion(kind: str) -> None:
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048) if kind == "rsa" else (
        ec.generate_private_key(ec.SECP256R1()))
    der = private.public_key().public_bytes(serialization.Encoding.DER,
                                            serialization.PublicFormat.SubjectPublicKeyInfo)
    pem = private.public_key().public_bytes(serialization.Encoding.PEM,
                                            serialization.PublicFormat.SubjectPublicKeyInfo)
    token = create_token("carol", private_key=private)
    for encoded in (der, pem):
        check = TokenVerifier(clock=ManualClock(), public_key=load_public_key(encoded))
        assert check.verify(token).role == "carol"
        # HS256 signed with the public key's bytes as the secret: the classic confusion attack
        import jwt
        forged = jwt.encode({"sub": "admin"}, SECRET, algorithm="HS256")
        with pytest.raises(AuthenticationFailedError, match="not accepted"):
            check.verify(forged)


@pytest.mark.parametrize("junk", [b"", b"junk", b"a.b.c", b"\xff\xfe", b"x" * (AUTH_DATA_BYTES_MAX + 1),
                                  b"eyJhbGciOiJIUzI1NiJ9.e30", b"eyJhbGciOiJIUzI1NiJ9.!!!.sig"])
def test_malformed_tokens_fail_cleanly(junk: bytes) -> None:
    with pytest.raises(AuthenticationFailedError):
        verifier().verify(junk)


# --- key references -------------------------------------------------------------------------------


def test_key_references() -> None:
    assert parse_key_reference("file:///etc/key.bin").path == "/etc/key.bin"
    assert parse_key_reference("data:;base64," + base64.b64encode(SECRET).decode()).data == SECRET
    assert parse_key_reference("data:application/octet-stream;base64,AAEC").data == b"\x00\x01\x02"
    assert parse_key_reference("/plain/path").path == "/plain/path"
    with pytest.raises(InvalidArgumentError):
        parse_key_reference("data:;base64,@@@")
    with pytest.raises(InvalidArgumentError):
        parse_key_reference("data:nocomma")


# --- htpasswd ------------------------------------------------------------------------------------


def test_md5_crypt_matches_openssl_golden_values() -> None:
    # `openssl passwd -apr1 -salt abcdefgh secret` and `openssl passwd -1 -salt abcdefgh secret`
    assert md5_crypt(b"secret", b"abcdefgh") == b"$apr1$abcdefgh$h9FWgUz3n9YxylKLlR5SQ/"
    assert md5_crypt(b"secret", b"abcdefgh", b"$1$") == b"$1$abcdefgh$cHJi5PXp/ki/ktXzqlk6I1"


def test_htpasswd_schemes() -> None:
    sha = "{SHA}" + base64.b64encode(hashlib.sha1(b"s3cret").digest()).decode()
    bcrypted = bcrypt.hashpw(b"pa55", bcrypt.gensalt(4)).decode().replace("$2b$", "$2y$", 1)
    table = Htpasswd(f"# users\nadmin:$apr1$abcdefgh$h9FWgUz3n9YxylKLlR5SQ/\n\nsam:{sha}\nbea:{bcrypted}\n"
                     "old:plaintext\n")
    assert table.verify("admin", "secret") and not table.verify("admin", "Secret")
    assert table.verify("sam", "s3cret") and not table.verify("sam", "s3cre")
    assert table.verify("bea", "pa55") and table.verify("bea", "pa55")  # second from the cache
    assert not table.verify("bea", "pa56")
    assert not table.verify("old", "plaintext") and table.unsupported_users() == ["old"]
    assert not table.verify("nobody", "secret")
    assert not verify_hash("x" * 100, bcrypted)  # bcrypt refuses > 72 bytes: a clean False
    with pytest.raises(InvalidArgumentError):
        Htpasswd("no-colon-line\n")


# --- the provider chain --------------------------------------------------------------------------


def chain(anonymous: str | None = None) -> Authenticator:
    return Authenticator(("token", "basic", "tls"), anonymous_role=anonymous, tokens=verifier(),
                         htpasswd=Htpasswd("admin:$apr1$abcdefgh$h9FWgUz3n9YxylKLlR5SQ/\n"))


def test_binary_methods() -> None:
    auth = chain()
    token = create_token("alice", secret_key=SECRET).encode()
    assert auth.authenticate("token", token).role == "alice"
    assert auth.authenticate("basic", b"admin:secret").role == "admin"
    assert auth.authenticate("tls", b"", tls_peer_cn="client-1").role == "client-1"
    for method, data, cn in (("token", b"junk", None), ("basic", b"admin:wrong", None), ("basic", b"nocolon", None),
                             ("tls", b"", None), ("none", None, None), (None, None, None), ("kerberos", b"x", None),
                             ("basic", b"\xff:\xff", None), ("token", b"x" * (AUTH_DATA_BYTES_MAX + 1), None)):
        with pytest.raises(AuthenticationFailedError):
            auth.authenticate(method, data, cn)


def test_anonymous_role_only_without_credentials_a_provider_serves() -> None:
    auth = chain(anonymous="anon")
    assert auth.authenticate(None, None).role == "anon"
    assert auth.authenticate("none", b"").role == "anon"
    assert auth.authenticate("kerberos", b"x").role == "anon"  # Pulsar: unknown method → anonymous
    with pytest.raises(AuthenticationFailedError):
        auth.authenticate("token", b"junk")  # a bad credential never falls back
    assert auth.authenticate_http(None).role == "anon"
    with pytest.raises(AuthenticationFailedError):
        auth.authenticate_http("Bearer junk")


def test_http_headers() -> None:
    auth = chain()
    token = create_token("alice", secret_key=SECRET)
    assert auth.authenticate_http(f"Bearer {token}").role == "alice"
    assert auth.authenticate_http(f"bearer   {token}  ").role == "alice"
    assert auth.authenticate_http("Basic " + base64.b64encode(b"admin:secret").decode()).role == "admin"
    assert auth.authenticate_http(None, tls_peer_cn="client-1").role == "client-1"
    for header in (None, "", "Bearer", "Bearer junk", "Basic", "Basic !!!", "Basic " + base64.b64encode(b"x").decode(),
                   "Basic " + base64.b64encode(b"admin:nope").decode(), "Digest abc", "x" * (AUTH_DATA_BYTES_MAX + 1)):
        with pytest.raises(AuthenticationFailedError):
            auth.authenticate_http(header)
