"""``--html FILE``: one self-contained page for the incident ticket.

The page is ``html_report.html`` (beside this module: its CSS and script, written for it) with
the report's data in one JSON blob. Nothing on the page is fetched: no network, no fonts, and a
Content-Security-Policy that forbids any request, so the file opens the same on a laptop
offline as in the browser of whoever reads the ticket. Owner paths, type names and findings
come from the target and are hostile input: the blob escapes ``<``, ``>`` and ``&`` (a name
``</script><script>...`` stays text), and the page's script builds every element with
``textContent``, never markup.

What it shows: the findings with their fix commands (copyable), the memory ledger as a stacked
bar, the owners as a zoomable treemap (their paths from the roots as the nesting, capped at
``TREE_FANOUT`` children a node with the rest as "N others"), the top owners' retainer paths,
and, for a watch, each process's RSS and owners over time, a gap in the samples drawn as a gap
(the stretches ``--plot`` shades: ``render.plot.sample_gaps``), and with ``--sites`` a flame
graph (an icicle: the owner on top, callers above callees) of each growing owner's sites.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any

from leakhound import __version__
from leakhound.analysis.dominators.parts import Part
from leakhound.analysis.growth import owner_histories
from leakhound.analysis.ledger import ledger
from leakhound.errors import ReportFileError
from leakhound.model import Finding, Owner, Snapshot
from leakhound.model.growth import GrowthReport, Sample, TargetEnded
from leakhound.model.names import OwnerModel
from leakhound.model.snapshot import AllocationSite
from leakhound.model.units import fmt_bytes, percent
from leakhound.render.plot import sample_gaps

# The tree keeps the biggest TREE_FANOUT children of a node; the rest are one "N others" tile:
# more boxes than this on a level are too small to read, and `--top 1000` owners would each
# be one (a 1,000-owner page with parts at their budget is 321 KiB: benchmarks/html_report.py).
TREE_FANOUT = 12
TABLE_OWNERS = 50  # rows of the owners table
RETAINER_OWNERS = 10  # owners whose retainer paths are listed
TABLE_TYPES = 25
CHART_SERIES = 8  # owners drawn over time: one colour each, told apart
# A name longer than this is cut for the page (the tree and tables; retainer paths too): a
# hostile target can name an object with a megabyte of text.
MAX_TEXT = 2000
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
CHART_WIDTH, CHART_HEIGHT = 760, 260
_MARGIN_LEFT, _MARGIN_RIGHT, _MARGIN_TOP, _MARGIN_BOTTOM = 78, 12, 10, 28

_TEMPLATE = "html_report.html"
_DATA_MARK = "/*LEAKHOUND_DATA*/"


# -- writing -----------------------------------------------------------------------------------


def write_snapshot_report(path: Path, snapshot: Snapshot, *, parts: Sequence[tuple[Part, ...]] = ()) -> int:
    """Write the page of one snapshot (inspect, show); its size in bytes. ``parts``: what each
    owner retains, broken down (``analysis.dominators.owner_parts``; inspect has the graph)."""
    return _write(path, page(snapshot_document(snapshot, parts=parts)))


def write_watch_report(
    path: Path,
    samples: Sequence[Sample],
    reports: Sequence[GrowthReport],
    snapshots: Sequence[Snapshot],
    *,
    ended: Sequence[TargetEnded] = (),
) -> int:
    """Write the page of a watch: per process its growth over time and its last full snapshot."""
    return _write(path, page(watch_document(samples, reports, snapshots, ended=ended)))


def _write(path: Path, text: str) -> int:
    data = text.encode()
    try:
        path.write_bytes(data)
    except OSError as exc:
        raise ReportFileError(f"cannot write the report to {path}: {exc.strerror or exc}") from None
    return len(data)


def page(document: dict[str, Any]) -> str:
    """The page with ``document`` embedded as its one JSON blob."""
    template = resources.files("leakhound.render").joinpath(_TEMPLATE).read_text(encoding="utf-8")
    before, mark, after = template.partition(_DATA_MARK)
    if not mark:
        raise RuntimeError(f"{_TEMPLATE} has no data mark")
    return before + embed_json(document) + after


def embed_json(document: Any) -> str:
    """``document`` as JSON that is safe inside a ``<script>`` element: ``<``, ``>`` and ``&``
    escaped (no ``</script>`` or ``<!--`` can appear), and the two line separators JavaScript
    once did not accept in strings."""
    text = json.dumps(document, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


# -- the document --------------------------------------------------------------------------------


def snapshot_document(snapshot: Snapshot, *, parts: Sequence[tuple[Part, ...]] = ()) -> dict[str, Any]:
    return {
        "kind": "snapshot",
        "title": f"leakhound: pid {snapshot.pid} {_cut(snapshot.process.name)}",
        "generated_by": f"leakhound {__version__}",
        "processes": [process_section(snapshot, parts=parts)],
    }


def watch_document(
    samples: Sequence[Sample],
    reports: Sequence[GrowthReport],
    snapshots: Sequence[Snapshot],
    *,
    ended: Sequence[TargetEnded] = (),
) -> dict[str, Any]:
    by_pid = {s.pid: s for s in snapshots}
    gone = {e.pid: e for e in ended}
    processes = []
    for report in reports:
        mine = [s for s in samples if s.pid == report.pid]
        snapshot = by_pid.get(report.pid)
        section = process_section(snapshot) if snapshot is not None else {"pid": report.pid, "name": report.name}
        section["growth"] = growth_section(report, mine)
        if report.pid in gone:
            section["ended"] = _cut(gone[report.pid].message)
        processes.append(section)
    pids = ", ".join(str(r.pid) for r in reports)
    return {
        "kind": "watch",
        "title": f"leakhound watch: pid {pids}",
        "generated_by": f"leakhound {__version__}",
        "processes": processes,
    }


def process_section(snapshot: Snapshot, *, parts: Sequence[tuple[Part, ...]] = ()) -> dict[str, Any]:
    h, p = snapshot.heap, snapshot.process
    owners = snapshot.owners
    return {
        "pid": snapshot.pid,
        "name": _cut(p.name),
        "cmdline": _cut(p.cmdline),
        "python": snapshot.python_version,
        "method": snapshot.method,
        "taken_at": _utc(snapshot.taken_at),
        "leakhound": snapshot.leakhound_version or "?",
        "facts": [
            ["RSS", fmt_bytes(p.rss_bytes)],
            ["live heap", fmt_bytes(h.bytes)],
            ["objects", f"{h.objects:,}"],
            ["threads", str(p.num_threads)],
            ["owners", _OWNER_MODEL_WORDS.get(h.owner_model, h.owner_model)],
            ["census", f"{h.census_seconds:.2f} s, longest pause {h.max_pause_ms:.0f} ms"],
        ],
        # a budget leakhound promised and did not keep comes first, a warning as in the header
        # why the owners are what they are (the graph not walked, over a budget) and what would allow more
        "owners_note": _cut(h.owner_model_note),
        "warnings": [_cut(b.text) for b in snapshot.over_budget] + [_cut(w) for w in snapshot.warnings],
        "findings": [_finding(f, snapshot.pid) for f in snapshot.findings],
        "ledger": [
            {"name": row.name.strip(), "part": row.name.startswith(" "), "bytes": row.bytes,
             "text": fmt_bytes(row.bytes), "share": percent(row.share), "note": row.note}
            for row in ledger(snapshot)
        ],
        "rss": p.rss_bytes,
        "tree": owner_tree(owners, heap_bytes=h.bytes, parts=parts),
        "owners_total": len(owners),
        "owners": [
            {"rank": rank, "path": _cut(o.path), "type": _cut(o.type), "items": o.items,
             "bytes": o.retained_bytes, "text": fmt_bytes(o.retained_bytes),
             "retainers": [_cut(r) for r in o.retainers] if rank <= RETAINER_OWNERS else []}
            for rank, o in enumerate(owners[:TABLE_OWNERS], 1)
        ],
        "types": [{"type": _cut(t.type), "count": t.count, "bytes": t.bytes, "text": fmt_bytes(t.bytes)}
                  for t in snapshot.types[:TABLE_TYPES]],
    }


_OWNER_MODEL_WORDS = {
    OwnerModel.DOMINATOR.value: "dominator tree",
    OwnerModel.FIRST_REACHER.value: "first reacher",
    OwnerModel.NOT_ATTRIBUTED.value: "not attributed",
}


def _finding(f: Finding, pid: int) -> dict[str, Any]:
    return {
        "kind": f.kind,
        "severity": f.severity,
        "bytes": f.bytes,
        "text": fmt_bytes(f.bytes) if f.bytes else "",
        "count": f.count,
        "owner": _cut(f.owner),
        "summary": _cut(f.summary),
        "fix": f"leakhound patch {pid} --fix {f.fix}" if f.fix and not f.skipped else "",
    }


def _cut(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT - 1] + "\u2026"


def _utc(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


# -- the owners' tree ----------------------------------------------------------------------------


_NEEDS_SCAN = re.compile(r"[()'\"\\]|\[[^\]]*\[|\][^.\[]")
_PLAIN_STEP = re.compile(r"\.[^.\[]*|[^.\[]+|\[[^\]]*\]?")


def split_path(path: str) -> list[str]:
    """An owner path cut into its steps from the root: at each ``.`` and before each ``[``,
    not inside brackets, parentheses or quotes (``task:Task-1/run (worker.py:12).x['a.b']``
    -> ``task:Task-1/run (worker.py:12)``, ``.x``, ``['a.b']``). A path in angle brackets
    (``<held from C: ...>``) is one step."""
    if path.startswith("<"):
        return [path]
    if not _NEEDS_SCAN.search(path):  # most paths: names and plain subscripts, cut by a regex
        return _PLAIN_STEP.findall(path)
    return scan_steps(path)


def scan_steps(path: str) -> list[str]:
    """``split_path`` one character at a time (paths with quotes, parentheses or nested brackets)."""
    steps: list[str] = []
    start = depth = 0
    quote = ""
    for i, ch in enumerate(path):
        if quote:
            if ch == quote:
                quote = ""
            elif ch == "\\":
                continue
        elif ch in "'\"" and depth:
            quote = ch
        elif ch in "([":
            if ch == "[" and depth == 0 and i > start:
                steps.append(path[start:i])
                start = i
            depth += 1
        elif ch in ")]":
            depth = max(0, depth - 1)
        elif ch == "." and depth == 0 and i > start:
            steps.append(path[start:i])
            start = i
    steps.append(path[start:])
    return [s for s in steps if s]


def owner_tree(owners: Sequence[Owner], *, heap_bytes: int, fanout: int = TREE_FANOUT,
               parts: Sequence[tuple[Part, ...]] = ()) -> dict[str, Any]:
    """The owners nested by their paths from the roots (owners never double count, so a node's
    bytes are its children's sum), the live heap no owner holds as one more child, chains of
    single steps joined into one node, and at most ``fanout`` children a node (the rest one
    "N others" node); under each owner its ``parts`` (``analysis.dominators.owner_parts``,
    same order as ``owners``) when the object graph was at hand. Node: ``n`` name, ``b``
    bytes, ``k`` kind (root, group, owner, part, others, rest), ``t`` type, ``o`` the owner's
    rank, ``c`` children."""
    root: dict[str, Any] = {"n": "live heap", "b": 0, "k": "root", "c": {}}
    for rank, owner in enumerate(owners, 1):
        node = root
        for step in split_path(owner.path):
            node = node["c"].setdefault(step, {"n": step, "b": 0, "k": "group", "c": {}})
        node.update(k="owner", t=owner.type, o=rank, own=node.get("own", 0) + owner.retained_bytes,
                    parts=parts[rank - 1] if rank <= len(parts) else ())
    _sum(root)
    rest = heap_bytes - root["b"]
    tree = _finish(root, fanout)
    if rest > 0:
        kids = tree.get("c", [])
        others = [c for c in kids if c["k"] == "others"]  # last, whatever its size
        shown = [c for c in kids if c["k"] != "others"] + [{"n": "not in a listed owner", "b": rest, "k": "rest"}]
        tree["c"] = sorted(shown, key=lambda c: -c["b"]) + others
        tree["b"] += rest
    return tree


def _sum(node: dict[str, Any]) -> int:
    total: int = node.get("own", 0)
    for child in node["c"].values():
        total += _sum(child)
    node["b"] = total
    return total


def _finish(node: dict[str, Any], fanout: int) -> dict[str, Any]:
    """Children as a list, biggest first, capped; single-child chains joined."""
    while node["k"] == "group" and len(node["c"]) == 1:
        (child,) = node["c"].values()
        node = {**child, "n": _cut(node["n"] + child["n"])}
    out: dict[str, Any] = {"n": _cut(node["n"]), "b": node["b"], "k": node["k"]}
    if node["k"] == "owner":
        out["t"] = _cut(node["t"])
        out["o"] = node["o"]
    kids = sorted(node["c"].values(), key=lambda c: -c["b"])
    broken_down = [_part_node(p) for p in node.get("parts", ())]
    if node["k"] == "owner" and kids and not broken_down:
        # an owner whose path another owner's path goes through: its own bytes as a child
        kids.append({"n": "(itself)", "b": node["own"], "k": "owner", "t": node["t"], "o": node["o"], "c": {}})
        kids.sort(key=lambda c: -c["b"])
    if not kids and not broken_down:
        return out
    shown = [_finish(c, fanout) for c in kids[:fanout]]
    hidden = kids[fanout:]
    others = [{"n": f"{len(hidden):,} others", "b": sum(c["b"] for c in hidden), "k": "others"}] if hidden else []
    out["c"] = sorted(shown + broken_down, key=lambda c: -c["b"]) + others
    return out


def _part_node(part: Part) -> dict[str, Any]:
    node: dict[str, Any] = {"n": _cut(part.name), "b": part.retained_bytes, "k": "others" if part.others else "part"}
    if part.type:
        node["t"] = _cut(part.type)
    if part.parts:
        node["c"] = [_part_node(p) for p in part.parts]
    return node


# -- growth over time ------------------------------------------------------------------------------


def series_path(
    points: Iterable[tuple[float, float]],
    *,
    x_of: Callable[[float], float],
    y_of: Callable[[float], float],
    gaps: Sequence[tuple[float, float]],
) -> str:
    """An SVG path through ``points`` (time, value), sorted by time: a new subpath (``M``, no
    line) where one of ``gaps`` (``render.plot.sample_gaps``: stretches without samples) lies
    between two points; a point alone between two gaps a dot (a line of 0.01 px with round
    caps: Chromium draws nothing of a zero-length one on a dashed line)."""
    runs: list[list[tuple[float, float]]] = []
    last: float | None = None
    for t, v in sorted(points):
        xy = (x_of(t), y_of(v))
        if last is None or any(last <= start and end <= t for start, end in gaps):
            runs.append([xy])
        else:
            runs[-1].append(xy)
        last = t
    parts = []
    for run in runs:
        (x, y), rest = run[0], run[1:]
        parts.append(f"M{x:.1f} {y:.1f}" + ("".join(f"L{a:.1f} {b:.1f}" for a, b in rest) if rest else "h0.01"))
    return "".join(parts)


def _nice_step(span: float, candidates: Sequence[float], most: int) -> float:
    for step in candidates:
        if span / step <= most:
            return step
    return candidates[-1] * max(1.0, span / (candidates[-1] * most))


_TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
_BYTE_STEPS = tuple(m * u for u in (1, 1024, 1024**2, 1024**3) for m in (1, 2, 5, 10, 20, 50, 100, 200, 500))


def chart(series: Sequence[dict[str, Any]], *, t0: float, t1: float,
          gaps: Sequence[tuple[float, float]] = ()) -> dict[str, Any]:
    """One line chart: ``series`` each ``{"name", "points": [(t, bytes)], ...}``, broken at
    ``gaps``; the plot's geometry, axis ticks, each series' path and the gaps' shading,
    computed here (the page only draws them)."""
    width, height = CHART_WIDTH, CHART_HEIGHT
    x0, x1 = _MARGIN_LEFT, width - _MARGIN_RIGHT
    y0, y1 = _MARGIN_TOP, height - _MARGIN_BOTTOM
    span = max(t1 - t0, 1e-9)
    top: float = max([v for s in series for _, v in s["points"]] + [1])
    y_step = _nice_step(top, _BYTE_STEPS, 5)
    y_max = y_step * -(-top // y_step)

    def x_of(t: float) -> float:
        return x0 + (t - t0) / span * (x1 - x0)

    def y_of(v: float) -> float:
        return y1 - v / y_max * (y1 - y0)

    t_step = _nice_step(span, _TIME_STEPS, 6)
    x_ticks = [{"x": round(x_of(t0 + k * t_step), 1), "label": _elapsed(k * t_step)}
               for k in range(int(span // t_step) + 1)]
    y_ticks = [{"y": round(y_of(k * y_step), 1), "label": fmt_bytes(k * y_step)}
               for k in range(int(y_max // y_step) + 1)]
    drawn = []
    for s in series:
        d = series_path(s["points"], x_of=x_of, y_of=y_of, gaps=gaps)
        drawn.append({**{k: v for k, v in s.items() if k != "points"}, "d": d, "runs": d.count("M"),
                      "points": len(s["points"])})
    return {"w": width, "h": height, "plot": [x0, y0, x1, y1], "xticks": x_ticks, "yticks": y_ticks,
            "gaps": [[round(x_of(a), 1), round(x_of(b), 1)] for a, b in gaps],
            "start": _utc(t0), "series": drawn}


def _elapsed(seconds: float) -> str:
    if seconds < 60:
        return f"+{seconds:.0f}s"
    if seconds < 3600:
        m, s = divmod(int(seconds), 60)
        return f"+{m}m" + (f"{s:02d}s" if s else "")
    h, rest = divmod(int(seconds), 3600)
    return f"+{h}h" + (f"{rest // 60:02d}m" if rest else "")


def growth_section(report: GrowthReport, samples: Sequence[Sample]) -> dict[str, Any]:
    """RSS and live heap over time, and the owners' bytes over time (the first CHART_SERIES of
    the report's owners: growing first), each with its verdict; the watch's growth findings."""
    ordered = sorted(samples, key=lambda s: s.taken_at)
    if not ordered:
        return {"findings": [_finding(f, report.pid) for f in report.findings]}
    t0, t1 = ordered[0].taken_at, ordered[-1].taken_at
    # the stretches --plot shades: every line of the process is broken across them
    gaps = sample_gaps([s.taken_at for s in ordered])
    memory = [{"name": "RSS", "color": "#222222", "dash": "", "verdict": str(report.rss.verdict),
               "points": [(s.taken_at, s.rss_bytes) for s in ordered]}]
    if report.heap is not None:
        memory.append({"name": "live heap", "color": "#888888", "dash": "6 3", "verdict": str(report.heap.verdict),
                       "points": [(s.taken_at, s.heap_bytes) for s in ordered if s.heap_bytes is not None]})
    histories = {(name, type_name): points for name, type_name, points in owner_histories(ordered)}
    owners: list[dict[str, Any]] = []
    for trend in report.owners[:CHART_SERIES]:  # growing and plateaued first, then the biggest
        points = histories.get((trend.name, trend.type), ())
        if not points:
            continue
        owners.append({"name": _cut(trend.name), "type": _cut(trend.type), "verdict": str(trend.verdict),
                       "color": PALETTE[len(owners) % len(PALETTE)], "dash": "",
                       "rate": f"{fmt_bytes(trend.bytes_per_min)}/min", "last": fmt_bytes(trend.last_bytes),
                       "points": [(t, b) for t, b, _ in points]})
    return {
        "seconds": round(t1 - t0, 1),
        "samples": len(ordered),
        "memory": chart(memory, t0=t0, t1=t1, gaps=gaps),
        "owners": chart(owners, t0=t0, t1=t1, gaps=gaps),
        "findings": [_finding(f, report.pid) for f in report.findings],
        "warnings": [_cut(w) for w in report.warnings],
        "flames": [flame_graph(f.owner, f.sites) for f in report.findings if f.sites],
    }


def flame_graph(owner: str, sites: Sequence[AllocationSite]) -> dict[str, Any]:
    """An icicle of ``owner``'s sites: the owner's box (depth 0) spans their bytes; under it
    each stack's frames from the outermost in, a frame shared by several stacks one box of
    their bytes; ``x`` and ``w`` are fractions of the whole. ``self``: the bytes of the sites
    whose innermost frame a box is (a site ends there)."""
    total = sum(site.bytes for site in sites) or 1
    # node: [bytes, self bytes, {frame key: child node}, frame]
    root: list[Any] = [0, 0, {}, None]
    for site in sites:
        node = root
        node[0] += site.bytes
        for frame in reversed(site.stack):
            node = node[2].setdefault((frame.file, frame.line, frame.function), [0, 0, {}, frame])
            node[0] += site.bytes
        node[1] += site.bytes
    boxes: list[dict[str, Any]] = []

    def place(node: list[Any], parent: int, depth: int, x: float) -> None:
        me = len(boxes)
        frame = node[3]
        where = f"{frame.file}:{frame.line} {frame.function}" if frame is not None else owner
        label = f"{frame.function} ({frame.file.rsplit('/', 1)[-1]}:{frame.line})" if frame is not None else owner
        boxes.append({"id": me, "parent": parent, "depth": depth, "x": x / total, "w": node[0] / total,
                      "bytes": node[0], "self": node[1], "frame": _cut(where), "label": _cut(label),
                      "title": _cut(f"{where}: {fmt_bytes(node[0])} ({percent(node[0] / total)})")})
        at = x
        for child in sorted(node[2].values(), key=lambda n: -n[0]):
            place(child, me, depth + 1, at)
            at += child[0]

    place(root, -1, 0, 0.0)
    return {"owner": _cut(owner), "bytes": root[0], "text": fmt_bytes(root[0]), "sites": len(sites),
            "depth": max(b["depth"] for b in boxes), "boxes": boxes}

