"""Sizes are the blocks objects take (sizes.heap_block): checked against the heap's own bytes.

Each CPython 3.10-3.13 here builds twelve shapes (ints, floats, strs, tuples, dicts, lists,
bytes small and big, instances, deques, bytearrays) and reads its allocators' bytes in use before and after
(tests/heap_blocks_probe.py): the payload's sizes are within 0.5% of that on each. Measured
before the rounding (sys.getsizeof's bytes): ints 10%, floats 20%, tuples 31% under it; a
deque sized as one block was ~3% under (its blocks are allocations of their own)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import deque

import pytest

from leakhound.payload import sizes
from tests.pythons import installed_pythons
from tests.utils import ROOT

VERSIONS = {v: p for v, p in installed_pythons().items() if v in ("3.10", "3.11", "3.12", "3.13")}


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_sizes_are_the_heaps_own_bytes(version: str) -> None:
    run = subprocess.run([VERSIONS[version], str(ROOT / "tests" / "heap_blocks_probe.py"), str(ROOT)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    found = json.loads(run.stdout)
    assert found.pop("blocks") == [512, 16, 8, 16, 32]  # pymalloc and glibc here
    off = {name: shape["model"] / shape["truth"] - 1 for name, shape in found.items()}
    assert all(abs(x) <= 0.005 for x in off.values()), off
    # what the rounding is for: sys.getsizeof's bytes are far under the heap's
    naive = {name: shape["getsizeof"] / shape["truth"] - 1 for name, shape in found.items()}
    assert naive["int"] < -0.09 and naive["float"] < -0.19 and naive["tuple"] < -0.3, naive


def test_the_rounding() -> None:
    blocks = (512, 16, 8, 16, 32)
    assert [sizes.heap_block(n, blocks) for n in (0, 1, 16, 17, 28, 512, 513, 1000, 200_000)] == [
        0, 16, 16, 32, 32, 512, 528, 1008, 200_016]
    assert sizes.heap_block(28, None) == 28  # another allocator: as requested
    assert sizes.heap_block(28, (0, 16, 8, 16, 32)) == 48  # PYTHONMALLOC=malloc: a glibc chunk
    assert sizes.object_block(list, sizes.LIST_HEAD + 720, blocks) == 64 + 736  # header, items
    assert sizes.object_block(bytearray, sizes.BYTEARRAY_HEAD + 601, blocks) == 64 + 624  # header, buffer
    head = sizes.heap_block(sizes.DEQUE_HEAD, blocks)
    # a deque: its header and each of its blocks of 64 items (528 bytes: a 544-byte chunk)
    assert sizes.object_block(deque, sizes.DEQUE_HEAD + 3 * 528, blocks) == head + 3 * 544
    assert sizes.object_block(deque, sys.getsizeof(deque(range(200))), blocks) == head + 4 * 544


@pytest.mark.parametrize(("env", "expected"), [
    ({}, [512, 16, 8, 16, 32]),
    ({"PYTHONMALLOC": "malloc"}, [0, 16, 8, 16, 32]),
    ({"PYTHONMALLOC": "debug"}, None),
    ({"PYTHONDEVMODE": "1"}, None),
    ({"LD_PRELOAD": "/nonexistent/libjemalloc.so.2"}, [512, 16, 0, 1, 0]),
])
def test_the_model_is_read_from_the_process(env: dict[str, str], expected: list[int] | None) -> None:
    import os

    code = "import json, sys; sys.path.insert(0, sys.argv[1]); from leakhound.payload import sizes; " \
           "print(json.dumps(sizes.HEAP_BLOCKS))"
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONMALLOC", "PYTHONDEVMODE", "LD_PRELOAD")}
    run = subprocess.run([sys.executable, "-c", code, str(ROOT)], capture_output=True, text=True, timeout=60,
                         env={**clean, **env})
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout.splitlines()[-1]) == expected
