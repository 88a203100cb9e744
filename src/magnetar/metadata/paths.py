"""ZooKeeper-style path rules, shared by every store so they reject the same input.

A path is absolute (``/ledgers/00000001``), has no empty, ``.`` or ``..`` component, no trailing
slash (except the root ``/``), no control or unassigned characters ZooKeeper rejects, and at
most ``METADATA_PATH_BYTES_MAX`` UTF-8 bytes. Values are at most ``METADATA_VALUE_BYTES_MAX``.
"""

from __future__ import annotations

import re

from magnetar.base.errors import InvalidArgumentError, LimitExceededError
from magnetar.base.limits import METADATA_PATH_BYTES_MAX, METADATA_VALUE_BYTES_MAX

ROOT = "/"
# ZooKeeper's PathUtils rejects these code points.
_BAD_CHARS = re.compile("[\u0000-\u001f\u007f-\u009f\ud800-\uf8ff\ufff0-\uffff]")


def validate_path(path: object) -> str:
    """Return ``path`` if valid; raise ``InvalidArgumentError`` or ``LimitExceededError`` otherwise."""
    if not isinstance(path, str):
        raise InvalidArgumentError(f"metadata path must be a str, got {type(path).__name__}")
    size = len(path.encode("utf-8", "surrogatepass"))
    if size > METADATA_PATH_BYTES_MAX:
        raise LimitExceededError("METADATA_PATH_BYTES_MAX", size, METADATA_PATH_BYTES_MAX)
    if not path.startswith("/"):
        raise InvalidArgumentError(f"metadata path must be absolute: {path!r}")
    if path == ROOT:
        return path
    if path.endswith("/"):
        raise InvalidArgumentError(f"metadata path must not end with '/': {path!r}")
    for part in path[1:].split("/"):
        if part in ("", ".", ".."):
            raise InvalidArgumentError(f"metadata path has an empty, '.' or '..' component: {path!r}")
    if _BAD_CHARS.search(path):
        raise InvalidArgumentError(f"metadata path has a control or reserved character: {path!r}")
    return path


def validate_node_path(path: object) -> str:
    """A path that names a node other than the root (the root is never written)."""
    checked = validate_path(path)
    if checked == ROOT:
        raise InvalidArgumentError("the root node '/' cannot be written or deleted")
    return checked


def validate_value(value: object) -> bytes:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise InvalidArgumentError(f"metadata value must be bytes, got {type(value).__name__}")
    data = bytes(value)
    if len(data) > METADATA_VALUE_BYTES_MAX:
        raise LimitExceededError("METADATA_VALUE_BYTES_MAX", len(data), METADATA_VALUE_BYTES_MAX)
    return data


def validate_expected_version(expected_version: object) -> int:
    if not isinstance(expected_version, int) or isinstance(expected_version, bool) or expected_version < -1:
        raise InvalidArgumentError(f"expected_version must be an int >= -1, got {expected_version!r}")
    return expected_version


def parent_of(path: str) -> str:
    """The parent of a non-root path."""
    head = path.rsplit("/", 1)[0]
    return head or ROOT


def ancestors(path: str) -> list[str]:
    """Proper ancestors of ``path`` below the root, shallowest first: ``/a/b/c`` -> ``/a``, ``/a/b``."""
    parts = path.split("/")[1:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def join(parent: str, name: str) -> str:
    return parent + name if parent == ROOT else f"{parent}/{name}"
