"""The struct scan (_ssl_scan.c ``struct_object_bytes``: what an object's own struct reaches
in glibc's heap, for C types whose state is behind pointers, pydantic-core's and the
tokenizers'), on objects made here: a ctypes array's buffer (a chunk its struct points at),
holding the four words of a Rust hash table whose allocation malloc made (its pointer is into
it, past the buckets), small (an arena chunk) and big (glibc mmaps it)."""

from __future__ import annotations

import array
import ctypes

import pytest

from leakhound.payload import sizes

walk = sizes._compiled_walk
pytestmark = pytest.mark.skipif(walk is None or not hasattr(walk, "struct_object_bytes") or sizes.HEAP_BLOCKS is None
                                or not sizes.HEAP_BLOCKS[2], reason="no compiled walk, or no glibc heap here")

libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc_usable_size.restype = ctypes.c_size_t
libc.malloc_usable_size.argtypes = [ctypes.c_void_p]
libc.free.argtypes = [ctypes.c_void_p]


def _chunk(p: int) -> int:
    """The glibc chunk of the allocation at ``p``: its size word (mmapped: its mapping)."""
    return ctypes.c_uint64.from_address(p - 8).value & ~7


def _scan(objects: list[object]) -> list[int]:
    basicsizes = array.array("q", [sizes._basicsize(type(o)) for o in objects])
    # (the globals of _ctypes's extension: no object's)
    import _ctypes

    got = walk.struct_object_bytes(objects, basicsizes.tobytes(), sizes._heap_ranges(), _ctypes.__file__,
                                   sizes.HEAP_BLOCKS[0], 1 << 20, 64 << 20, 30.0)
    assert got is not None
    out = array.array("q")
    out.frombytes(got)
    return list(out)


@pytest.mark.parametrize(("buckets", "item"), [(64, 24), (32768, 32)])
def test_a_rust_table_is_found_by_its_four_words(buckets: int, item: int) -> None:
    holder = (ctypes.c_uint64 * 100)()  # 800 bytes: its buffer a chunk of malloc's
    buffer = ctypes.addressof(holder)
    offset = (buckets * item + 15) & ~15
    table = libc.malloc(offset + buckets + 16)
    try:
        ctypes.memset(table, 0, offset + buckets + 16)
        ctypes.memset(table + offset, 0xFF, buckets + 16)  # every bucket empty
        alone = _scan([holder])[0]
        assert alone == _chunk(buffer)
        # (bucket_mask, ctrl, growth_left, items), as hashbrown's RawTableInner
        holder[10], holder[11], holder[12], holder[13] = buckets - 1, table + offset, buckets // 8 * 7 - 3, 3
        with_table = _scan([holder])[0]
        assert with_table == _chunk(buffer) + _chunk(table), (with_table, _chunk(buffer), _chunk(table))
        # the same words with a ctrl that is not past a table's buckets: nothing more
        holder[11] = table + offset + 16
        assert _scan([holder])[0] == alone
        # two holders of the same table: it is the first's
        other = (ctypes.c_uint64 * 100)()
        holder[11] = table + offset
        other[20], other[21], other[22], other[23] = buckets - 1, table + offset, buckets // 8 * 7 - 3, 3
        first, second = _scan([holder, other])
        assert first == with_table and second == _chunk(ctypes.addressof(other))
    finally:
        libc.free(table)


def test_a_chunk_is_counted_only_inside_one_of_glibcs_heaps() -> None:
    """A pair of words that reads as an arena chunk's header and the next one's, in an anonymous
    mapping that is no glibc heap (pymalloc's arenas, a buffer: on a real worker a stale word of
    a pydantic validator's reached a "chunk" of 7.5 MB there), is no chunk; a chunk of another
    thread's arena (a heap of glibc's, its heap_info at its aligned start) is one."""
    import mmap
    import threading

    holder = (ctypes.c_uint64 * 100)()
    alone = _scan([holder])[0]
    assert alone == _chunk(ctypes.addressof(holder))
    region = mmap.mmap(-1, 1 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)  # (as pymalloc maps its arenas)
    try:
        base = ctypes.addressof(ctypes.c_char.from_buffer(region))
        fake = base + 8192
        # prev_size, size 64 KiB with NON_MAIN_ARENA | PREV_INUSE; the next one's: 32, its previous in use
        ctypes.c_uint64.from_address(fake + 8).value = (64 << 10) | 5
        ctypes.c_uint64.from_address(fake + (64 << 10) + 8).value = 32 | 1
        holder[10] = fake + 16
        assert _scan([holder])[0] == alone
    finally:
        holder[10] = 0
        del base
        region.close()
    made: list[int] = []
    thread = threading.Thread(target=lambda: made.append(libc.malloc(20000)))
    thread.start()
    thread.join()
    try:
        assert ctypes.c_uint64.from_address(made[0] - 8).value & 4, "not in an arena of the thread's own"
        holder[10] = made[0]
        assert _scan([holder])[0] == alone + _chunk(made[0])
    finally:
        holder[10] = 0
        libc.free(made[0])
