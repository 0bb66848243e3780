"""Past the object graph's budgets no owner is named: the heap's bytes are one
``<not attributed: ...>`` owner, never a first reacher presented as an owner; the header, the
JSON (owner_model, owner_model_reason) and watch say why and what would allow it."""

from __future__ import annotations

import io
from dataclasses import replace

import pytest

from leakhound.analysis.growth import analyse_growth
from leakhound.core import capture
from leakhound.core.decode import decode_graph_outcome
from leakhound.model import snapshot_from_json, snapshot_to_json
from leakhound.model.growth import Sample, sample_from_snapshot
from leakhound.model.names import NotAttributed, OwnerModel, Owners, not_attributed_owner
from leakhound.payload import graph
from leakhound.render import table
from tests.factories import MB, make_snapshot


def test_the_payload_says_the_models_reason_codes() -> None:
    sent = {graph.SKIPPED_OVER_NODES, graph.SKIPPED_OVER_MEMORY_BUDGET, graph.SKIPPED_NO_HEADROOM,
            graph.SKIPPED_OUT_OF_TIME}
    assert sent == {r.value for r in NotAttributed} - {NotAttributed.NO_GRAPH.value}


@pytest.mark.parametrize(("doc", "reason", "owner", "allows"), [
    ({"skipped": "the object graph has more than 6,000,000 nodes: over the graph budget",
      "skipped_code": "graph_over_nodes", "max_nodes": 6_000_000},
     "graph_over_nodes", "<not attributed: graph over 6,000,000 nodes>", "LEAKHOUND_MAX_GRAPH_NODES=N"),
    ({"skipped": "the object graph held 70 MiB in the target while walked, over its memory budget of 64 MiB",
      "skipped_code": "graph_over_memory_budget"},
     "graph_over_memory_budget", "<not attributed: graph over its memory budget>", "--owners dominator"),
    ({"skipped": "the request's memory budget in the target (16 MiB, ...) had 1.0 MiB left for the object graph",
      "skipped_code": "graph_no_headroom"},
     "graph_no_headroom", "<not attributed: no room for the graph under the memory limit>", "--force"),
    ({"skipped": "the object graph did not finish within 36 s", "skipped_code": "graph_out_of_time"},
     "graph_out_of_time", "<not attributed: graph out of time>", "a longer --timeout"),
    ({"skipped": "an older payload's reason"}, "no_graph", "<not attributed: no object graph>", ""),
    (None, "no_graph", "<not attributed: no object graph>", ""),
])
def test_the_heap_is_one_owner_not_attributed_with_why_and_what_would_allow_it(
        doc: dict[str, object] | None, reason: str, owner: str, allows: str) -> None:
    census = make_snapshot()  # its owners are the census's first reachers
    snap = capture.not_attributed(census, decode_graph_outcome(doc) if doc is not None else None)
    assert (snap.heap.owner_model, snap.heap.owner_model_reason) == ("not-attributed", reason)
    (only,) = snap.owners
    assert (only.path, only.retained_bytes, only.items) == (owner, census.heap.bytes, census.heap.objects)
    assert snap.types == census.types  # the per-type view stands
    why = str(doc.get("skipped")) if doc else "the target sent no object graph"
    assert snap.heap.owner_model_note.startswith(why + "; ")
    assert allows in snap.heap.owner_model_note and "--owners census" in snap.heap.owner_model_note
    assert snapshot_from_json(snapshot_to_json(snap)) == snap


def test_explicit_dominators_over_memory_are_the_limits_not_a_budgets() -> None:
    over = decode_graph_outcome({"skipped": "x", "skipped_code": "graph_over_memory_budget"})
    snap = capture.not_attributed(make_snapshot(), over, owners=Owners.DOMINATOR)
    assert snap.heap.owner_model_reason == "graph_no_headroom"


@pytest.mark.parametrize(("value", "auto", "dominator"), [
    (None, 6_000_000, 6_000_000), ("1000", 1000, 1000), ("20_000_000", 20_000_000, 20_000_000),
    ("0", 6_000_000, 6_000_000), ("-5", 6_000_000, 6_000_000), ("lots", 6_000_000, 6_000_000),
    ("999999999999", 100_000_000, 100_000_000),
])
def test_the_node_budget_follows_its_environment_variable(value: str | None, auto: int, dominator: int) -> None:
    env = {} if value is None else {"LEAKHOUND_MAX_GRAPH_NODES": value}
    assert capture.graph_node_budget(Owners.AUTO, env) == auto
    assert capture.graph_node_budget(Owners.DOMINATOR, env) == dominator


def test_the_header_says_owners_are_not_attributed_and_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    snap = capture.not_attributed(make_snapshot(), decode_graph_outcome({
        "skipped": "the object graph has more than 1,000 nodes: over the graph budget",
        "skipped_code": "graph_over_nodes", "max_nodes": 1000}))
    out = io.StringIO()
    table.render_snapshot(snap, [], file=out)
    text = out.getvalue()
    header = next(line for line in text.splitlines() if line.startswith("owners:"))
    assert header.startswith("owners: not attributed: the object graph has more than 1,000 nodes: over the graph "
                             "budget; LEAKHOUND_MAX_GRAPH_NODES=N raises the node budget")
    # The census's first reachers are nowhere on the screen.
    assert "<not attributed: graph over 1,000 nodes>" in text and "trajectories" not in text


def _sample(snap_mb: int, at: float, model: str = "not-attributed") -> Sample:
    base = make_snapshot(taken_at=at)
    snap = capture.not_attributed(replace(base, heap=replace(base.heap, bytes=snap_mb * MB)), decode_graph_outcome({
        "skipped": "over", "skipped_code": "graph_over_nodes", "max_nodes": 1000}))
    if model != "not-attributed":
        snap = replace(base, heap=replace(base.heap, bytes=snap_mb * MB, owner_model=model))
    return sample_from_snapshot(snap)


def test_watch_says_the_heap_grows_with_no_owner_named() -> None:
    samples = [_sample(100 + 10 * k, 1_800_000_000.0 + 10 * k) for k in range(4)]
    last = capture.not_attributed(make_snapshot(), decode_graph_outcome({
        "skipped": "over", "skipped_code": "graph_over_nodes", "max_nodes": 1000}))
    report = analyse_growth(samples, snapshot=last)
    assert (report.owner_model, report.owner_model_reason) == (OwnerModel.NOT_ATTRIBUTED, "graph_over_nodes")
    (finding,) = [f for f in report.findings if f.severity == "warning"]
    assert finding.owner == not_attributed_owner(NotAttributed.GRAPH_OVER_NODES, 1000)
    assert finding.summary.startswith("the heap keeps growing: 60.0 MiB/min")  # as the watch's table says it
    assert "no owner could be computed (not attributed: graph over 1,000 nodes)" in finding.summary


def test_watch_follows_the_dominator_owners_past_a_census_not_attributed() -> None:
    samples = [_sample(100, 1_800_000_000.0, "dominator"), _sample(110, 1_800_000_010.0),
               _sample(120, 1_800_000_020.0, "dominator")]
    report = analyse_growth(samples)
    assert report.owner_model == "dominator" and report.owner_model_reason == ""
    assert any("1 full census(es) could not attribute owners" in w for w in report.warnings)
    assert not any(t.name.startswith("<not attributed") for t in report.owners)


@pytest.mark.parametrize("census_owners", [True, False])
def test_a_skipped_graph_leaves_the_first_reachers_uncounted_when_the_cli_names_none(census_owners: bool) -> None:
    """The CLI names no owner past the graph's budgets (``census_owners: False``): the census
    then counts the heap without walking the first reachers (a third of its CPU on a
    1M-object heap); a request without the key still gets them."""
    from leakhound.payload import runner

    saved = dict(runner._last_graph)
    request: dict[str, object] = {"op": "snapshot", "graph": True, "max_graph_nodes": 10, "max_pause_ms": 50}
    if not census_owners:
        request["census_owners"] = False
    try:
        out = runner.handle(request)
    finally:
        runner._last_graph.clear()
        runner._last_graph.update(saved)
    assert out["ok"], out
    assert out["graph"]["skipped_code"] == "graph_over_nodes"
    assert ("census (owners)" in out["phases"]) is census_owners, out["phases"]
    assert out["heap"]["with_owners"] is census_owners and out["heap"]["objects"] > 0
