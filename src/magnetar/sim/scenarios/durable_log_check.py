"""Checker for ``durable-log``, kept apart from the workload it judges.

Given the server's disk after the final recovery and the acknowledgements the clients saw:

1. every acknowledged record is in the file at its acknowledged offset, with the same bytes;
2. no record id is stored at two offsets (a retry was not appended twice);
3. every client finished (liveness, once faults stopped), and no node's main failed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from magnetar.base.io import Disk
from magnetar.sim.scenarios.base import Verdict
from magnetar.sim.scenarios.frames import scan

if TYPE_CHECKING:
    from magnetar.sim.scenarios.durable_log import Ack

#: The verdict lists this many violations and counts the rest.
VIOLATIONS_LISTED_MAX = 20


def _record_id(payload: bytes) -> bytes:
    parts = payload.split(b"/", 2)
    return parts[0] + b"/" + parts[1] if len(parts) == 3 else payload


def check(disk: Disk, path: str, acks: Sequence[Ack], *, clients_done: int, clients: int,
          crash_count: int, failures: Sequence[str]) -> Verdict:
    file = disk.open(path, create=False)
    records, good_end, reason = scan(file.read_at(0, file.size()))
    at_offset = dict(records)
    violations: list[str] = []
    for ack in acks:
        stored = at_offset.get(ack.offset)
        if stored is None:
            violations.append(f"lost: acked {ack.record_id.decode()} at offset {ack.offset} is not in the log")
        elif stored != ack.payload:
            violations.append(f"changed: offset {ack.offset} holds other bytes than acked {ack.record_id.decode()}")
    first_offset: dict[bytes, int] = {}
    for offset, payload in records:
        rid = _record_id(payload)
        if rid in first_offset:
            violations.append(f"duplicate: {rid.decode()} at offsets {first_offset[rid]} and {offset}")
        else:
            first_offset[rid] = offset
    if clients_done != clients:
        violations.append(f"liveness: {clients_done} of {clients} clients finished")
    violations += [f"node failed: {failure}" for failure in failures]
    listed = violations[:VIOLATIONS_LISTED_MAX]
    if len(violations) > len(listed):
        listed.append(f"... and {len(violations) - len(listed)} more")
    summary = (f"{len(acks)} acks checked against {len(records)} records ({good_end} bytes, scan stopped: "
               f"{reason}), {crash_count} server crashes, {len(violations)} violations")
    return Verdict(ok=not violations, summary=summary, violations=tuple(listed))
