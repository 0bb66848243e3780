"""census_unreached.still_outside: of the objects referenced from outside what the walk did
not reach, those that something in the heap references now (a reference made after its
holder was walked) are not held from C; in C (count_references) and in Python alike."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from leakhound.payload import census_unreached


@pytest.mark.parametrize("compiled", [True, False], ids=["count_references", "python"])
def test_a_reference_from_the_heap_is_not_one_from_outside(monkeypatch: pytest.MonkeyPatch, compiled: bool) -> None:
    if compiled and getattr(census_unreached._walk_module, "count_references", None) is None:
        pytest.skip("the C helpers were not built here")
    if not compiled:
        monkeypatch.setattr(census_unreached, "_walk_module", None)
    holder: list[Any] = [[0] * 3]  # tracked, in the heap: it references the first candidate
    outside: list[Any] = [[1] * 3]  # stands for C: not among the referrers
    module_held = type(gc)("lh_still_outside")
    module_held.entry = [2] * 3  # type: ignore[attr-defined]  # a module's dict holds it
    candidates = [holder[0], outside[0], module_held.entry]  # type: ignore[attr-defined]
    # every tracked object but the test's own (``candidates``) and what stands for C
    referrers = [o for o in gc.get_objects() if o is not outside and o is not candidates]
    found = census_unreached.still_outside(candidates, referrers, held=2)
    assert [id(o) for o in found] == [id(outside[0])]


def test_big_containers_are_read_in_place() -> None:
    """A tracked dict of many entries among the referrers: counted without a list of its
    referents (the C helper allocates nothing while it reads)."""
    if getattr(census_unreached._walk_module, "count_references", None) is None:
        pytest.skip("the C helpers were not built here")
    target: list[Any] = []
    big = dict.fromkeys(range(200_000), target)
    keys = sorted({id(target), id(big)})
    counts = census_unreached._walk_module.count_references([big, [target, target]], 0, 2, keys)
    assert dict(zip(keys, counts, strict=True)) == {id(target): 200_002, id(big): 0}


def test_an_lru_caches_results_are_held_by_its_wrapper() -> None:
    """The walks read a bounded lru_cache's results as its links' (untracked, never among the
    referrers); counting references still sees the wrapper's real traverse: a result is held
    by the heap, not from C, where the wrapper was not reached."""
    import functools

    from leakhound.payload import sizes

    if getattr(census_unreached._walk_module, "count_references", None) is None:
        pytest.skip("the C helpers were not built here")
    sizes.native_types()  # (the walks' known classes: the wrapper read from its fields)
    cached = functools.lru_cache(maxsize=100)(lambda i: [i] * 3)
    results = [cached(k) for k in range(50)]
    assert census_unreached._walk_module.typed_referents(cached) is not None or sizes.lru_cache_wrapper() is None
    candidates = results[:10]
    referrers = [cached]
    found = census_unreached.still_outside(candidates, referrers, held=2)
    assert found == []


def _closure_over(value: Any) -> Any:
    def read() -> Any:
        return value

    return read


def test_a_closure_s_cell_is_referenced_by_its_function() -> None:
    """A function's closure, a tuple only the function holds, is in no listing of the tracked
    objects (tracked.py: it may be being built): the cell it holds is referenced from the heap
    through it, counted as the function's (a profile function C holds was named
    ``<held from C: cell>``). In count_references and in referenced_from_outside alike."""
    walk = census_unreached._walk_module
    if getattr(walk, "count_references", None) is None:
        pytest.skip("the C helpers were not built here")
    function = _closure_over([3] * 3)
    counts = walk.count_references([function], 0, 1, [id(function.__closure__[0])])
    assert counts == [1]
    # the function and its cell, unreached, the function held from outside (by this test's
    # variable, as C would), the cell by nothing else (none of the test's variables)
    found = census_unreached.referenced_from_outside([function, function.__closure__[0]], held=1)
    assert [id(o) for o in found] == [id(function)]
    # a tuple held twice is listed: what it references is its own, not its holders'
    shared = function.__closure__
    assert walk.held_once_referents(gc.get_referents(function), 0, 100) == []
    del shared
    found = walk.held_once_referents(gc.get_referents(function), 0, 100)
    assert [id(o) for o in found] == [id(function.__closure__[0])]
