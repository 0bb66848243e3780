"""The object graph's walk looks at the clock (duty cycle, deadline, cancel) in its Python
loops over the roots too: on the real verifiers worker's heap (thousands of modules, tens of
thousands of classes) the roots and the natively sized types' lookup were one 170 ms stretch
without a yield (its heartbeat thread waited 182 ms). Counted here, not timed."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from leakhound.payload import graph, sizes


@pytest.fixture(scope="module")
def classes() -> Iterator[list[type]]:
    """Many classes, as a big program has: made for these tests only and collected after
    them (at import they were in every test's process, and every later census's tables)."""
    made = [type(f"Planted{i}", (), {"__module__": __name__}) for i in range(6000)]
    yield made
    made.clear()
    gc.collect()  # classes are reference cycles: gone from the subclass tree for the next tests


@pytest.mark.parametrize("compiled", [True, False])
def test_the_roots_are_added_under_the_clock(monkeypatch: pytest.MonkeyPatch, compiled: bool,
                                            classes: list[type]) -> None:
    since = [0]
    widest = [0]
    real_root = graph.Graph.root
    real_check = graph.Graph.check

    def root(self: Any, *args: Any, **kwargs: Any) -> Any:
        since[0] += 1
        widest[0] = max(widest[0], since[0])
        return real_root(self, *args, **kwargs)

    def check(self: Any) -> None:
        since[0] = 0
        real_check(self)

    monkeypatch.setattr(graph.Graph, "root", root)
    monkeypatch.setattr(graph.Graph, "check", check)
    out = graph.build(timeout=120, progress=None, is_stdlib=lambda name: False, exclude=(), max_nodes=5_000_000,
                      max_pause_ms=50, cancelled=None, compiled=compiled)
    assert out["nodes"] > len(classes)
    assert widest[0] <= 300, widest[0]  # every 256 modules or classes (it was every root there is)


def test_the_natively_sized_types_are_looked_up_under_the_clock(classes: list[type]) -> None:
    ticks = [0]
    sizes.native_types(lambda: ticks.__setitem__(0, ticks[0] + 1))
    # the subclass tree is listed, then looked at, each with a tick every 256 classes
    assert ticks[0] >= 2 * len(classes) // 256


def test_the_tables_of_classes_are_made_under_the_clock() -> None:
    # After the walk of the classes, their tables (a kind, then a code, per class; the compiled
    # walk's without code objects) were made in one go: on 40k classes a stretch of 34-49 ms
    # of CPU without a yield (the real worker's longest). Each looks at the clock too.
    code_type = id(type(test_the_tables_of_classes_are_made_under_the_clock.__code__))
    kinds = dict.fromkeys(range(20000), "instance")
    kinds[code_type] = "code"
    ticks = [0]

    def tick() -> None:
        ticks[0] += 1

    codes = sizes.native_codes(kinds, tick)
    assert ticks[0] >= len(kinds) // 4096 and codes == sizes.native_codes(kinds)
    ticks[0] = 0

    class Walk:
        READS_CODE = 1

    compiled = sizes.for_compiled_walk(codes, Walk, tick)
    assert ticks[0] >= len(kinds) // 4096
    assert compiled == {k: v for k, v in codes.items() if k != code_type} == sizes.for_compiled_walk(codes, Walk)


@pytest.mark.parametrize("compiled", [True, False])
def test_the_roots_hold_no_tracked_object_each(classes: list[type], compiled: bool) -> None:
    """Every gc-tracked object the walk keeps counts towards the target's next collection,
    which runs in whichever thread allocates: the real worker (gc.set_threshold(150_000, ...)
    after gc.freeze()) ran its ~300 ms one in our thread on first inspections, brought
    forward by a list per root (50k roots there). Counted with gc.get_count(), collections
    off for the count."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        before = gc.get_count()[0]
        out = graph.build(timeout=120, progress=None, is_stdlib=lambda name: False, exclude=(), max_nodes=5_000_000,
                          max_pause_ms=50, cancelled=None, compiled=compiled)
        kept = gc.get_count()[0] - before
    finally:
        if was_enabled:
            gc.enable()
    roots = len(out["roots"]) // 4
    assert roots > len(classes)
    assert kept < roots // 10, (kept, roots)


@pytest.mark.parametrize("compiled", [True, False])
def test_the_young_generations_are_listed_after_a_yield(monkeypatch: pytest.MonkeyPatch, compiled: bool) -> None:
    # Listing them is one step no yield splits (100k objects were 45 ms of the busy real
    # worker's CPU): with the tables of classes before it, one 53 ms stretch there. The walk
    # yields first, before its marker (so that nothing is made between the marker and the
    # listing).
    order: list[str] = []
    real_young, real_yield = graph.young_ids, graph.Clock.yield_now
    monkeypatch.setattr(graph, "young_estimate", lambda: 10)

    def young_ids(limit: int) -> Any:
        order.append("list")
        assert limit == graph.young_limit(50)  # as many as the pause budget lets it list
        return real_young(limit)

    def yield_now(self: Any) -> None:
        order.append("yield")
        real_yield(self)

    monkeypatch.setattr(graph, "young_ids", young_ids)
    monkeypatch.setattr(graph.Clock, "yield_now", yield_now)
    graph.build(timeout=120, progress=None, is_stdlib=lambda name: False, exclude=(), max_nodes=5_000_000,
                max_pause_ms=50, cancelled=None, compiled=compiled)
    assert order[:2] == ["yield", "list"], order
