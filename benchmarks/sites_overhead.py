"""What the allocation-site tracker (``watch --sites``) costs a busy worker: the simulated
verifiers worker (leakhound/simulate) running rollouts for ever, in phases of ``--phase``
seconds: tracker off, tracker on (installed live by leakhound's ``sites`` request, ptrace),
tracemalloc on (started in the worker by a signal, as a reference: 1 frame, its default),
repeated ``--rounds`` times in one run, so the machine's load is alike for all three.

Per phase: rollouts per minute (the worker's own count, from its report) and the worker's CPU
time per rollout (/proc/PID/stat utime + stime: what the work cost, whatever else the machine
ran). The ratios are each mode's summed over the rounds against the tracker-off phases. The
tracker's extra memory in the target (its tables) is printed as the target reported it.

Usage: .venv/bin/python benchmarks/sites_overhead.py [--phase S] [--rounds N] [--rate BYTES]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import header, kill_group, main_guard, table  # noqa: E402
from leakhound.attach import run_request  # noqa: E402
from leakhound.core.watch import DEFAULT_SITES_RATE  # noqa: E402
from leakhound.payload import wire  # noqa: E402

# The worker, with tracemalloc switched on and off by SIGUSR2 (its main thread runs the handler).
DRIVER = """
import signal, sys, tracemalloc
def toggle(signum, frame):
    if tracemalloc.is_tracing():
        tracemalloc.stop()
    else:
        tracemalloc.start()
signal.signal(signal.SIGUSR2, toggle)
from leakhound.simulate.worker import main
sys.exit(main(sys.argv[1:]))
"""
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def completed(report_dir: Path, pid: int) -> tuple[float, int]:
    """(when the worker wrote it, rollouts completed) from its latest report."""
    doc = json.loads((report_dir / f"{pid}.json").read_text())
    return float(doc["written_at"]), int(doc["rollouts_completed"])


def wait_report(report_dir: Path, pid: int, after: float) -> tuple[float, int]:
    while True:
        try:
            at, done = completed(report_dir, pid)
            if at > after:
                return at, done
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.05)


def sites(pid: int, action: str, **fields: Any) -> dict[str, Any]:
    remote = run_request(pid, {"op": wire.OP_SITES, "action": action, **fields}, method="ptrace", timeout=60.0)
    return remote.result["sites"]  # type: ignore[no-any-return]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phase", type=float, default=30.0, help="seconds per phase")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=int, default=DEFAULT_SITES_RATE, help="the tracker's mean bytes per sample")
    parser.add_argument("--warm", type=float, default=15.0)
    args = parser.parse_args()
    header("the allocation-site tracker's cost on the busy simulated worker (issue 26)", sys.argv)
    report_dir = Path(tempfile.mkdtemp(prefix="sites-overhead-"))
    proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER, "--rollouts", "forever", "--fix", "all", "--turns", "10",
         "--concurrency", "4", "--stats-interval", "1", "--report-dir", str(report_dir)],
        start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    totals: dict[str, list[float]] = {m: [0.0, 0.0, 0.0] for m in ("off", "sites", "tracemalloc")}  # s, done, cpu
    rows = []
    table_bytes = 0
    try:
        wait_report(report_dir, proc.pid, 0.0)
        time.sleep(args.warm)
        sites(proc.pid, wire.SITES_STATE)  # the payload loaded before the first phase
        for rnd in range(args.rounds):
            for mode in ("off", "sites", "tracemalloc"):
                if mode == "sites":
                    started = sites(proc.pid, wire.SITES_START, mean_bytes=args.rate, seconds=args.phase + 60)
                    assert started.get("started"), started
                    table_bytes = int(started["table_bytes"])
                elif mode == "tracemalloc":
                    os.kill(proc.pid, signal.SIGUSR2)
                at0, done0 = wait_report(report_dir, proc.pid, time.time())
                cpu0 = cpu_seconds(proc.pid)
                time.sleep(args.phase)
                at1, done1 = wait_report(report_dir, proc.pid, time.time())
                cpu1 = cpu_seconds(proc.pid)
                extra = ""
                if mode == "sites":
                    state = sites(proc.pid, wire.SITES_STOP)
                    extra = f"{state['sampled']:,} sampled of {state['allocated_bytes'] / 1e6:,.0f} MB"
                elif mode == "tracemalloc":
                    os.kill(proc.pid, signal.SIGUSR2)
                seconds, done, cpu = at1 - at0, done1 - done0, cpu1 - cpu0
                for i, v in enumerate((seconds, done, cpu)):
                    totals[mode][i] += v
                rows.append([rnd + 1, mode, f"{seconds:.1f}", done, f"{60.0 * done / seconds:,.1f}",
                             f"{1000.0 * cpu / max(done, 1):,.1f}", extra])
                time.sleep(2.0)
    finally:
        kill_group(proc)
    print(table(["round", "mode", "seconds", "rollouts", "rollouts/min", "CPU ms/rollout", "tracker"], rows))
    base_rate = totals["off"][1] / totals["off"][0]
    base_cpu = totals["off"][2] / max(totals["off"][1], 1)
    summary = []
    for mode in ("sites", "tracemalloc"):
        s, done, cpu = totals[mode]
        summary.append([mode, f"{(done / s) / base_rate:.3f}", f"{(cpu / max(done, 1)) / base_cpu:.3f}"])
    title = f"one sample per {args.rate:,} bytes; tracker's tables in the target {table_bytes / 1048576:.2f} MiB"
    print(table(["mode", "rollouts/min vs off", "CPU per rollout vs off"], summary, title=title))
    return 0


if __name__ == "__main__":
    main_guard(main)
