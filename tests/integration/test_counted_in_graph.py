"""The census the object graph's walk makes on the way.

With the dominator owners and a pause budget that rules out listing every gc-tracked object
(so no census would look at what no root reaches either), no census walk runs: the graph's
walk counted every object it met once, by type, and that is the snapshot's heap
(``heap.counted_in == "graph"``). Checked against the target's own truth and against the
census of the same target, on 3.11, 3.12 and 3.13 targets.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from leakhound.core.capture import take_snapshot
from leakhound.core.request import RequestOptions
from leakhound.model.names import Method, Owners
from tests.pythons import installed_pythons
from tests.utils import spawn_target

# ptrace whatever else the target offers: the graph's walk is what is measured
BY_PTRACE = RequestOptions(method=Method.PTRACE, timeout=120)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]

PYTHONS = {v: p for v, p in installed_pythons(minimum=(3, 10)).items() if v in ("3.11", "3.12", "3.13")}
N = 50_000


@pytest.mark.parametrize("version", list(PYTHONS))
def test_the_graph_walk_counts_what_the_census_counts(tmp_path: Path, version: str) -> None:
    with spawn_target("instances", tmp_path, python=PYTHONS[version],
                      env={"LEAKHOUND_AGENT": "", "FIXTURE_ITEMS": str(N)}) as child:
        # 0.5 ms: listing ~60k tracked objects (~60 ns each) is over it, for both walks
        graph = take_snapshot(child.pid, request=BY_PTRACE,
                              max_pause_ms=0.5, owners=Owners.DOMINATOR)
        census = take_snapshot(child.pid, request=BY_PTRACE, max_pause_ms=0.5, owners=Owners.CENSUS)
    assert graph.heap.owner_model == "dominator"
    assert graph.heap.counted_in == "graph" and census.heap.counted_in == "census"
    assert not graph.heap.unreached_examined and "pause budget" in graph.heap.unreached_note
    types = {t.type: t for t in graph.types}
    counted = {t.type: t for t in census.types}
    # the target's own objects, exactly: each instance once, its values array in its size
    assert types["__main__.Point"].count == N == counted["__main__.Point"].count
    assert types["__main__.Point"].bytes == counted["__main__.Point"].bytes
    # the ints of the points (-i - 100000 and i * 3 + 100000: 2N distinct objects), folded
    # leaves of their instances in the graph, counted once each; the interpreter's own ints
    # reached a little differently by the two walks (tens of them)
    assert types["int"].count >= 2 * N and abs(types["int"].count - counted["int"].count) <= 0.005 * 2 * N
    # The rest is the interpreter's and leakhound's own state, which the two walks meet a
    # little differently (the graph reads instance dicts of C types and native references,
    # the census member descriptors; the second request finds the first one's caches).
    assert abs(graph.heap.objects - census.heap.objects) <= 0.01 * census.heap.objects
    assert abs(graph.heap.bytes - census.heap.bytes) <= 0.01 * census.heap.bytes
    assert graph.heap.gc_tracked > N
    assert graph.owners[0].path == "__main__.POINTS"


@pytest.mark.parametrize("version", list(PYTHONS))
def test_after_the_graph_the_census_splits_only_what_it_did_not_reach(tmp_path: Path, version: str) -> None:
    # A small heap: listing every tracked object fits the budget, so what no root reaches is
    # split (held from C, cyclic garbage), by a census seeded with the graph's bitmap: no
    # walk of its own from the roots. The split must be the full census's, to the object.
    with spawn_target("instance_graph", tmp_path, python=PYTHONS[version], env={"LEAKHOUND_AGENT": ""}) as child:
        graph = take_snapshot(child.pid, request=BY_PTRACE, owners=Owners.DOMINATOR)
        census = take_snapshot(child.pid, request=BY_PTRACE, owners=Owners.CENSUS)
        truth = child.report()["truth"]
    assert graph.heap.owner_model == "dominator" and graph.heap.counted_in == "graph"
    assert graph.heap.unreached_examined and census.heap.unreached_examined
    nodes = {t.type: t for t in graph.cyclic_garbage.types}["__main__.Node"]
    assert nodes.count == truth["garbage_objects"] * 2 // 3
    # The fixture's garbage to the object; besides it, what the target's 5 ms heartbeat has in
    # flight as each snapshot is taken (an asyncio Future, its callback's bound method, a timer's
    # float: CI once had a Future more in the census's, 6,034 objects to 6,033)
    own = ("__main__.Node", "str")
    assert ({(t.type, t.count, t.bytes) for t in graph.cyclic_garbage.types if t.type in own}
            == {(t.type, t.count, t.bytes) for t in census.cyclic_garbage.types if t.type in own})
    assert abs(graph.cyclic_garbage.objects - census.cyclic_garbage.objects) <= 4
    assert abs(graph.cyclic_garbage.bytes - census.cyclic_garbage.bytes) <= 4 * 512
    # the garbage is in the heap's totals and types too, as the census counts it
    types = {t.type: t for t in graph.types}
    assert types["__main__.Node"].count == {t.type: t for t in census.types}["__main__.Node"].count
    assert abs(graph.heap.objects - census.heap.objects) <= 0.01 * census.heap.objects
    assert abs(graph.heap.bytes - census.heap.bytes) <= 0.01 * census.heap.bytes
    assert graph.heap.gc_tracked > 0
