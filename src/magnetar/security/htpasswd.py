"""An htpasswd file, as Apache's ``htpasswd`` writes it and Pulsar's basic provider reads it.

One ``user:hash`` per line; blank lines and ``#`` comments are skipped. Hashes: ``$apr1$``
(Apache's MD5-crypt, what ``htpasswd -m`` and the official client's tests use), ``$2a$``/``$2b$``/
``$2y$`` (bcrypt, ``htpasswd -B``) and ``{SHA}`` (base64 SHA-1, ``htpasswd -s``). Any other hash
makes that user unable to log in (reported by ``unsupported_users``), never the file unreadable.

bcrypt costs about a tenth of a second per check and HTTP clients authenticate every request, so
successful checks are remembered (keyed by the stored hash and a SHA-256 of the password, at most
``BASIC_AUTH_CACHE_COUNT_MAX``); a changed file starts a new ``Htpasswd`` and so a new cache.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections import OrderedDict

import bcrypt

from magnetar.base.errors import InvalidArgumentError
from magnetar.base.limits import BASIC_AUTH_CACHE_COUNT_MAX, HTPASSWD_USERS_COUNT_MAX

_ITOA64 = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_APR1 = b"$apr1$"
_BCRYPT_PREFIXES = ("$2a$", "$2b$", "$2y$")


def _to64(value: int, count: int) -> bytes:
    out = bytearray()
    for _ in range(count):
        out.append(_ITOA64[value & 0x3F])
        value >>= 6
    return bytes(out)


def md5_crypt(password: bytes, salt: bytes, magic: bytes = _APR1) -> bytes:
    """Poul-Henning Kamp's MD5-crypt with ``magic`` ($1$ or Apache's $apr1$): ``magic salt $ hash``."""
    salt = salt[:8]
    alternate = hashlib.md5(password + salt + password).digest()
    context = bytearray(password + magic + salt)
    remaining = len(password)
    while remaining > 0:
        context += alternate[:min(16, remaining)]
        remaining -= 16
    bits = len(password)
    while bits:
        context += b"\x00" if bits & 1 else password[:1]
        bits >>= 1
    digest = hashlib.md5(context).digest()
    for round_index in range(1000):  # the algorithm's fixed stretching
        step = bytearray(password if round_index & 1 else digest)
        if round_index % 3:
            step += salt
        if round_index % 7:
            step += password
        step += digest if round_index & 1 else password
        digest = hashlib.md5(step).digest()
    encoded = bytearray()
    for a, b, c in ((0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5)):
        encoded += _to64((digest[a] << 16) | (digest[b] << 8) | digest[c], 4)
    encoded += _to64(digest[11], 2)
    return magic + salt + b"$" + bytes(encoded)


def verify_hash(password: str, stored: str) -> bool:
    """Whether ``password`` matches one stored htpasswd hash (False for unsupported schemes)."""
    secret = password.encode("utf-8")
    if stored.startswith("$apr1$") or stored.startswith("$1$"):
        magic = _APR1 if stored.startswith("$apr1$") else b"$1$"
        salt = stored[len(magic):].split("$", 1)[0].encode("ascii", "replace")
        return hmac.compare_digest(md5_crypt(secret, salt, magic), stored.encode("ascii", "replace"))
    if stored.startswith(_BCRYPT_PREFIXES):
        try:
            return bcrypt.checkpw(secret, stored.encode("ascii"))
        except ValueError:  # malformed stored hash, or a password bcrypt refuses (> 72 bytes)
            return False
    if stored.startswith("{SHA}"):
        expected = base64.b64encode(hashlib.sha1(secret).digest()).decode()
        return hmac.compare_digest(expected, stored[len("{SHA}"):])
    return False


def supported(stored: str) -> bool:
    return stored.startswith(("$apr1$", "$1$", "{SHA}", *_BCRYPT_PREFIXES))


class Htpasswd:
    def __init__(self, text: str) -> None:
        self._users: dict[str, str] = {}
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            user, sep, stored = line.partition(":")
            if not sep or not user:
                raise InvalidArgumentError(f"htpasswd line {number}: expected user:hash")
            self._users[user] = stored
            if len(self._users) > HTPASSWD_USERS_COUNT_MAX:
                raise InvalidArgumentError(f"htpasswd lists more than {HTPASSWD_USERS_COUNT_MAX} users")
        self._verified: OrderedDict[tuple[str, str, bytes], None] = OrderedDict()

    @property
    def users(self) -> frozenset[str]:
        return frozenset(self._users)

    def unsupported_users(self) -> list[str]:
        return sorted(u for u, h in self._users.items() if not supported(h))

    def verify(self, user: str, password: str) -> bool:
        stored = self._users.get(user)
        if stored is None:
            return False
        key = (user, stored, hashlib.sha256(password.encode("utf-8", "surrogatepass")).digest())
        if key in self._verified:
            self._verified.move_to_end(key)
            return True
        if not verify_hash(password, stored):
            return False
        self._verified[key] = None
        if len(self._verified) > BASIC_AUTH_CACHE_COUNT_MAX:
            self._verified.popitem(last=False)
        return True
