"""The --html page's data: the embedded blob's escaping, the owners' tree, the growth chart's
paths with their gaps, and the page's size."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leakhound.analysis.growth import analyse_growth
from leakhound.commands.options import check_report_path
from leakhound.errors import ReportFileError
from leakhound.model import Owner
from leakhound.model.growth import OwnerSample, Sample
from leakhound.render import html
from tests.factories import make_snapshot

MB = 1024 * 1024
HOSTILE = "</script><script>alert(1)</script><!-- \u2028 & <b>"


def _blob(page: str) -> object:
    found = re.search(r'<script type="application/json" id="leakhound-data">(.*?)</script>', page, re.S)
    assert found is not None
    return json.loads(found.group(1))


def test_the_blob_cannot_end_its_script_element() -> None:
    owners = (Owner(HOSTILE, HOSTILE, 1, 5 * MB, 1, (HOSTILE,)),)
    page = html.page(html.snapshot_document(make_snapshot(owners=owners)))
    blob = page[page.index('id="leakhound-data">'):page.index("</script>", page.index('id="leakhound-data">'))]
    assert "<" not in blob.partition(">")[2] and "&" not in blob and "\u2028" not in blob
    # the page has exactly its two script elements, and the blob decodes to the names as given
    assert page.count("</script>") == 2
    doc = _blob(page)
    assert isinstance(doc, dict)
    assert doc["processes"][0]["owners"][0]["path"] == HOSTILE


def test_split_path_keeps_brackets_quotes_and_parentheses_whole() -> None:
    assert html.split_path("__main__.APP.bus._listeners") == ["__main__", ".APP", ".bus", "._listeners"]
    assert html.split_path("task:Task-1/run (worker.py:12).x['a.b'][3]") == [
        "task:Task-1/run (worker.py:12)", ".x", "['a.b']", "[3]"]
    assert html.split_path("__main__.CACHE['k]\\'.x']") == ["__main__", ".CACHE", "['k]\\'.x']"]
    assert html.split_path("<held from C: cell>.<tuple>[]") == ["<held from C: cell>.<tuple>[]"]


@given(st.text(alphabet="ab.[]'()\\x", max_size=30))
def test_split_path_cuts_without_losing_a_character(path: str) -> None:
    steps = html.split_path(path)
    assert "".join(steps) == path
    if not path.startswith("<"):
        assert steps == html.scan_steps(path)


def test_owner_tree_nests_by_path_sums_and_caps() -> None:
    owners = [Owner("__main__.APP.a", "dict", 1, 40 * MB), Owner("__main__.APP.b", "list", 1, 20 * MB),
              Owner("__main__.CACHE", "dict", 1, 10 * MB)]
    owners += [Owner(f"mod{i}.table", "dict", 1, (i + 1) * 1024) for i in range(30)]
    tree = html.owner_tree(owners, heap_bytes=100 * MB, fanout=5)
    assert tree["b"] == 100 * MB  # the heap: owners plus what no listed owner holds
    kids = tree["c"]
    assert [c["n"] for c in kids][:2] == ["__main__", "not in a listed owner"]
    main = kids[0]
    assert main["b"] == 70 * MB
    # __main__ -> .APP is a group of two owners; .CACHE an owner; chains joined
    assert [(c["n"], c["k"], c["b"]) for c in main["c"]] == [(".APP", "group", 60 * MB), (".CACHE", "owner", 10 * MB)]
    assert [c["o"] for c in main["c"][0]["c"]] == [1, 2]
    others = kids[-1]
    assert others["k"] == "others" and others["n"] == "26 others"  # 31 top-level steps, 5 shown
    assert sum(c["b"] for c in kids) == tree["b"]
    single = html.owner_tree([Owner("mod.x", "dict", 1, MB)], heap_bytes=MB)
    assert single["c"][0]["n"] == "mod.x" and single["c"][0]["o"] == 1


def test_an_owner_another_path_goes_through_keeps_its_own_bytes_as_a_child() -> None:
    owners = [Owner("m.reg", "dict", 2, 5 * MB), Owner("m.reg['a']", "list", 1, 3 * MB)]
    (reg,) = html.owner_tree(owners, heap_bytes=8 * MB)["c"]
    assert reg["b"] == 8 * MB and reg["o"] == 1
    assert sorted((c["n"], c["b"]) for c in reg["c"]) == [("(itself)", 5 * MB), ("['a']", 3 * MB)]


def test_tree_of_many_owners_stays_small() -> None:
    owners = [Owner(f"__main__.R['{i:08d}'].steps[{i % 50}]", "dict", 1, 1000 + i) for i in range(20_000)]
    tree = html.owner_tree(owners, heap_bytes=10**9)
    assert len(json.dumps(tree)) < 20_000


def _ident(v: float) -> float:
    return v


def test_series_path_starts_a_new_run_across_a_gap() -> None:
    points = [(0, 0), (1, 1), (2, 2), (10, 3), (11, 4), (30, 5)]
    d = html.series_path(points, x_of=_ident, y_of=_ident, gaps=[(2, 10), (11, 30)])
    assert d == "M0.0 0.0L1.0 1.0L2.0 2.0M10.0 3.0L11.0 4.0M30.0 5.0h0.01"
    assert html.series_path(points, x_of=_ident, y_of=_ident, gaps=[]).count("M") == 1
    # a series sampled more sparsely than the process is broken only where the process was not
    assert html.series_path([(0, 1), (5, 1), (9, 1)], x_of=_ident, y_of=_ident, gaps=[(6, 8)]).count("M") == 2
    assert html.series_path([], x_of=_ident, y_of=_ident, gaps=[]) == ""


def _sample(t: float, rss: int, sessions: int | None, full: bool = False) -> Sample:
    owners = (OwnerSample("__main__.SESSIONS", "dict", sessions, sessions * 1000, object_id=7),) if sessions else ()
    return Sample(pid=4242, taken_at=t, rss_bytes=rss, heap_bytes=rss // 2 if full else None, owners=owners,
                  full=full, owner_model="dominator")


def test_growth_chart_draws_a_gap_where_samples_are_missing() -> None:
    times = [0, 1, 2, 3, 4, 20, 21, 22, 23]
    samples = [_sample(t, 100 * MB + int(t) * MB, 1000 + 100 * int(t), full=t in (0, 23)) for t in times]
    report = analyse_growth(samples)
    section = html.growth_section(report, samples)
    (sessions,) = section["owners"]["series"]
    assert sessions["name"] == "__main__.SESSIONS" and sessions["runs"] == 2 and sessions["points"] == 9
    rss = section["memory"]["series"][0]
    assert rss["name"] == "RSS" and rss["runs"] == 2
    assert section["owners"]["gaps"] == section["memory"]["gaps"] and len(section["memory"]["gaps"]) == 1
    plot = section["owners"]["plot"]
    for line in section["owners"]["series"] + section["memory"]["series"]:
        xs = [float(x) for x in re.findall(r"[ML](-?[\d.]+) ", line["d"])]
        assert plot[0] <= min(xs) and max(xs) <= plot[2]  # inside the plot; the legend is not
    page = html.page(html.watch_document(samples, [report], [make_snapshot()]))
    assert len(page) < 200_000


def test_check_report_path(tmp_path: Path) -> None:
    check_report_path(tmp_path / "ok.html")
    with pytest.raises(ReportFileError, match="no directory"):
        check_report_path(tmp_path / "missing" / "r.html")
    with pytest.raises(ReportFileError, match="is a directory"):
        check_report_path(tmp_path)
    with pytest.raises(ReportFileError, match="not standard output"):
        check_report_path(Path("-"))
    assert ReportFileError.EXIT_CODE == 21 and ReportFileError.HELP_TEXT


def test_write_error_is_a_report_file_error(tmp_path: Path) -> None:
    with pytest.raises(ReportFileError, match="cannot write the report"):
        html.write_snapshot_report(tmp_path / "gone" / "r.html", make_snapshot())


def test_owner_parts_break_an_owner_down_by_what_it_retains() -> None:
    from leakhound.analysis import dominators as dom
    from leakhound.analysis.dominators.parts import owner_parts
    from tests.unit.test_dominators import callbacks_graph

    graph = callbacks_graph()
    found = dom.find_owners(graph, top=5)
    rows = found.owners[0]
    app = Owner("__main__.APP", "__main__.App", 1, int(found.tree.retained[5]), object_id=5)
    owners = [Owner(rows.path, rows.type, rows.items, rows.retained_bytes, object_id=int(graph.ids[rows.node])),
              app, Owner("<group>", "module", 1, 10)]
    rows_parts, app_parts, none = owner_parts(graph, found.tree, owners, fanout=12, depth=3)
    assert none == ()
    # 12 strings by themselves, the other 988 as one, and the list's own bytes: all it retains
    assert [(p.name, p.type, p.retained_bytes) for p in rows_parts[:12]] == [("[]", "str", 100)] * 12
    assert (rows_parts[12].name, rows_parts[12].others, rows_parts[12].retained_bytes) == ("988 others", 988, 98_800)
    assert (rows_parts[13].name, rows_parts[13].retained_bytes) == ("(its own)", 8056)
    assert sum(p.retained_bytes for p in rows_parts) == rows.retained_bytes
    # an instance: its attribute dict, then the dict's entries by key
    (attrs, own) = app_parts
    assert (attrs.name, attrs.type, own.name) == (".__dict__", "dict", "(its own)")
    assert attrs.parts[0].name == "['rows']" and attrs.parts[0].retained_bytes == rows.retained_bytes
    tree = html.owner_tree([app], heap_bytes=200_000, parts=[app_parts])
    app_node = next(c for c in tree["c"] if c.get("o") == 1)
    assert app_node["n"] == "__main__.APP"
    assert [c["k"] for c in app_node["c"]] == ["part", "part"]
    assert sum(c["b"] for c in app_node["c"]) == app_node["b"] == app.retained_bytes
    # the budget goes to the biggest owners first: past it, an owner is not broken down
    first, second, _ = owner_parts(graph, found.tree, owners, fanout=12, depth=3, budget=14)
    assert first and second == ()
