"""Reading protobuf's upb arenas (_walk.c upb_arena_bytes, upb_held) where the memory is not
what it should be: every word is read through process_vm_readv, and a word that starts no
arena's chain must cost a few reads. A pointer into a cycle of other structures once made
each candidate word a walk of 262,144 reads with the GIL held: 300,000 messages hung an
inspection for minutes (about one run in two, as the heap's leftovers fell), and the
payload's thread did not answer the cancel.

Run in a child: the layout a process found (or gave up looking for) is kept for its life.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from leakhound.payload import sizes

pytestmark = pytest.mark.skipif(sizes._compiled_walk is None, reason="the compiled walk is not built")

_CHILD = textwrap.dedent("""
    import ctypes, sys
    from leakhound.payload import _walk

    def words(n):
        return (ctypes.c_uint64 * n)()

    def arena_like(candidates):
        # An object whose word after its header (a ctypes array's buffer pointer) is a
        # fake upb_Arena: the bump pointer and end of a block, then candidate words.
        fake = words(12)
        block = words(64)
        base = ctypes.addressof(block)
        fake[0], fake[1] = base + 64, base + 256
        for k, value in enumerate(candidates):
            fake[2 + k] = value
        return fake, block

    keep = []
    # a block whose next is itself, and a list of 4,000 blocks that never reaches the end
    cycle = words(2)
    cycle[0], cycle[1] = ctypes.addressof(cycle), 64
    chain = [words(2) for _ in range(4000)]
    for one, after in zip(chain, chain[1:] + [None]):
        one[0], one[1] = (ctypes.addressof(after) if after is not None else 0), 64
    keep += [cycle, chain]
    for candidates in ([ctypes.addressof(cycle)] * 10, [ctypes.addressof(chain[0])] * 10):
        for _ in range(200):
            fake, block = arena_like(candidates)
            assert _walk.upb_arena_bytes(fake) is None
            held = _walk.upb_held(fake, type(None), 16)
            assert held == (None, 0, 0), held
    print("ok")
""")


def test_words_that_start_no_chain_cost_a_few_reads_each() -> None:
    # 400 arenas of 10 cycling (or endless) candidates each: ~3,200 s of reads before
    # (8 s an arena); the bound here only stops a hang
    done = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


_HINTED_CHILD = textwrap.dedent("""
    import ctypes
    from leakhound import payload  # noqa: F401
    from leakhound.payload import _walk

    mem = (ctypes.c_uint64 * 64)()
    base = ctypes.addressof(mem)
    skip = (-base % 16) // 8  # the chunk starts 16-aligned, as glibc's do
    chunk, chunk_bytes = base + 8 * skip, 320
    block = chunk + 16
    end = block + chunk_bytes - 8 - 8  # the block in use fills its chunk's usable bytes but 8

    def word(address, value):
        mem[(address - base) // 8] = value

    def answer(size_field, prev_size, next_size_field):
        for k in range(64):
            mem[k] = 0
        word(chunk, prev_size)
        word(chunk + 8, size_field)
        word(block, 0)  # the chain's next block: none
        word(block + 8, 12345)  # protobuf 6.3x: a hint, not the block's size
        arena = block + 32  # the arena's state lives in its first block
        word(arena, block + 64)  # the bump pointer
        word(arena + 8, end)
        word(arena + 16, block)  # the chain's first block
        word(chunk + chunk_bytes + 8, next_size_field)
        # an object whose word after its header (its buffer's address) is the arena
        fake = (ctypes.c_uint64 * 12).from_address(arena)
        return _walk.upb_arena_bytes(fake)

    # a chunk of the arena with the next chunk's header after it: the block in use, its bytes
    print(answer(chunk_bytes | 1, 0, 32 | 1))
    # the next chunk's previous-in-use bit clear: no chunk of glibc's, none
    print(answer(chunk_bytes | 1, 0, 32))
    # an mmapped chunk whose mapping does not start on a page: none
    print(answer(chunk_bytes | 2, 24, 32 | 1))
""")


def test_a_hinted_block_in_use_is_a_glibc_chunk_of_its_size() -> None:
    # protobuf 6.3x's block in use keeps a hint where its size was: its size is that of the
    # glibc chunk it is, a header read only where the chunk after it confirms it
    done = subprocess.run([sys.executable, "-c", _HINTED_CHILD], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:3] == ["(304, 1)", "None", "None"], done.stdout
