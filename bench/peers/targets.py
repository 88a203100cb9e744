"""Issue 22's targets from one run of ``bench/peers/run.py``: medians per system, each target's
figure, its reference in the same run, the ratio and met/missed; the markdown tables.

Pure functions over the run's result dict (tested in ``tests/bench/test_peers_targets.py``).
A system key is ``<system>`` for a peer and ``<system>/<variant>`` for Magnetar (``pure`` or
``compiled``); each target is evaluated per Magnetar variant.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any

NATS = "nats"
ONE_BOOKIE = "magnetar-1-bookie"
THREE_BOOKIES = "magnetar-3-bookies"


def stats(rows: list[dict[str, Any]], key: str) -> dict[str, float] | None:
    values = [float(row[key]) for row in rows if isinstance(row.get(key), (int, float))]
    if not values:
        return None
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def cell(summary: dict[str, float] | None, digits: int = 0) -> str:
    if summary is None:
        return "-"
    fmt = f"{{:,.{digits}f}}"
    return f"{fmt.format(summary['median'])} ({fmt.format(summary['min'])}..{fmt.format(summary['max'])})"


def system_key(system: str, variant: str | None) -> str:
    return system if variant is None else f"{system}/{variant}"


def median(systems: dict[str, dict[str, Any]], key: str, metric: str) -> float | None:
    found = systems.get(key, {}).get("stats", {}).get(metric)
    return None if found is None else float(found["median"])


@dataclass(frozen=True)
class Target:
    """One target of the issue for one variant: ``ratio`` is ``figure / reference`` (the reference
    is the same run's peer figure, or the fixed bound for an absolute target), met when
    ``ratio <= limit`` (``at_most``) or ``ratio >= limit``. ``pairs``: the same ratio per repeat
    (figure and reference from the same repeat, measured minutes apart at most), shown beside it:
    they tell a steady result from one that flips with the machine's load."""

    name: str
    variant: str
    figure: float | None
    reference: float | None
    reference_label: str
    limit: float
    at_most: bool
    unit: str
    pairs: tuple[float, ...] = ()

    @property
    def ratio(self) -> float | None:
        if self.figure is None or self.reference is None or self.reference == 0:
            return None
        return self.figure / self.reference

    @property
    def verdict(self) -> str:
        ratio = self.ratio
        if ratio is None:
            return "not measured"
        return "met" if (ratio <= self.limit if self.at_most else ratio >= self.limit) else "missed"

    def pairs_met(self) -> int:
        return sum(1 for r in self.pairs if (r <= self.limit if self.at_most else r >= self.limit))

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "pairs": list(self.pairs), "ratio": self.ratio, "verdict": self.verdict}


def paired(systems: dict[str, dict[str, Any]], key: str, metric: str, ref_key: str | None,
           ref_metric: str, constant: float | None = None) -> tuple[float, ...]:
    """Per repeat (the rows' ``repeat``), ``key``'s ``metric`` over ``ref_key``'s ``ref_metric`` (or
    over ``constant``), for the repeats where both were measured."""
    def by_repeat(name: str | None, field: str) -> dict[int, float]:
        rows = systems.get(name or "", {}).get("rows", [])
        return {int(r["repeat"]): float(r[field]) for r in rows
                if isinstance(r.get(field), (int, float)) and "repeat" in r}

    figures = by_repeat(key, metric)
    refs = {i: constant for i in figures} if constant is not None else by_repeat(ref_key, ref_metric)
    return tuple(figures[i] / refs[i] for i in sorted(figures) if refs.get(i))


def targets(systems: dict[str, dict[str, Any]], variants: list[str]) -> list[Target]:
    """Every target per Magnetar variant, with the same run's references."""
    out: list[Target] = []
    nats = NATS if NATS in systems else None

    def peer(metric: str) -> float | None:
        return None if nats is None else median(systems, nats, metric)

    for variant in variants:
        one, three = system_key(ONE_BOOKIE, variant), system_key(THREE_BOOKIES, variant)
        out += [
            Target("batched server CPU per message <= 2 us", variant,
                   median(systems, one, "batched_server_us_msg"), 2.0, "2 us", 1.0, True, "us",
                   paired(systems, one, "batched_server_us_msg", None, "", 2.0)),
            Target("--blast durable ingest >= 40% of the disk's fsync'd bandwidth", variant,
                   median(systems, one, "blast_batched_mb_s"), median(systems, one, "disk_fsync_mb_s"),
                   "disk MB/s (same run, same filesystem)", 0.4, False, "MB/s",
                   paired(systems, one, "blast_batched_mb_s", one, "disk_fsync_mb_s")),
            Target("3 bookies (3,3,2): unbatched server CPU <= 1.5x 1 bookie", variant,
                   median(systems, three, "unbatched_server_us_msg"), median(systems, one, "unbatched_server_us_msg"),
                   "1 bookie us/msg", 1.5, True, "us",
                   paired(systems, three, "unbatched_server_us_msg", one, "unbatched_server_us_msg")),
        ]
        for name, metric, label, limit, at_most, unit in (
                ("unbatched server CPU per durable message <= 3x NATS", "unbatched_server_us_msg", "NATS us/msg",
                 3.0, True, "us"),
                ("unbatched throughput >= 1x NATS", "unbatched_msgs_s", "NATS msg/s", 1.0, False, "msg/s"),
                ("e2e p99 at the paced rate <= NATS p99", "e2e_p99_ms", "NATS p99 ms", 1.0, True, "ms")):
            out.append(Target(name, variant, median(systems, one, metric), peer(metric), label, limit, at_most, unit,
                              paired(systems, one, metric, nats, metric)))
    return out


def _num(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    digits = 0 if abs(value) >= 1000 else 2 if abs(value) < 10 else 1
    return f"{value:,.{digits}f}{' ' + unit if unit else ''}"


def targets_markdown(found: list[Target]) -> list[str]:
    lines = ["| target | variant | figure (median) | reference (same run) | ratio of medians | limit | verdict "
             "| ratio per repeat (met in) |",
             "|---|---|---|---|---|---|---|---|"]
    for t in found:
        ratio = "-" if t.ratio is None else _ratio(t.ratio)
        limit = f"{'<=' if t.at_most else '>='} {t.limit:g}"
        pairs = (", ".join(_ratio(r) for r in t.pairs) + f" ({t.pairs_met()}/{len(t.pairs)})") if t.pairs else "-"
        lines.append(f"| {t.name} | {t.variant} | {_num(t.figure, t.unit)} | {_num(t.reference)} "
                     f"({t.reference_label}) | {ratio} | {limit} | **{t.verdict}** | {pairs} |")
    return lines


def _ratio(value: float) -> str:
    return f"{value:.3f}" if value < 10 else f"{value:.1f}"


#: The blast phase's columns: (metric, header, digits).
BLAST_COLUMNS = (("blast_unbatched_msgs_s", "blast unbatched msg/s", 0),
                 ("blast_unbatched_server_us_msg", "server us/msg", 1),
                 ("blast_batched_msgs_s", "blast batched msg/s", 0),
                 ("blast_batched_mb_s", "MB/s", 1),
                 ("blast_batched_server_us_msg", "server us/msg", 2),
                 ("disk_fsync_mb_s", "disk fsync'd MB/s", 0),
                 ("blast_batched_over_disk", "ingest / disk", 3),
                 ("blast_generator_pct", "generator % of a core (busiest process)", 0),
                 ("blast_server_thread_pct", "busiest server thread % of a core", 0))


def blast_markdown(systems: dict[str, dict[str, Any]]) -> list[str]:
    rows = [(name, s) for name, s in systems.items() if "blast_batched_mb_s" in s.get("stats", {})]
    if not rows:
        return []
    lines = ["| system | " + " | ".join(header for _, header, _ in BLAST_COLUMNS) + " | bound by |",
             "|---" * (len(BLAST_COLUMNS) + 2) + "|"]
    for name, system in rows:
        cells = [cell(system["stats"].get(metric), digits) for metric, _, digits in BLAST_COLUMNS]
        bound = ", ".join(sorted({str(r.get("blast_bound_by", "?")) for r in system.get("rows", [])}))
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {bound} |")
    return lines


def bound_by(generator_pct: float, server_thread_pct: float, machine_pct: float, cores: int,
             saturated_pct: float = 85.0) -> str:
    """What limited a blast phase: the broker when its busiest thread ran near a full core (the
    event loop is one thread), the generator when one of its processes did and the broker did not,
    the machine when every core was busy; otherwise neither (latency: fsync waits, the window)."""
    if server_thread_pct >= saturated_pct:
        return "broker (its busiest thread at a full core)"
    if generator_pct >= saturated_pct:
        return "generator (a blast process at a full core)"
    if machine_pct >= saturated_pct * cores:
        return "machine (every core busy: the broker, its bookies and the generator share them)"
    return "neither CPU (waits: fsync, the window)"


def per_message(count: float | None, messages: float) -> float | None:
    return None if count is None or messages <= 0 else count / messages
