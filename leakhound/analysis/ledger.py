"""The memory ledger: where a process's RSS goes, from one snapshot.

Rows: live Python objects (the census), free space pymalloc keeps inside its arenas, free
space glibc keeps (and the part of it ``malloc_trim`` can return), and the rest of RSS
(interpreter, code, C extensions, thread stacks, allocator metadata). Pure arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass

from leakhound.model import Snapshot


@dataclass(frozen=True)
class LedgerRow:
    name: str
    bytes: int
    share: float  # of RSS
    note: str = ""


def ledger(snapshot: Snapshot) -> tuple[LedgerRow, ...]:
    rss = max(1, snapshot.process.rss_bytes)
    arena = snapshot.arena
    live = snapshot.heap.bytes
    pymalloc_free = arena.pymalloc_free_bytes
    malloc_free = arena.malloc_free_bytes
    trimmable = arena.trimmable_bytes
    rest = rss - live - pymalloc_free - malloc_free
    rows = [
        LedgerRow(
            "live Python objects",
            live,
            live / rss,
            "" if snapshot.heap.unreached_examined
            else "reached from named roots only (pause budget); the rest is in 'other'",
        ),
        LedgerRow("pymalloc free", pymalloc_free, pymalloc_free / rss, "in arenas; trim cannot return it"),
        LedgerRow("glibc free", malloc_free, malloc_free / rss, "freed, still held by malloc"),
        LedgerRow("  of which trimmable", trimmable, trimmable / rss, "malloc_trim(0) would return it"),
        LedgerRow(
            "other",
            rest,
            rest / rss,
            "free glibc pages already not resident" if rest < 0 else "interpreter, C, stacks",
        ),
    ]
    return tuple(rows)
