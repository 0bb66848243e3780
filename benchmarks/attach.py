"""Attach-to-report time on an idle small worker, and how long each tool stops it.

Every row gets a fresh idle target (fixtures/bench_heap.py with a small heap, .venv's python,
the peers venv's site-packages on PYTHONPATH so memray can import in it). Per row:

* attach->report: wall time from starting the tool until its report is available
* worst lag: the target's own 5 ms heartbeat's worst loop lag while the tool ran
* ptrace-stopped: time the target's main thread spent in the 't'/'T' state, sampled from
  outside every ~0.5 ms, and the longest single stop
* tool's own figure: for `leakhound` via the API, gdb's run time (attach_stop_ms: gdb
  start-up, attach, inject, detach) and the main thread's time in the bootstrap; for the CLI,
  the snapshot's max_pause_ms

Tools: `leakhound inspect --method gdb|agent`, `leakhound.attach.run_request` (gdb, to read
the gdb run time), `py-spy dump` (blocking and --nonblocking) and `memray attach`, whose
report is an allocation capture over --duration seconds followed by `memray summary`.

Numbers come from ONE run each. Usage:

    .venv/bin/python benchmarks/attach.py [--quick] [--objects N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _common as c

from leakhound.model.names import Method


def idle_target(objects: int, agent: bool = False) -> c.Target:
    env = {"BENCH_OBJECTS": str(objects), "PYTHONPATH": str(c.peers_site_packages())}
    if agent:
        env["LEAKHOUND_AGENT"] = "1"
    return c.Target("bench_heap.py", env=env)


def one_row(name: str, objects: int, run: Callable[[int], dict[str, Any]], *,
            agent: bool = False) -> dict[str, Any]:
    t = idle_target(objects, agent=agent)
    try:
        t.settle(1.0)
        t.reset_lag()
        with c.StopSampler(t.pid) as stops:
            started = time.perf_counter()
            row = run(t.pid)
            attach_wall = time.perf_counter() - started
        lag = t.lag_after()
        if "after" in row:  # e.g. memray: its report needs more steps once the attach returned
            row["after"]()
        row.setdefault("wall", attach_wall)
        row.update(name=name, lag_ms=lag, stopped_s=stops.stopped_s, longest_s=stops.longest_s)
        return row
    finally:
        t.stop()


def leakhound_cli(method: str) -> Callable[[int], dict[str, Any]]:
    def run(pid: int) -> dict[str, Any]:
        wall, snap, error = c.leakhound_inspect(pid, method, timeout=60)
        own = f"max_pause {snap['heap']['max_pause_ms']:.1f} ms" if snap else ""
        return {"wall": wall, "own": own, "error": error}
    return run


def leakhound_api(pid: int) -> dict[str, Any]:
    from leakhound.attach import run_request

    started = time.perf_counter()
    remote = run_request(pid, {"op": "snapshot"}, method=Method.GDB, timeout=60)
    wall = time.perf_counter() - started
    return {"wall": wall, "error": "",
            "own": f"gdb run {remote.attach_stop_ms:.1f} ms, "
                   f"bootstrap {remote.main_thread_ms:.1f} ms"}


def py_spy(nonblocking: bool) -> Callable[[int], dict[str, Any]]:
    def run(pid: int) -> dict[str, Any]:
        argv = [str(c.PY_SPY), "dump", "--pid", str(pid)] + (["--nonblocking"] if nonblocking else [])
        wall, proc = c.run_timed(argv, timeout=60)
        error = "" if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["failed"])[-1]
        return {"wall": wall, "error": error, "own": ""}
    return run


def memray(duration: int) -> Callable[[int], dict[str, Any]]:
    memray_bin = c.PEERS_VENV / "bin" / "memray"

    def run(pid: int) -> dict[str, Any]:
        tmp = Path(tempfile.mkdtemp(prefix="leakhound-bench-memray-"))
        capture = tmp / "capture.bin"
        row: dict[str, Any] = {"own": "", "error": ""}
        attach_wall, proc = c.run_timed(
            [str(memray_bin), "attach", "-f", "-o", str(capture), "--duration", str(duration),
             str(pid)], timeout=120)
        if proc.returncode != 0:
            row["error"] = (proc.stderr.strip().splitlines() or ["memray attach failed"])[-1]
            row["wall"] = attach_wall
            shutil.rmtree(tmp, ignore_errors=True)
            return row

        def after() -> None:
            # The capture is complete once tracking stopped (after --duration) and the writer
            # closed the file; then `memray summary` produces the report.
            try:
                time.sleep(duration)
                deadline = time.monotonic() + 30
                summary = None
                while time.monotonic() < deadline:
                    summary_wall, summary = c.run_timed(
                        [str(memray_bin), "summary", str(capture)], timeout=60)
                    if summary.returncode == 0 and summary.stdout.strip():
                        break
                    time.sleep(0.1)
                if summary is None or summary.returncode != 0:
                    row["error"] = "memray summary failed"
                row["wall"] = attach_wall + duration + summary_wall
                row["own"] = (f"attach {attach_wall:.2f} s + capture {duration} s + summary "
                              f"{summary_wall:.2f} s")
            finally:
                shutil.rmtree(tmp, ignore_errors=True)

        row["after"] = after
        return row
    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny heap (5k objects), fast smoke run")
    parser.add_argument("--objects", type=int, default=None, help="heap size (default 20,000)")
    args = parser.parse_args()
    objects = args.objects or (5_000 if args.quick else 20_000)
    c.ensure_peers_venv()
    c.header(f"attach-to-report on an idle ~{objects:,}-object worker",
             ["benchmarks/attach.py", *sys.argv[1:]])
    gdb = shutil.which("gdb")
    rows: list[dict[str, Any]] = []
    skipped: list[tuple[str, str]] = []
    rows.append(one_row("leakhound inspect --method ptrace", objects, leakhound_cli("ptrace")))
    if gdb:
        rows.append(one_row("leakhound inspect --method gdb", objects, leakhound_cli("gdb")))
        rows.append(one_row("leakhound run_request (gdb, API)", objects, leakhound_api))
    else:
        skipped.append(("leakhound gdb", "gdb is not installed"))
    rows.append(one_row("leakhound inspect --method agent", objects, leakhound_cli("agent"),
                        agent=True))
    if sys.version_info < (3, 14):
        skipped.append(("leakhound --method remote-exec",
                        f"needs Python >= 3.14 (sys.remote_exec); targets run {sys.version.split()[0]}"))
    if c.PY_SPY.exists():
        rows.append(one_row("py-spy dump", objects, py_spy(False)))
        rows.append(one_row("py-spy dump --nonblocking", objects, py_spy(True)))
    else:
        skipped.append(("py-spy", f"{c.PY_SPY} not found"))
    if gdb and (c.PEERS_VENV / "bin" / "memray").exists():
        rows.append(one_row("memray attach (+ summary)", objects, memray(1)))
    else:
        skipped.append(("memray attach", "needs gdb or lldb and memray importable in the target"))

    print(c.table(
        ["tool", "attach->report", "worst lag", "ptrace-stopped", "longest stop", "tool's own figure"],
        [[r["name"], c.secs(r["wall"]), f"{r['lag_ms']:,.1f} ms", c.ms(r["stopped_s"]),
          c.ms(r["longest_s"]), r["error"] and f"failed: {r['error']}" or r["own"]] for r in rows],
        title="One run per row, fresh idle target each (worst lag: heartbeat, inside the target)"))
    print()
    for name, why in skipped:
        print(f"{name}: not measured: {why}")
    print(f"# pid of this benchmark: {os.getpid()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    c.main_guard(main)
