"""The struct scan (_ssl_scan.c ``struct_object_bytes``: what an object's own struct reaches
in glibc's heap, for C types whose state is behind pointers, pydantic-core's and the
tokenizers'), on objects made here: a ctypes array's buffer (a chunk its struct points at),
holding the four words of a Rust hash table whose allocation malloc made (its pointer is into
it, past the buckets), small (an arena chunk) and big (glibc mmaps it)."""

from __future__ import annotations

import array
import ctypes
import os
import shutil
import subprocess
from pathlib import Path

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


@pytest.mark.parametrize(("extra", "found"), [(0, True), (16, True), (32, False)])
def test_a_rust_tables_chunk_may_be_16_bytes_bigger_than_asked(extra: int, found: bool) -> None:
    """malloc gives an arena's free chunk whole when what would be left of it is no chunk: a
    table's chunk is then 16 bytes bigger than its request rounded (the test above missed its
    table in one heap layout of three). 32 bytes more is another allocation."""
    holder = (ctypes.c_uint64 * 100)()
    buckets, item = 64, 24
    offset = buckets * item
    table = libc.malloc(offset + buckets + 16 + extra)  # (what glibc would have given whole)
    try:
        ctypes.memset(table, 0, offset + buckets + 16 + extra)
        ctypes.memset(table + offset, 0xFF, buckets + 16)
        holder[10], holder[11], holder[12], holder[13] = buckets - 1, table + offset, buckets // 8 * 7 - 3, 3
        got = _scan([holder])[0]
        assert got == _chunk(ctypes.addressof(holder)) + (_chunk(table) if found else 0), (got, _chunk(table))
    finally:
        holder[11] = 0
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


def test_a_big_chunk_is_counted_only_where_the_chunks_after_it_read_as_chunks() -> None:
    """A word that points into another chunk's data where two words read as a big chunk's
    header and the next one's (stale pointers: on a real worker a validator's found 6.6 MB and
    11.2 MB so) is no chunk unless the chunks after it read as chunks, its data does not start
    with a chunk's header, and a free chunk before it says its size; a real one is one."""
    holder = (ctypes.c_uint64 * 100)()
    alone = _scan([holder])[0]
    big = libc.malloc(100 << 10)  # (under the mmap threshold: a chunk of the main arena)
    try:
        ctypes.memset(big, 0, 100 << 10)
        fake = big + 4096
        ctypes.c_uint64.from_address(fake + 8).value = 70000 | 1  # (a multiple of 16, its previous in use)
        ctypes.c_uint64.from_address(fake + 70000 + 8).value = 32 | 1  # the next "chunk"; after it, zeros
        holder[10] = fake + 16
        assert _scan([holder])[0] == alone

        def chain(at: int) -> None:  # eight chunks of 32 bytes from ``at``, each's previous in use
            for k in range(8):
                ctypes.c_uint64.from_address(at + 32 * k + 8).value = 32 | 1

        chain(fake + 70000)
        assert _scan([holder])[0] == alone + 70000  # (what such a word cannot be told from)
        # ... but where the "chunk"'s data starts with a chunk's header, and more after it, the
        # word is 16 bytes short of that chunk (the data before it read as a size)
        chain(fake + 16)
        assert _scan([holder])[0] == alone
        # the chunk before one whose "previous in use" bit is clear is free: prev_size is its
        # size, its own header says so (an 11.2 MB "chunk" in a Rust table's buckets did not)
        ctypes.memset(big, 0, 100 << 10)
        other = big + 8192
        ctypes.c_uint64.from_address(other).value = 0xA6000000000000
        ctypes.c_uint64.from_address(other + 8).value = 70000
        chain(other + 70000)
        holder[10] = other + 16
        assert _scan([holder])[0] == alone
        ctypes.c_uint64.from_address(other).value = 64
        ctypes.c_uint64.from_address(other - 64 + 8).value = 64 | 1
        assert _scan([holder])[0] == alone + 70000
        holder[10] = big
        assert _scan([holder])[0] == alone + _chunk(big)
    finally:
        holder[10] = 0
        libc.free(big)


def _unclaimed(size: int, holder: ctypes.Array[ctypes.c_uint64], alone: int, tried: list[int]) -> int:
    """A zeroed malloc block of ``size`` that ``holder``'s word 10 makes its own: not one a
    global of _ctypes's extension points into (a stale pointer from an earlier test's block at
    that address, in a long pytest worker: the chunk is the globals' then, and a test of
    another rule saw none). The ones tried and so held are in ``tried``, to free."""
    for _ in range(16):
        block = libc.malloc(size)
        ctypes.memset(block, 0, size)
        holder[10] = block
        if _scan([holder])[0] == alone + _chunk(block):
            return block
        tried.append(block)
    raise AssertionError("every block tried is held by a global")


def test_a_pointer_into_a_chunk_taken_is_no_chunk_of_its_own() -> None:
    """A chunk's word that points into its own data (a DFA state's pointer to its instructions:
    google-re2's), where the bytes before it read as a small chunk's header and the next one's,
    is no chunk: the chunk it is in was taken (40 re2 expressions: 23 MB of such "chunks", 1.34
    of what freeing them returns, before). The chunk itself still counts once. (Met before the
    chunk it is in, at the same depth, it would be taken too: an owner points at its block's
    start before anything points into it, as re2's do.)"""
    holder = (ctypes.c_uint64 * 100)()
    alone = _scan([holder])[0]
    tried: list[int] = []
    block = _unclaimed(912, holder, alone, tried)
    try:
        inner = block + 256
        ctypes.c_uint64.from_address(inner + 8).value = 48 | 1  # a "chunk" of 48 bytes, its previous in use
        ctypes.c_uint64.from_address(inner + 48 + 8).value = 32 | 1  # and the "next" one's header
        ctypes.c_uint64.from_address(block).value = inner + 16  # the block's own pointer into itself
        holder[10] = block
        assert _scan([holder])[0] == alone + _chunk(block)
    finally:
        holder[10] = 0
        for taken in (block, *tried):
            libc.free(taken)


@pytest.mark.parametrize(("tag", "found"), [(0, True), (1, True), (2, True), (3, True), (8, False), (9, False)])
def test_a_pointer_with_flags_in_its_low_bits_is_followed(tag: int, found: bool) -> None:
    """protobuf keeps its repeated fields and strings behind pointers tagged in their three
    low bits (sentencepiece's model: 0.13 of what freeing its processors returns, before):
    such a word less its tag is a pointer too; one 8 bytes into an allocation is not."""
    holder = (ctypes.c_uint64 * 100)()
    alone = _scan([holder])[0]
    block = libc.malloc(2000)
    try:
        ctypes.memset(block, 0, 2000)
        holder[10] = block + tag
        assert _scan([holder])[0] == alone + (_chunk(block) if found else 0)
    finally:
        holder[10] = 0
        libc.free(block)


def test_an_object_held_in_a_c_field_is_read_only_as_the_class_asked() -> None:
    """held_object: the object a C struct points at (a zstd stream's compressor, which no
    traversal shows), only of exactly the class asked, at an offset inside the struct after
    its header; any other layout reads as None (through process_vm_readv: never a fault)."""

    class Held:
        pass

    one = Held()
    holder = (one, 7)  # (a tuple's first item is the word at offset 24)
    assert walk.held_object(holder, 40, 24, Held) is one
    assert walk.held_object(holder, 40, 24, int) is None  # another class
    assert walk.held_object(holder, 40, 32, Held) is None  # the int's word: no Held there
    assert walk.held_object(holder, 40, 8, type) is None  # the header: refused
    assert walk.held_object(holder, 24, 24, Held) is None  # past the basicsize given
    stray = (ctypes.c_uint64 * 4)(0, 0, 0, 0x10)  # (a word that points at no object: nothing read)
    assert walk.held_object(stray, 48, 32, Held) is None


@pytest.mark.skipif(shutil.which("cc") is None or bool(os.environ.get("LEAKHOUND_NO_COMPILE")),
                    reason="needs a C compiler to build the library")
@pytest.mark.parametrize(("into", "found"), [(9, False), (200, False), (0, False), (None, True)])
def test_a_chunk_a_library_global_points_into_is_no_objects(tmp_path: Path, into: int | None, found: bool) -> None:
    """A library's global that points past the start of an arena chunk (sentencepiece keeps a
    2.3 MB table so, 9 bytes in) holds that chunk: it is no object's, even where an object's
    stale word points at its start (one run in ~150, loaded: 1.10-1.15 of what freeing 20
    processors returns). A chunk nothing else holds is still the object's."""
    (tmp_path / "lib.c").write_text("void *held_by_a_global;\n")
    library = tmp_path / "libglobal.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(tmp_path / "lib.c")], check=True)
    lib = ctypes.CDLL(str(library))
    held = ctypes.c_void_p.in_dll(lib, "held_by_a_global")
    holder = (ctypes.c_uint64 * 100)()
    import _ctypes

    def scan() -> int:
        basicsizes = array.array("q", [sizes._basicsize(type(holder))])
        got = walk.struct_object_bytes([holder], basicsizes.tobytes(), sizes._heap_ranges(), str(library),
                                       sizes.HEAP_BLOCKS[0], 1 << 20, 64 << 20, 30.0)
        assert got is not None
        return array.array("q", got)[0]

    assert _ctypes  # (the holder's class)
    alone = scan()
    block = libc.malloc(4000)  # an arena chunk
    try:
        ctypes.memset(block, 0, 4000)
        holder[10] = block  # the object's word (stale or not) at its start
        held.value = block + into if into is not None else None
        assert scan() == alone + (_chunk(block) if found else 0)
    finally:
        holder[10] = 0
        held.value = None
        libc.free(block)
