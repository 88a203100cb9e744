"""Compile the hot path with mypyc (issue 22): ``make`` runs this after installing Magnetar.

Compiles ``magnetar._compiled.COMPILED_MODULES`` with mypyc and the machine's C compiler into
``build/mypyc/`` (C sources and objects in ``build/mypyc-c/`` and ``build/mypyc-tmp/``, kept for
a faster rebuild), then writes ``build/mypyc/manifest.json``; ``import magnetar`` loads the
extensions only while that manifest matches the sources (``src/magnetar/_compiled.py``).

It never fails an install: without mypyc, a C compiler or Python's headers, or when the build
fails, it prints one line saying Magnetar runs pure Python and exits 0 (``--strict`` exits 1
instead, for a check that the build works). A build that is already current is not redone.
``MAGNETAR_COMPILE=0`` skips it (and removes a build). A build that is not current is removed
before the new one is made, so ``build/mypyc/manifest.json`` exists exactly when Magnetar runs
compiled.

Run: ``.venv/bin/python scripts/build_compiled.py [--force] [--strict]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PREFIX = "magnetar compile:"


def _load_compiled_module() -> ModuleType:
    """``magnetar/_compiled.py`` on its own, without activating a build in this process."""
    os.environ["MAGNETAR_PURE_PYTHON"] = "1"
    spec = importlib.util.spec_from_file_location("_magnetar_compiled", REPO / "src" / "magnetar" / "_compiled.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _missing_tool(needs_mypyc: bool = True) -> str | None:
    if needs_mypyc and importlib.util.find_spec("mypyc") is None:
        return "mypyc is not installed (it ships with mypy: pip install mypy)"
    compiler = os.environ.get("CC", "cc").split()[0]
    if shutil.which(compiler) is None:
        return f"no C compiler ({compiler}) on PATH"
    include = Path(sysconfig.get_paths()["include"])
    if not (include / "Python.h").is_file():
        return f"Python's C headers are missing ({include}/Python.h)"
    return None


def _current(compiled: ModuleType) -> bool:
    try:
        manifest = json.loads((compiled.BUILD_DIR / compiled.MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    same_modules = isinstance(manifest, dict) and sorted(manifest.get("modules", {})) == sorted(compiled.COMPILED_MODULES)
    return bool(same_modules and compiled.why_not_usable(manifest) is None)


def _register_builtin_types() -> None:
    """Builtin classes mypyc does not know by name yet, so dataclass fields can use them.

    A compiled dataclass stores its fields' annotations as the class objects; mypyc loads a
    builtin class through its own table (``int``, ``bytes``, ``dict``...) and otherwise looks
    the name up in the module's globals, where ``memoryview`` or ``set`` are not (a ``KeyError``
    at import: ``payload: memoryview`` in ``protocol/pulsar/frames.py``). The build imports
    every module it made before it keeps the build, so a gap found later fails the build, never
    a server.
    """
    from mypyc.ir.rtypes import object_rprimitive
    from mypyc.primitives.registry import builtin_names, load_address_op

    for name, c_type in (("memoryview", "PyMemoryView_Type"), ("set", "PySet_Type"),
                         ("frozenset", "PyFrozenSet_Type"), ("object", "PyBaseObject_Type")):
        if f"builtins.{name}" not in builtin_names:
            load_address_op(name=f"builtins.{name}", type=object_rprimitive, src=c_type)


def _imports_cleanly(compiled: ModuleType, staging: Path) -> str | None:
    """Imports every compiled module from ``staging`` in a fresh interpreter; the error, if any."""
    probe = (
        "import sys, magnetar._compiled as c\n"
        "assert c.MODE == 'compiled', c.REASON\n"
        "import importlib\n"
        "for m in c.COMPILED_MODULES:\n"
        "    mod = importlib.import_module(m)\n"
        "    assert not mod.__file__.endswith('.py'), mod.__file__\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"), MAGNETAR_COMPILED_DIR=str(staging))
    env.pop("MAGNETAR_PURE_PYTHON", None)
    result = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        return (result.stderr.strip().splitlines() or [f"exit status {result.returncode}"])[-1]
    return None


def _compile_in_parallel(compiler: Any, jobs: int) -> None:
    """Make ``compiler.compile`` run one C compiler per source file, ``jobs`` at a time.

    setuptools compiles the sources of one extension one after the other (its ``-j`` spreads
    whole extensions). In ``--multi-file`` mode mypyc writes one C file per module (and the
    runtime's files) for the one shared library, so this is what lets both cores work; the
    largest files start first. The steps are distutils' own ``compile`` (``_setup_compile``,
    ``_get_cc_args``, ``_compile``), only spread over threads that each wait on a ``cc``.
    """
    from concurrent.futures import ThreadPoolExecutor

    def compile_all(sources: list[str], output_dir: str | None = None, macros: Any = None,
                    include_dirs: Any = None, debug: bool = False, extra_preargs: Any = None,
                    extra_postargs: Any = None, depends: Any = None) -> list[str]:
        macros, objects, extra_postargs, pp_opts, build = compiler._setup_compile(
            output_dir, macros, include_dirs, sources, depends, extra_postargs)
        cc_args = compiler._get_cc_args(pp_opts, debug, extra_preargs)
        todo = sorted((obj for obj in objects if obj in build), key=lambda obj: -os.path.getsize(build[obj][0]))

        def one(obj: str) -> None:
            src, ext = build[obj]
            compiler._compile(obj, src, ext, cc_args, extra_postargs, pp_opts)

        with ThreadPoolExecutor(max(1, jobs)) as pool:
            for _ in pool.map(one, todo):  # re-raises a CompileError
                pass
        return list(objects)

    compiler.compile = compile_all


def _build(compiled: ModuleType, jobs: int, multi_file: bool) -> None:
    from mypyc.build import mypycify
    from setuptools import setup
    from setuptools.command.build_ext import build_ext

    class BuildExt(build_ext):  # type: ignore[misc]
        def build_extensions(self) -> None:
            if multi_file:
                _compile_in_parallel(self.compiler, jobs)
            super().build_extensions()

    modules: tuple[str, ...] = compiled.COMPILED_MODULES
    manifest = compiled.manifest_for(modules)
    paths = [str(compiled.source_path(module).relative_to(REPO)) for module in modules]
    build = REPO / "build"
    staging = build / "mypyc-staging"
    shutil.rmtree(staging, ignore_errors=True)
    os.chdir(REPO)  # mypy reads pyproject.toml's [tool.mypy] (strict) from here
    _register_builtin_types()
    extensions = mypycify(paths, opt_level="3", target_dir=str(build / "mypyc-c"), group_name=compiled.GROUP,
                          multi_file=multi_file)
    setup(
        name="magnetar-compiled",
        ext_modules=extensions,
        cmdclass={"build_ext": BuildExt},
        script_args=["-q", "build_ext", "--build-lib", str(staging), "--build-temp", str(build / "mypyc-tmp"), "-j", str(jobs)],
    )
    if compiled.manifest_for(modules) != manifest:
        raise RuntimeError("a compiled module's source changed during the build; run it again")
    (staging / compiled.MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    broken = _imports_cleanly(compiled, staging)
    if broken is not None:
        raise RuntimeError(f"the compiled modules do not import: {broken}")
    shutil.rmtree(compiled.BUILD_DIR, ignore_errors=True)
    staging.rename(compiled.BUILD_DIR)


def _load_native_writer_module() -> ModuleType:
    """``magnetar/runtime/disk_writer.py``'s manifest helpers, without loading a build."""
    os.environ["MAGNETAR_PURE_PYTHON"] = "1"
    sys.path.insert(0, str(REPO / "src"))
    try:
        import magnetar.runtime.disk_writer as disk_writer
    finally:
        sys.path.pop(0)
    return disk_writer


def _native_current(writer: ModuleType) -> bool:
    try:
        return bool(json.loads((writer.BUILD_DIR / writer.MANIFEST).read_text()) == writer.manifest())
    except (OSError, ValueError):
        return False


def _build_native(writer: ModuleType) -> None:
    """Cythonize and compile ``runtime/disk_cwriter.pyx`` into ``build/cython/`` (through a
    staging directory: the build is replaced only once the new one imports)."""
    from Cython.Build import cythonize
    from setuptools import Extension, setup

    build = REPO / "build"
    staging = build / "cython-staging"
    shutil.rmtree(staging, ignore_errors=True)
    manifest = writer.manifest()
    source = writer.SOURCE.relative_to(REPO)
    extension = Extension(writer.NATIVE_MODULE, [str(source)], extra_compile_args=["-O2"])
    os.chdir(REPO)
    setup(
        name="magnetar-native-writer",
        ext_modules=cythonize([extension], build_dir=str(build / "cython-c"), quiet=True,
                              compiler_directives={"language_level": "3"}),
        script_args=["-q", "build_ext", "--build-lib", str(staging), "--build-temp", str(build / "cython-tmp")],
    )
    if writer.manifest() != manifest:
        raise RuntimeError("disk_cwriter.pyx changed during the build; run it again")
    (staging / writer.MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    probe = ("import magnetar.runtime.disk_writer as w\n"
             "assert w.MODE == 'native', w.REASON\n")
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"), MAGNETAR_CYTHON_DIR=str(staging), MAGNETAR_NATIVE_WRITER="1")
    env.pop("MAGNETAR_PURE_PYTHON", None)
    result = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise RuntimeError((result.stderr.strip().splitlines() or [f"exit status {result.returncode}"])[-1])
    shutil.rmtree(writer.BUILD_DIR, ignore_errors=True)
    staging.rename(writer.BUILD_DIR)


def _main_native(args: argparse.Namespace) -> int:
    """The journal's native writer (Cython, ``runtime/disk_cwriter.pyx``, session 22): built
    beside the mypyc build, used while its manifest matches the source (``runtime.disk_writer``);
    without it the journal's writes go to Python's writer threads."""
    failed = 1 if args.strict else 0
    writer = _load_native_writer_module()
    if os.environ.get("MAGNETAR_COMPILE", "1") == "0":
        shutil.rmtree(writer.BUILD_DIR, ignore_errors=True)
        return 0
    if not args.force and _native_current(writer):
        print(f"{PREFIX} the native writer is up to date in {writer.BUILD_DIR}")
        return 0
    shutil.rmtree(writer.BUILD_DIR, ignore_errors=True)
    missing = _missing_tool(needs_mypyc=False)
    if missing is None and importlib.util.find_spec("Cython") is None:
        missing = "Cython is not installed (pip install cython)"
    if missing is not None:
        print(f"{PREFIX} native writer not built: {missing}; the journal uses Python's writer threads")
        return failed
    started = time.monotonic()
    try:
        _build_native(writer)
    except (Exception, SystemExit) as exc:  # a failed build must never fail the install
        traceback.print_exc()
        print(f"{PREFIX} native writer build failed ({exc!r}); the journal uses Python's writer threads")
        return failed
    print(f"{PREFIX} native writer compiled in {time.monotonic() - started:.0f} s into {writer.BUILD_DIR}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--force", action="store_true", help="rebuild even if the build is current")
    parser.add_argument("--strict", action="store_true", help="exit 1 if the build cannot be made")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--one-file", action="store_true",
                        help="one C file for all modules, compiled by one cc (no --jobs; slower to build)")
    parser.add_argument("--native-only", action="store_true", help="build only the native writer (Cython)")
    args = parser.parse_args()
    mypyc_status = 0 if args.native_only else _main_mypyc(args)
    return max(mypyc_status, _main_native(args))


def _main_mypyc(args: argparse.Namespace) -> int:
    failed = 1 if args.strict else 0
    compiled = _load_compiled_module()
    if os.environ.get("MAGNETAR_COMPILE", "1") == "0":
        shutil.rmtree(compiled.BUILD_DIR, ignore_errors=True)
        print(f"{PREFIX} skipped (MAGNETAR_COMPILE=0): Magnetar runs pure Python")
        return 0
    if not args.force and _current(compiled):
        print(f"{PREFIX} {len(compiled.COMPILED_MODULES)} modules up to date in {compiled.BUILD_DIR}")
        return 0
    # A build that is not current is never used (the sources changed); it goes now, so whether a
    # build exists after this script says whether Magnetar runs compiled (make test relies on it).
    shutil.rmtree(compiled.BUILD_DIR, ignore_errors=True)
    missing = _missing_tool()
    if missing is not None:
        print(f"{PREFIX} not built: {missing}; Magnetar runs pure Python")
        return failed
    started = time.monotonic()
    print(f"{PREFIX} compiling {len(compiled.COMPILED_MODULES)} modules with mypyc (about a minute) ...", flush=True)
    try:
        _build(compiled, args.jobs, multi_file=not args.one_file)
    except (Exception, SystemExit) as exc:  # a failed build must never fail the install
        traceback.print_exc()
        print(f"{PREFIX} build failed ({exc!r}); Magnetar runs pure Python")
        return failed
    print(f"{PREFIX} {len(compiled.COMPILED_MODULES)} modules compiled in {time.monotonic() - started:.0f} s "
          f"into {compiled.BUILD_DIR} (MAGNETAR_PURE_PYTHON=1 runs the .py modules)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
