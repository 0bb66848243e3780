"""leakhound's owner-attributed census vs in-process heap tools, on the same heap.

Every row gets a fresh target (fixtures/bench_heap.py, ~4.8M objects, ~400 MB by default)
built the same, deterministic way, with the same interpreter (.venv's python) and the same
PYTHONPATH (the peers venv's site-packages, so the peers import in the target). Peers run
in-process, on the target's main thread inside its event loop (bench_heap's SIGHUP), the way
a user calls them from a debug endpoint:

* objgraph:  objgraph.typestats()
* guppy3:    str(hpy().heap())   (heap() builds the set; the kind table is computed on print)
* pympler:   summary.summarize(muppy.get_objects())

leakhound rows run `leakhound inspect PID --method ptrace|agent --json` from outside: the
default census (compiled walk, 50 ms pause budget), with `--max-pause 0` (no budget: the full
census, whatever it costs), and with the pure-Python loop (what a target on another Python
version than leakhound's gets). Per row: wall
time, extra peak memory (VmHWM after minus VmRSS before; the peak is reset through
/proc/PID/clear_refs first) and the target's worst loop lag (its 5 ms heartbeat). The peer's
module is imported before the heap is built, so its import is not measured.

Numbers come from ONE run each. Usage:

    .venv/bin/python benchmarks/peers.py [--quick] [--objects N] [--peers objgraph,guppy3,pympler]
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import _common as c

LAG_GOAL_MS = 50.0
SPEED_GOAL = 3.0  # leakhound at least 3x faster than guppy3
MEMORY_GOAL = 0.25  # with at most 1/4 of guppy3's extra memory


def base_env(objects: int) -> dict[str, str]:
    return {"BENCH_OBJECTS": str(objects), "PYTHONPATH": str(c.peers_site_packages())}


def measure_leakhound(spec: str, objects: int) -> dict[str, Any]:
    """``spec``: a method, optionally with a variant: ``ptrace:python`` (the pure-Python census
    loop instead of the compiled one), ``ptrace:max-pause=0`` (inspect --max-pause 0: no pause
    budget, always the full census)."""
    method, _, variant = spec.partition(":")
    extra: list[str] = []
    cli_env: dict[str, str] = {}
    if variant == "python":
        cli_env["LEAKHOUND_WALKER"] = "python"
    elif variant.startswith("max-pause="):
        extra = ["--max-pause", variant.split("=", 1)[1]]
    elif variant:
        raise SystemExit(f"unknown variant {variant!r} in {spec!r}")
    env = base_env(objects)
    if method == "agent":
        env["LEAKHOUND_AGENT"] = "1"
    with c.target("bench_heap.py", env=env) as t:
        t.settle(1.0)
        reset = c.reset_peak(t.pid)
        before = c.proc_status(t.pid)
        t.reset_lag()
        wall, snap, error = c.leakhound_inspect(t.pid, method, timeout=1800, extra=extra, env=cli_env)
        lag = t.lag_after()
        after = c.proc_status(t.pid)
    heap = (snap or {}).get("heap", {})
    return {
        "name": f"leakhound ({spec})",
        "wall": wall,
        "census": heap.get("census_seconds"),
        "objects": heap.get("objects"),
        "error": error,
        "lag_ms": lag,
        "extra_peak": after["VmHWM"] - before["VmRSS"],
        "retained": after["VmRSS"] - before["VmRSS"],
        "rss_before": before["VmRSS"],
        "peak_reset": reset,
    }


def measure_peer(peer: str, objects: int) -> dict[str, Any]:
    env = {**base_env(objects), "BENCH_PEER": peer}
    with c.target("bench_heap.py", env=env) as t:
        t.settle(1.0)
        t.reset_lag()
        result = t.run_peer()
        lag = t.lag_after()
    return {
        "name": peer,
        "wall": result["wall_seconds"],
        "census": result["wall_seconds"],
        "objects": None,
        "error": "",
        "lag_ms": lag,
        "extra_peak": result["hwm_after"] - result["rss_before"],
        "retained": result["rss_after"] - result["rss_before"],
        "rss_before": result["rss_before"],
        "peak_reset": result["peak_reset"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small heap (200k objects), fast smoke run")
    parser.add_argument("--objects", type=int, default=None, help="heap size (default 4,800,000)")
    parser.add_argument("--peers", default="objgraph,guppy3,pympler")
    parser.add_argument("--methods", default="ptrace,ptrace:max-pause=0,ptrace:python,agent",
                        help="leakhound attach methods to run, each optionally with a variant: "
                             "METHOD:python (pure-Python census loop), METHOD:max-pause=MS")
    args = parser.parse_args()
    objects = args.objects or (200_000 if args.quick else 4_800_000)
    c.ensure_peers_venv()
    c.header(f"leakhound vs in-process peers on a ~{objects:,}-object heap",
             ["benchmarks/peers.py", *sys.argv[1:]])

    rows_in: list[dict[str, Any]] = []
    for method in args.methods.split(","):
        started = time.perf_counter()
        rows_in.append(measure_leakhound(method, objects))
        print(f"# measured leakhound ({method}) in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    for peer in args.peers.split(","):
        started = time.perf_counter()
        rows_in.append(measure_peer(peer, objects))
        print(f"# measured {peer} in {time.perf_counter() - started:.0f} s", file=sys.stderr)

    print(c.table(
        ["tool", "wall", "census/run", "worst lag", "extra peak", "retained after", "RSS before",
         "objects seen"],
        [[r["name"], c.secs(r["wall"]), c.secs(r["census"]), f"{r['lag_ms']:,.1f} ms",
          c.mib(r["extra_peak"]), c.mib(r["retained"]), c.mib(r["rss_before"]),
          f"{r['objects']:,}" if r["objects"] else (r["error"] or "-")] for r in rows_in],
        title="One run per row, fresh target each (wall = attach->report for leakhound, the "
              "call for peers)"))
    print()

    ours = [r for r in rows_in if r["name"].startswith("leakhound") and r["objects"]]
    peers = [r for r in rows_in if not r["name"].startswith("leakhound")]
    rows = [
        [
            f"{lh['name']} vs {p['name']}",
            c.ratio(p["wall"], lh["wall"]),
            c.ratio(p["wall"], lh["census"]),
            c.ratio(lh["extra_peak"], p["extra_peak"]),
            f"{lh['lag_ms']:,.0f} / {p['lag_ms']:,.0f} ms",
        ]
        for lh in ours
        for p in peers
    ]
    print(c.table(
        ["pair", "speed-up (wall)", "speed-up (census)", "extra memory (ours/theirs)",
         "worst lag (ours / theirs)"],
        rows, title="Ratios (speed-up = peer time / leakhound time; > 1 means leakhound is faster)"))
    print()

    guppy = next((p for p in peers if p["name"] == "guppy3"), None)
    if guppy is not None:  # the page's one line: each leakhound row against guppy3, in this run
        c.summarize("; ".join(f"{lh['name']} {lh['wall']:.2f} s vs guppy3 {guppy['wall']:.2f} s = "
                              f"{guppy['wall'] / lh['wall']:.2f}x, lag {lh['lag_ms']:.0f} ms" for lh in ours))
    for lh in ours:
        if guppy is not None:
            mem = lh["extra_peak"] / guppy["extra_peak"] if guppy["extra_peak"] else float("inf")
            for what in ("wall", "census"):
                speed = guppy["wall"] / lh[what]
                print(f"goal >= {SPEED_GOAL:.0f}x faster than guppy3 ({lh['name']}, {what}): "
                      f"{'met' if speed >= SPEED_GOAL else 'NOT met'} ({speed:.2f}x)")
            print(f"goal <= 1/4 of guppy3's extra memory ({lh['name']}): "
                  f"{'met' if mem <= MEMORY_GOAL else 'NOT met'} ({mem:.2f} of it)")
        print(f"goal worst loop lag <= {LAG_GOAL_MS:.0f} ms ({lh['name']}): "
              f"{'met' if lh['lag_ms'] <= LAG_GOAL_MS else 'NOT met'} ({lh['lag_ms']:,.1f} ms)")
    for r in rows_in:
        if not r["peak_reset"]:
            print(f"note ({r['name']}): could not reset VmHWM; extra peak is relative to the "
                  "build's own peak")
        if r["error"]:
            print(f"note ({r['name']}): failed: {r['error']}")
    return 0


if __name__ == "__main__":
    c.main_guard(main)
