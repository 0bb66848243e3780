"""Dominator owners: what they cost, in the target and in leakhound's own process.

Two parts, one run (ratios, not tests; numbers in docs/performance.md):

1. **The pass alone**, in leakhound's process, on a synthetic heap-shaped graph (default
   4.8M nodes / 5.8M edges: a random tree with local parents, extra cross references, and a
   1M-long linked list): the compiled pass (``_dominators.c``: semi-NCA, then naming and the
   owners) and, on a tenth of it, the pure-Python twin. Time and peak RSS of a fresh process.
2. **End to end** on each heap shape of ``--shapes`` (default ``bench,registry``):
   ``fixtures/bench_heap.py`` (``bench``), and ``fixtures/scale_heap.py``'s ``registry`` (a dict
   of sessions: instances with a ``__dict__``, lists, bytes and shared ints) or ``requests``:
   ``leakhound inspect`` with the dominator
   owners (the default), with ``--owners census``, and guppy3's ``heap()`` (run in-process
   by the target, as a user would), in the same run: wall time, worst loop lag, the target's
   extra peak memory.

    .venv/bin/python benchmarks/dominators.py [--nodes 4800000] [--objects 4800000] [--skip-e2e] [--skip-pass]
        [--method ptrace|agent] [--runs N] [--shapes bench,registry,requests] [--nice -10]

``--nice N`` (root): every target, and with it its loop's heartbeat, runs at niceness N (default
-10), so that the lag it reports holds less of a shared machine's load; the CLI stays at 0.

``--runs N``: the end-to-end part N times (fresh targets each), then each row's median, min and
max and the per-run ratios against that run's guppy3: this machine's speed moves a walk by
half over minutes, and one run's ratio is one draw.
"""

from __future__ import annotations

import argparse
import array
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _common as c  # noqa: E402


def synthetic_graph(nodes: int, extra_edges: int, chain: int, seed: int = 1) -> dict[str, Any]:
    rng = random.Random(seed)
    src = array.array("i")
    dst = array.array("i")
    roots = 2000
    for r in range(1, roots + 1):
        src.append(0)
        dst.append(r)
    tree_end = nodes - chain
    for v in range(roots + 1, tree_end):
        src.append(max(1, v - rng.randint(1, 1000)))
        dst.append(v)
    for v in range(tree_end, nodes):  # a linked list hanging off root 1
        src.append(v - 1 if v > tree_end else 1)
        dst.append(v)
    for _ in range(max(0, extra_edges - (nodes - 1))):  # cross references
        src.append(rng.randrange(1, nodes))
        dst.append(rng.randrange(1, nodes))
    sizes = array.array("q", [0] + [rng.choice((56, 64, 72, 104, 232, 1200)) for _ in range(nodes - 1)])
    return {"nodes": nodes, "src": src, "dst": dst, "sizes": sizes, "roots": roots}


def pass_alone(nodes: int, compiled: bool) -> dict[str, Any]:
    """In a fresh process (its peak RSS is the pass's): build the graph, run the pass."""
    code = f"""
import array, json, resource, sys, time
sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r})
from benchmarks.dominators import synthetic_graph
from leakhound.analysis import dominators as d
g = synthetic_graph({nodes}, int({nodes} * 1.2), min(1000000, {nodes} // 5))
graph = d.ObjectGraph(nodes=g["nodes"], sizes=g["sizes"], types=array.array("i", [0]) * g["nodes"],
    ids=array.array("q", range(g["nodes"])), lengths=array.array("i", [0]) * g["nodes"], src=g["src"], dst=g["dst"],
    lab=array.array("i", [-1]) * len(g["src"]), type_names=["object"], labels=[],
    roots=[(r, "root%d" % r, "module", 1) for r in range(1, g["roots"] + 1)])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
tree = d.dominators(graph, compiled={compiled})
t1 = time.perf_counter()
found = d.find_owners(graph, top=20, tree=tree, compiled={compiled})
t2 = time.perf_counter()
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({{"nodes": graph.nodes, "edges": graph.edges, "dominators_s": t1 - t0, "owners_s": t2 - t1,
                  "engine": tree.engine, "graph_rss": before * 1024, "extra_peak": (after - before) * 1024,
                  "owners": len(found.owners)}}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise SystemExit(out.stderr[-2000:])
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


SHAPES = ("bench", "registry", "requests")


def _heap_target(shape: str, env: dict[str, str], nice: int | None) -> Any:
    """A fresh target of the shape; both fixtures take BENCH_PEER and the same signals."""
    fixture = "bench_heap.py" if shape == "bench" else "scale_heap.py"
    target = c.target(fixture, env=env, ready_timeout=1800)
    if nice is None:
        return target

    class _Reniced:
        def __enter__(self) -> Any:
            t = target.__enter__()
            t.renice(nice)
            return t

        def __exit__(self, *exc: Any) -> Any:
            return target.__exit__(*exc)

    return _Reniced()


def end_to_end(objects: int, method: str, shape: str = "bench", nice: int | None = None) -> list[dict[str, Any]]:
    rows = []
    env = {"BENCH_OBJECTS": str(objects), "PYTHONPATH": str(c.peers_site_packages())}
    if shape != "bench":
        env.update(SCALE_OBJECTS=str(objects), SCALE_SHAPE=shape)
    if method == "agent":
        env["LEAKHOUND_AGENT"] = "1"  # the agent listens in the target (its thread started at import)
    for name, extra in (("leakhound (default owners)", []), ("leakhound (--owners census)", ["--owners", "census"])):
        with _heap_target(shape, env, nice) as t:
            t.settle(1.0)
            c.reset_peak(t.pid)
            before = c.proc_status(t.pid)
            t.reset_lag()
            # leakhound's own process: its peak RSS (the dominator pass's memory) via time -v
            wall, snap, error = c.leakhound_inspect(t.pid, method, timeout=1800, extra=extra)
            lag = t.lag_after()
            after = c.proc_status(t.pid)
        heap = (snap or {}).get("heap", {})
        rows.append({"name": name, "wall": wall, "lag_ms": lag, "error": error,
                     "extra_peak": after["VmHWM"] - before["VmRSS"], "model": heap.get("owner_model"),
                     "graph_nodes": heap.get("graph_nodes"), "graph_edges": heap.get("graph_edges"),
                     "graph_s": heap.get("graph_seconds"), "analysis_s": heap.get("dominator_seconds"),
                     "census_s": heap.get("census_seconds"), "max_pause_ms": heap.get("max_pause_ms"),
                     "cli_rss": CLI_PEAK[0], "note": heap.get("owner_model_note", "")})
    with _heap_target(shape, {**env, "BENCH_PEER": "guppy3"}, nice) as t:
        t.settle(1.0)
        t.reset_lag()
        result = t.run_peer()
        lag = t.lag_after()
    rows.append({"name": "guppy3 heap()", "wall": result["wall_seconds"], "lag_ms": lag, "error": "",
                 "extra_peak": result["hwm_after"] - result["rss_before"]})
    return rows


CLI_PEAK = [0]


def summary(runs: list[list[dict[str, Any]]]) -> None:
    """Each row's median, min and max over the runs, and its ratio to guppy3 run by run."""
    print(f" over {len(runs)} runs (ratios: each run's guppy3 over that run's row)")
    for i, name in enumerate(r["name"] for r in runs[0]):
        walls = [rows[i]["wall"] for rows in runs if rows[i]["wall"]]
        ratios = sorted(rows[-1]["wall"] / rows[i]["wall"] for rows in runs if rows[i]["wall"] and rows[-1]["wall"])
        peaks = [rows[i]["extra_peak"] / rows[-1]["extra_peak"] for rows in runs if rows[-1]["extra_peak"]]
        if not walls:
            continue
        line = (f"  {name:<30} wall median {c.secs(statistics.median(walls))} (min {c.secs(min(walls))}, "
                f"max {c.secs(max(walls))})")
        if i < len(runs[0]) - 1 and ratios:
            each = ", ".join(f"{x:.2f}" for x in ratios)
            line += (f"  vs guppy3: median {statistics.median(ratios):.2f}x, runs {each}"
                     f"  memory {max(peaks):.2f}x of guppy3's at most")
        print(line)


# Runs the CLI and reports its own peak RSS (the dominator pass's memory) at exit.
_WRAP = ("import atexit, resource, sys; atexit.register(lambda: sys.stderr.write("
         "'\\nleakhound-maxrss %d\\n' % resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)); "
         "from leakhound._entry import main; sys.argv[0] = 'leakhound'; sys.exit(main())")


def _timed_rss(run_timed: Any) -> Any:
    """c.run_timed, running leakhound's CLI so that it says its own peak RSS (CLI_PEAK)."""
    def timed(argv: Any, **kwargs: Any) -> Any:
        argv = list(argv)
        if argv and Path(argv[0]).name == "leakhound":
            argv = [sys.executable, "-c", _WRAP, *argv[1:]]
        wall, proc = run_timed(argv, **kwargs)
        found = [line.split()[1] for line in (proc.stderr or "").splitlines() if line.startswith("leakhound-maxrss ")]
        CLI_PEAK[0] = int(found[-1]) * 1024 if found else 0
        lines = [line for line in (proc.stderr or "").splitlines() if not line.startswith("leakhound-maxrss ")]
        proc.stderr = "\n".join(lines)
        return wall, proc
    return timed


def end_to_end_runs(args: Any, shape: str, nice: int | None) -> str:
    """``args.runs`` end-to-end runs on ``shape``; what the default owners' row says against
    guppy3 ("2.35 s vs guppy3 13.09 s = 5.56x, lag 33 ms", the median run's)."""
    heap = "bench_heap" if shape == "bench" else f"scale_heap {shape}"
    where = f"{heap} {args.objects:,} objects, {args.method}, target nice {nice if nice is not None else 0}"
    print(f"end to end, {where}")
    runs = []
    for k in range(max(1, args.runs)):
        if args.runs > 1:
            print(f" run {k + 1} of {args.runs}")
        rows = end_to_end(args.objects, args.method, shape, nice)
        runs.append(rows)
        guppy = rows[-1]
        c.record(f"end to end, {where}, run {k + 1}",
                 ["tool", "wall", "vs guppy3", "worst loop lag", "target extra peak", "of guppy3's"],
                 [[r["name"], c.secs(r["wall"]), c.ratio(guppy["wall"], r["wall"]), f"{r['lag_ms']:.0f} ms",
                   c.mib(r["extra_peak"]), c.ratio(r["extra_peak"], guppy["extra_peak"])] for r in rows])
        for r in rows:
            extra = (f"  graph {r['graph_nodes']:,} nodes {r['graph_edges']:,} edges walked "
                     f"{c.secs(r['graph_s'])}, analysed {c.secs(r['analysis_s'])}; leakhound's peak RSS "
                     f"{c.mib(r['cli_rss'])}"
                     if r.get("graph_nodes") else f" ({r.get('model')}: {r.get('note', '')[:80]})"
                     if r.get("model") else "")
            print(f"  {r['name']:<30} wall {c.secs(r['wall'])} ({c.ratio(guppy['wall'], r['wall'])} vs guppy3)  "
                  f"worst loop lag {r['lag_ms']:.0f} ms  target extra peak {c.mib(r['extra_peak'])} "
                  f"({c.ratio(r['extra_peak'], guppy['extra_peak'])} of guppy3's){extra} {r['error']}")
    if len(runs) > 1:
        summary(runs)
    done = sorted((rows for rows in runs if rows[0]["wall"] and rows[-1]["wall"]),
                  key=lambda rows: rows[-1]["wall"] / rows[0]["wall"])
    if not done:
        return ""
    rows = done[len(done) // 2]
    own, guppy = rows[0], rows[-1]
    return (f"{own['wall']:.2f} s vs guppy3 {guppy['wall']:.2f} s = {guppy['wall'] / own['wall']:.2f}x, "
            f"lag {own['lag_ms']:.0f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4_800_000)
    parser.add_argument("--objects", type=int, default=4_800_000)
    parser.add_argument("--method", default="ptrace")
    parser.add_argument("--skip-e2e", action="store_true")
    parser.add_argument("--skip-pass", action="store_true")
    parser.add_argument("--runs", type=int, default=1, help="end-to-end runs (fresh targets each): medians")
    parser.add_argument("--shapes", default="bench,registry",
                        help="the end-to-end heaps: bench (bench_heap.py), registry, requests (scale_heap.py)")
    parser.add_argument("--nice", type=int, default=-10, help="the targets' niceness (as root)")
    parser.add_argument("--quick", action="store_true", help="200k nodes and objects: checks the script")
    args = parser.parse_args()
    if args.quick:
        args.nodes = args.objects = 200_000
    c.run_timed = _timed_rss(c.run_timed)
    started = time.time()
    c.header("dominator owners: the pass alone, and end to end against guppy3", sys.argv)
    passes = []
    for nodes, compiled in ((args.nodes, True), (max(10_000, args.nodes // 10), False)) if not args.skip_pass else ():
        r = pass_alone(nodes, compiled)
        passes.append([r["engine"], f"{r['nodes']:,}", f"{r['edges']:,}", c.secs(r["dominators_s"]),
                       c.secs(r["owners_s"]), c.mib(r["extra_peak"]), c.mib(r["graph_rss"])])
    if passes:
        print(c.table(["engine", "nodes", "edges", "dominators", "owners+names", "extra peak", "the graph itself"],
                      passes, title="dominator pass alone, in leakhound's process"))
    if not args.skip_e2e:
        c.ensure_peers_venv()
        nice = args.nice if os.geteuid() == 0 else None
        said = []
        for shape in args.shapes.split(","):
            if shape not in SHAPES:
                raise SystemExit(f"unknown shape {shape!r} (one of {', '.join(SHAPES)})")
            ratios = end_to_end_runs(args, shape, nice)
            if ratios:
                said.append(f"{shape} {args.objects / 1e6:.1f}M objects: default owners {ratios}")
        c.summarize("; ".join(said) + f" (targets at nice {nice or 0})")
    print(f"({time.time() - started:.0f} s; max RSS of this process "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB)")
    return 0


if __name__ == "__main__":
    c.main_guard(main)
