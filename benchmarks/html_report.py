"""`--html FILE`: the page's size and how long headless Chromium takes to show it.

Three pages and one timing:

- ``small``: `leakhound inspect PID --html` of a 100k-object heap (fixtures/scale_heap.py);
- ``5M``: the same of a 5M-object heap, with ``--top 1000`` (the most owners a snapshot holds);
- ``5M-synth``: a synthesized snapshot of a 5M-object heap at its widest: 1,000 owners with
  long paths and three retainer paths each, 5,000 types, a finding per owner for the first
  hundred, and owner parts at their budget (3,000), written in-process;
- ``parts-2M-nodes``: no page, the owners' parts alone on a synthesized 2M-node graph (a
  registry of 1M entries, none folded).

For each page: its size, the time leakhound takes to make it (in-process: the owners' parts
from the dominator tree, and writing the page), and in Debian's chromium (playwright's
``executable_path``; no browser is downloaded) with the network off, best and median of
``--repeat`` fresh loads: navigation to the load event, and to the first paint of the treemap
(the page's ``leakhound:treemap-painted`` mark: the frame with the treemap in it has been
painted). Writes benchmarks/results/html-report-<date>.json and the "HTML report" table of
docs/performance.md from it (``--no-doc``: not; ``--doc-from FILE``: only the table, from a
results file).

    .venv/bin/python benchmarks/html_report.py [--cases small,5M,5M-synth,parts-2M-nodes] [--repeat 5]
        [--out FILE] [--no-doc] [--doc-from FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as c

from leakhound.model.names import Owners

sys.path.insert(0, str(c.ROOT))

RESULTS = Path(__file__).resolve().parent / "results"
CASES = ("small", "5M", "5M-synth", "parts-2M-nodes")


def real_page(objects: int, out: Path, *, top: int) -> dict[str, Any]:
    env = {"SCALE_OBJECTS": str(objects), "SCALE_SHAPE": "registry"}
    row: dict[str, Any] = {"objects_asked": objects, "source": "inspect --html of fixtures/scale_heap.py"}
    with c.target("scale_heap.py", env=env, ready_timeout=3600) as t:
        t.settle(1.0)
        saved = out.with_suffix(".json")
        wall, proc = c.run_timed([str(c.LEAKHOUND), "inspect", str(t.pid), "--top", str(top), "--html", str(out),
                                  "--save", str(saved)])
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-2000:])
        row.update(page_seconds(t.pid, top, out.with_suffix(".again.html")))
        snap = json.loads(saved.read_text())
        row.update(inspect_wall_s=round(wall, 2), heap_objects=snap["heap"]["objects"], owners=len(snap["owners"]),
                   owner_model=snap["heap"]["owner_model"], owner1=snap["owners"][0]["path"])
    return row


def page_seconds(pid: int, top: int, out: Path) -> dict[str, float]:
    """What the page adds to an inspection, timed in-process on a capture of its own: the
    owners' parts (the dominator tree's children) and the page's writing."""
    from leakhound.analysis.dominators.parts import owner_parts
    from leakhound.core.capture import capture
    from leakhound.render import html

    taken = capture(pid, top=top, owners=Owners.AUTO)
    started = time.perf_counter()
    parts = owner_parts(taken.graph, taken.tree, taken.snapshot.owners) if taken.graph and taken.tree else ()
    parted = time.perf_counter()
    html.write_snapshot_report(out, taken.snapshot, parts=parts)
    return {"graph_nodes": taken.graph.nodes if taken.graph else 0, "parts_s": round(parted - started, 3),
            "write_s": round(time.perf_counter() - parted, 3)}


def parts_of_a_big_graph(entries: int = 1_000_000) -> dict[str, Any]:
    """owner_parts on a synthesized graph of 2M nodes: one registry of ``entries`` entries (each
    with a str), none folded: the most a graph within its node budget asks of it."""
    import array

    from leakhound.analysis import dominators as dom
    from leakhound.analysis.dominators.parts import owner_parts
    from leakhound.model import Owner

    n = 3 + 2 * entries  # 0 the super-root, 1 a module, 2 its registry, then entries and their strs
    graph = dom.ObjectGraph(
        nodes=n,
        sizes=array.array("q", [0, 72, 40_000_000] + [200 + i % 977 for i in range(entries)] + [60] * entries),
        types=array.array("i", [0, 1, 2] + [3] * entries + [4] * entries), ids=array.array("q", range(n)),
        lengths=array.array("i", [0] * n),
        src=array.array("i", [0, 1] + [2] * entries + list(range(3, 3 + entries))),
        dst=array.array("i", [1, 2] + list(range(3, n))),
        lab=array.array("i", [-1, 0] + list(range(1, entries + 1)) + [-1] * entries),
        type_names=["<root>", "module", "dict", "Session", "str"],
        labels=["kREGISTRY"] + [f"ksession-{i}" for i in range(entries)], roots=[(1, "__main__", "module", 0)])
    tree = dom.dominators(graph)
    owners = [Owner("__main__.REGISTRY", "dict", entries, int(tree.retained[2]), object_id=2)]
    started = time.perf_counter()
    owner_parts(graph, tree, owners)
    return {"case": "parts-2M-nodes", "graph_nodes": n, "parts_s": round(time.perf_counter() - started, 3)}


def synthesized_page(out: Path) -> dict[str, Any]:
    from leakhound.model import Finding, HeapStats, Owner, TypeStat, snapshot_to_json
    from leakhound.render import html
    from tests.factories import make_snapshot

    owners = tuple(
        Owner(f"task:Task-{i}/run (worker.py:{i % 500}).self.env.harness.runtime.trajectories['{i:032x}']"
              f".steps[{i % 50}].response.choices[0].message", "dict", 1000 + i, 10_000_000 - i * 7_000, 5_000 + i,
              tuple(f"__main__.WORKERS[{k}].runtime.trajectories['{i:032x}'].steps[{i % 50}]" for k in range(3)))
        for i in range(1000))
    types = tuple(TypeStat(f"package_{i % 40}.module_{i % 300}.Class_{i}", 5_000_000 // (i + 2), 900_000_000 // (i + 2))
                  for i in range(5000))
    findings = tuple(Finding("growth", "warning", o.retained_bytes, o.items, o.path, "registry" if i % 2 else "",
                             f"{o.path} keeps growing: 1.2 MiB/min") for i, o in enumerate(owners[:100]))
    heap = HeapStats(objects=5_000_000, bytes=2_000_000_000, census_seconds=9.5, max_pause_ms=48.0)
    snapshot = make_snapshot(owners=owners, types=types, findings=findings, heap=heap)
    saved = out.with_suffix(".json")
    saved.write_text(snapshot_to_json(snapshot))
    parts = synthesized_parts(len(owners))
    started = time.perf_counter()
    html.write_snapshot_report(out, snapshot, parts=parts)
    write_s = time.perf_counter() - started
    return {"objects_asked": 5_000_000,
            "source": "a synthesized snapshot (1,000 owners, 5,000 types) and owner parts at their budget",
            "owners": len(owners), "parts": _count(parts), "snapshot_json_bytes": saved.stat().st_size,
            "write_s": round(write_s, 3)}


def synthesized_parts(owners: int) -> tuple[tuple[Any, ...], ...]:
    """Owner parts as big as analysis.dominators.owner_parts makes them: PART_BUDGET parts in
    all, PART_FANOUT a level and an "N others", the biggest owners first, long keys."""
    from leakhound.analysis.dominators.parts import PART_BUDGET, PART_FANOUT, Part

    left = PART_BUDGET

    def level(depth: int, salt: str) -> tuple[Any, ...]:
        nonlocal left
        if depth == 0 or left <= 0:
            return ()
        left -= PART_FANOUT + 2
        kids = [Part(f"['{salt}-{k:02d}-{'x' * 32}']", "dict", 100_000 >> depth, level(depth - 1, f"{salt}{k}"))
                for k in range(PART_FANOUT)]
        return (*kids, Part("123,456 others", "", 9_000_000 >> depth, others=123_456),
                Part("(its own)", "dict", 1_000))

    return tuple(level(3, f"o{i}") for i in range(owners))


def _count(groups: Any) -> int:
    return sum(1 + _count((p.parts,)) for group in groups for p in group)


def browser_times(path: Path, repeat: int) -> dict[str, Any]:
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium")
    if chromium is None:
        raise SystemExit("no chromium on PATH (apt-get install chromium)")
    load, painted, wall = [], [], []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"] if os.geteuid() == 0 else [])
        try:
            for _ in range(repeat):
                context = browser.new_context(offline=True, viewport={"width": 1280, "height": 900})
                page = context.new_page()
                page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:")
                           else route.abort())
                started = time.perf_counter()
                page.goto(path.as_uri(), wait_until="load")
                page.wait_for_function("performance.getEntriesByName('leakhound:treemap-painted').length > 0")
                wall.append(time.perf_counter() - started)
                timing = page.evaluate("""() => ({
                    load: performance.getEntriesByType('navigation')[0].loadEventEnd,
                    painted: performance.getEntriesByName('leakhound:treemap-painted')[0].startTime})""")
                load.append(timing["load"] / 1000)
                painted.append(timing["painted"] / 1000)
                context.close()
        finally:
            browser.close()
    return {
        "load_s": {"best": round(min(load), 3), "median": round(statistics.median(load), 3)},
        "treemap_painted_s": {"best": round(min(painted), 3), "median": round(statistics.median(painted), 3)},
        "wall_to_painted_s": {"best": round(min(wall), 3), "median": round(statistics.median(wall), 3)},
    }


DOC_HEADERS = ("page", "heap objects", "owners", "page size", "owner parts", "writing", "load (median)",
               "treemap painted (median)")


def doc_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    """The rows of docs/performance.md's "HTML report" table."""
    def median(r: dict[str, Any], key: str) -> str:
        return f"{r[key]['median'] * 1000:.0f} ms" if key in r else "-"

    def took(r: dict[str, Any], key: str) -> str:
        return f"{r[key] * 1000:.0f} ms" if key in r else "-"

    out = []
    for r in rows:
        objects = r.get("heap_objects") or r.get("objects_asked")
        out.append([
            r["case"] if "page_bytes" in r else f"{r['case']} (no page)",
            f"{objects / 1e6:.2g}M" if objects else f"{r.get('graph_nodes', 0) / 1e6:.2g}M graph nodes",
            f"{r['owners']:,}" if "owners" in r else "-",
            f"{r['page_bytes'] / 1024:,.0f} KiB" if "page_bytes" in r else "-",
            took(r, "parts_s"), took(r, "write_s"), median(r, "load_s"), median(r, "treemap_painted_s"),
        ])
    return out


def write_doc(results: Path) -> None:
    c.update_doc_table("html-report", results, DOC_HEADERS, doc_rows(json.loads(results.read_text())["rows"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS / f"html-report-{time.strftime('%Y-%m-%d')}.json")
    c.add_doc_options(parser)
    args = parser.parse_args()
    if args.doc_from is not None:
        write_doc(args.doc_from)
        return
    rows = []
    workdir = Path(tempfile.mkdtemp(prefix="leakhound-html-bench-"))
    try:
        for case in args.cases.split(","):
            page = workdir / f"{case}.html"
            if case == "small":
                row = real_page(100_000, page, top=15)
            elif case == "5M":
                row = real_page(5_000_000, page, top=1000)
            elif case == "5M-synth":
                row = synthesized_page(page)
            elif case == "parts-2M-nodes":
                rows.append(parts_of_a_big_graph())
                print(f"{case}: owner parts in {rows[-1]['parts_s']:.3f} s", flush=True)
                continue
            else:
                raise SystemExit(f"no case {case!r}: {', '.join(CASES)}")
            row = {"case": case, **row, "page_bytes": page.stat().st_size, **browser_times(page, args.repeat)}
            rows.append(row)
            print(f"{case:9} {row['page_bytes'] / 1024:8,.0f} KiB  load {row['load_s']['median']:.3f} s  "
                  f"treemap painted {row['treemap_painted_s']['median']:.3f} s  "
                  f"(wall from navigation {row['wall_to_painted_s']['median']:.3f} s; median of {args.repeat})",
                  flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    doc = {"machine": c.machine(), "commit": c.git_head(), "date": time.strftime("%Y-%m-%d"),
           "argv": sys.argv, "load_average_at_end": " ".join(f"{x:.2f}" for x in os.getloadavg()), "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"written to {args.out}")
    if not args.no_doc:
        write_doc(args.out)


if __name__ == "__main__":
    c.main_guard(main, results="")  # (its own results file, and its own table on the page)
