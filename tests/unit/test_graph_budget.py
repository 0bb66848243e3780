"""The object graph's default memory budget in the target: a quarter of its RSS, within a
floor and a ceiling (a sick worker near its limit must not be handed a graph of a quarter of
several GB)."""

from __future__ import annotations

import os

import pytest

from leakhound.core import capture


@pytest.mark.parametrize(("rss_mib", "budget_mib"), [(0, 64), (100, 64), (400, 100), (4096, 256)])
def test_a_quarter_of_rss_within_the_floor_and_the_ceiling(monkeypatch: pytest.MonkeyPatch,
                                                            rss_mib: int, budget_mib: int) -> None:
    page = os.sysconf("SC_PAGE_SIZE")
    real_open = open

    def fake_open(path: str, *args: object, **kwargs: object) -> object:
        if path == "/proc/4242/statm":
            import io  # noqa: PLC0415

            return io.StringIO(f"0 {rss_mib * (1 << 20) // page} 0 0 0 0 0\n")
        return real_open(path, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr("builtins.open", fake_open)
    assert capture.graph_memory_budget(4242) == budget_mib << 20


def test_a_graph_that_finished_last_time_gets_twice_its_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The census's reserve (four times its last time) would leave a big heap's graph 1 s of
    a 60 s request, and its owners to the census: a graph that finished in this process in
    29 s gets 58 s, within what the request has."""
    from leakhound.payload import graph, runner

    asked: list[float] = []

    def build(**kwargs: object) -> dict[str, object]:
        asked.append(float(kwargs["timeout"]))  # type: ignore[arg-type]
        return {"format": graph.GRAPH_FORMAT, "graph_seconds": 29.0}

    monkeypatch.setattr(graph, "build", build)
    monkeypatch.setattr(runner, "_last_graph", {"over_nodes": 0, "seconds": 0.0})
    request = {"op": "snapshot", "graph": True, "max_graph_nodes": 1000}
    runner._graph(request, lambda phase, done: None, runner._Stop(60.0), census_seconds=29.0)
    runner._graph(request, lambda phase, done: None, runner._Stop(60.0), census_seconds=29.0)
    assert asked[0] == 1.0  # nothing known of the graph: the census's reserve
    assert 57.0 < asked[1] <= 58.0
