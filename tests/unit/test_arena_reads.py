"""The payload's allocator reads (payload/arena.py): through the compiled extension
(_libc.c) where it loads, through ctypes where it does not; the two agree."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from leakhound.payload import arena

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator only")


def _both(monkeypatch: pytest.MonkeyPatch, read):  # type: ignore[no-untyped-def]
    if arena._native is None:
        pytest.skip("the compiled extension did not load here")
    native = read()
    monkeypatch.setattr(arena, "_native", None)
    return native, read()


def test_mallinfo2_reads_the_same_fields_either_way(monkeypatch: pytest.MonkeyPatch) -> None:
    native, through_ctypes = _both(monkeypatch, arena.mallinfo2)
    if native is None:
        assert through_ctypes is None  # (a libc without mallinfo2)
        return
    assert through_ctypes is not None and set(native) == set(through_ctypes) == set(arena._MALLINFO2_FIELDS)
    for field in ("arena", "hblks", "hblkhd"):  # what a few allocations between the reads leave alone
        assert native[field] == pytest.approx(through_ctypes[field], rel=0.05, abs=1 << 20), field


def test_the_allocator_statistics_are_read_either_way(monkeypatch: pytest.MonkeyPatch) -> None:
    native, through_ctypes = _both(monkeypatch, arena.arena_stats)
    assert native["available"] is through_ctypes["available"]
    assert native["reason"] == through_ctypes["reason"]
    for key in ("pymalloc_arenas", "malloc_mmapped_bytes"):
        assert native[key] == pytest.approx(through_ctypes[key], rel=0.1, abs=4 << 20), key
    assert native["pymalloc_in_use_bytes"] > 0 or "pymalloc" in native["reason"]


def test_a_payload_without_ctypes_reads_the_allocators_through_its_extension(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Importing ctypes was ~0.3 MiB of the target's memory: none of these reads needs it."""
    if arena._native is None:
        pytest.skip("the compiled extension did not load here")
    monkeypatch.setitem(sys.modules, "ctypes", None)  # import ctypes raises ImportError
    stats = arena.arena_stats()
    assert stats["available"] is True, stats["reason"]
    assert stats["malloc_in_use_bytes"] > 0
    assert arena.in_use_bytes()


def test_the_word_reader_is_the_extensions() -> None:
    """objects.py reads an instance's managed __dict__ pointer through it (no ctypes)."""
    objects = importlib.import_module("leakhound.payload.objects")
    if arena._native is None:
        pytest.skip("the compiled extension did not load here")
    assert objects._word_at is arena._native.word_at
    held = bytearray(16)
    assert objects._word_at(id(held)) == sys.getrefcount(held) - 1  # its first word: the count


def test_the_ctypes_path_makes_its_structure_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ctypes class made at every read would be garbage for the target's GC each time."""
    monkeypatch.setattr(arena, "_native", None)
    if arena.mallinfo2() is None:
        pytest.skip("no mallinfo2 in this libc")
    first = arena._structure()
    arena.mallinfo2()
    assert arena._structure() is first and len(arena._MALLINFO2_TYPE) == 1


def test_tracemalloc_started_by_the_environment_is_read_with_nothing_imported_before() -> None:
    """PYTHONTRACEMALLOC traces a worker whose sys.modules has no _tracemalloc: its tables are
    read all the same, first thing (no other read imported it before), and 0 without it."""
    import os
    import subprocess

    code = ("import sys; from leakhound.payload import arena; "
            "assert '_tracemalloc' not in sys.modules; print(arena.tracemalloc_bytes())")
    for env, traced in (({"PYTHONTRACEMALLOC": "1"}, True), ({}, False)):
        full = {k: v for k, v in os.environ.items() if k != "PYTHONTRACEMALLOC"}
        done = subprocess.run([sys.executable, "-c", code], env={**full, **env}, capture_output=True, text=True,
                              timeout=60, check=True)
        assert (int(done.stdout) > 0) is traced, done.stdout


# A thread frees its bodies (~24 MB between small pins) in one C call and allocates nothing
# after: the chunks stay in its arena's unsorted bin. Another thread predicts the trimmable
# bytes, trims, and reads what RSS gave back.
_UNSORTED = r"""
import ctypes, json, os, re, sys, threading
from leakhound.payload import arena
libc = ctypes.CDLL("libc.so.6")
def rss():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
freed = threading.Lock(); freed.acquire()  # released by the churn thread once it freed
done = threading.Lock(); done.acquire()    # (locks made before: waiting on them allocates nothing)
def churn():
    # in this thread's own arena: bodies of 100-300 KB between small pins, the bodies freed in
    # one C call (a list cleared): nothing allocates in this arena after, so they stay in its
    # unsorted bin
    keep = []
    bodies = []
    for i in range(120):
        bodies.append(bytearray(100_000 + (i % 3) * 100_000))
        keep.append(bytearray(2000))
    for b in bodies:
        b[::4096] = b"x" * len(b[::4096])  # touch every page
    del bodies[:]
    freed.release()
    done.acquire()
libc.mallopt(-3, 4 << 20)  # M_MMAP_THRESHOLD: the bodies from the arena, not mmap
t = threading.Thread(target=churn)
t.start()
freed.acquire()
xml = arena._malloc_info_xml()
unsorted = sum(int(m[2]) for m in re.findall(r'<unsorted from="(\d+)" to="(\d+)" total="(\d+)" count="(\d+)"/>', xml))
predicted = arena.glibc_stats()[0]["trimmable_bytes"]
before = rss(); libc.malloc_trim(0); after = rss()
done.release(); t.join()
print(json.dumps({"unsorted": unsorted, "predicted": predicted, "dropped": before - after}))
"""


def test_the_trimmable_bytes_count_the_chunks_freed_since_the_arenas_last_sort() -> None:
    """glibc keeps chunks freed since an arena's last sorting pass in its unsorted bin, which
    ``malloc_info`` lists as one ``<unsorted>`` row a heap, and ``malloc_trim`` releases their
    pages too: the prediction read only the ``<size>`` rows and said 0.4 MB of 23.8 MB."""
    root = Path(__file__).resolve().parents[2]
    run = subprocess.run([sys.executable, "-c", _UNSORTED], cwd=root, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    assert got["unsorted"] > 16 << 20, got  # (the shape this test is about)
    assert abs(got["predicted"] - got["dropped"]) <= 0.05 * got["dropped"], got
