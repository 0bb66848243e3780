"""The real verifiers 0.1.14 EnvWorker under continuous rollouts, inspected as on-call would
(issue 12): attach-to-report, the census and where its time went, the pause it kept, and
guppy3 in the same worker.

Part 1 (the real worker): spawns the worker (tests/verifiers_target.py: the fake model server
on loopback) with ``benchmarks/busy_site`` on its PYTHONPATH: a heartbeat thread in the worker
(it sleeps 5 ms at a time; how late it wakes is how long a thread of the worker waited for
the GIL, or for a core) and the event loop's own 5 ms callback on the main thread. Batches of
rollouts run in a thread the whole time; after ``--warm`` seconds it runs
``leakhound -v inspect PID --json`` ``--repeat`` times for each owner model (``--owners
census`` and the default), a few seconds apart. Per run: attach-to-report wall seconds, the
census's wall and CPU seconds (CPU of the payload's thread: wall minus CPU is time it waited,
for the GIL against the worker's threads or for a core on a loaded machine), the longest
single step (max step), the longest stretch the census (with the default owners, the census
or the object graph) ran between two yields of the GIL (max hold, its CPU time: an upper
bound on one hold) and how many yields (both walks'), and the heartbeat
thread's worst lag during the inspection against its worst lag in as long a time before it
(the machine's own noise), and the phases the payload reported (-v).

guppy3 (from the peers venv, benchmarks/_common.py) runs in the same worker on its main
thread: busy_site's SIGUSR2 handler calls ``hpy().heap()`` there (a signal handler runs on
the main thread, between two bytecodes of whatever it runs). Its row: the heap walk's wall
time, objects and bytes, and the heartbeat's worst lag meanwhile. The worker is stopped for the
whole walk (the loop runs nothing meanwhile) and guppy3 keeps what it imported; the batches
of rollouts wait and go on afterwards. The event loop's own lag is not a column: the fixture's
ground-truth report (leakhound_vf_truth.py) walks the worker's rollouts on the loop every few
seconds, 1-6 s of lag with or without an inspection.

Part 2 (the promise): ``--max-pause`` checked side by side with fixtures/busy_worker.py's 5 ms
heartbeat (its loop's worst lag, measured in the target), FIXTURE_C_THREADS threads in C code:
the worst lag during the inspection against the budget and what the payload reported.

``--nice N`` (root, default -10): the worker's threads, and with them its heartbeat, run at
niceness N once it is up (threads it starts later inherit it), so that its lag holds less of a
shared machine's load; leakhound's CLI is not reniced.

BENCH_LOG_DIR=DIR keeps each inspection's -v output there.

Usage: .venv/bin/python benchmarks/busy_real_worker.py [--repeat N] [--warm S] [--no-real]
       [--no-guppy] [--owners both|census|default] [--no-heartbeat] [--nice -10]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import (  # noqa: E402
    LEAKHOUND,
    header,
    main_guard,
    run_timed,
    summarize,
    table,
    target,
    verbose_holds,
    verbose_phases,
)


def inspect(pid: int, extra: list[str]) -> dict[str, Any]:
    argv = [str(LEAKHOUND), "-v", "inspect", str(pid), "--json", "--timeout", "120", *extra]
    wall, proc = run_timed(argv, timeout=200)
    row: dict[str, Any] = {"wall": wall, "rc": proc.returncode, "phases": {}}
    if proc.returncode == 0:
        import json  # noqa: PLC0415

        doc = json.loads(proc.stdout)
        row["census"] = doc["heap"]["census_seconds"]
        row["max_pause_ms"] = doc["heap"]["max_pause_ms"]
        row["objects"] = doc["heap"]["objects"]
        row["owner1"] = doc["owners"][0]["path"] if doc["owners"] else ""
        row["target_gc"] = "{} / {:.0f}".format(doc["heap"].get("target_gc_in_payload_thread", "-"),
                                                doc["heap"].get("target_gc_in_payload_thread_max_ms", 0.0))
    row["phases"] = verbose_phases(proc.stderr)
    if os.environ.get("BENCH_LOG_DIR"):  # each run's -v output, to read where a long hold was
        log = Path(os.environ["BENCH_LOG_DIR"]) / f"inspect-{pid}-{time.time():.0f}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(proc.stderr)
    holds = verbose_holds(proc.stderr)  # the census's and, with the default owners, the graph's
    if holds is not None:
        row["max_hold_ms"], row["yields"] = holds
    if proc.returncode != 0:
        row["error"] = (proc.stderr.strip().splitlines() or ["?"])[-1]
    return row


def census_cpu(row: dict[str, Any]) -> float:
    # "census", "census (owners)", "census (what the graph did not reach)": whichever ran
    return sum(float(cpu) for (key, name), (_wall, cpu) in row["phases"].items()
               if key == "payload" and name.startswith("census"))


SITE = Path(__file__).resolve().parent / "busy_site"


def lags(path: Path) -> list[tuple[float, float]]:
    """(time.monotonic(), lag ms) of the heartbeat thread's late beats (busy_site)."""
    out: list[tuple[float, float]] = []
    try:
        text = path.read_text()
    except OSError:
        return out
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] != "beats" and parts[2] == "thread":
            out.append((float(parts[0]), float(parts[1])))
    return out


def worst(beats: list[tuple[float, float]], start: float, end: float) -> float:
    return max((lag for when, lag in beats if start <= when <= end), default=0.0)


def guppy_run(pid: int, hb_dir: Path, timeout: float = 300.0) -> tuple[float, float, str]:
    """SIGUSR2 to the worker: busy_site runs guppy3's hpy().heap() on its main thread.
    Returns (start, end) in time.monotonic() and its line (time, seconds, objects, bytes)."""
    import os  # noqa: PLC0415
    import signal  # noqa: PLC0415

    out = hb_dir / f"guppy-{pid}.txt"
    start = time.monotonic()
    os.kill(pid, signal.SIGUSR2)
    while not out.exists() and time.monotonic() - start < timeout:
        time.sleep(0.1)
    time.sleep(0.5)  # the heartbeat's late beat lands after the walk
    return start, time.monotonic(), out.read_text().strip() if out.exists() else "no answer"


def renice(pid: int, niceness: int | None) -> None:
    """Every thread of ``pid`` at ``niceness`` (None: left as it is)."""
    if niceness is None:
        return
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            os.setpriority(os.PRIO_PROCESS, int(tid), niceness)


def _whole(value: Any) -> str:
    return f"{value:.0f}" if isinstance(value, (int, float)) else str(value)


def real_worker(repeat: int, warm: float, guppy: bool, models: str = "both", nice: int | None = None) -> None:
    from benchmarks._common import ensure_peers_venv, peers_site_packages  # noqa: PLC0415
    from tests.verifiers_target import (  # noqa: PLC0415
        COUNTS_ONLY_ENV,
        continuous_rollouts,
        spawn_verifiers_worker,
    )

    tmp = Path(subprocess.run(["mktemp", "-d"], capture_output=True, text=True).stdout.strip())
    hb_dir = tmp / "heartbeat"
    hb_dir.mkdir()
    # The fixture's ground-truth reports carry the rollout counts only (the driver waits on
    # them): measuring the registries JSON-encodes them on the worker's loop several times a
    # second, json.dumps holding the GIL for up to hundreds of ms, which made every yield of
    # leakhound's walks wait that long (until 2026-11-30 the numbers here included it).
    env = {"PYTHONPATH": str(SITE), "LEAKHOUND_BENCH_HEARTBEAT_DIR": str(hb_dir), **COUNTS_ONLY_ENV}
    if guppy:
        ensure_peers_venv()  # the benchmark's python is the worker's (3.11): its guppy3 loads there
        env["LEAKHOUND_BENCH_GUPPY_PATH"] = str(peers_site_packages())
    rows = []
    phase_rows = []
    guppy_row: Any = None
    with spawn_verifiers_worker(tmp, rollouts=4, turns=3, park=0, extra_env=env) as worker, \
            continuous_rollouts(worker):
        beats_file = hb_dir / f"hb-{worker.worker_pid}.txt"
        renice(worker.worker_pid, nice)
        time.sleep(warm)
        chosen = {"both": (["--owners", "census"], []), "census": (["--owners", "census"],), "default": ([],)}[models]
        for owners in chosen:
            for i in range(repeat):
                rss = open(f"/proc/{worker.worker_pid}/status").read().split("VmRSS:")[1].split()[0]
                start = time.monotonic()
                row = inspect(worker.worker_pid, owners)
                end = time.monotonic()
                time.sleep(3.0)  # the heartbeat writes its late beats as they come
                beats = lags(beats_file)
                during, before = worst(beats, start, end), worst(beats, 2 * start - end, start)
                label = " ".join(owners) or "default"
                rows.append([label, i + 1, f"{int(rss) / 1024:.0f}", row.get("objects", "-"),
                             f"{row['wall']:.1f}", f"{row.get('census', 0):.2f}", f"{census_cpu(row):.2f}",
                             row.get("max_pause_ms", "-"), row.get("max_hold_ms", "-"), row.get("yields", "-"),
                             row.get("target_gc", "-"), f"{during:.0f}", f"{before:.0f}",
                             row.get("error", row.get("owner1", ""))[:40]])
                phase_rows.append([label, i + 1] + [", ".join(f"{n} {w:.2f}/{c:.2f}" for (k, n), (w, c)
                                                              in row["phases"].items() if k == key)
                                                    for key in ("payload", "census")])
        if guppy:
            start, end, line = guppy_run(worker.worker_pid, hb_dir)
            time.sleep(3.0)
            parts = line.split()
            during = worst(lags(beats_file), start, end)
            guppy_row = (parts, during) if len(parts) == 4 else (line, during)
    said = [f"RSS {rows[-1][2]} MiB" if rows else "no run"]
    for label in sorted(dict.fromkeys(r[0] for r in rows), key=lambda name: name != "default"):
        mine = [r for r in rows if r[0] == label]
        said.append(f"{label}: wall {'/'.join(r[4] for r in mine)} s, step {'/'.join(_whole(r[7]) for r in mine)} ms, "
                    f"hold {'/'.join(_whole(r[8]) for r in mine)} ms")
    if guppy_row is not None and isinstance(guppy_row[0], list):
        said.append(f"guppy3 {float(guppy_row[0][1]):.1f} s")
    summarize("; ".join(said) + " (goal <= 3 s, <= 50 ms)")
    print(table(["owners", "run", "RSS MiB", "objects", "attach-to-report s", "census s", "census CPU s",
                 "max step ms", "max hold ms", "yields", "target gc in payload thread (n / max ms)",
                 "worst wait ms", "worst wait before ms", "owner #1"],
                rows, title="the real verifiers worker under continuous rollouts (worst wait: the "
                            "heartbeat thread's latest beat in the worker)"))
    print()
    if guppy_row is not None:
        parts, during = guppy_row
        if isinstance(parts, list):  # else the error line
            _when, seconds, count, size = parts
            print(table(["peer", "heap walk s", "objects", "bytes", "worst wait ms"],
                        [["guppy3 hpy().heap() on the main thread", f"{float(seconds):.2f}", f"{int(count):,}",
                          f"{int(size):,}", f"{during:.0f}"]],
                        title="guppy3 in the same worker (the main thread walks; the worker is stopped meanwhile)"))
        else:
            print(f"# guppy3: {parts}")
        print()
    print(table(["owners", "run", "payload phases (wall s / CPU s)", "census phases"], phase_rows))


# The worker as it is, and with the real verifiers worker's raised threshold over a million
# more tracked objects (its costly collections: the ones that can run in the payload's thread).
WORKERS = {"default gc": {}, "gc 150000, +1M objects": {"FIXTURE_GC_THRESHOLD": "150000",
                                                        "FIXTURE_BULK_OBJECTS": "1000000"}}


def heartbeat(repeat: int, budgets: list[str], nice: int | None = None) -> None:
    rows = []
    for kind, extra_env in WORKERS.items():
        for budget in budgets:
            for i in range(repeat):
                # A fresh target per run: its worst lag is a maximum since it started.
                with target("busy_worker.py", env={"FIXTURE_C_THREADS": "1", **extra_env}) as t:
                    renice(t.pid, nice)
                    t.settle(2.0)
                    before = float(t.report()["max_lag_ms"])
                    row = inspect(t.pid, ["--owners", "census", "--max-pause", budget])
                    lag = t.lag_after()
                rows.append([kind, budget, i + 1, f"{row['wall']:.2f}", row.get("max_pause_ms", "-"),
                             row.get("max_hold_ms", "-"), row.get("yields", "-"), row.get("target_gc", "-"),
                             f"{before:.1f}", f"{lag:.1f}"])
    print(table(["worker", "--max-pause ms", "run", "attach-to-report s", "max step ms", "max hold ms", "yields",
                 "target gc in payload thread (n / max ms)", "worst lag before ms", "worst lag after ms"], rows,
                title="fixtures/busy_worker.py (1 C thread), its 5 ms heartbeat's worst lag"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--warm", type=float, default=20.0, help="seconds of rollouts before the first inspection")
    parser.add_argument("--no-real", action="store_true", help="only the heartbeat part")
    parser.add_argument("--no-guppy", action="store_true", help="no guppy3 in the real worker")
    parser.add_argument("--owners", choices=("both", "census", "default"), default="both",
                        help="which owner models to inspect the real worker with (default: both, census first)")
    parser.add_argument("--no-heartbeat", action="store_true", help="skip part 2 (fixtures/busy_worker.py)")
    parser.add_argument("--nice", type=int, default=-10, help="the targets' niceness (as root)")
    args = parser.parse_args()
    nice = args.nice if os.geteuid() == 0 else None
    header(f"the busy real worker (issue 12), targets at nice {nice or 0}", sys.argv)
    if not args.no_real:
        real_worker(args.repeat, args.warm, not args.no_guppy, args.owners, nice)
        print()
    if not args.no_heartbeat:
        heartbeat(args.repeat, ["50", "20"], nice)
    return 0


if __name__ == "__main__":
    main_guard(main)
