"""Positions and offsets of the Spark connector (pure; no pyspark).

A position ``"ledger:entry"`` names the *next* entry to read in one topic partition: a range
``[start, end)`` holds the entries at or after ``start`` and before ``end``, across the
partition's ledgers in id order. ``BEGINNING`` (``-1:0``) is before every ledger, so a range
from it never reports data loss. Spark compares offsets as JSON strings, so an offset is always
built by ``canonical``: keys (full partition names) sorted, values ``"L:E"`` strings.

``startingOffsets``/``endingOffsets`` take ``earliest``, ``latest`` or a JSON object mapping
partition names (short or full) to ``"earliest"``, ``"latest"`` or ``"L:E"``; partitions the
JSON leaves out get the default.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Literal

from magnetar.base.errors import InvalidArgumentError
from magnetar.base.types import Position
from magnetar.client.topic import full_topic_name

BEGINNING = Position(-1, 0)
Named = Literal["earliest", "latest"]
Spec = Named | Position


def format_position(position: Position) -> str:
    return f"{position.ledger_id}:{position.entry_id}"


def parse_position(text: str) -> Position:
    """``"L:E"`` with ``L >= -1`` and ``E >= 0``; ``InvalidArgumentError`` otherwise."""
    ledger, sep, entry = str(text).strip().partition(":")
    try:
        if not sep:
            raise ValueError(text)
        position = Position(int(ledger), int(entry))
    except ValueError:
        raise InvalidArgumentError(f"offset {text!r} is not 'ledger:entry'") from None
    if position.ledger_id < -1 or position.entry_id < 0:
        raise InvalidArgumentError(f"offset {text!r}: ledger must be >= -1 and entry >= 0")
    return position


def canonical(offsets: Mapping[str, Position]) -> dict[str, str]:
    """The offset dict Spark stores: sorted keys, ``"L:E"`` values (so equal offsets compare equal)."""
    return {name: format_position(offsets[name]) for name in sorted(offsets)}


def from_offset(offset: Mapping[str, str] | None) -> dict[str, Position]:
    """The inverse of ``canonical`` (an offset read back from a checkpoint)."""
    return {name: parse_position(text) for name, text in (offset or {}).items()}


def parse_spec(text: str | None, default: Named) -> Named | dict[str, Spec]:
    """An ``startingOffsets``/``endingOffsets`` option: a name for every partition, or per partition."""
    if text is None or not text.strip():
        return default
    value = text.strip()
    if value in ("earliest", "latest"):
        return value  # type: ignore[return-value]
    try:
        parsed = json.loads(value)
    except ValueError:
        raise InvalidArgumentError(f"offsets option {text!r}: expected earliest, latest or a JSON object") from None
    if not isinstance(parsed, dict):
        raise InvalidArgumentError(f"offsets option {text!r}: the JSON must be an object of partition -> offset")
    out: dict[str, Spec] = {}
    for name, spec in parsed.items():
        key = full_topic_name(str(name))
        if spec in ("earliest", "latest"):
            out[key] = spec
        elif isinstance(spec, str):
            out[key] = parse_position(spec)
        else:
            raise InvalidArgumentError(f"offset of {name}: expected 'earliest', 'latest' or 'L:E', got {spec!r}")
    return out


def spec_for(spec: Named | dict[str, Spec], partition: str, default: Named) -> Spec:
    if isinstance(spec, str):
        return spec
    return spec.get(partition, default)
