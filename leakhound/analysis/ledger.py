"""The memory ledger: where a process's RSS goes, from one snapshot.

Rows: live Python objects (the census), the native buffers it attributed to owners (torch
storages, mmaps, Pillow pixels), free space pymalloc keeps inside its arenas, free space glibc
keeps (and the part of it ``malloc_trim`` can return), tracemalloc's tables while it traces,
SQLite's memory by its own count, thread stacks and file-backed mappings (from
/proc/PID/pagemap), and the rest of RSS (interpreter and C extension state, allocator
metadata). When the rows add up to more than
RSS, the last row is not "other" but the overlap, "counted twice", negative: bytes the worker
freed between the walk that counted them live and the allocator read that counted them free,
or native buffers' bytes never written (sized by what was asked for, not resident).
A row the snapshot has no number for (older snapshots) is left out. Pure arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass

from leakhound.model import Snapshot

# The row that takes the place of "other" when the rows above add up to more than RSS.
COUNTED_TWICE = "counted twice"
# tracemalloc's own tables while it traces the worker (PYTHONTRACEMALLOC left on)
TRACEMALLOC = "tracemalloc"
# SQLite's own memory (every connection's), by its own count
SQLITE = "SQLite"


@dataclass(frozen=True)
class LedgerRow:
    name: str
    bytes: int
    share: float  # of RSS
    note: str = ""


def ledger(snapshot: Snapshot) -> tuple[LedgerRow, ...]:
    rss = max(1, snapshot.process.rss_bytes)
    arena = snapshot.arena
    native = snapshot.heap.native_bytes
    live = snapshot.heap.bytes - native
    pymalloc_free = arena.pymalloc_free_bytes
    malloc_free = arena.malloc_free_bytes
    trimmable = arena.trimmable_bytes
    tracing = arena.tracemalloc_bytes
    # what SQLite counts for the connections sized natively is in native buffers (under their
    # owners): the rest of its count is its row
    sqlite = max(0, arena.sqlite_bytes - snapshot.heap.native_sqlite_bytes)
    stacks = snapshot.process.stack_bytes
    # the pages of mmaps and torch storages that are a file's or shared memory's are in native
    # buffers (under their owners): counted there once
    files = max(0, snapshot.process.file_mapped_bytes - snapshot.heap.native_mapped_bytes)
    rest = rss - live - native - pymalloc_free - malloc_free - tracing - sqlite - stacks - files
    rows = [
        LedgerRow(
            "live Python objects",
            live,
            live / rss,
            "" if snapshot.heap.unreached_examined
            else "reached from named roots only (pause budget); the rest is in 'other'",
        ),
    ]
    if native:
        rows.append(LedgerRow("native buffers", native, native / rss,
                              "sized natively (torch, mmap, Pillow, ctypes, cffi, StringIO, zlib, protobuf, hashlib, "
                              "OpenSSL, SQLite): under their owners"))
    rows += [
        LedgerRow("pymalloc free", pymalloc_free, pymalloc_free / rss, "in arenas; trim cannot return it"),
        LedgerRow("glibc free", malloc_free, malloc_free / rss, "freed, still held by malloc"),
        LedgerRow("  of which trimmable", trimmable, trimmable / rss, "malloc_trim(0) would return it"),
    ]
    if tracing:
        rows.append(LedgerRow(TRACEMALLOC, tracing, tracing / rss,
                              "its traces of every allocation: tracemalloc.stop() frees them"))
    if sqlite:
        rows.append(LedgerRow(SQLITE, sqlite, sqlite / rss,
                              "its connections' page caches, schemas, statements: sqlite3_memory_used(), "
                              "but what their owners hold"))
    if stacks:
        rows.append(LedgerRow("thread stacks", stacks, stacks / rss, "resident, from /proc/PID/pagemap"))
    if files:
        rows.append(LedgerRow("mapped files", files, files / rss,
                              "executable, libraries, mmapped files (an mmap object's: in native buffers)"))
    if rest >= 0:
        rows.append(LedgerRow("other", rest, rest / rss,
                              "interpreter, C" if stacks or files else "interpreter, C, stacks"))
    else:
        # The rows are read one after another while the worker runs: live objects during the
        # walk, the allocators' free space after it (seconds later), RSS last. What the worker
        # freed in between is in both rows (on a churning simulated worker the walk's live
        # bytes exceeded everything the allocators had in use at their read by 16-30 MiB).
        # Native buffers are sized by what their library asked for: a zlib stream's window, a
        # big malloc'd block, are resident only where written (400 zlib.compressobj(9): 152 MiB
        # asked for, ~100 MiB of RSS).
        note = "freed by the worker while leakhound counted: live at the walk, free by the allocator read"
        if native:
            note += "; or native buffers asked for but never written (not resident)"
        rows.append(LedgerRow(COUNTED_TWICE, rest, rest / rss, note))
    return tuple(rows)
