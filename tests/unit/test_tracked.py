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
