"""The design documents stay inside the repository and current (issue 16).

* Every link in ``README.md`` and ``docs/*.md`` is relative, resolves to an existing file and does
  not escape the repository root (no web links, no absolute paths, no ``../shared/...``).
* Every path named in backticks in those documents exists: ``src/...``, ``tests/...``,
  ``docs/...`` and the like from the repository root, ``broker/topic.py`` and the like under
  ``src/magnetar``; a path outside the repository (``../...``, ``/...``, ``shared/...``) is refused.
* Every registered fault point has its row in ``docs/faults.md`` with its code, every row names a
  registered point, and each file a row names contains the point.

Each checker is also run on bad input (negative controls), so it can fail.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from magnetar.faults import REGISTRY, FaultPoint
from tests.conftest import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_PATH = re.compile(r"^(?:\.\.?/|/)?[\w.-]+(?:/[\w.-]+)*/?$")
_ROOT_DIRS = ("src", "tests", "docs", "scripts", "bench", "examples")
_OUTSIDE = ("../", "/work/", "shared/")  # "/admin/v2" and the like are URL paths
#: Written by runs, ignored by git (``.gitignore``): documents may name them without their existing.
_GENERATED = ("bench/results/",)
_FILE_SUFFIXES = (".py", ".md", ".toml", ".sh", ".json", ".png", ".proto", ".js", ".css", ".html")


def _strip_fences(text: str) -> str:
    """The text without fenced code blocks (shell examples are not links or paths to check)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def link_problems(doc: Path, text: str, repo: Path = REPO) -> list[str]:
    """Links in ``text`` (the document ``doc``) that leave the repository or resolve to nothing."""
    problems: list[str] = []
    for target in _LINK.findall(_strip_fences(text)):
        where = target.split("#", 1)[0]
        if target.startswith("#"):
            continue
        if ":" in where.split("/", 1)[0] or where.startswith("/"):
            problems.append(f"{doc.name}: {target} links outside the repository")
            continue
        resolved = (doc.parent / where).resolve()
        if not resolved.is_relative_to(repo.resolve()):
            problems.append(f"{doc.name}: {target} escapes the repository root")
        elif not resolved.exists():
            problems.append(f"{doc.name}: {target} does not exist")
    return problems


def path_problems(doc: Path, text: str, repo: Path = REPO) -> list[str]:
    """Paths named in backticks in ``text`` that do not exist in the repository or lie outside it."""
    problems: list[str] = []
    src = repo / "src" / "magnetar"
    for span in _CODE_SPAN.findall(_strip_fences(text)):
        token = span.split("::", 1)[0].rstrip(".,;:")
        if "/" not in token or not _PATH.match(token):
            continue
        if token.startswith(_OUTSIDE):
            problems.append(f"{doc.name}: `{span}` lies outside the repository")
            continue
        if token.startswith(("/", *_GENERATED)):
            continue  # a URL or metadata path (``/admin/v2``), or what a benchmark writes
        first = token.split("/", 1)[0]
        if first in _ROOT_DIRS:
            base = repo
        elif (src / first).is_dir():
            base = src
        else:
            continue  # not a path of ours (a topic name, a metadata path, a URL path)
        if not token.endswith("/") and not token.endswith(_FILE_SUFFIXES):
            continue  # a module path without a suffix, a wildcard's stem: not a file name
        if not (base / token).exists():
            problems.append(f"{doc.name}: `{span}` does not exist")
    return problems


def fault_table_problems(text: str, registry: Mapping[str, FaultPoint], repo: Path = REPO) -> list[str]:
    """Registered points without their row (or with another code), rows naming no registered
    point, and rows whose files do not contain their point."""
    rows: dict[str, tuple[str, list[str]]] = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and re.fullmatch(r"`[a-z_]+(\.[a-z_]+)+`", cells[1]):
            rows[cells[1].strip("`")] = (cells[0], _CODE_SPAN.findall(cells[2]))
    problems = [f"fault point {name} is missing from docs/faults.md" for name in registry if name not in rows]
    for name, (code, files) in rows.items():
        point = registry.get(name)
        if point is None:
            problems.append(f"docs/faults.md lists {name}, which is not registered")
            continue
        if code != point.code:
            problems.append(f"docs/faults.md gives {name} the code {code}, the registry {point.code}")
        if not files:
            problems.append(f"docs/faults.md does not say where {name} sits")
        for file in files:
            path = repo / file
            if not path.is_file() or f'"{name}"' not in path.read_text():
                problems.append(f"docs/faults.md: {file} does not contain the point {name}")
    return problems


def test_documents_link_only_inside_the_repository() -> None:
    problems = [p for doc in DOCS for p in link_problems(doc, doc.read_text())]
    assert problems == []


def test_paths_named_in_the_documents_exist() -> None:
    problems = [p for doc in DOCS for p in path_problems(doc, doc.read_text())]
    assert problems == []


def test_the_readme_lists_the_design_documents() -> None:
    readme = (REPO / "README.md").read_text()
    for name in ("architecture.md", "write-path.md", "read-path.md", "faults.md", "style.md"):
        assert f"](docs/{name})" in readme, name


def test_every_registered_fault_point_is_in_docs_faults() -> None:
    assert fault_table_problems((REPO / "docs" / "faults.md").read_text(), REGISTRY) == []


def test_link_checker_catches_outside_escaping_and_missing_links() -> None:
    doc = REPO / "docs" / "x.md"
    text = (
        "[a](../../shared/design/STYLE.md) [b](https://example.org/x) [c](/etc/passwd) "
        "[d](missing.md) [e](write-path.md) [f](#words) [g](../README.md#layout)\n"
        "```\n[h](nowhere.md)\n```\n"
    )
    problems = link_problems(doc, text)
    assert len(problems) == 4, problems
    assert any("escapes" in p for p in problems)
    assert sum("outside" in p for p in problems) == 2
    assert any("missing.md does not exist" in p for p in problems)


def test_path_checker_catches_missing_and_outside_paths() -> None:
    doc = REPO / "docs" / "x.md"
    text = (
        "`src/magnetar/broker/topic.py` `broker/topic.py` `tests/tooling/` `src/magnetar/nowhere.py` "
        "`broker/gone.py` `../shared/design/FAULTS.md` `shared/design/STYLE.md` "
        "`persistent://public/default/t` `tenant/ns` `magnetar.broker.topic`"
    )
    assert sorted(path_problems(doc, text)) == sorted([
        "x.md: `src/magnetar/nowhere.py` does not exist",
        "x.md: `broker/gone.py` does not exist",
        "x.md: `../shared/design/FAULTS.md` lies outside the repository",
        "x.md: `shared/design/STYLE.md` lies outside the repository",
    ])


def test_fault_table_checker_catches_a_missing_point_a_stranger_and_a_wrong_place() -> None:
    text = (REPO / "docs" / "faults.md").read_text()
    extra = FaultPoint("bookie.nowhere", "B99", "a point no document lists")
    registry = {**REGISTRY, extra.name: extra}
    assert fault_table_problems(text, registry) == ["fault point bookie.nowhere is missing from docs/faults.md"]
    first = next(iter(REGISTRY.values()))
    smaller = {name: point for name, point in REGISTRY.items() if name != first.name}
    assert fault_table_problems(text, smaller) == [f"docs/faults.md lists {first.name}, which is not registered"]
    wrong = text.replace(f"| `{first.name}` | `src/magnetar/ledger/handle.py`",
                         f"| `{first.name}` | `src/magnetar/storage/journal.py`")
    assert wrong != text
    assert fault_table_problems(wrong, REGISTRY) == [
        f"docs/faults.md: src/magnetar/storage/journal.py does not contain the point {first.name}"]
