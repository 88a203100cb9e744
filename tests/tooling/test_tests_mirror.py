"""Tests mirror ``src/`` (issue 16; the rule is written in ``tests/README.md``).

* Every directory under ``tests/`` that holds files is either the path of a ``src/magnetar``
  package (``tests/protocol/pulsar`` for ``src/magnetar/protocol/pulsar``) or lies in one of the
  system-test categories (``SYSTEM_CATEGORIES``), which have no package of their own.
* Each of those directories is a package (``__init__.py``), so ``from tests.x.y import ...`` works.
* No test module lies loose in ``tests/`` itself.

A directory holding nothing but ``__pycache__`` (left behind by a move) is not a test directory.
Each checker also runs on a bad tree (negative controls), so it can fail.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import REPO, SRC

TESTS = REPO / "tests"
#: Tests of whole processes or of the repository, not of one package.
SYSTEM_CATEGORIES = {
    "integration": "real processes: standalone, bookies, kill -9, geo replication, tiered storage",
    "cluster": "multi-process clusters (magnetar cluster up), failover, elasticity",
    "compat": "the official pulsar-client against a real Magnetar broker",
    "tooling": "the repository itself: ratchets, architecture, docs, mypy, this rule",
}
_SKIPPED = ("__pycache__",)


def _test_dirs(tests_root: Path) -> list[Path]:
    """Directories under ``tests_root`` that hold at least one file outside ``__pycache__``."""
    found: list[Path] = []
    for directory in sorted(p for p in tests_root.rglob("*") if p.is_dir()):
        relative = directory.relative_to(tests_root)
        if any(part in _SKIPPED or part.startswith(".") for part in relative.parts):
            continue
        if any(child.is_file() for child in directory.iterdir()):
            found.append(directory)
    return found


def _name(tests_root: Path, directory: Path) -> str:
    return "/".join(("tests", *directory.relative_to(tests_root).parts))


def misplaced_dirs(tests_root: Path, src_root: Path, categories: tuple[str, ...]) -> list[str]:
    """Test directories that are neither a ``src_root`` package path nor inside a category."""
    problems: list[str] = []
    for directory in _test_dirs(tests_root):
        relative = directory.relative_to(tests_root)
        if relative.parts[0] in categories:
            continue
        if not (src_root / relative / "__init__.py").is_file():
            problems.append(f"{_name(tests_root, directory)} mirrors no package of src/magnetar")
    return problems


def missing_inits(tests_root: Path) -> list[str]:
    """Test directories (and ``tests_root`` itself) without an ``__init__.py``."""
    return [f"{_name(tests_root, d)}/__init__.py is missing"
            for d in [tests_root, *_test_dirs(tests_root)] if not (d / "__init__.py").is_file()]


def loose_tests(tests_root: Path) -> list[str]:
    """Test modules directly in ``tests_root`` (they belong in a package's or a category's directory)."""
    return [f"tests/{p.name} belongs in a package directory" for p in sorted(tests_root.glob("test_*.py"))]


def test_every_test_directory_mirrors_a_package_or_is_a_system_category() -> None:
    assert misplaced_dirs(TESTS, SRC, tuple(SYSTEM_CATEGORIES)) == []


def test_every_test_directory_is_a_package() -> None:
    assert missing_inits(TESTS) == []


def test_no_test_module_lies_loose_in_tests() -> None:
    assert loose_tests(TESTS) == []


def test_the_categories_are_not_packages() -> None:
    # A category named like a package would hide that package's misplaced tests.
    assert [c for c in SYSTEM_CATEGORIES if (SRC / c).exists()] == []


def test_the_readme_names_every_category() -> None:
    readme = (TESTS / "README.md").read_text()
    assert [c for c in SYSTEM_CATEGORIES if f"`tests/{c}/`" not in readme] == []


def _tree(root: Path, files: list[str]) -> None:
    for name in files:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")


def test_negative_control_misplaced_directories_are_reported(tmp_path: Path) -> None:
    src, tests = tmp_path / "src", tmp_path / "tests"
    _tree(src, ["__init__.py", "protocol/__init__.py", "protocol/pulsar/__init__.py", "storage/__init__.py",
                "admin/console/static/app.js"])
    _tree(tests, ["__init__.py",
                  "protocol/__init__.py", "protocol/pulsar/__init__.py", "protocol/pulsar/test_frames.py",
                  "storage/__init__.py", "storage/test_storage.py",
                  "integration/__init__.py", "integration/geo/__init__.py", "integration/geo/test_geo.py",
                  "bookie/__init__.py", "bookie/test_kill.py",
                  "protocol_pulsar/__init__.py", "protocol_pulsar/test_batch.py",
                  "unit/__init__.py", "unit/base/__init__.py", "unit/base/test_types.py",
                  "admin/console/static/__init__.py", "admin/console/static/test_page.py"])
    (tests / "gone" / "__pycache__").mkdir(parents=True)  # only bytecode left by a move: not a test directory
    (tests / "gone" / "__pycache__" / "test_old.cpython-312.pyc").write_bytes(b"")
    assert misplaced_dirs(tests, src, ("integration",)) == [
        "tests/admin/console/static mirrors no package of src/magnetar",
        "tests/bookie mirrors no package of src/magnetar",
        "tests/protocol_pulsar mirrors no package of src/magnetar",
        "tests/unit mirrors no package of src/magnetar",
        "tests/unit/base mirrors no package of src/magnetar",
    ]


def test_negative_control_missing_init_and_loose_tests_are_reported(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    _tree(tests, ["__init__.py", "test_loose.py", "storage/test_storage.py", "base/__init__.py", "base/test_types.py"])
    assert missing_inits(tests) == ["tests/storage/__init__.py is missing"]
    assert loose_tests(tests) == ["tests/test_loose.py belongs in a package directory"]
    (tests / "__init__.py").unlink()
    assert missing_inits(tests)[0] == "tests/__init__.py is missing"
