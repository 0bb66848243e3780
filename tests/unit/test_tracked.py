"""payload/tracked.py: gc.get_objects() without the tuples and frozensets another holds once
(what another thread may still be building), in C and in the Python fallback."""

from __future__ import annotations

import collections
from typing import Any

import pytest

from leakhound.payload import tracked


class _Holder:
    pass


@pytest.mark.parametrize("compiled", [True, False])
def test_held_once_tuples_and_frozensets_are_left_out_and_counted(
        compiled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if compiled and tracked._walk_module is None:
        pytest.skip("the C walk was not built here")
    if not compiled:
        monkeypatch.setattr(tracked, "_walk_module", None)
    h = _Holder()
    h.t = (object(), 1)  # held once: by h's dict
    h.f = frozenset([object()])
    h.p = collections.namedtuple("P", "x")(object())
    twice = (object(),)
    both = [twice, twice]
    counts: dict[int, int] = {}
    kinds: dict[int, Any] = {}
    ids = {id(o) for o in tracked.tracked_objects(counts, kinds)}
    assert not {id(h.t), id(h.f), id(h.p)} & ids
    assert id(twice) in ids and id(both) in ids and id(h) in ids
    assert counts[id(tuple)] >= 1 and counts[id(frozenset)] >= 1 and counts[id(type(h.p))] == 1
    assert kinds[id(type(h.p))] is type(h.p)
    assert {id(h.t)} & {id(o) for o in tracked.tracked_objects()} == set()


def test_young_generations_past_the_limit_are_not_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    # The real verifiers worker's thresholds: generation 1 grows to ~1.5M objects between its
    # collections. young_ids() must see that from the counts, without listing them (one C call
    # no yield splits: 61-111 ms of the worker's GIL at 1.2-2.2 GB on 3.12).
    import gc

    listed: list[int] = []
    real = tracked._generation
    monkeypatch.setattr(tracked, "_generation", lambda g: listed.append(g) or real(g))
    old = gc.get_threshold()
    keep: list[Any] = []
    try:
        gc.collect()
        assert tracked.young_ids() is not None and listed == [0, 1]  # the default thresholds: listed
        listed.clear()
        gc.set_threshold(50_000, 10, 10)
        for _ in range(3):  # each batch passes generation 0's threshold: its survivors go to generation 1
            keep.extend([[] for _ in range(50_001)])
        assert gc.get_count()[1] >= 2
        assert tracked.young_estimate() > tracked.YOUNG_IDS_MAX
        assert tracked.young_ids() is None and listed == []
    finally:
        gc.set_threshold(*old)
        keep.clear()
        gc.collect()


@pytest.mark.parametrize("max_pause_ms", [5, 20, 50, 100, 1000])
def test_the_young_generations_listed_fit_the_pause_budget(max_pause_ms: float) -> None:
    # Listing them is one step no yield splits (100k objects: 45 ms of the busy real worker's
    # CPU, its longest hold against a 50 ms budget): no more of them than the budget's margin
    # lets such a step take, at that rate.
    from leakhound.payload.pacing import unsplit_step_fits

    limit = tracked.young_limit(max_pause_ms)
    assert 0 < limit <= tracked.YOUNG_IDS_MAX
    assert unsplit_step_fits(limit * tracked.YOUNG_NS_PER_OBJECT / 1e6, max_pause_ms)
    assert tracked.young_limit(None) == tracked.YOUNG_IDS_MAX
    assert tracked.young_limit(50) < 60_000  # the busy worker's 100k were 45 ms: over the hold of 25
