"""The journal's reply lanes at many ledgers (issue 22, 100,000 topics): the CPU per answered
record of ``ReplyLanes`` for groups of ``--group`` records spread over as many ledgers (one record
per lane, as at 100,000 topics) or over ``--ledgers`` ledgers, answered a slice of 32 at a time as
the journal does, against another tree's ``journal_replies.py`` in the same run (``--base``).

Run: ``PYTHONPATH=src .venv/bin/python bench/reply_lanes.py --base /tmp/base16/src``.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType

from magnetar.base.limits import JOURNAL_REPLY_SLICE_COUNT


def _load(label: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_reply_lanes_{label}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _us_per_record(module: ModuleType, group: int, ledgers: int, groups: int) -> float:
    lanes = module.ReplyLanes()
    replies = [lambda _error: None] * group
    lanes_of = [(i % ledgers, 1) for i in range(group)]
    started = time.process_time_ns()
    for _ in range(groups):
        lanes.add(replies, lanes_of, module.GroupReplies(group))
        while lanes:
            lanes.run(JOURNAL_REPLY_SLICE_COUNT)
    return (time.process_time_ns() - started) / 1000 / (group * groups)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="another tree's src directory")
    parser.add_argument("--group", type=int, default=512, help="records per group")
    parser.add_argument("--ledgers", type=int, default=0, help="ledgers (0: one per record)")
    parser.add_argument("--groups", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    here = Path(__file__).resolve().parent.parent / "src"
    trees = {"base": _load("base", args.base / "magnetar/storage/journal_replies.py"),
             "now": _load("now", here / "magnetar/storage/journal_replies.py")}
    ledgers = args.ledgers or args.group
    figures: dict[str, list[float]] = {label: [] for label in trees}
    for _ in range(args.repeats):
        for label, module in trees.items():  # interleaved
            figures[label].append(_us_per_record(module, args.group, ledgers, args.groups))
    for label, values in figures.items():
        print(f"{label}: us per answered record min/median/max "
              f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f} "
              f"(groups of {args.group} over {ledgers} ledgers)")
    print(f"now/base (medians): {statistics.median(figures['now']) / statistics.median(figures['base']):.3f}")


if __name__ == "__main__":
    main()
