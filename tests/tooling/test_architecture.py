"""Architecture rules that import-linter does not express.

* docs/style.md rules 1-2: cores never reach the clock, randomness, uuid4, sockets, files or
  ``asyncio.sleep`` directly; they are given capabilities.
* docs/style.md rule 15: heavy dependencies stay in their adapter.
* Every ``faults.point("...")`` names a registered fault point.
* Every layer package states what it owns in its docstring.

Each checker is exercised on a bad snippet too (negative controls), so it can fail.
"""

from __future__ import annotations

import ast
from pathlib import Path

from magnetar.faults import REGISTRY
from tests.conftest import SRC
from tests.tooling.pysource import parse_python

CORES = ("protocol", "storage", "ledger", "managed_ledger", "catalog", "broker", "control", "replication", "security")
BANNED_MODULES = {"time", "random", "socket", "uuid", "os", "pathlib", "shutil", "threading", "selectors", "io"}
BANNED_CALLS = {
    ("asyncio", "sleep"),
    ("asyncio", "open_connection"),
    ("asyncio", "start_server"),
    ("asyncio", "to_thread"),
    ("uuid", "uuid4"),
}
BANNED_BUILTINS = {"open", "input"}
HEAVY = {"pyspark": "connectors", "kazoo": "metadata/zookeeper", "rocksdict": "runtime", "uvloop": "runtime",
         "starlette": "", "uvicorn": "runtime", "fastapi": "",
         # tiered storage: Parquet, Delta Lake and object stores only in the lakehouse adapter
         "pyarrow": "", "deltalake": "runtime/lakehouse", "fsspec": "runtime/lakehouse",
         "s3fs": "runtime/lakehouse", "fastavro": ""}
HEAVY_EXTRA_HOMES = {"starlette": ("admin", "runtime"), "fastapi": ("admin", "runtime"),
                     "pyarrow": ("connectors", "runtime/lakehouse"),  # the broker writes Parquet only there
                     "fastavro": ("connectors", "runtime/lakehouse")}


def core_violations(source: str) -> list[str]:
    """What in ``source`` reaches the real world directly."""
    found: list[str] = []
    for node in ast.walk(parse_python(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in BANNED_MODULES:
                    found.append(f"line {node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            root = node.module.split(".")[0]
            if root in BANNED_MODULES:
                found.append(f"line {node.lineno}: from {node.module} import ...")
            for alias in node.names:
                if (root, alias.name) in BANNED_CALLS:
                    found.append(f"line {node.lineno}: from {root} import {alias.name}")
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in BANNED_BUILTINS:
                found.append(f"line {node.lineno}: {func.id}()")
            if (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and (func.value.id, func.attr) in BANNED_CALLS
            ):
                found.append(f"line {node.lineno}: {func.value.id}.{func.attr}()")
    return found


def _py_files(package: str) -> list[Path]:
    root = SRC / package
    return sorted(p for p in root.rglob("*.py") if not p.name.endswith("_pb2.py")) if root.exists() else []


def test_cores_take_clock_randomness_and_io_as_capabilities() -> None:
    problems = []
    for package in CORES:
        for path in _py_files(package):
            for problem in core_violations(path.read_text()):
                problems.append(f"{path.relative_to(SRC)} {problem}")
    assert not problems, "cores must use injected Clock/Rng/Disk/Network:\n" + "\n".join(problems)


def test_core_checker_catches_each_banned_use() -> None:
    bad = {
        "import time\n": "import time",
        "from random import choice\n": "from random",
        "import uuid\nuuid.uuid4()\n": "uuid.uuid4",
        "import asyncio\nasyncio.sleep(1)\n": "asyncio.sleep",
        "from asyncio import sleep\n": "from asyncio import sleep",
        "import socket\n": "import socket",
        "open('x')\n": "open()",
        "import os\n": "import os",
    }
    for snippet, expected in bad.items():
        found = core_violations(snippet)
        assert any(expected in item for item in found), (snippet, found)
    assert core_violations("import asyncio\nawait_clock = 1\n") == []


def heavy_violations(path: Path, source: str) -> list[str]:
    relative = path.relative_to(SRC).as_posix()
    found = []
    for node in ast.walk(parse_python(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            root = name.split(".")[0]
            if root in HEAVY:
                homes = HEAVY_EXTRA_HOMES.get(root, (HEAVY[root],))
                if not any(home and relative.startswith(home) for home in homes):
                    found.append(f"{relative}:{node.lineno} imports {root}")
    return found


def test_heavy_dependencies_stay_in_their_adapter() -> None:
    problems = []
    for path in sorted(SRC.rglob("*.py")):
        problems += heavy_violations(path, path.read_text())
    assert not problems, "\n".join(problems)


def test_heavy_dependency_checker_catches_a_stray_import() -> None:
    assert heavy_violations(SRC / "broker" / "x.py", "import kazoo.client\n")
    assert heavy_violations(SRC / "managed_ledger" / "x.py", "import pyarrow.parquet as pq\n")
    assert heavy_violations(SRC / "runtime" / "x.py", "from deltalake import DeltaTable\n")
    assert not heavy_violations(SRC / "runtime" / "lakehouse" / "x.py", "import s3fs\n")
    assert heavy_violations(SRC / "ledger" / "x.py", "from pyspark.sql import SparkSession\n")
    assert not heavy_violations(SRC / "metadata" / "zookeeper" / "x.py", "import kazoo.client\n")


def test_connectors_do_not_reach_into_broker_or_storage() -> None:
    forbidden = ("magnetar.broker", "magnetar.managed_ledger", "magnetar.storage", "magnetar.admin")
    problems = []
    for path in _py_files("connectors"):
        for node in ast.walk(parse_python(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(forbidden):
                problems.append(f"{path.relative_to(SRC)}:{node.lineno} {node.module}")
    assert not problems, problems


#: The calls that mark a fault point (``faults.point``, ``faults.gate``/``gate0``/``gate1`` on callback paths,
#: ``faults.point_blocking`` on worker threads) and the keyword arguments that hand a point's name
#: to a disk write (``DiskFile.append_and_sync_then``), which passes it there.
POINT_CALLS = frozenset({"point", "gate", "gate0", "gate1", "point_blocking"})
POINT_KEYWORDS = frozenset({"torn_point", "unsynced_point"})
#: The disks pass the point names their callers give (``torn_point``/``unsynced_point``).
PASSES_GIVEN_NAMES = frozenset({"sim/disk.py", "runtime/disk_io.py", "runtime/disk_file.py"})


def fault_point_names(source: str) -> list[str]:
    names = []
    for node in ast.walk(parse_python(source)):
        if not isinstance(node, ast.Call):
            continue
        if (
            isinstance(node.func, ast.Attribute)
            and node.func.attr in POINT_CALLS
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "faults"
            and node.args
        ):
            arg = node.args[0]
            names.append(arg.value if isinstance(arg, ast.Constant) else "<not a literal>")
        for keyword in node.keywords:
            if keyword.arg in POINT_KEYWORDS and not (isinstance(keyword.value, ast.Name)
                                                      and keyword.value.id == keyword.arg):
                value = keyword.value
                names.append(value.value if isinstance(value, ast.Constant) else "<not a literal>")
    return names


def test_every_fault_point_in_the_source_is_registered() -> None:
    unknown = []
    for path in sorted(SRC.rglob("*.py")):
        relative = path.relative_to(SRC).as_posix()
        for name in fault_point_names(path.read_text()):
            if name not in REGISTRY and not (relative in PASSES_GIVEN_NAMES and name == "<not a literal>"):
                unknown.append(f"{relative}: {name}")
    assert not unknown, unknown


def test_fault_point_checker_reads_names() -> None:
    assert fault_point_names('await faults.point("bookie.after_reply")\n') == ["bookie.after_reply"]
    assert fault_point_names("await faults.point(name)\n") == ["<not a literal>"]
    assert fault_point_names('faults.gate("ledger.before_send", then, op)\n') == ["ledger.before_send"]
    assert fault_point_names('faults.point_blocking("x.y")\n') == ["x.y"]
    assert fault_point_names('f.append_and_sync_then(p, d, torn_point="a.b", unsynced_point=c)\n') == [
        "a.b", "<not a literal>"]
    assert fault_point_names("f(torn_point=torn_point)\n") == []  # a name handed on, not chosen here


def test_every_layer_package_states_what_it_owns() -> None:
    missing = []
    for init in sorted(SRC.glob("*/__init__.py")):
        doc = ast.get_docstring(parse_python(init.read_text()))
        if not doc or len(doc) < 40:
            missing.append(init.parent.name)
    assert not missing, f"layer packages without an ownership docstring: {missing}"
