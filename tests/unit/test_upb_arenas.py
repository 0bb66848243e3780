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
