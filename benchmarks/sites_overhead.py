"""What the allocation-site tracker (``watch --sites``) costs a busy worker: the simulated
verifiers worker (leakhound/simulate) running rollouts for ever, in phases of ``--phase``
seconds: tracker off, tracker on (installed live by leakhound's ``sites`` request, ptrace),
tracemalloc on (started in the worker by a signal, as a reference: 1 frame, its default),
repeated ``--rounds`` times in one run, so the machine's load is alike for all three.

Per phase: rollouts per minute (the worker's own count, from its report) and the worker's CPU
time per rollout (/proc/PID/stat utime + stime: what the work cost, whatever else the machine
ran). The ratios are each mode's summed over the rounds against the tracker-off phases. The
tracker's extra memory in the target (its tables) is printed as the target reported it.

``--real``: the same on the real verifiers 0.1.14 worker (tests/verifiers_target.py) under
batches of rollouts, with memray (its Tracker, aggregated, Python frames) as a fourth mode
where it is installed in the worker's venv; tracemalloc and memray toggled by
benchmarks/sites_site's signal handlers. Rollouts are the worker's own count of finished ones.

Usage: .venv/bin/python benchmarks/sites_overhead.py [--phase S] [--rounds N] [--rate BYTES] [--real]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import header, kill_group, main_guard, summarize, table  # noqa: E402
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


def sites(pid: int, action: str, **fields: Any) -> dict[str, Any]:
    remote = run_request(pid, {"op": wire.OP_SITES, "action": action, **fields}, method="ptrace", timeout=60.0)
    return remote.result["sites"]  # type: ignore[no-any-return]


SITE = Path(__file__).resolve().parent / "sites_site"
MODES = ("off", "sites", "tracemalloc", "memray")


class Worker:
    """The worker measured: its pid, its rollouts done so far (its own count, from its report,
    with when it wrote it), and its reference trackers toggled by a signal."""

    def __init__(self, pid: int, done: Any, trackers_dir: Path | None = None) -> None:
        self.pid, self.done, self.trackers_dir = pid, done, trackers_dir

    def toggle(self, mode: str) -> str:
        """SIGUSR2 (tracemalloc) or SIGUSR1 (memray); what the worker said of it ("" unasked)."""
        log = self.trackers_dir / f"trackers-{self.pid}.txt" if self.trackers_dir else None
        seen = log.read_text().count("\n") if log is not None and log.exists() else 0
        os.kill(self.pid, signal.SIGUSR2 if mode == "tracemalloc" else signal.SIGUSR1)
        if log is None:
            return ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            lines = log.read_text().splitlines() if log.exists() else []
            if len(lines) > seen:
                return lines[seen].split(" ", 1)[1]
            time.sleep(0.05)
        return f"{mode}: no answer"

    def wait_report(self, after: float) -> tuple[float, int]:
        while True:
            try:
                at, done = self.done()
                if at > after:
                    return at, done
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.05)


def phases(worker: Worker, *, modes: tuple[str, ...], rounds: int, phase: float, rate: int) -> dict[str, Any]:
    """Each mode for ``phase`` seconds, ``rounds`` times, in turn; the tables printed."""
    totals: dict[str, list[float]] = {m: [0.0, 0.0, 0.0] for m in modes}  # seconds, rollouts, cpu
    rows = []
    table_bytes = 0
    for rnd in range(rounds):
        for mode in modes:
            said = ""
            if mode == "sites":
                started = sites(worker.pid, wire.SITES_START, mean_bytes=rate, seconds=phase + 120)
                assert started.get("started"), started
                table_bytes = int(started["table_bytes"])
            elif mode in ("tracemalloc", "memray"):
                said = worker.toggle(mode)
                if not said.endswith(" on") and worker.trackers_dir is not None:
                    print(f"# {mode} not started: {said}", file=sys.stderr)
                    continue
            at0, done0 = worker.wait_report(time.time())
            cpu0 = cpu_seconds(worker.pid)
            time.sleep(phase)
            at1, done1 = worker.wait_report(time.time())
            cpu1 = cpu_seconds(worker.pid)
            extra = ""
            if mode == "sites":
                state = sites(worker.pid, wire.SITES_STOP)
                extra = f"{state['sampled']:,} sampled of {state['allocated_bytes'] / 1e6:,.0f} MB"
            elif mode in ("tracemalloc", "memray"):
                worker.toggle(mode)
            seconds, done, cpu = at1 - at0, done1 - done0, cpu1 - cpu0
            for i, v in enumerate((seconds, done, cpu)):
                totals[mode][i] += v
            rows.append([rnd + 1, mode, f"{seconds:.1f}", done, f"{60.0 * done / seconds:,.1f}",
                         f"{1000.0 * cpu / max(done, 1):,.1f}", extra])
            time.sleep(2.0)
    print(table(["round", "mode", "seconds", "rollouts", "rollouts/min", "CPU ms/rollout", "tracker"], rows))
    base_rate = totals["off"][1] / totals["off"][0]
    base_cpu = totals["off"][2] / max(totals["off"][1], 1)
    summary = []
    ratios: dict[str, tuple[float, float]] = {}
    for mode in modes[1:]:
        s, done, cpu = totals[mode]
        if not s:
            continue
        ratios[mode] = ((done / s) / base_rate, (cpu / max(done, 1)) / base_cpu)
        summary.append([mode, f"{ratios[mode][0]:.3f}", f"{ratios[mode][1]:.3f}"])
    title = f"one sample per {rate:,} bytes; tracker's tables in the target {table_bytes / 1048576:.2f} MiB"
    print(table(["mode", "rollouts/min vs off", "CPU per rollout vs off"], summary, title=title))
    return {"ratios": ratios, "table_bytes": table_bytes, "off_rollouts": totals["off"][1]}


def simulated(args: argparse.Namespace) -> dict[str, Any]:
    report_dir = Path(tempfile.mkdtemp(prefix="sites-overhead-"))
    proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER, "--rollouts", "forever", "--fix", "all", "--turns", "10",
         "--concurrency", "4", "--stats-interval", "1", "--report-dir", str(report_dir)],
        start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        worker = Worker(proc.pid, lambda: completed(report_dir, proc.pid))
        worker.wait_report(0.0)
        time.sleep(args.warm)
        sites(proc.pid, wire.SITES_STATE)  # the payload loaded before the first phase
        return phases(worker, modes=("off", "sites", "tracemalloc"), rounds=args.rounds, phase=args.phase,
                      rate=args.rate)
    finally:
        kill_group(proc)
        shutil.rmtree(report_dir, ignore_errors=True)


def real(args: argparse.Namespace) -> dict[str, Any]:
    """The real verifiers 0.1.14 EnvWorker (tests/verifiers_target.py) under batches of
    rollouts run one after another; tracemalloc and memray by sites_site's signal handlers
    (memray where ``pip install memray`` into the worker's venv worked)."""
    from tests.verifiers_target import COUNTS_ONLY_ENV, continuous_rollouts, spawn_verifiers_worker

    tmp = Path(tempfile.mkdtemp(prefix="sites-overhead-real-"))
    trackers = tmp / "trackers"
    trackers.mkdir()
    env = {"PYTHONPATH": str(SITE), "LEAKHOUND_BENCH_TRACKERS_DIR": str(trackers), **COUNTS_ONLY_ENV}
    try:
        with spawn_verifiers_worker(tmp, rollouts=2, turns=3, extra_env=env) as vw, \
                continuous_rollouts(vw, rollouts=4, turns=4):

            def done() -> tuple[float, int]:
                doc = vw.read_report()
                return float(doc["written_at"]), int(doc["rollouts"]["finished"])

            worker = Worker(vw.worker_pid, done, trackers)
            time.sleep(args.warm)
            sites(worker.pid, wire.SITES_STATE)
            return phases(worker, modes=MODES, rounds=args.rounds, phase=args.phase, rate=args.rate)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # memray's files among them


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phase", type=float, default=30.0, help="seconds per phase")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=int, default=DEFAULT_SITES_RATE, help="the tracker's mean bytes per sample")
    parser.add_argument("--warm", type=float, default=15.0)
    parser.add_argument("--real", action="store_true",
                        help="the real verifiers 0.1.14 worker (and memray), not the simulated one")
    args = parser.parse_args()
    which = "the real verifiers 0.1.14 worker" if args.real else "the busy simulated worker"
    header(f"the allocation-site tracker's cost on {which} (issue 26)", sys.argv)
    found = real(args) if args.real else simulated(args)
    said = ", ".join(f"{mode} {rate:.3f}x rollouts/min, {cpu:.3f}x CPU per rollout"
                     for mode, (rate, cpu) in found["ratios"].items())
    summarize(f"{which}, {args.rounds} x {args.phase:.0f} s phases, vs tracker off: {said}; "
              f"tables {found['table_bytes'] / 1048576:.1f} MiB", smoke=args.phase < 20)
    return 0


if __name__ == "__main__":
    main_guard(main)
