"""The pause budget's rule for a step that cannot be split (gc.get_objects()): taken only
when twice its estimate fits (pacing.unsplit_step_fits), in the census, the graph's held-from-C
split and the census after the graph alike."""

from __future__ import annotations

from leakhound.payload import census, graph, pacing


def test_unsplit_step_fits_with_a_margin() -> None:
    assert pacing.unsplit_step_fits(25.0, 50.0)
    # 465k tracked objects at the default 60 ns: ~28 ms, which took 48 ms of CPU on a loaded machine
    assert not pacing.unsplit_step_fits(28.0, 50.0)
    assert not pacing.unsplit_step_fits(50.0, 50.0)
    assert pacing.unsplit_step_fits(10_000.0, None)


def test_census_after_the_graph_lists_all_only_within_the_margin() -> None:
    assert graph.census_lists_all({"examined": True}, 50.0)
    assert graph.census_lists_all({"examined": False, "estimated_pause_ms": 24.0}, 50.0)
    assert not graph.census_lists_all({"examined": False, "estimated_pause_ms": 28.0}, 50.0)
    assert not graph.census_lists_all({"examined": False, "estimated_pause_ms": 1.0}, None)


def test_the_reason_says_what_a_loaded_machine_takes() -> None:
    said = census.unreached_over_budget(465_000, 28.0, 50.0)
    assert said["examined"] is False
    assert "~28 ms" in said["reason"] and "up to ~56 ms on a loaded machine" in said["reason"]
    assert "over the 50 ms pause budget" in said["reason"]
