"""The census without owners (Census(owners=False), the object graph names them): the same
totals and types as the census with them, from one walk of every named root, in this process."""

from __future__ import annotations

import gc
import sys
from typing import Any

import pytest

from leakhound.payload import census


class _Planted:
    def __init__(self, n: int) -> None:
        self.planted_cells = [f"cell-{i}" * 4 for i in range(n)]
        self.planted_index = {i: (i, float(i)) for i in range(n)}


PLANTED = _Planted(20000)


def _result(owners: bool, max_pause_ms: float | None) -> dict[str, Any]:
    """What the test compares, small: the whole result (every owner's path) alive while the
    other census runs would be counted by it (what no root reaches is counted too)."""
    census._measured.update(ns_per_object=None, tracked=None)  # each runs its own sizing walk
    walk = census.Census(timeout=120, owners=owners, max_pause_ms=max_pause_ms)
    walk.run()
    out = walk.result(top_types=100000, top_owners=100000)
    del walk
    wanted = ("str", f"{__name__}._Planted")
    return {
        "with_owners": out["with_owners"],
        "named": [o["path"] for o in out["owners"] if not o["path"].startswith("<held from C")][:3],
        "examined": out["unreached"]["examined"],
        "objects": out["objects"],
        "bytes": out["bytes"],
        "types": {t["type"]: (t["count"], t["bytes"]) for t in out["types"] if t["type"] in wanted},
    }


@pytest.mark.parametrize("max_pause_ms", [None, 50.0, 0.001])
def test_the_census_without_owners_counts_what_the_census_counts(max_pause_ms: float | None) -> None:
    # The same heap for both runs: the cyclic garbage earlier tests left (counted by a census)
    # collected first, and no collection between or during the runs (measured: with 100,000
    # garbage lists left, the collections the first run's allocations set off freed ~3,000 of
    # them before the second, 0.9% of this process's objects).
    gc.collect()
    gc.disable()
    try:
        full = _result(True, max_pause_ms)
        lite = _result(False, max_pause_ms)
    finally:
        gc.enable()
    assert full["with_owners"] is True and lite["with_owners"] is False
    # One owner, every named root's: no path per global or attribute.
    assert lite["named"] == ["<named roots>"]
    assert lite["examined"] == full["examined"]
    # The same heap, each object once whoever claims it: the totals agree to what this
    # process allocates between the two runs (pytest's own, the first run's result). Without
    # the list of tracked objects (over the budget), what only an object's C members hold
    # (the census with owners reads them through member descriptors along its paths; a
    # referent walk does not see them) is not reached: measured 0.56% of the bytes on the
    # real verifiers worker's heap, 1.7% in this process after the fast tier's tests.
    listed = lite["examined"]
    assert lite["objects"] == pytest.approx(full["objects"], rel=0.01 if listed else 0.03)
    assert lite["bytes"] == pytest.approx(full["bytes"], rel=0.01 if listed else 0.03)
    types_full, types_lite = full["types"], lite["types"]
    planted = f"{__name__}._Planted"
    assert types_lite[planted] == types_full[planted] == (1, types_full[planted][1])
    assert types_lite["str"][0] >= 20000 and types_lite["str"][0] == pytest.approx(types_full["str"][0], rel=0.01)
    assert sys.getrefcount(PLANTED) == 2  # neither census kept a reference


def test_a_census_leaves_no_cycle_behind() -> None:
    # The census's bookkeeping goes when it does (refcounting): a cycle through it (a bound
    # method kept on itself) would keep its marks and tables until the target's next full
    # collection, which leakhound never runs.
    import weakref

    for owners in (True, False):
        walk = census.Census(timeout=60, owners=owners, max_pause_ms=50.0)
        walk.run()
        gone = weakref.ref(walk)
        del walk
        assert gone() is None, "the census outlived its last reference (a reference cycle)"
    assert gc.isenabled()
