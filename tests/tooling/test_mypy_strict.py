"""Ratchet: mypy runs strictly on the whole tree (issue 16). The only exemption is generated
protobuf code; no override may relax a checked module."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
GENERATED = {"magnetar.protocol.pulsar.generated.*", "magnetar.protocol.bookie.generated.*"}
RELAXING = {"strict": False, "ignore_errors": True, "disallow_untyped_defs": False,
            "check_untyped_defs": False, "disallow_any_generics": False}


def relaxations(config: dict[str, Any]) -> list[str]:
    """What in a ``[tool.mypy]`` table keeps some non-generated module from strict checking."""
    found: list[str] = []
    if config.get("strict") is not True:
        found.append("[tool.mypy] strict is not true")
    for override in config.get("overrides", []):
        modules = override.get("module", [])
        modules = [modules] if isinstance(modules, str) else modules
        loose = {k: v for k, v in override.items() if k in RELAXING and RELAXING[k] == v}
        outside = [m for m in modules if m not in GENERATED]
        if loose and outside:
            found.append(f"override {outside} relaxes {sorted(loose)}")
    return found


def test_mypy_is_strict_on_the_whole_tree() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert relaxations(config) == []


def test_negative_control_a_relaxed_package_is_reported() -> None:
    config = {"strict": True, "overrides": [{"module": ["magnetar.broker.*"], "ignore_errors": True}]}
    assert relaxations(config) == ["override ['magnetar.broker.*'] relaxes ['ignore_errors']"]
    assert relaxations({"overrides": []}) == ["[tool.mypy] strict is not true"]
