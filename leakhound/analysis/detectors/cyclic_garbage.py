"""Cyclic garbage: objects alive only because they sit in uncollected reference cycles.

Found in the target without ``gc.collect()`` (see payload/census.py); this detector only
decides whether the amount matters.
"""

from __future__ import annotations

from leakhound.analysis.detectors.base import skipped
from leakhound.model import Finding, Snapshot
from leakhound.model.units import MiB, fmt_bytes

KIND = "cyclic_garbage"
MIN_BYTES = 1 * MiB


def detect(snapshot: Snapshot) -> list[Finding]:
    if not snapshot.heap.unreached_examined:
        return [skipped(KIND, f"unreachable objects were not looked for: {snapshot.heap.unreached_note}")]
    garbage = snapshot.cyclic_garbage
    if garbage.objects == 0:
        return []
    top = ", ".join(f"{t.type} x{t.count}" for t in garbage.types[:3])
    severity = "warning" if garbage.bytes >= MIN_BYTES else "info"
    return [
        Finding(
            kind=KIND,
            severity=severity,
            bytes=garbage.bytes,
            count=garbage.objects,
            owner="<unreachable cycles>",
            fix="",
            summary=(
                f"{garbage.objects:,} objects ({fmt_bytes(garbage.bytes)}) are unreachable and kept alive "
                f"only by reference cycles the GC has not collected yet ({top}); break the "
                "cycles (weakref, explicit clear) rather than calling gc.collect() on a fat heap"
            ),
            details={"types": [{"type": t.type, "count": t.count, "bytes": t.bytes} for t in garbage.types]},
        )
    ]
