"""Allocation sites attributed to owners (analysis/sites.py), decoded from the payload's answer
(core/decode.py) and carried by growth findings (analysis/growth.py)."""

from __future__ import annotations

import array

import pytest

from leakhound.analysis import dominators as dom
from leakhound.analysis.sites import SitesFound, attribute_sites, owner_of_nodes
from leakhound.core.decode import decode_sites
from leakhound.errors import ProtocolViolation
from leakhound.model.snapshot import SiteFrame


def _tree(idom: list[int]) -> dom.DominatorTree:
    return dom.DominatorTree(idom=array.array("q", idom), retained=array.array("q", [0] * len(idom)))


def _graph(ids: list[int]) -> dom.ObjectGraph:
    n = len(ids)
    return dom.ObjectGraph(nodes=n, sizes=array.array("q", [0] * n), types=array.array("i", [0] * n),
                           ids=array.array("q", ids), lengths=array.array("i", [0] * n), src=array.array("i"),
                           dst=array.array("i"), lab=array.array("i"), type_names=["object"], labels=[], roots=[])


def test_a_node_belongs_to_its_nearest_owner_up_the_dominator_tree() -> None:
    # 0 root; 1 owner A; 2 under A; 3 owner B under 2; 4 under B; 5 under the root only
    tree = _tree([-1, 0, 1, 2, 3, 0])
    assert owner_of_nodes(tree, {1: "A", 3: "B"}, [1, 2, 3, 4, 5]) == {1: "A", 2: "A", 3: "B", 4: "B"}


def _found(samples: list[tuple[int, int, int, int, int]]) -> SitesFound:
    stacks = ((SiteFrame("w.py", 10, "record_step"),), (SiteFrame("w.py", 20, "record_meta"),))
    return SitesFound(samples=tuple(samples), stacks=stacks, mean_bytes=4096, sampled=9, allocated_bytes=10**6,
                      table_bytes=1 << 20, dropped=0, expired=False, seconds=5.0)


def test_samples_go_to_their_owner_and_the_rest_is_not_attributed_never_guessed() -> None:
    graph = _graph([0, 0x1000, 0x2000, 0x3000])
    tree = _tree([-1, 0, 1, 0])  # 0x2000 under the owner 0x1000; 0x3000 under no owner
    found = _found([(0x1000, 0, 3000, 1, 1), (0x2000, 0, 3000, 1, 1), (0x2000, 1, 1000, 1, 1),
                    (0x3000, 1, 500, 1, 1), (0x9999, 0, 700, 1, 1), (0, 1, 100, 1, 1)])
    per_owner, tracking = attribute_sites(found, graph, tree, {1: "RUNTIME.trajectories"})
    sites = per_owner["RUNTIME.trajectories"]
    assert [(s.stack[0].function, s.bytes, s.samples) for s in sites] == [("record_step", 6000, 2),
                                                                            ("record_meta", 1000, 1)]
    assert tracking.attributed_bytes == 7000
    assert tracking.not_attributed_bytes == 1300
    assert {s.stack[0].function for s in tracking.not_attributed} == {"record_step", "record_meta"}
    # without a graph (its walk skipped) nothing is attributed
    per_owner, tracking = attribute_sites(found, None, None, {})
    assert per_owner == {} and tracking.attributed_bytes == 0 and tracking.not_attributed_bytes == 8300


def test_the_answer_is_read_field_by_field() -> None:
    doc = {"available": True, "samples": [[4096, 0, 3000, 1, 1]], "stacks": [[["w.py", 3, "f"]]],
           "tracker": {"mean_bytes": 4096.0, "sampled": 1, "allocated_bytes": 5000, "table_bytes": 100,
                       "dropped": 0, "dropped_stacks": 0, "expired": 0, "seconds": 1.5}}
    found = decode_sites(1, doc)
    assert found is not None and found.samples == ((4096, 0, 3000, 1, 1),) and found.seconds == 1.5
    assert found.stacks == ((SiteFrame("w.py", 3, "f"),),)
    assert decode_sites(1, {"available": False, "reason": "no module"}) is None
    for bad in ({**doc, "samples": [[1, 5, 1, 1, 1]]}, {**doc, "stacks": "x"}, "nope",
                {**doc, "tracker": {**doc["tracker"], "sampled": -1}}):
        with pytest.raises(ProtocolViolation):
            decode_sites(1, bad)


def test_a_growing_owners_sites_reach_its_finding_and_the_screen(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from leakhound.analysis.growth import analyse_growth
    from leakhound.model.snapshot import AllocationSite, Owner, SiteTracking
    from leakhound.render.watch import render_reports
    from tests.factories import make_snapshot
    from tests.unit.test_watch_screen import LEAK, _sample

    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    samples = [_sample(float(t)) for t in range(12)]
    site = AllocationSite(stack=(SiteFrame("/venv/verifiers/v1/runtime.py", 633, "Runtime.submit_model_request"),
                                 SiteFrame("/venv/verifiers/v1/utils/endpoint_utils.py", 406, "forward_request")),
                          bytes=3_000_000, count=1000, samples=6)
    tracking = SiteTracking(mean_bytes=524288, seconds=11.0, sampled=40, allocated_bytes=20_000_000, surviving=6,
                            attributed_bytes=3_000_000, not_attributed_bytes=0, table_bytes=1_966_080)
    snapshot = make_snapshot(owners=(Owner(path=LEAK, type="dict", items=2100, retained_bytes=630_000,
                                           sites=(site,)),), sites=tracking)
    report = analyse_growth(samples, snapshot=snapshot)
    growth = [f for f in report.findings if f.owner == LEAK]
    assert growth and growth[0].sites == (site,)
    assert report.sites == tracking
    out = io.StringIO()
    render_reports((report,), file=out)
    text = " ".join(out.getvalue().split())
    assert "runtime.py:633 Runtime.submit_model_request <- endpoint_utils.py:406" in text.replace("│ ", "")
    assert "tracker's extra memory in the target 1.9 MiB" in text


def test_a_snapshot_with_sites_is_read_back_as_written() -> None:
    from leakhound.model.snapshot import AllocationSite, Owner, SiteTracking, snapshot_from_json, snapshot_to_json
    from tests.factories import make_snapshot

    site = AllocationSite(stack=(SiteFrame("w.py", 3, "f"),), bytes=10, count=2, samples=1)
    snap = make_snapshot(owners=(Owner("a", "list", 1, 10, sites=(site,)),),
                         sites=SiteTracking(mean_bytes=1, seconds=1.0, sampled=1, allocated_bytes=1, surviving=1,
                                            attributed_bytes=10, not_attributed_bytes=0, table_bytes=5,
                                            not_attributed=(site,)))
    assert snapshot_from_json(snapshot_to_json(snap)) == snap
