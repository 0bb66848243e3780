"""Take a snapshot of a live process: attach, run the census, read the kernel's numbers.

The one place that turns a payload result into a ``Snapshot`` (and runs the detectors on it).
"""

from __future__ import annotations

import os
import time
from typing import Any

from leakhound.analysis.detectors import run_detectors
from leakhound.attach import run_request
from leakhound.attach.base import AttachLog
from leakhound.attach.channel import Progress
from leakhound.attach.process import process_stats, resolve_target
from leakhound.model import (
    ArenaStats,
    CyclicGarbage,
    HeapStats,
    Owner,
    Snapshot,
    TypeStat,
)


def snapshot_from_result(
    *,
    pid: int,
    method: str,
    result: dict[str, Any],
    process: Any,
    taken_at: float,
    pause_ms: float,
) -> Snapshot:
    heap = result["heap"]
    garbage = heap.get("cyclic_garbage", {})
    unreached = heap.get("unreached") or {}
    warnings = []
    arena = ArenaStats(**result["arena"])
    if not arena.available:
        warnings.append(f"allocator statistics unavailable: {arena.reason}")
    snap = Snapshot(
        pid=pid,
        taken_at=taken_at,
        python_version=str(result.get("python_version", "")),
        method=method,
        process=process,
        heap=HeapStats(
            objects=int(heap["objects"]),
            bytes=int(heap["bytes"]),
            census_seconds=round(float(heap["census_seconds"]), 4),
            max_pause_ms=round(max(pause_ms, float(heap.get("max_step_ms", 0.0))), 2),
            gc_tracked=int(heap.get("gc_tracked", 0)),
            untracked=int(heap.get("untracked", 0)),
            payload_peak_bytes=int(heap.get("payload_peak_bytes", 0)),
            walker=str(heap.get("walker", "")),
            unreached_examined=bool(unreached.get("examined", True)),
            unreached_note=str(unreached.get("reason", "")),
        ),
        arena=arena,
        types=tuple(TypeStat(**t) for t in heap["types"]),
        owners=tuple(Owner(**o) for o in heap["owners"]),
        cyclic_garbage=CyclicGarbage(
            objects=int(garbage.get("objects", 0)),
            bytes=int(garbage.get("bytes", 0)),
            types=tuple(TypeStat(**t) for t in garbage.get("types", ())),
        ),
        probes=dict(result.get("probes") or {}),
        warnings=tuple(warnings),
    )
    return snap.with_findings(run_detectors(snap))


# The pause budget every command's census keeps by default: the worst event-loop lag an
# inspection may add (the hardening goal; docs/inspect.md).
DEFAULT_MAX_PAUSE_MS = 50.0


def take_snapshot(
    pid: int,
    *,
    method: str = "auto",
    top: int = 20,
    timeout: float = 60.0,
    progress: Progress | None = None,
    log: AttachLog | None = None,
    max_pause_ms: float | None = DEFAULT_MAX_PAUSE_MS,
) -> Snapshot:
    """One census of ``pid``. ``max_pause_ms``: skip the one step of the census that cannot be
    split (listing every gc-tracked object, needed to find objects no named root reaches)
    when it would hold the target longer than this; None or 0: never skip it."""
    target = resolve_target(pid)
    taken_at = time.time()
    request: dict[str, object] = {"op": "snapshot", "top_types": max(top, 50), "top_owners": max(top, 50)}
    if max_pause_ms:
        request["max_pause_ms"] = max_pause_ms
    if os.environ.get("LEAKHOUND_WALKER") == "python":
        # The pure-Python census loop even where the compiled one loads (benchmarks, tests).
        request["walker"] = "python"
    remote = run_request(
        pid,
        request,
        method=method,
        timeout=timeout,
        progress=progress,
        log=log,
        target=target,
    )
    # RSS is read right after the census so the ledger compares like with like.
    process = process_stats(pid)
    return snapshot_from_result(
        pid=pid,
        method=remote.method,
        result=remote.result,
        process=process,
        taken_at=taken_at,
        pause_ms=max(remote.attach_stop_ms, remote.main_thread_ms),
    )
