"""The object graph's compiled walk in live targets: the same graph as the Python loop, on
every CPython here, through both channels (the agent's socket and the debugger's files).
tests/graph_hostile.py compares the two exactly, in-process, on a heap that does not move."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import pytest

from leakhound.analysis import dominators
from leakhound.attach import run_request
from leakhound.model.names import Method
from tests.pythons import installed_pythons
from tests.utils import spawn_target

pytestmark = pytest.mark.integration

PYTHONS = installed_pythons()


def _graph(pid: int, method: str, walker: str) -> tuple[dict[int, Any], collections.Counter[Any], list[Any], str]:
    # max_pause_ms 1: the objects held from C are not looked for (each request leaves the
    # payload's own transient objects in the list of every tracked object)
    request = {"op": "graph", "max_graph_nodes": 2_000_000, "max_pause_ms": 1, "walker": walker}
    remote = run_request(pid, request, method=Method(method), timeout=120)
    doc = remote.result["graph"]
    assert "binary" in doc and "edge_src" not in doc  # the arrays came raw, not in the JSON
    g = dominators.decode_graph(doc)
    nodes = {g.ids[i]: (g.sizes[i], g.type_names[g.types[i]], g.lengths[i]) for i in range(g.nodes)}
    edges: collections.Counter[Any] = collections.Counter()
    for k in range(g.edges):
        label = g.labels[g.lab[k]] if g.lab[k] >= 0 else ""
        edges[(g.ids[g.src[k]], g.ids[g.dst[k]], label)] += 1
    roots = sorted((g.ids[r[0]], r[1], r[2], r[3]) for r in g.roots)
    return nodes, edges, roots, str(doc.get("walker"))


@pytest.mark.parametrize(("version", "method"), [(v, "ptrace") for v in PYTHONS] + [
    (v, "agent") for v in PYTHONS if v == "3.11"])
def test_compiled_and_python_walks_give_the_same_graph(version: str, method: str, tmp_path: Path) -> None:
    env = {"SHAPE": "weak_registry"}
    if method == "agent":
        env["LEAKHOUND_AGENT"] = "1"
    with spawn_target("dominator_shapes", tmp_path, python=PYTHONS[version], env=env) as child:
        _graph(child.pid, method, "compiled")  # what the first request loads is there for both
        _graph(child.pid, method, "python")
        *python, walker_p = _graph(child.pid, method, "python")
        *compiled, walker_c = _graph(child.pid, method, "compiled")
    assert (walker_p, walker_c) == ("python", "compiled")
    (pn, pe, pr), (cn, ce, cr) = python, compiled
    assert len(cn) > 1000
    # The target keeps running between the two requests (its event loop's heartbeat makes
    # floats, handles, a deque's blocks): the same graph but for that churn, well under 1%.
    # (the main thread's frames are where the debugger or the agent found it)
    roots_p, roots_c = ({r for r in roots if r[2] != "thread"} for roots in (pr, cr))
    assert len(roots_p & roots_c) >= 0.99 * max(len(roots_p), len(roots_c))
    same = sum(1 for x in pn.keys() & cn.keys() if pn[x] == cn[x])
    assert same >= 0.99 * max(len(pn), len(cn)), (len(pn), len(cn), same)
    assert sum((pe & ce).values()) >= 0.99 * max(sum(pe.values()), sum(ce.values()))
    total_p, total_c = sum(v[0] for v in pn.values()), sum(v[0] for v in cn.values())
    assert abs(total_p - total_c) <= 0.01 * total_p
