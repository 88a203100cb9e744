"""Ratchets (issue 16): rules the tree must keep, each checked here with a negative control.

* The import-linter layers are all required (no optional ``(x)`` entry) and name packages that
  exist; the forbidden contracts keep the heavy dependencies in their adapters and name modules
  that exist (``lint-imports`` itself runs in ``test_tooling.py``).
* Tidy: functions at most ``FUNCTION_LINES_MAX`` lines, modules at most ``MODULE_LINES_MAX``.
* Exception classes are named ``...Error``.
* One entry type: exactly one class named ``Entry`` (``base/entry.py``) in ``src/magnetar``.

Today's offenders are listed in one place, ``ratchet_allowlist.py``, which may only shrink: an
entry that is no longer an offender fails the test until it is removed.
"""

from __future__ import annotations

import ast
import builtins
import subprocess
import tomllib
from collections.abc import Iterable, Iterator
from pathlib import Path

from tests.conftest import REPO, tool
from tests.tooling import ratchet_allowlist as allow
from tests.tooling.pysource import parse_python

SRC = REPO / "src" / "magnetar"
FUNCTION_LINES_MAX = 70
MODULE_LINES_MAX = 800
_BUILTIN_ERRORS = frozenset(
    name for name in dir(builtins)
    if isinstance(getattr(builtins, name), type) and issubclass(getattr(builtins, name), BaseException)
)


def _sources(root: Path = SRC) -> Iterator[tuple[str, str]]:
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if "/generated/" not in relative:
            yield relative, path.read_text()


def _ratchet(found: Iterable[str], allowed: frozenset[str], existing: Iterable[str]) -> list[str]:
    """New offenders, and allow-list entries that are no offenders any more (fixed or gone)."""
    found = set(found)
    problems = [f"new offender: {item}" for item in sorted(found - allowed)]
    present = set(existing)
    for item in sorted(allowed - found):
        why = "no longer an offender" if item in present else "gone"
        problems.append(f"{why}, remove it from ratchet_allowlist.py: {item}")
    return problems


# --- import-linter contracts -----------------------------------------------------------------


def contract_problems(contracts: list[dict[str, object]], src: Path = SRC) -> list[str]:
    """Layers in parentheses (optional) or naming no package; forbidden sources that do not exist."""
    problems = []
    for contract in contracts:
        if contract.get("type") == "layers":
            for layer in contract["layers"]:  # type: ignore[attr-defined]
                for name in (part.strip() for part in str(layer).split("|")):
                    if name.startswith("("):
                        problems.append(f"optional layer {name} in {contract['name']!r}: layers are required")
                    elif not (src / name).is_dir():
                        problems.append(f"layer {name} in {contract['name']!r}: no package magnetar.{name}")
        elif contract.get("type") == "forbidden":
            for module in contract["source_modules"]:  # type: ignore[attr-defined]
                path = src.joinpath(*str(module).split(".")[1:])
                if not (path.is_dir() or path.with_suffix(".py").is_file()):
                    problems.append(f"{module} in {contract['name']!r} does not exist")
    return problems


def _contracts() -> list[dict[str, object]]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_import_layers_are_required_and_name_existing_packages() -> None:
    contracts = _contracts()
    assert contract_problems(contracts) == []
    layered = {part.strip() for c in contracts if c["type"] == "layers" for layer in c["layers"]
               for part in layer.split("|")}
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages - layered == set(), "every package has its layer"


def test_heavy_dependencies_have_forbidden_contracts() -> None:
    forbidden = {m for c in _contracts() if c["type"] == "forbidden" for m in c["forbidden_modules"]}
    assert {"pyspark", "kazoo", "starlette", "uvicorn", "rocksdict"} <= forbidden


def test_a_forbidden_contract_of_this_kind_fails_on_this_tree(tmp_path: Path) -> None:
    """Negative control for the forbidden contracts: the same kind of contract, for a dependency
    the broker does import directly (msgspec), is reported broken by ``lint-imports`` run on this
    tree (``PYTHONPATH`` names the tree's ``src``, as ``test_tooling.py`` runs it)."""
    config = tmp_path / "control.toml"
    config.write_text(
        '[tool.importlinter]\nroot_package = "magnetar"\ninclude_external_packages = true\n\n'
        '[[tool.importlinter.contracts]]\nname = "control"\ntype = "forbidden"\n'
        'source_modules = ["magnetar"]\nforbidden_modules = ["msgspec"]\n'
        'ignore_imports = ["magnetar.admin.** -> msgspec"]\nunmatched_ignore_imports_alerting = "none"\n'
        'allow_indirect_imports = true\n')
    result = subprocess.run([tool("lint-imports"), "--config", str(config), "--no-cache"], cwd=REPO,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode != 0 and "magnetar.catalog.policies -> msgspec" in result.stdout, result.stdout[-2000:]


def test_contract_checker_catches_optional_and_missing_layers() -> None:
    bad = [{"name": "t", "type": "layers", "layers": ["(broker)", "nothing_here | base"]},
           {"name": "f", "type": "forbidden", "source_modules": ["magnetar.gone"], "forbidden_modules": ["x"]}]
    assert contract_problems(bad) == [
        "optional layer (broker) in 't': layers are required",
        "layer nothing_here in 't': no package magnetar.nothing_here",
        "magnetar.gone in 'f' does not exist",
    ]


# --- tidy --------------------------------------------------------------------------------------


def long_functions(relative: str, source: str, limit: int = FUNCTION_LINES_MAX) -> list[str]:
    found = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                assert child.end_lineno is not None
                if child.end_lineno - child.lineno + 1 > limit:
                    found.append(f"{relative}::{prefix}{child.name}")
                walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.")

    walk(parse_python(source), "")
    return found


def _function_names(relative: str, source: str) -> list[str]:
    return long_functions(relative, source, limit=0)


def test_functions_are_short_enough_to_read_at_once() -> None:
    found, existing = [], []
    for relative, source in _sources():
        found += long_functions(relative, source)
        existing += _function_names(relative, source)
    assert _ratchet(found, allow.LONG_FUNCTIONS, existing) == []


def test_modules_stay_small() -> None:
    sources = dict(_sources())
    found = [rel for rel, source in sources.items() if len(source.splitlines()) > MODULE_LINES_MAX]
    assert _ratchet(found, allow.LONG_MODULES, sources) == []


def test_tidy_checkers_catch_long_code_and_stale_entries() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_LINES_MAX))
    source = f"class C:\n    def fine(self):\n        pass\n\n    def long(self):\n{body}\n"
    assert long_functions("m.py", source.replace("\n    x", "\n        x")) == ["m.py::C.long"]
    assert _ratchet([], frozenset({"m.py::C.fine"}), ["m.py::C.fine"]) == [
        "no longer an offender, remove it from ratchet_allowlist.py: m.py::C.fine"]
    assert _ratchet([], frozenset({"m.py::C.old"}), []) == ["gone, remove it from ratchet_allowlist.py: m.py::C.old"]
    assert _ratchet(["m.py::C.long"], frozenset(), []) == ["new offender: m.py::C.long"]


# --- naming ------------------------------------------------------------------------------------


def exception_classes(sources: Iterable[tuple[str, str]]) -> list[str]:
    """``path::Name`` of every class in ``sources`` that derives (through the tree) from an exception."""
    defined: dict[str, list[tuple[str, list[str]]]] = {}
    for relative, source in sources:
        for node in ast.walk(parse_python(source)):
            if isinstance(node, ast.ClassDef):
                bases = [b.id if isinstance(b, ast.Name) else b.attr for b in node.bases
                         if isinstance(b, ast.Name | ast.Attribute)]
                defined.setdefault(node.name, []).append((relative, bases))

    def is_error(name: str, seen: frozenset[str]) -> bool:
        if name in _BUILTIN_ERRORS:
            return True
        if name in seen or name not in defined:
            return False
        return any(is_error(base, seen | {name}) for _, bases in defined[name] for base in bases)

    return sorted(f"{rel}::{name}" for name, defs in defined.items() for rel, _ in defs
                  if is_error(name, frozenset()))


def test_exception_classes_are_named_error() -> None:
    classes = exception_classes(_sources())
    offenders = [c for c in classes if not c.endswith("Error")]
    assert _ratchet(offenders, allow.ERROR_NAMES, classes) == []


def test_error_naming_checker_sees_inherited_exceptions() -> None:
    source = "class Base(Exception): ...\nclass Gone(Base): ...\nclass FineError(Base): ...\nclass Plain: ...\n"
    classes = exception_classes([("m.py", source)])
    assert classes == ["m.py::Base", "m.py::FineError", "m.py::Gone"]
    assert [c for c in classes if not c.endswith("Error")] == ["m.py::Base", "m.py::Gone"]


def classes_named(name: str, sources: Iterable[tuple[str, str]]) -> list[str]:
    """``path::Name`` of every class called ``name`` in ``sources`` (nested ones too)."""
    return sorted(f"{relative}::{node.name}" for relative, source in sources
                  for node in ast.walk(parse_python(source))
                  if isinstance(node, ast.ClassDef) and node.name == name)


def test_there_is_one_entry_type() -> None:
    """Issue 16: one ``Entry``; the bookie wire/storage form is ``EncodedEntry``, not another one."""
    assert classes_named("Entry", _sources()) == ["base/entry.py::Entry"]


def test_one_entry_checker_sees_a_second_entry_class() -> None:
    sources = [("base/entry.py", "class Entry:\n    pass\n"),
               ("protocol/codec.py", "class EncodedEntry:\n    pass\n"),
               ("ledger/x.py", "def f():\n    class Entry:\n        pass\n")]
    assert classes_named("Entry", sources) == ["base/entry.py::Entry", "ledger/x.py::Entry"]
    assert classes_named("Entry", sources[:2]) == ["base/entry.py::Entry"]
