"""The compiled census walk (payload/_walk.c) against its pure-Python twin, in this process.

Both walk the same private structure of built-in containers (no heap-type instances, so no
walk leaves it through a class) and must agree exactly: objects, bytes and every type's count
and bytes. A tiny per-call budget makes the C walk stop and resume inside big containers.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any

import pytest

from leakhound.payload import census

built = pytest.mark.skipif(census._walk is None, reason="the C walk was not built here")


@pytest.mark.skipif(shutil.which("cc") is None or bool(os.environ.get("LEAKHOUND_NO_COMPILE")),
                    reason="no C compiler: the install goes on without the C walk")
def test_the_walk_is_built_where_a_compiler_is() -> None:
    # hatch_build.py only warns when the build fails; here it must not have failed silently.
    assert census._walk is not None


def _structure() -> Any:
    shared_text = "shared-" * 20  # one str held by many containers: counted once
    big = [(f"item-{i}", i * 1000003, float(i)) for i in range(5000)]  # bigger than a call
    numbers = {i * 7919: [i, -i, str(i)] for i in range(300)}  # non-str keys: walked as referents
    cycle: list[Any] = []
    cycle.append([cycle, {"back": cycle}])
    nested = {"a": {"b": {"c": [shared_text] * 4}}, "d": frozenset({"x", "y", 3.5})}
    return {
        "big": big,
        "numbers": numbers,
        "cycle": cycle,
        "nested": nested,
        "shared": [shared_text, shared_text, (shared_text, None, True, 1j)],
        "bytes": [bytes(range(i % 256)) * 3 for i in range(400)],
        "sets": {frozenset(range(i)) for i in range(30)},
    }


def _walk(root: Any, compiled: bool) -> tuple[int, int, dict[str, tuple[int, int]]]:
    walk = census.Census(timeout=60, compiled=compiled)
    assert walk.walker == ("compiled" if compiled else "python")
    owner = walk._owner("root", root)
    walk._claim_tree(owner, root)
    types = walk.types
    by_type = {census._type_name(tp): (types.counts[i], types.bytes[i]) for i, tp in enumerate(types.keys)}
    return walk.total_objects, walk.total_bytes, by_type


@built
@pytest.mark.parametrize("per_call", [census._WORK_PER_CALL, 7])
def test_compiled_walk_matches_the_python_loop(monkeypatch: pytest.MonkeyPatch, per_call: int) -> None:
    monkeypatch.setattr(census, "_WORK_PER_CALL", per_call)
    root = _structure()
    python = _walk(root, compiled=False)
    compiled = _walk(root, compiled=True)
    assert compiled == python
    objects, nbytes, by_type = python
    assert by_type["str"][0] > 5000 and by_type["tuple"][0] >= 5001
    assert objects == sum(count for count, _ in by_type.values())
    assert nbytes == sum(size for _, size in by_type.values())


@built
def test_compiled_walk_counts_each_shared_object_once() -> None:
    text = "x" * 1000
    root = [text, [text, text], {"k": text}]
    objects, nbytes, by_type = _walk(root, compiled=True)
    assert by_type["str"] == (2, sys.getsizeof(text) + sys.getsizeof("k"))  # text and the key
    assert by_type["list"][0] == 2 and by_type["dict"][0] == 1


@built
def test_compiled_walk_rejects_malformed_state() -> None:
    walk = census.Census(timeout=60)
    with pytest.raises(TypeError):
        census._walk.claim([[1]], [[], "not an index"], {}, {}, walk.types.slot,
                           walk.types.counts, walk.types.bytes, 10)
    with pytest.raises(TypeError):
        census._walk.claim([[1]], [], {}, {}, walk.types.slot, [], walk.types.bytes, 10)
