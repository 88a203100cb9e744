"""Configuration: a TOML file, overridden by ``MAGNETAR_*`` environment variables, overridden by
command-line flags, loaded into a frozen dataclass (docs/style.md rule 11).

Each node type defines its own frozen dataclass with unit-suffixed field names
(``journal_group_wait_ms_max``); this module only loads values into it. The environment variable
for field ``f`` of section ``s`` is ``MAGNETAR_<S>_<F>`` upper-cased (``MAGNETAR_BOOKIE_PORT``).
Unknown keys in the file, values of the wrong type and unknown sections are errors, never
silently ignored: a typo in a config must not leave a durability setting at its default.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from magnetar.base.errors import InvalidArgumentError

C = TypeVar("C")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def env_var_name(section: str, field: str) -> str:
    return f"MAGNETAR_{section}_{field}".upper().replace("-", "_")


def _coerce(value: Any, target: Any, where: str) -> Any:
    origin = typing.get_origin(target)
    if origin in (types.UnionType, typing.Union):
        options = [t for t in typing.get_args(target) if t is not type(None)]
        if value is None or (isinstance(value, str) and value.lower() in ("", "none")):
            return None
        return _coerce(value, options[0], where)
    if target is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
            return value.lower() in _TRUE
        raise InvalidArgumentError(f"{where}: expected true/false, got {value!r}")
    if target is int:
        if isinstance(value, bool):
            raise InvalidArgumentError(f"{where}: expected an integer, got {value!r}")
        try:
            return int(value)
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"{where}: expected an integer, got {value!r}") from None
    if target is float:
        try:
            return float(value)
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"{where}: expected a number, got {value!r}") from None
    if target is str:
        if not isinstance(value, str):
            raise InvalidArgumentError(f"{where}: expected a string, got {value!r}")
        return value
    if origin is tuple:
        items = value.split(",") if isinstance(value, str) else list(value)
        item_type = typing.get_args(target)[0]
        return tuple(_coerce(item.strip() if isinstance(item, str) else item, item_type, where) for item in items)
    return value


def load_config(
    cls: type[C],
    section: str,
    *,
    file_values: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> C:
    """Build ``cls`` from defaults < ``file_values`` < environment < ``overrides`` (flags).

    ``overrides`` entries whose value is ``None`` mean "flag not given" and are skipped.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values: dict[str, Any] = {}
    for key, value in (file_values or {}).items():
        if key not in fields:
            raise InvalidArgumentError(f"config [{section}]: unknown key {key!r}; known: {', '.join(sorted(fields))}")
        values[key] = _coerce(value, hints[key], f"config [{section}] {key}")
    env = os.environ if environ is None else environ
    for name in fields:
        var = env_var_name(section, name)
        if var in env:
            values[name] = _coerce(env[var], hints[name], var)
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key not in fields:
            raise InvalidArgumentError(f"unknown option {key!r} for [{section}]")
        values[key] = _coerce(value, hints[key], f"--{key.replace('_', '-')}")
    instance = cls(**values)
    return typing.cast(C, instance)


def read_toml(path: str | None) -> dict[str, Any]:
    """The parsed TOML file, or ``{}`` when no path is given."""
    if not path:
        return {}
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise InvalidArgumentError(f"config file {path!r} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidArgumentError(f"config file {path!r} is not valid TOML: {exc}") from None


def section_of(document: Mapping[str, Any], section: str) -> dict[str, Any]:
    value = document.get(section, {})
    if not isinstance(value, dict):
        raise InvalidArgumentError(f"config section [{section}] must be a table")
    return value
