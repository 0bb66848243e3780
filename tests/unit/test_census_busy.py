"""Issue 12 on the busy real worker: the census's long stretches between two looks at the clock,
and the per-owner work it now does once per class or in one walk.

Structural, not timed: counts of clock ticks and exact numbers, never wall-clock limits.
"""

from __future__ import annotations

import gc
from typing import Any

from leakhound.model.names import Method
from leakhound.payload import census, pacing
from leakhound.payload.census_unreached import cyclic_only, referenced_from_outside
from leakhound.payload.objects import instance_dict, slot_values


def test_peeling_a_big_dead_container_ticks_the_clock() -> None:
    # A container among the garbage candidates that no other candidate references (it died
    # while the census ran) is peeled off: its referents were looked at in one loop with no
    # tick (the busy real worker's census ran 87-103 ms there between two looks at the clock).
    big = list(range(100000))  # referents that are not candidates
    ticks = []
    left = cyclic_only([big], tick=lambda: ticks.append(1))
    assert left == []  # refcounting frees it: not cyclic garbage
    # the first pass over its referents ticks every 8192 of them, the peeling pass every 4096
    # (before: the first pass only)
    assert len(ticks) >= 100000 // 8192 + 100000 // 4096


def test_many_small_containers_add_up_to_a_tick() -> None:
    # 1,000 containers of 4,000 referents: no single one reaches 4,096, and the old per-object
    # counter ticked every 1,024 objects only (4M referents between two ticks).
    members = [list(range(4000)) for _ in range(1000)]
    ticks = []
    outside = referenced_from_outside(members, held=2, tick=lambda: ticks.append(1))
    assert len(outside) == 0 or all(o in members for o in outside)
    assert len(ticks) >= 4000 * 1000 // 8192


class _Slotted:
    __slots__ = ("a", "b", "__dict__")

    def __init__(self) -> None:
        self.a = [1, 2]
        self.c = {"x": 1}


class _SlottedChild(_Slotted):
    __slots__ = ("d",)


class _Plain:
    def __init__(self) -> None:
        self.p = "v"


class _DictProperty:
    @property  # type: ignore[misc]
    def __dict__(self) -> Any:  # a __dict__ written in Python: never run
        raise AssertionError("ran")


def test_attributes_looked_up_once_per_class_match_the_per_object_lookup() -> None:
    walk = census.Census().walk
    child = _SlottedChild()
    child.d = (1,)
    for obj in (_Slotted(), child, _Plain(), _DictProperty(), object(), gc, [1], {"k": 1}):
        for _ in range(2):  # the class's entry made, then used
            d, slots = walk._attributes(obj)
            assert d is instance_dict(obj)
            assert slots == slot_values(obj)


def test_the_result_says_where_the_longest_stretch_began_and_ended() -> None:
    walk = census.Census(max_pause_ms=2.0)
    walk.run()
    heap = walk.result()
    began, ended = heap["max_hold_where"]
    assert ".py:" in ended and "(" in ended  # file:line (function) of the census's code
    assert began == "start" or ".py:" in began
    assert heap["max_gap_ms"] > 0
    assert heap["max_gap_ms"] <= heap["max_hold_ms"] + 0.01
    # the unreached split's parts are phases of their own, and the list is let go in pieces
    # (a census without a budget: a 2 ms one leaves the split out in a process this size)
    walk = census.Census()
    walk.run()
    heap = walk.result()
    assert {"unreached: held from outside", "unreached: cyclic", "release"} <= set(heap["phases"])
    assert heap["unreached"]["objects"] >= heap["unreached"]["held_from_outside"]


def _make_function(i: int) -> Any:
    source = f"def f{i}(x, y={i}):\n    z = x + 'const{i}' + y * {i}.5\n    return lambda: (z, {i}, 'n{i}')\n"
    scope: dict[str, Any] = {}
    exec(compile(source, f"<f{i}>", "exec"), scope)  # a fresh code object each, with its constants
    return scope[f"f{i}"]


def test_the_walls_and_the_roots_counted_by_the_compiled_walk_match_the_python_walk() -> None:
    # The walls (modules, classes, their dicts) are counted in one walk from the list of them
    # and a root by the compiled walk itself: the owners' numbers stay those of the Python
    # walk. A root held only here, so nothing else in the process changes between the walks.
    root: dict[str, Any] = {"rows": [{"id": i, "name": f"n{i}"} for i in range(2000)],
                            "inst": _Plain(), "slotted": _SlottedChild(),
                            # code objects: what they hold is claimed through sizes.native_extra
                            "functions": [_make_function(i) for i in range(300)]}
    out = {}
    for compiled in (False, True):
        taken = census.Census(compiled=compiled)
        taken._walk_roots(None)
        walk = taken.walk
        owner = walk.owner_slot("root", root)
        walk.claim_tree(owner, root)
        out[compiled] = (walk.owners.counts[owner], walk.owners.bytes[owner])
        assert walk.walker == ("compiled" if compiled else "python")
    assert out[True] == out[False]
    assert out[True][0] > 4000


def test_the_snapshot_keeps_the_pause_budget_and_how_the_census_kept_it() -> None:
    from leakhound.core.decode import snapshot_from_answer
    from leakhound.model.snapshot import snapshot_from_json, snapshot_to_json

    walk = census.Census(max_pause_ms=20.0)
    walk.run()
    heap = walk.result()
    result = {"heap": heap, "python_version": "3.11.7", "probes": {},
              "arena": {"malloc_in_use_bytes": 0, "malloc_free_bytes": 0, "trimmable_bytes": 0,
                        "pymalloc_free_bytes": 0}}
    snap = snapshot_from_answer(result, pid=1, method=Method.AGENT, process=_process())
    assert snap.heap.max_pause_budget_ms == 20.0
    assert snap.heap.max_hold_ms == heap["max_hold_ms"] > 0
    assert snap.heap.yields == heap["yields"]
    assert 0 < snap.heap.census_cpu_seconds <= heap["census_seconds"] + 0.05
    assert snapshot_from_json(snapshot_to_json(snap)) == snap


def _process() -> Any:
    from leakhound.model.snapshot import ProcessStats

    return ProcessStats(rss_bytes=1, uss_bytes=1, pss_bytes=1, swap_bytes=0, num_threads=1)


class _Node:
    def __init__(self, i: int) -> None:
        self.peer: Any = None
        self.data = {f"k{i}": [i, str(i) * 3, 10**30 + i]}


def _dead_cycles(n: int) -> None:
    for i in range(n):
        a, b = _Node(i), _Node(i)
        a.peer, b.peer = b, a


def test_the_compiled_walk_counts_the_garbage_as_the_python_loops() -> None:
    # The garbage and the untracked objects hanging off it, claimed by the compiled walk from
    # the list of the garbage (1.5 s of Python for half a million dead objects before).
    gc.collect()
    gc.disable()  # this test process's own collector must not free the cycles meanwhile
    try:
        _dead_cycles(3000)
        out = {}
        for compiled in (False, True, False):
            walk = census.Census(compiled=compiled)
            walk.run()
            out[compiled] = walk.result()["cyclic_garbage"]
    finally:
        gc.enable()
        gc.collect()
    assert out[True] == out[False]
    # per instance: itself, its data dict, the list, the key, a str and a big int
    assert out[True]["objects"] >= 3000 * 2 * 6


def test_the_hidden_references_of_many_found_objects_tick_the_clock() -> None:
    # Every code object a walk meets is sized natively (sizes.native_extra): after the walls'
    # one walk, tens of thousands of them were one loop with no look at the clock (150 ms on
    # the busy real worker).
    taken = census.Census()
    taken._walk_roots(None)
    walk = taken.walk
    checks = []
    real_check = walk.clock.check

    def check() -> None:
        checks.append(1)
        real_check()

    walk.clock.check = check  # type: ignore[method-assign]
    found = [_make_function(i).__code__ for i in range(3000)]
    for compiled in (False, True):
        checks.clear()
        stack: list[Any] = []
        walk._claim_native(list(found), stack, compiled=compiled)
        assert len(checks) >= 3000 // 256


def test_the_census_yields_right_before_listing_every_tracked_object(monkeypatch: Any) -> None:
    # The yield before gc.get_objects() (one step that cannot be split) was skipped when the
    # clock had been looked at less than 0.5 ms before: the stretch before and the step were one.
    walk = census.Census(max_pause_ms=50.0)
    seen = []
    real = gc.get_objects

    def get_objects(*args: Any) -> Any:
        seen.append((walk.clock._began_at, pacing.own_cpu() - walk.clock.held_since))
        return real(*args)

    monkeypatch.setitem(census._measured, "tracked", 10)  # no sizing walk: straight to the list
    monkeypatch.setattr(census.gc, "get_objects", get_objects)
    walk.run()
    assert seen and seen[0][0] is not None
    (code, _line), held = seen[0]
    # yielded right there, or the stretch before the step is under the 1 ms yield_now leaves
    # alone (a yield elsewhere just before: on a loaded machine, the wall clock's)
    assert (code.co_name == "run" and code.co_filename.endswith("census.py")) or held <= 0.001, (code, held)
