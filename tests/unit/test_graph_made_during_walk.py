"""An object made while the graph is walked, after what holds it was walked, is a root named
``<made during the walk: Type>``; an object only C holds (a reference a C extension took, made
before the walk) is still ``<held from C: Type>``. In-process, the new object made at a known
point of the walk (once its holder has been walked), with no collection but the test's own: a
collection during the walk reorders the collector's lists, and then what shares the walk's
generation is not known to be new by its place in them (an object made before the walk is
never called new); it is found among the referents of what the walk reached."""

from __future__ import annotations

import ctypes
import gc
import sys
import types
from typing import Any

import pytest

from leakhound.payload import graph


class _MakesOneDuringTheWalk(graph.Graph):
    """The Python loop: ``log`` gets a new list once the walk has been through it."""

    log: list[Any]
    made: list[Any]
    collect = 0

    def check(self) -> None:
        graph.Graph.check(self)
        if not self.made and id(self.log) in self.index and self.index[id(self.log)] > 0 and self._walked(self.log):
            entry = [bytes(1000)]
            self.log.append(entry)
            self.made.append(id(entry))
            if self.collect:
                gc.collect(self.collect)

    def _walked(self, obj: Any) -> bool:
        # walked: its entries are nodes or folded into it (the first entry is a node: held twice)
        return id(self.log[0]) in self.index


class _CompiledMakesOne(graph.CompiledGraph):
    work_per_call = 32  # a look at LOG every 32 objects: the entry is still made after LOG is walked
    log: list[Any]
    made: list[Any]
    collect = 0

    def check(self) -> None:
        graph.CompiledGraph.check(self)
        if not self.made and self.store is not None and self.known(self.log[0]):
            entry = [bytes(1000)]
            self.log.append(entry)
            self.made.append(id(entry))
            if self.collect:
                gc.collect(self.collect)


def _root_labels(walk: Any) -> dict[int, str]:
    """id -> the label of the root it is, or of the group of held objects it is in (the group,
    a list of the payload's, is gone: its members are the edges from it)."""
    labels = {walk.roots[k]: walk.roots[k + 1] for k in range(0, len(walk.roots), 4)}
    out = {walk.ids[i]: label for i, label in labels.items()}
    for e in range(len(walk.src)):
        label = labels.get(walk.src[e])
        if label is not None and label.startswith(("<held from C", "<made during")):
            out.setdefault(walk.ids[walk.dst[e]], label)
    return out


# (the compiled walk looks at LOG every 32 objects of the whole test process: once)
@pytest.mark.parametrize(("compiled", "collect"), [(True, 0), (False, 0), (False, 1), (False, 2), (True, 2)],
                         ids=["compiled", "python", "python-a-collection-meanwhile",
                              "python-a-full-collection-meanwhile", "compiled-a-full-collection-meanwhile"])
def test_an_object_made_during_the_walk_is_not_held_from_c(compiled: bool, collect: int) -> None:
    if compiled and graph._walk_module is None:
        pytest.skip("the C walk was not built here")
    module = types.ModuleType("lh_made_during_walk")
    first = [bytes(1000)]
    module.LOG = [first]  # type: ignore[attr-defined]
    module.FIRST = first  # type: ignore[attr-defined]  # held twice: a node, known once LOG is walked
    sys.modules[module.__name__] = module
    rows = [f"{i:06d}" * 50 for i in range(100)]
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(rows))  # as a C extension's static cache keeps it
    rows_id = id(rows)
    del rows
    enabled = gc.isenabled()
    gc.disable()  # no collection but the test's own (the test process's allocations would set one off)
    try:
        kind = _CompiledMakesOne if compiled else _MakesOneDuringTheWalk
        walk = kind(timeout=120, progress=None, is_stdlib=None, exclude=(), max_nodes=5_000_000, max_pause_ms=None,
                    cancelled=None)
        walk.log, walk.made, walk.collect = module.LOG, [], collect  # type: ignore[attr-defined]
        walk.run()
        by_id = {} if compiled else _root_labels(walk)
        out = walk.result()
    finally:
        if enabled:
            gc.enable()
        ctypes.pythonapi.Py_DecRef(ctypes.cast(rows_id, ctypes.py_object))
        sys.modules.pop(module.__name__, None)
    assert walk.made, "nothing was made during the walk: nothing was tested"
    roots = out["roots"]
    labels = {roots[k + 1] for k in range(0, len(roots), 4) if roots[k + 2] == "held"}
    # the rows only C holds
    assert "<held from C: list>" in labels, sorted(labels)
    if not compiled:
        assert by_id[rows_id] == "<held from C: list>"
    assert "<made during the walk: list>" in labels, sorted(labels)
    if not compiled:
        assert by_id[walk.made[0]] == "<made during the walk: list>"


def test_atexits_callbacks_are_one_group_not_held_from_c() -> None:
    """What ``atexit.register`` keeps is the group ``atexit.<callbacks>`` (read from the
    interpreter's state by the compiled walk's module): the function, and the tuple of its
    arguments register made."""
    if graph._walk_module is None:
        pytest.skip("the C walk was not built here")
    import atexit

    kept = ([f"{i:06d}" * 50 for i in range(100)],)

    def flush(rows: list[str]) -> int:
        return len(rows)

    atexit.register(flush, *kept)
    # the tuple of its arguments register made (not ``kept``, which holds the rows too)
    args = [id(m) for m in gc.get_referrers(kept[0]) if type(m) is tuple and m is not kept]
    enabled = gc.isenabled()
    gc.disable()
    try:
        walk = graph.Graph(timeout=120, progress=None, is_stdlib=None, exclude=(), max_nodes=5_000_000,
                           max_pause_ms=None, cancelled=None)
        walk.run()
    finally:
        if enabled:
            gc.enable()
        atexit.unregister(flush)
    groups = [walk.roots[k] for k in range(0, len(walk.roots), 4) if walk.roots[k + 1] == "atexit.<callbacks>"]
    assert len(groups) == 1
    members = {walk.ids[walk.dst[e]] for e in range(len(walk.src)) if walk.src[e] == groups[0]}
    walk.result()  # (lets go of the nodes it held)
    del walk
    gc.collect()  # (the walk's cycles: the next test's walk must not see its objects held twice)
    assert id(flush) in members
    assert len(args) == 1 and args[0] in members
