"""The history of one chaos run: every send with its outcome, every receive, ack and stored message.

A history is a list of ``Op`` in the order they were recorded, plus what the checker must know
about the producers (``ProducerInfo``: topic, deduplication on or off) and the faults that were
injected (``FaultEvent``, for the report only). It is plain data: ``to_json``/``from_json`` round
trip it exactly, so a run can be checked again later (``magnetar chaos --check FILE``).

Values are ``"<producer>:<seq>"``: every send of a producer gets the next ``seq``; a retry of the
same message (deduplicating producers resend an unknown send with the same sequence id) keeps
its value. ``OpType.DRAIN`` ops are what a reader from the earliest position found stored after
the run, in stored order, one pass per ``process`` ("drain-1", "drain-2").

Outcomes follow Jepsen: ``ok`` (the broker's SEND_RECEIPT), ``error`` (known not to have been
sent: the client refused it before it left), ``unknown`` (a timeout or a broken connection; the
message may or may not be stored).
"""

from __future__ import annotations

import enum
import json
import threading
from dataclasses import asdict, dataclass, field
from typing import Any

from magnetar.base.errors import InvalidArgumentError, LimitExceededError
from magnetar.base.limits import CHAOS_HISTORY_OPS_COUNT_MAX

FORMAT_VERSION = 1


class OpType(enum.Enum):
    SEND = "send"
    RECEIVE = "receive"
    ACK = "ack"
    DRAIN = "drain"


class Outcome(enum.Enum):
    OK = "ok"
    ERROR = "error"
    UNKNOWN = "unknown"


#: (ledger id, entry id, batch index); batch index is -1 for an unbatched message.
MessageId = tuple[int, int, int]


def value_of(producer: str, seq: int) -> str:
    return f"{producer}:{seq}"


def parse_value(value: str) -> tuple[str, int]:
    """The producer and seq of a value; ("", -1) for anything the workload never sends."""
    producer, sep, seq = value.rpartition(":")
    if not sep or not producer or not seq.isdigit():
        return "", -1
    return producer, int(seq)


@dataclass(frozen=True, slots=True)
class Op:
    process: str  # "producer-0", "consumer-shared-1", "drain-1", ...
    type: OpType
    topic: str
    value: str
    outcome: Outcome = Outcome.OK
    message_id: MessageId | None = None
    time_ns: int = 0  # since the start of the run
    subscription: str = ""
    error: str = ""

    @property
    def producer(self) -> str:
        return parse_value(self.value)[0]

    @property
    def seq(self) -> int:
        return parse_value(self.value)[1]

    def to_dict(self) -> dict[str, Any]:
        # Field by field (``asdict`` deep-copies each value: the digest of every run pays for it).
        return {
            "process": self.process,
            "type": self.type.value,
            "topic": self.topic,
            "value": self.value,
            "outcome": self.outcome.value,
            "message_id": list(self.message_id) if self.message_id is not None else None,
            "time_ns": self.time_ns,
            "subscription": self.subscription,
            "error": self.error,
        }

    @staticmethod
    def from_dict(raw: dict[str, Any]) -> Op:
        mid = raw.get("message_id")
        return Op(
            process=raw["process"],
            type=OpType(raw["type"]),
            topic=raw["topic"],
            value=raw["value"],
            outcome=Outcome(raw.get("outcome", "ok")),
            message_id=(int(mid[0]), int(mid[1]), int(mid[2])) if mid is not None else None,
            time_ns=int(raw.get("time_ns", 0)),
            subscription=raw.get("subscription", ""),
            error=raw.get("error", ""),
        )


@dataclass(frozen=True, slots=True)
class ProducerInfo:
    name: str
    topic: str
    dedup: bool


@dataclass(frozen=True, slots=True)
class FaultEvent:
    """One injected fault as it happened: ``kind`` is arm-hang-kill, kill, pause, restart, ..."""

    time_ns: int
    kind: str
    process: str
    point: str = ""
    detail: str = ""


@dataclass
class History:
    """Ops in recording order; ``record`` may be called from several threads."""

    producers: dict[str, ProducerInfo] = field(default_factory=dict)
    ops: list[Op] = field(default_factory=list)
    faults: list[FaultEvent] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add_producer(self, name: str, topic: str, *, dedup: bool) -> None:
        if name in self.producers or ":" in name:
            raise InvalidArgumentError(f"producer name {name!r} is taken or contains ':'")
        self.producers[name] = ProducerInfo(name, topic, dedup)

    def record(self, op: Op) -> None:
        with self._lock:
            if len(self.ops) >= CHAOS_HISTORY_OPS_COUNT_MAX:
                raise LimitExceededError("CHAOS_HISTORY_OPS_COUNT_MAX", len(self.ops) + 1, CHAOS_HISTORY_OPS_COUNT_MAX)
            self.ops.append(op)

    def record_fault(self, event: FaultEvent) -> None:
        with self._lock:
            self.faults.append(event)

    def snapshot(self) -> list[Op]:
        with self._lock:
            return list(self.ops)

    def to_json(self) -> str:
        with self._lock:
            doc = {
                "format": FORMAT_VERSION,
                "meta": self.meta,
                "producers": [asdict(p) for p in self.producers.values()],
                "faults": [asdict(f) for f in self.faults],
                "ops": [op.to_dict() for op in self.ops],
            }
        return json.dumps(doc, indent=None, separators=(",", ":"))

    @staticmethod
    def from_json(text: str) -> History:
        doc = json.loads(text)
        if doc.get("format") != FORMAT_VERSION:
            raise InvalidArgumentError(f"history format {doc.get('format')!r}, expected {FORMAT_VERSION}")
        history = History(meta=dict(doc.get("meta", {})))
        for raw in doc["producers"]:
            history.producers[raw["name"]] = ProducerInfo(raw["name"], raw["topic"], bool(raw["dedup"]))
        history.faults = [FaultEvent(**raw) for raw in doc.get("faults", [])]
        history.ops = [Op.from_dict(raw) for raw in doc["ops"]]
        return history
