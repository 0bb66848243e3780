"""The default path at scale: `leakhound inspect PID --json`, no option, on 1M-50M-object heaps.

For each size and heap shape a fresh target (fixtures/scale_heap.py) builds ~N objects, ~90%
of them under one culprit, and computes the bytes that culprit alone holds (its truth); then
the CLI runs end to end, as an on-call engineer runs it, and this records:

- attach-to-report wall clock (the CLI's whole run) and its growth per object against the
  smallest size measured;
- the owner model used (``heap.owner_model``, with its note when it fell back), and owner #1:
  its path, its retained bytes against the truth (``right``: the culprit's path, within 5%);
- the target's worst event-loop lag during the inspection (its 5 ms heartbeat), and its
  latest late ticks (``late``: [time.time(), lag ms], fixtures/_target.py) to line a lag up
  with what ran then;
- the target's extra memory: the snapshot's ``cost`` (VmHWM growth, and the payload's own
  peak), in bytes and as a share of the target's RSS (a fixed part, the payload's modules and
  blocks, weighs most on small heaps);
- leakhound's own peak RSS (/usr/bin/time's maximum resident set size of the CLI);
- guppy3's ``str(hpy().heap())`` in the same target after leakhound, on its main thread, when
  it finishes within ``--peer-timeout`` (a separate venv: ``pip install guppy3``).

Shapes: ``registry`` (``REGISTRY = {}`` of sessions, each with a dict, a list, a small bytes
and shared ints) and ``requests`` (a list of dicts with a str and a tuple), both beside a
static decoy table of ~10% of the objects. Nothing here asserts: it prints what it sees (a
first-reacher fallback past the graph budget is reported as such), writes the rows to
benchmarks/results/scale-<date>.json and the table of docs/performance.md's "At scale" from
them (``--no-doc``: not; ``--doc-from FILE``: only the table, from a results file).

    .venv/bin/python benchmarks/scale.py [--sizes 1M,5M,20M] [--shapes registry,requests]
        [--no-guppy] [--peer-timeout 600] [--nice -10] [--out FILE] [--no-doc] [--doc-from FILE]

``--nice N`` (root): the target, and with it its heartbeat, runs at niceness N (default -10):
on a machine shared with other work the lag measured is then more the payload's than the
machine's.

50M objects is ~4-5 GB a target (and guppy3 needs as much again): it fits a 24 GiB machine,
and takes several minutes to build.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _common as c

SHAPES = ("registry", "requests")
# owner #1 counts as right when it is the culprit and its retained bytes are this close to the truth
RIGHT_WITHIN = 0.05
RESULTS = Path(__file__).resolve().parent / "results"
GUPPY_VENV = c.PEERS_VENV


def parse_size(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1_000, "M": 1_000_000, "G": 1_000_000_000}.get(text[-1:], 1)
    return int(float(text.rstrip("KMG")) * scale)


def guppy_site() -> Path | None:
    """site-packages of the peers' venv with guppy3 in it (installed on first use), or None."""
    site = c.peers_site_packages()
    if (site / "guppy").exists():
        return site
    python = GUPPY_VENV / "bin" / "python"
    print(f"# installing guppy3 into {GUPPY_VENV}", file=sys.stderr)
    try:
        if not python.exists():
            subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(GUPPY_VENV)],
                           check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "guppy3"], check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"# guppy3 not installed ({exc}): no guppy3 column", file=sys.stderr)
        return None
    return site if (site / "guppy").exists() else None


def inspect_default(pid: int, timeout: float) -> tuple[float, int, subprocess.CompletedProcess[str]]:
    """``leakhound inspect PID --json`` under /usr/bin/time: (wall s, leakhound's peak RSS, proc)."""
    argv = ["/usr/bin/time", "-f", "leakhound-time %e %M", str(c.LEAKHOUND), "inspect", str(pid), "--json"]
    wall, proc = c.run_timed(argv, timeout=timeout)
    peak = 0
    kept = []
    for line in (proc.stderr or "").splitlines():
        if line.startswith("leakhound-time "):
            peak = int(line.split()[2]) * 1024
        else:
            kept.append(line)
    proc.stderr = "\n".join(kept)
    return wall, peak, proc


def measure(objects: int, shape: str, *, guppy: Path | None, peer_timeout: float, cli_timeout: float,
            nice: int | None = None, python: Path | None = None) -> dict[str, Any]:
    env = {"SCALE_OBJECTS": str(objects), "SCALE_SHAPE": shape}
    if guppy is not None:
        env.update(BENCH_PEER="guppy3", PYTHONPATH=str(guppy))
    row: dict[str, Any] = {"objects_asked": objects, "shape": shape}
    if python is not None:
        row["python"] = str(python)
    with c.target("scale_heap.py", env=env, ready_timeout=3600,
                  **({"python": python} if python is not None else {})) as t:
        truth = t.doc["truth"]
        row.update(culprit=truth["culprit"], culprit_bytes=truth["culprit_bytes"], build_s=truth["build_seconds"])
        if nice is not None:
            t.renice(nice)
            row["target_nice"] = nice
        t.settle(2.0)
        row["target_rss"] = c.proc_status(t.pid)["VmRSS"]
        t.reset_lag()
        wall, cli_peak, proc = inspect_default(t.pid, cli_timeout)
        row["lag_ms"] = t.lag_after()
        row["late_ticks"] = sorted(t.doc.get("late") or [], key=lambda tick: -tick[1])[:8]
        row["load_average"] = c.load_average()
        row.update(wall_s=wall, cli_peak_rss=cli_peak, exit=proc.returncode)
        if proc.returncode != 0:
            row["error"] = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1][:300]
        else:
            snap = json.loads(proc.stdout)
            heap, cost = snap["heap"], snap.get("cost") or {}
            first = snap["owners"][0] if snap["owners"] else {}
            retained = int(first.get("retained_bytes") or 0)
            row.update(
                heap_objects=heap["objects"], owner_model=heap.get("owner_model"),
                owner_model_note=heap.get("owner_model_note", ""), graph_nodes=heap.get("graph_nodes"),
                max_pause_ms=heap.get("max_pause_ms"), max_hold_ms=heap.get("max_hold_ms"),
                owner1=first.get("path"), owner1_bytes=retained,
                owner1_vs_truth=retained / truth["culprit_bytes"] if truth["culprit_bytes"] else None,
                rss=snap["process"]["rss_bytes"], hwm_growth=cost.get("hwm_bytes"),
                payload_peak=cost.get("payload_peak_bytes"),
                # the payload's first load (its modules, kept for the next request): a fixed part
                payload_load=cost.get("payload_load_bytes"),
            )
            row["owner1_right"] = (row["owner1"] == truth["culprit"]
                                   and abs(row["owner1_vs_truth"] - 1.0) <= RIGHT_WITHIN)
        if guppy is not None:
            try:
                peer = t.run_peer(timeout=peer_timeout)
                row.update(guppy_s=peer["wall_seconds"], guppy_extra=peer["hwm_after"] - peer["rss_before"],
                           guppy_objects=peer.get("objects"))
            except TimeoutError:
                row["guppy_s"] = None
                row["guppy_note"] = f"did not finish within {peer_timeout:.0f} s"
    return row


def _extra(part: float | None, whole: float | None) -> str:
    """Extra memory in MiB and as a share of RSS: "15.5 MiB (13.0%)"."""
    return "-" if not part or not whole else f"{part / 2**20:.1f} MiB ({100.0 * part / whole:.1f}%)"


def print_rows(rows: list[dict[str, Any]]) -> None:
    smallest: dict[str, dict[str, Any]] = {}
    lines = []
    for r in rows:
        base = smallest.setdefault(r["shape"], r)
        per_object = (r["wall_s"] / r["objects_asked"]) / (base["wall_s"] / base["objects_asked"])
        owner = "-" if r.get("owner1") is None else r["owner1"].replace("__main__.", "")
        lines.append([
            f"{r['shape']} {r['objects_asked'] / 1e6:g}M", f"{r.get('heap_objects', 0) / 1e6:.1f}M",
            c.mib(r["target_rss"]), c.secs(r["wall_s"]), f"{per_object:.2f}x",
            r.get("owner_model") or f"exit {r['exit']}", owner,
            "-" if r.get("owner1_vs_truth") is None else f"{r['owner1_vs_truth']:.3f}",
            {True: "yes", False: "NO"}.get(r.get("owner1_right"), "-"), f"{r['lag_ms']:.0f} ms",
            _extra(r.get("hwm_growth"), r.get("rss")), _extra(r.get("payload_peak"), r.get("rss")),
            c.mib(r["cli_peak_rss"]), c.secs(r.get("guppy_s")) if r.get("guppy_s") else r.get("guppy_note", "-"),
            c.ratio(r.get("guppy_s"), r["wall_s"]),
        ])
    print(c.table(["heap", "objects", "target RSS", "wall", "wall/obj", "owner model", "owner #1", "bytes/truth",
                   "right", "worst lag", "target +HWM", "payload peak", "leakhound peak", "guppy3", "guppy3/wall"],
                  lines))
    for r in rows:
        if r.get("owner_model") not in (None, "dominator") or r.get("error"):
            print(f"  {r['shape']} {r['objects_asked'] / 1e6:g}M: {r.get('owner_model_note') or r.get('error')}")


DOC_HEADERS = ("heap", "objects", "target RSS", "wall", "owner model", "owner #1", "bytes/truth", "lag",
               "target +HWM", "leakhound peak", "guppy3", "guppy3/wall")


def doc_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    """The rows of docs/performance.md's "At scale" table (see its text for the columns)."""
    return [
        [
            f"{r['shape']} {r['objects_asked'] / 1e6:g}M", f"{r.get('heap_objects', 0) / 1e6:.1f}M",
            f"{r['target_rss'] / 2**20:,.0f} MiB", c.secs(r["wall_s"]), r.get("owner_model") or f"exit {r['exit']}",
            "-" if r.get("owner1") is None else r["owner1"].replace("__main__.", ""),
            "-" if r.get("owner1_vs_truth") is None else f"{r['owner1_vs_truth']:.3f}",
            f"{r['lag_ms']:.0f} ms", _extra(r.get("hwm_growth"), r.get("rss")), f"{r['cli_peak_rss'] / 2**20:,.0f} MiB",
            f"{r['guppy_s']:.3g} s" if r.get("guppy_s") else "-",
            f"{r['guppy_s'] / r['wall_s']:.1f}x" if r.get("guppy_s") else "-",
        ]
        for r in sorted(rows, key=lambda r: (r["shape"], r["objects_asked"]))
    ]


def write_doc(results: Path) -> None:
    c.update_doc_table("scale", results, DOC_HEADERS, doc_rows(json.loads(results.read_text())["rows"]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1M,5M,20M", help="object counts, e.g. 1M,5M,20M,50M")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--no-guppy", action="store_true")
    parser.add_argument("--peer-timeout", type=float, default=600.0, help="seconds guppy3 may take")
    parser.add_argument("--cli-timeout", type=float, default=3600.0, help="seconds before the CLI is killed")
    parser.add_argument("--nice", type=int, default=-10, help="the target niceness (as root)")
    parser.add_argument("--python", type=Path, default=None,
                        help="the targets' interpreter (default: this venv's); guppy3 runs on this venv's only")
    parser.add_argument("--out", type=Path, default=None)
    c.add_doc_options(parser)
    args = parser.parse_args()
    if args.python is not None:
        args.no_guppy = True
    if args.doc_from is not None:
        write_doc(args.doc_from)
        return 0
    sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    shapes = [s for s in args.shapes.split(",") if s]
    for shape in shapes:
        if shape not in SHAPES:
            parser.error(f"unknown shape {shape!r}; choose from {', '.join(SHAPES)}")
    c.header("scale: the default inspect path, end to end, by heap size", sys.argv)
    guppy = None if args.no_guppy else guppy_site()
    rows = []
    started = time.time()
    for objects in sizes:
        for shape in shapes:
            row = measure(objects, shape, guppy=guppy, peer_timeout=args.peer_timeout, cli_timeout=args.cli_timeout,
                          nice=args.nice if os.geteuid() == 0 else None, python=args.python)
            rows.append(row)
            print(f"# {shape} {objects:,}: {json.dumps(row, default=str)}", flush=True)
    print()
    print_rows(sorted(rows, key=lambda r: (r["shape"], r["objects_asked"])))
    out = args.out or RESULTS / f"scale-{time.strftime('%Y%m%d-%H%M')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": c.machine(), "commit": c.git_head(), "date": time.strftime("%Y-%m-%d"),
                               "argv": sys.argv,
                               "load_average_at_end": c.load_average(), "rows": rows,
                               "seconds": round(time.time() - started)}, indent=1) + "\n")
    print(f"# rows written to {os.path.relpath(out)} ({time.time() - started:.0f} s)")
    if not args.no_doc:
        write_doc(out)
    return 0


if __name__ == "__main__":
    c.main_guard(main, results="")  # (its own results file, and its own table on the page)
