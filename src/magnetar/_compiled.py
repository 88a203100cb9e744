"""The compiled hot path (issue 22): which modules mypyc compiles, and loading them.

``scripts/build_compiled.py`` (run by ``make``) compiles ``COMPILED_MODULES`` with mypyc into
``build/mypyc/`` beside ``src/`` and writes a manifest: the source directory it was built from,
the interpreter's cache tag and a SHA-256 of every compiled module's source. On ``import
magnetar`` this module puts a finder first on ``sys.meta_path`` that loads those modules from the
build's extension modules, if and only if:

* ``MAGNETAR_PURE_PYTHON`` is not set to ``1`` (the switch to the pure-Python modules),
* the build exists and was made from this source directory by this interpreter,
* no compiled module's source changed since the build (an edited ``.py`` is never shadowed by a
  stale extension; the whole build is then skipped, because compiled modules call each other
  natively and a mix of old and new code would run two versions of one class).

Otherwise every module is the plain ``.py`` (the fallback, always complete). ``MODE`` says which
one is active and ``REASON`` why: ``python -c "import magnetar._compiled as c; print(c.MODE,
c.REASON)"``.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

#: Set to ``1`` to run the pure-Python modules even when a compiled build is present.
PURE_ENV = "MAGNETAR_PURE_PYTHON"
#: The package directory (``src/magnetar``) and the build beside ``src/`` (``MAGNETAR_COMPILED_DIR``
#: names another one: the build script checks a new build there before it replaces the old one).
PACKAGE_DIR = Path(__file__).resolve().parent
BUILD_DIR = Path(os.environ.get("MAGNETAR_COMPILED_DIR") or PACKAGE_DIR.parent.parent / "build" / "mypyc")
MANIFEST = "manifest.json"
#: The name of the shared library that holds the compiled code (the per-module extensions are
#: thin shims that import it).
GROUP = "magnetar_hot"

#: The modules compiled, chosen by measurement (docs/performance.md, "Session 9" and "Session 10 ...
#: compiled hot path"): the modules that run per message on the unbatched publish path, from the
#: frame codec to the journal, then the fault points and the consume path.
COMPILED_MODULES: tuple[str, ...] = (
    "magnetar.base.checksum",
    "magnetar.base.entry",
    "magnetar.base.invariant",
    "magnetar.base.types",
    "magnetar.protocol.pulsar.fast",
    "magnetar.protocol.pulsar.fast_decode",
    "magnetar.protocol.pulsar.frames",
    "magnetar.protocol.pulsar._receiving",
    "magnetar.protocol.pulsar.connection",
    "magnetar.protocol.bookie.codec",
    "magnetar.storage.journal",
    "magnetar.storage.journal_express",  # session 14: per queued item (ledger counts, group taking)
    "magnetar.storage.journal_submit",  # session 15: the journal's submission side (Journal's base class)
    "magnetar.storage.bookie",
    "magnetar.ledger.handle",
    "magnetar.ledger.quorum",
    "magnetar.managed_ledger.append",
    "magnetar.managed_ledger.entry_reader",
    "magnetar.broker.producer",
    "magnetar.broker.session",
    "magnetar.broker.dedup",
    "magnetar.node.broker",
    # Session 10: every path passes fault points; the consume path (dispatch, acks, the cursor).
    "magnetar.faults.points",
    "magnetar.faults.breaks",
    "magnetar.faults.registry",
    "magnetar.broker.consumer",
    "magnetar.broker.dispatcher",
    "magnetar.broker.dispatcher_single",
    "magnetar.broker.dispatcher_shared",
    "magnetar.broker.dispatcher_key_shared",
    "magnetar.broker.subscription",
    "magnetar.broker.entry",
    "magnetar.broker.delayed",
    "magnetar.broker.metrics",
    "magnetar.managed_ledger.ranges",
    "magnetar.managed_ledger.ledger_list",
    "magnetar.broker.ids",
    "magnetar.protocol.pulsar.commands",
    "magnetar.protocol.pulsar.batch",
    # Session 11 compiled these four and took them out at the merge (cluster brokers died under
    # load in tests/cluster/test_elastic.py); session 12 found the cause and compiles them again.
    "magnetar.runtime.network",
    "magnetar.broker.topic",
    "magnetar.managed_ledger.managed_ledger",
    "magnetar.managed_ledger.cursor",
    # Session 15 (remote helper): per entry per bookie, three times per message with three
    # bookies: the ledger state each add notes, the write cache, the checkpoint flush's framing
    # and index rows, the checkpointer (its ``put`` per add, its flush per entry).
    "magnetar.storage.bookie_ledger",
    "magnetar.storage.caches",
    "magnetar.storage.checkpointer",
    "magnetar.storage.flush_rows",
    # Session 15: the loop thread's remaining interpreted frames at 2,000 msg/s and at the maximum
    # rate (py-spy): the local bookie transport, the journal's reply lanes and PAD record, the
    # system clock, the shared add window, the bookie's index keys, and the lazy events set and
    # cleared per message (the write cache and ledger state: the remote helper's lines above).
    # Not runtime/disk.py's loop side: compiled (split into a module of its own, with the writer
    # threads' loop), the e2e p99 at 2,000 msg/s rose from ~2.7 to 8-11 ms in A/B runs (session 15).
    # Not storage/entry_log.py (tests replace EntryLogger.append_many on an instance, which a
    # native class refuses) nor broker/managed_log.py (ReadOnlyTopicLog, an interpreted subclass,
    # hands it a ReadOnlyManagedLedger where a ManagedLedger is declared; its own share was 0.2%).
    "magnetar.node.ledger",
    "magnetar.storage.journal_replies",
    "magnetar.storage.journal_pad",
    "magnetar.runtime.clock",
    "magnetar.ledger.window",
    "magnetar.storage.index",
    "magnetar.base.lazy_event",  # 5 calls per message (a producer's room, the pipeline's flags)
    "magnetar.base.loop_ref",  # session 21: the running loop without a getpid per lookup
    "magnetar.broker.entry_published",  # session 16: the log's callback per published entry
    "magnetar.catalog.policy_cache",  # session 16: ``PolicyCache.effective``, once per publish run
    # Session 17 (ledger): read or called per run at one message per run (100,000 topics, a
    # modest rate): the managed ledger's state (two reads per append run) and the ledger client's
    # add-timeout watch (a writer joins it on its first add after an idle spell: per message at
    # 100,000 topics round-robin).
    "magnetar.managed_ledger.state",
    "magnetar.ledger.add_timeouts",
    # Session 17 (broker): per publish run at a modest rate (one message per run): the managed
    # topic log's append (``broker/managed_log.py`` stays interpreted, see above).
    "magnetar.broker.managed_append",
    "magnetar.protocol.pulsar.metadata_scan",  # per SEND: its MessageMetadata checked without protobuf
    # Session 18 (storage): per journal submission and per journal group, once per bookie (three
    # times per message run with three bookies): the group-wait policy (``arrived`` per
    # submission) and the inline-write pace (``inline_ok`` and ``finished`` per group); both ran
    # interpreted (py-spy of ``bench/bookie_storage_cost.py``).
    "magnetar.storage.journal_wait",
    "magnetar.runtime.disk_pace",
    # Session 18 (ledger): the one object per add both the managed ledger (``_OpAdd``) and the
    # ledger client's table share (a compiled class's base class is compiled too).
    "magnetar.ledger.pending_add",
    # Session 19 (storage): per journal group on the loop thread (one group per message at 2,000
    # msg/s): ``LocalFile.append_and_sync_then``, the aligned copy, the inline write and sync
    # (``write_job``) and the completion, split out of ``runtime/disk.py``, whose interpreted
    # frames were the loop's largest interpreted share (the lead's profile). The writer threads'
    # loop stays interpreted (``runtime/disk_threads.py``, session 15's p99 finding).
    "magnetar.runtime.disk_io",
    "magnetar.runtime.disk_file",
    # Session 20 (broker): the broker's passes over every loaded topic, per topic (which policy
    # checks can act on a topic, the rate samples of a run of topics): per topic every 5 s and
    # every minute at 100,000 topics.
    "magnetar.broker.topic_passes",
    # Session 21 (storage): per journal group on the loop thread, from the compiled
    # ``runtime.disk_file`` (``_AlignedBuffers.take`` and ``give_back``, ``_copy_into``: ~0.45
    # interpreted calls each per message at a steady 2,000 msg/s).
    "magnetar.runtime.disk_buffers",
    # Session 21 (broker): the FIFO step of a producer's pending SENDs and a topic's appends in
    # flight, once per message (a list and a head index instead of a deque per idle topic).
    "magnetar.base.fifo",
)


def source_path(module: str) -> Path:
    """The ``.py`` file of ``module`` (a module of this package, not a package ``__init__``)."""
    parts = module.split(".")
    if parts[0] != "magnetar" or len(parts) < 2:
        raise ValueError(f"not a magnetar module: {module!r}")
    return PACKAGE_DIR.joinpath(*parts[1:]).with_suffix(".py")


def source_digest(module: str) -> str:
    return hashlib.sha256(source_path(module).read_bytes()).hexdigest()


def manifest_for(modules: Sequence[str]) -> dict[str, object]:
    """The manifest a build of ``modules`` from this source directory records."""
    return {
        "source_dir": str(PACKAGE_DIR),
        "cache_tag": sys.implementation.cache_tag,
        "group": GROUP,
        "modules": {module: source_digest(module) for module in modules},
    }


def why_not_usable(manifest: dict[str, object]) -> str | None:
    """``None`` if ``manifest`` describes a build of exactly today's sources, else the reason."""
    if manifest.get("source_dir") != str(PACKAGE_DIR):
        return f"the build in {BUILD_DIR} was made from {manifest.get('source_dir')}, not {PACKAGE_DIR}"
    if manifest.get("cache_tag") != sys.implementation.cache_tag:
        return f"the build is for {manifest.get('cache_tag')}, this interpreter is {sys.implementation.cache_tag}"
    modules = manifest.get("modules")
    if not isinstance(modules, dict) or not modules:
        return "the build's manifest lists no modules"
    for module, digest in modules.items():
        try:
            current = source_digest(module)
        except (OSError, ValueError):
            return f"{module} is no longer in the source tree"
        if current != digest:
            return f"{module} changed since the build (run `make compile`)"
    return None


class _CompiledFinder(importlib.abc.MetaPathFinder):
    """Finds the compiled modules (and their shared library) in the build directory."""

    def __init__(self, files: dict[str, Path]) -> None:
        self._files = files

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        file = self._files.get(fullname)
        if file is None:
            return None
        loader = importlib.machinery.ExtensionFileLoader(fullname, str(file))
        return importlib.util.spec_from_file_location(fullname, file, loader=loader)


def _extension(directory: Path, stem: str) -> Path | None:
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = directory / (stem + suffix)
        if candidate.is_file():
            return candidate
    return None


def _files(manifest: dict[str, object]) -> dict[str, Path] | str:
    """Module name -> extension file for every compiled module, or why the build is incomplete."""
    modules = manifest["modules"]
    assert isinstance(modules, dict)
    files: dict[str, Path] = {}
    group = _extension(BUILD_DIR, f"{GROUP}__mypyc")
    if group is None:
        return f"the build in {BUILD_DIR} has no shared library {GROUP}__mypyc"
    files[f"{GROUP}__mypyc"] = group
    for module in modules:
        parts = module.split(".")
        file = _extension(BUILD_DIR.joinpath(*parts[:-1]), parts[-1])
        if file is None:
            return f"the build in {BUILD_DIR} has no extension for {module}"
        files[module] = file
    return files


def _decide() -> tuple[str, str, dict[str, Path]]:
    if os.environ.get(PURE_ENV, "") == "1":
        return "pure", f"{PURE_ENV}=1", {}
    try:
        manifest = json.loads((BUILD_DIR / MANIFEST).read_text())
    except FileNotFoundError:
        return "pure", f"no compiled build in {BUILD_DIR} (`make compile` makes one)", {}
    except (OSError, ValueError) as exc:
        return "pure", f"the build's manifest is unreadable: {exc}", {}
    if not isinstance(manifest, dict):
        return "pure", "the build's manifest is not an object", {}
    reason = why_not_usable(manifest)
    if reason is not None:
        return "pure", reason, {}
    files = _files(manifest)
    if isinstance(files, str):
        return "pure", files, {}
    return "compiled", f"{len(files) - 1} modules from {BUILD_DIR}", files


#: ``"compiled"`` or ``"pure"``, and why.
MODE, REASON, _FILES = _decide()
if MODE == "compiled":
    sys.meta_path.insert(0, _CompiledFinder(_FILES))
elif os.environ.get(PURE_ENV, "") != "1" and (BUILD_DIR / MANIFEST).exists():
    # A build exists but cannot be used: say so once, so a stale build is never silent.
    print(f"magnetar: running pure Python: {REASON}", file=sys.stderr)
