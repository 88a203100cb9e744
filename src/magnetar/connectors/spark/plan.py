"""Topic partition layouts and how a read is cut into Spark partitions (pure; no pyspark).

A ``PartitionLayout`` is what the planner saw of one topic partition: its ledgers in id order,
each with how many entries are readable (a closed ledger: all of them; the open one: up to the
LAC the planner read), and each ledger's encoded metadata so tasks reach the bookies without the
metadata store. ``earliest``/``latest`` are the positions before the first and after the last
readable entry. ``ranges(start, end)`` lists the entry ranges of ``[start, end)``;
``trimmed(start)`` says retention removed the ledger ``start`` points into.

``cut`` turns ranges into ``Slice``s: one per topic partition, or one per ledger with
``splitBy=ledger``, then halves the largest until there are ``minPartitions``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from magnetar.base.errors import InvalidArgumentError, LimitExceededError
from magnetar.base.limits import SPARK_SLICES_COUNT_MAX
from magnetar.base.types import Position
from magnetar.connectors.spark.offsets import BEGINNING, format_position


@dataclass(frozen=True)
class LedgerSpan:
    ledger_id: int
    readable: int  # entries 0..readable-1 may be read
    metadata: bytes = b""  # ledger metadata record (ledger_metadata.LedgerMetadata.encode())
    offload_uid: str = ""  # offloaded: the attempt whose Parquet file holds it (read there, not from bookies)


@dataclass(frozen=True)
class EntryRange:
    ledger_id: int
    first: int
    last: int  # inclusive

    @property
    def count(self) -> int:
        return self.last - self.first + 1


@dataclass(frozen=True)
class PartitionLayout:
    topic: str  # full name of the partition (or of a non-partitioned topic)
    partition: int  # -1: not a partition
    ledgers: tuple[LedgerSpan, ...]

    @property
    def earliest(self) -> Position:
        return Position(self.ledgers[0].ledger_id, 0) if self.ledgers else BEGINNING

    @property
    def latest(self) -> Position:
        if not self.ledgers:
            return BEGINNING
        last = self.ledgers[-1]
        return Position(last.ledger_id, last.readable)

    def trimmed(self, start: Position) -> bool:
        """``start`` points into a ledger that is gone from the front of the list (retention)."""
        return start.ledger_id >= 0 and (not self.ledgers or start.ledger_id < self.ledgers[0].ledger_id)

    def describe_loss(self, start: Position) -> str:
        first = format_position(self.earliest) if self.ledgers else "none"
        return (
            f"{self.topic}: offset {format_position(start)} is no longer stored: retention trimmed ledgers "
            f"before {first} (the earliest entry still stored). Set failOnDataLoss=false to continue from "
            f"{first}, skipping the trimmed entries"
        )

    def ranges(self, start: Position, end: Position) -> list[EntryRange]:
        """Entry ranges of ``[start, end)`` over the listed ledgers (end clamped to what is readable)."""
        out = []
        for span in self.ledgers:
            if span.ledger_id < start.ledger_id or span.ledger_id > end.ledger_id:
                continue
            first = start.entry_id if span.ledger_id == start.ledger_id else 0
            last = span.readable - 1
            if span.ledger_id == end.ledger_id:
                last = min(last, end.entry_id - 1)
            if last >= first:
                out.append(EntryRange(span.ledger_id, first, last))
        return out

    def offload_of(self, ledger_id: int) -> str:
        for span in self.ledgers:
            if span.ledger_id == ledger_id:
                return span.offload_uid
        raise InvalidArgumentError(f"{self.topic}: ledger {ledger_id} is not in the layout")

    def metadata_of(self, ledger_id: int) -> bytes:
        for span in self.ledgers:
            if span.ledger_id == ledger_id:
                return span.metadata
        raise InvalidArgumentError(f"{self.topic}: ledger {ledger_id} is not in the layout")


@dataclass(frozen=True)
class Slice:
    """What one Spark task reads: entry ranges of one topic partition (picklable)."""

    topic: str
    partition: int
    ranges: tuple[EntryRange, ...]
    ledger_metadata: Mapping[int, bytes] = field(default_factory=dict)
    #: Offloaded ledgers of the slice -> the attempt uid of their Parquet file.
    offloaded: Mapping[int, str] = field(default_factory=dict)

    @property
    def entries(self) -> int:
        return sum(r.count for r in self.ranges)

    @property
    def tiers(self) -> tuple[str, ...]:
        """How the task reads its ranges, run by run in order: ``lakehouse`` (offloaded ledgers,
        Arrow batches from their Parquet files) or ``bookies`` (entries, rows built per entry)."""
        out: list[str] = []
        for r in self.ranges:
            tier = "lakehouse" if r.ledger_id in self.offloaded else "bookies"
            if not out or out[-1] != tier:
                out.append(tier)
        return tuple(out)


def _halve(piece: Slice) -> tuple[Slice, Slice] | None:
    if piece.entries < 2:
        return None
    target = _cut_point(piece, piece.entries // 2)
    left: list[EntryRange] = []
    right: list[EntryRange] = []
    taken = 0
    for r in piece.ranges:
        if taken >= target:
            right.append(r)
        elif taken + r.count <= target:
            left.append(r)
            taken += r.count
        else:
            cut = target - taken
            left.append(EntryRange(r.ledger_id, r.first, r.first + cut - 1))
            right.append(EntryRange(r.ledger_id, r.first + cut, r.last))
            taken = target
    return replace(piece, ranges=tuple(left)), replace(piece, ranges=tuple(right))


def _cut_point(piece: Slice, middle: int) -> int:
    """Entries left of the cut: ``middle``, unless it falls inside an offloaded ledger's range and
    an end of that range is within a quarter of the slice from it: then that end, so each task
    reads whole files (a cut inside one makes both tasks open it and decode the row group it falls
    in; the bookie read of a range costs the same wherever it is cut)."""
    taken = 0
    for r in piece.ranges:
        if taken < middle < taken + r.count:
            if r.ledger_id not in piece.offloaded:
                return middle
            end = min((taken, taken + r.count), key=lambda edge: abs(edge - middle))
            return end if 0 < end < piece.entries and abs(end - middle) * 4 <= piece.entries else middle
        taken += r.count
    return middle


def cut(
    layouts: Mapping[str, PartitionLayout],
    starts: Mapping[str, Position],
    ends: Mapping[str, Position],
    *,
    split_by: str = "partition",
    min_partitions: int = 1,
) -> list[Slice]:
    """The Spark partitions of reading ``[starts[p], ends[p])`` of every partition ``p``."""
    slices: list[Slice] = []
    for name in sorted(layouts):
        layout = layouts[name]
        ranges = layout.ranges(starts[name], ends[name])
        if not ranges:
            continue
        groups = [[r] for r in ranges] if split_by == "ledger" else [ranges]
        for group in groups:
            metadata = {r.ledger_id: layout.metadata_of(r.ledger_id) for r in group}
            offloaded = {r.ledger_id: layout.offload_of(r.ledger_id) for r in group if layout.offload_of(r.ledger_id)}
            slices.append(Slice(layout.topic, layout.partition, tuple(group), metadata, offloaded))
    while slices and len(slices) < min_partitions:
        largest = max(range(len(slices)), key=lambda i: slices[i].entries)
        halves = _halve(slices[largest])
        if halves is None:
            break
        slices[largest : largest + 1] = list(halves)
    if len(slices) > SPARK_SLICES_COUNT_MAX:
        raise LimitExceededError("SPARK_SLICES_COUNT_MAX", len(slices), SPARK_SLICES_COUNT_MAX)
    return slices
