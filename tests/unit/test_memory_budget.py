"""The request's memory budget in the payload (measured RSS, the graph given up, the request
stopped with reason "memory"), its error at the CLI, and the cost in the header."""

from __future__ import annotations

import io
import mmap
import os
from pathlib import Path

import pytest

from leakhound.attach import RemoteResult, _checked
from leakhound.attach.memory_limit import MIB, MemoryCost
from leakhound.attach.process import Target
from leakhound.errors import MemoryBudgetReached
from leakhound.model import RequestCost
from leakhound.payload import runner
from leakhound.render import table
from tests.factories import make_snapshot


def _touched(n: int) -> mmap.mmap:
    """``n`` bytes made resident: fresh anonymous pages (malloc could hand back memory that is
    resident already, freed by earlier tests: no RSS growth, in the fast tier's full run)."""
    block = mmap.mmap(-1, n)
    for i in range(0, n, 4096):
        block[i] = 1
    return block


def test_the_budget_is_the_rss_grown_since_it_began() -> None:
    budget = runner._MemoryBudget(8 * MIB)
    try:
        assert budget.left() is not None and budget.left() > 4 * MIB  # type: ignore[operator]
        held = _touched(16 * MIB)
        assert budget.cost() >= 15 * MIB
        assert budget.left() < 0  # type: ignore[operator]
        assert budget.peak >= 15 * MIB
        del held
    finally:
        budget.close()


def test_a_file_written_for_the_cli_counts_until_its_pages_go(tmp_path: Path) -> None:
    spool = tmp_path / "graph.bin"
    spool.write_bytes(b"x" * (4 * MIB))
    budget = runner._MemoryBudget(None)
    try:
        without = budget.cost()
        budget.files.append(str(spool))
        assert budget.cost() - without >= 4 * MIB - 4096
    finally:
        budget.close()


def test_passing_the_budget_stops_the_request_with_reason_memory() -> None:
    stop = runner._Stop(60.0, memory=runner._MemoryBudget(1 * MIB))
    try:
        assert stop() is False
        held = _touched(8 * MIB)
        stop.memory_polled = 0.0  # (the RSS is read at most every MEMORY_EVERY s)
        with pytest.raises(runner.Cancelled) as cancelled:
            stop.check("census")
        assert cancelled.value.reason == "memory"
        del held
    finally:
        stop.memory.close()  # type: ignore[union-attr]


def test_the_graph_is_given_up_when_little_of_the_budget_is_left() -> None:
    stop = runner._Stop(60.0, memory=runner._MemoryBudget(1 * MIB))
    try:
        out = runner._graph({"op": "snapshot", "graph": True}, lambda phase, done: None, stop)
        assert "left for the object graph" in out["skipped"] and out["skipped_code"] == "graph_no_headroom"
        assert stop.reason is None  # the request goes on (census owners)
    finally:
        stop.memory.close()  # type: ignore[union-attr]


def test_the_python_loops_graph_is_not_walked_under_a_budget() -> None:
    stop = runner._Stop(60.0, memory=runner._MemoryBudget(512 * MIB))
    try:
        out = runner._graph({"op": "snapshot", "graph": True, "walker": "python"}, lambda phase, done: None, stop)
        assert "Python loop" in out["skipped"]
    finally:
        stop.memory.close()  # type: ignore[union-attr]


def test_a_request_stopped_for_memory_is_its_own_error() -> None:
    target = Target(pid=4242, uid=os.getuid(), exe="/usr/bin/python3", version=(3, 11), name="python", cmdline="")
    cost = MemoryCost(cgroup_peak_bytes=15 * MIB, hwm_bytes=14 * MIB, rss_bytes=MIB, payload_peak_bytes=16 * MIB,
                      budget_bytes=16 * MIB, headroom_bytes=40 * MIB, limit="cgroup v1 /x")
    remote = RemoteResult(target, "ptrace", {"ok": False, "kind": "Cancelled", "reason": "memory", "phase": "census",
                                             "memory_cost": {"peak_rss_bytes": 17 * MIB}}, 0.0, 0.0, cost)
    with pytest.raises(MemoryBudgetReached) as raised:
        _checked(remote, lambda line: None)
    assert "during census" in str(raised.value) and "memory budget of 16.0 MiB" in str(raised.value)
    assert raised.value.EXIT_CODE == 19


def test_the_header_says_what_the_inspection_cost_the_target(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    cost = RequestCost(cgroup_peak_bytes=13 * MIB, hwm_bytes=12 * MIB, rss_bytes=5 * MIB, payload_peak_bytes=12 * MIB,
                       budget_bytes=16 * MIB, headroom_bytes=47 * MIB, limit="cgroup v1 /x: 110 of 157 MiB used")
    out = io.StringIO()
    table.render_snapshot(make_snapshot(cost=cost), [], file=out)
    lines = out.getvalue().splitlines()
    assert lines[3] == "the worker waited: at most 12 ms at once (no budget)"
    assert lines[4] == ("cost to the worker: its memory cgroup +13.0 MiB at peak, VmHWM +12.0 MiB, RSS +5.0 MiB "
                        "while leakhound ran, its own allocations included "
                        "(budget 16.0 MiB of 47.0 MiB headroom under its limit)")
    out = io.StringIO()
    table.render_snapshot(make_snapshot(cost=RequestCost(hwm_bytes=MIB, rss_bytes=-MIB)), [], file=out)
    assert out.getvalue().splitlines()[4] == ("cost to the worker: VmHWM +1.0 MiB, RSS -1.0 MiB while leakhound ran, "
                                              "its own allocations included (no memory limit)")


def test_the_cost_line_says_leakhounds_own_tables_beside_the_workers_growth(monkeypatch: pytest.MonkeyPatch) -> None:
    """A busy worker grows by itself while it is inspected (a real verifiers worker under
    rollouts: RSS +48.8 MiB in 4 s): the process's growth is said as such, and beside it what
    leakhound's own tables held at their peak, as it counts them."""
    from dataclasses import replace

    monkeypatch.setenv("COLUMNS", "250")
    snap = make_snapshot(cost=RequestCost(hwm_bytes=20 * MIB, rss_bytes=49 * MIB))
    snap = replace(snap, heap=replace(snap.heap, payload_peak_bytes=3 * MIB))
    out = io.StringIO()
    table.render_snapshot(snap, [], file=out)
    assert out.getvalue().splitlines()[4] == (
        "cost to the worker: VmHWM +20.0 MiB, RSS +49.0 MiB while leakhound ran, its own allocations included; "
        "leakhound's tables 3.0 MiB at their peak (no memory limit)")


def test_the_cost_is_saved_and_read_back() -> None:
    from leakhound.model import snapshot_from_json, snapshot_to_json

    cost = RequestCost(cgroup_peak_bytes=None, hwm_bytes=12 * MIB, rss_bytes=-4096, payload_peak_bytes=None,
                       budget_bytes=None, headroom_bytes=None, limit="")
    snap = make_snapshot(cost=cost)
    assert snapshot_from_json(snapshot_to_json(snap)) == snap
    older = make_snapshot()
    assert snapshot_from_json(snapshot_to_json(older)).cost is None


def test_a_graph_whose_bitmaps_do_not_fit_the_memory_budget_is_skipped_before_it_walks() -> None:
    """Under a memory budget, a graph whose bitmaps (a bit per 16 bytes of the heap) would
    not fit what the budget leaves it is not walked (at 4 GB a walk spent the memory budget in
    0.6 s and left the census too little of it); the census's owners stand."""
    stop = runner._Stop(60.0, memory=runner._MemoryBudget(24 << 20, 0))
    rss = runner.resident_bytes(stop.memory.fd)
    saved = runner.GRAPH_BITMAP_SHARE
    runner.GRAPH_BITMAP_SHARE = (64 << 20) / max(rss, 1)  # "64 MiB of bitmaps"
    try:
        out = runner._graph({"op": "snapshot", "graph": True, "max_graph_nodes": 1000000},
                            lambda phase, done: None, stop)
    finally:
        runner.GRAPH_BITMAP_SHARE = saved
    assert set(out) == {"format", "skipped", "skipped_code"}, out.keys()
    assert "bitmaps would take ~64 MiB" in out["skipped"], out["skipped"]
    assert out["skipped_code"] == "graph_no_headroom"


def test_a_graph_over_its_node_budget_is_not_walked_again_with_no_bigger_budget() -> None:
    """The census's object count does not decide (the walk folds what a collection alone
    holds): the last walk's node count in this process does."""
    saved = dict(runner._last_graph)
    try:
        first = runner._graph({"op": "snapshot", "graph": True, "max_graph_nodes": 10},
                              lambda phase, done: None, runner._Stop(60.0))
        assert "over the graph budget" in first["skipped"] and first["skipped_code"] == "graph_over_nodes"
        again = runner._graph({"op": "snapshot", "graph": True, "max_graph_nodes": 10},
                              lambda phase, done: None, runner._Stop(60.0))
        assert "the last object graph walked in this process had more than 10 nodes" in again["skipped"]
        assert (again["skipped_code"], again["max_nodes"]) == ("graph_over_nodes", 10)
        bigger = runner._graph({"op": "snapshot", "graph": True, "max_graph_nodes": 1000000},
                               lambda phase, done: None, runner._Stop(60.0))
        assert "skipped" not in bigger and bigger["nodes"] > 10
    finally:
        runner._last_graph.clear()
        runner._last_graph.update(saved)
