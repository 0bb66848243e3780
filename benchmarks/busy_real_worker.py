"""The real verifiers 0.1.14 EnvWorker under continuous rollouts, inspected as on-call would
(issue 12): attach-to-report, the census and where its time went, and the pause it kept.

Part 1 (the real worker): spawns the worker (tests/verifiers_target.py: the fake model server
on loopback), keeps batches of rollouts running in a thread the whole time, waits ``--warm``
seconds, then runs ``leakhound -v inspect PID --json`` ``--repeat`` times for each owner model
(``--owners census`` and the default). Per run: attach-to-report wall seconds, the census's
wall and CPU seconds (CPU of the payload's thread: wall minus CPU is time it waited, for the
GIL against the worker's threads or for a core on a loaded machine), heap.max_pause_ms
(the longest single step), the longest stretch the census ran between two yields of the GIL
(max_hold) and how many yields, and the phases the payload reported (-v).

Part 2 (the promise): the real worker has no heartbeat, so ``--max-pause`` is checked side by
side with fixtures/busy_worker.py's 5 ms heartbeat (its loop's worst lag, measured in the
target), FIXTURE_C_THREADS threads in C code: the worst lag during the inspection against the
budget and what the payload reported.

guppy3 is not compared on the real worker: it does not run in a live worker from outside
(hpy().heap() must be called by the worker's own code, on its main thread, stopping it for
the whole walk), and the verifiers fixture has no hook to run it; census_versions.py and
dominators.py compare against guppy3 on the benchmark heap, whose fixture has that hook.

Usage: .venv/bin/python benchmarks/busy_real_worker.py [--repeat N] [--warm S] [--no-real]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import (  # noqa: E402
    LEAKHOUND,
    header,
    main_guard,
    run_timed,
    table,
    target,
)

PHASES = re.compile(r"(payload|census) phases: (.*)")
HELD = re.compile(r"held the GIL at most ([\d.]+) ms between yields \((\d+) yields")


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
    for line in proc.stderr.splitlines():
        m = PHASES.search(line)
        if m:
            for part in m.group(2).split(", "):
                name, spent, _unit = part.rsplit(" ", 2)
                w, c = spent.split("/")
                row["phases"][(m.group(1), name)] = (float(w), float(c))
        m = HELD.search(line)
        if m:
            row["max_hold_ms"], row["yields"] = float(m.group(1)), int(m.group(2))
    if proc.returncode != 0:
        row["error"] = (proc.stderr.strip().splitlines() or ["?"])[-1]
    return row


def census_cpu(row: dict[str, Any]) -> float:
    return row["phases"].get(("payload", "census"), (0.0, 0.0))[1]


def real_worker(repeat: int, warm: float) -> None:
    from tests.verifiers_target import spawn_verifiers_worker  # noqa: PLC0415

    tmp = Path(subprocess.run(["mktemp", "-d"], capture_output=True, text=True).stdout.strip())
    rows = []
    phase_rows = []
    with spawn_verifiers_worker(tmp, rollouts=4, turns=3, park=0) as worker:
        stop = threading.Event()

        def rollouts() -> None:
            while not stop.is_set():
                try:
                    worker.run_batch(rollouts=6, turns=4, timeout=600)
                except Exception as exc:  # noqa: BLE001, PERF203 - said, and the benchmark goes on
                    print(f"# batch error: {exc}", file=sys.stderr)
                    return

        thread = threading.Thread(target=rollouts, daemon=True)
        thread.start()
        try:
            time.sleep(warm)
            for owners in (["--owners", "census"], []):
                for i in range(repeat):
                    rss = open(f"/proc/{worker.worker_pid}/status").read().split("VmRSS:")[1].split()[0]
                    row = inspect(worker.worker_pid, owners)
                    label = " ".join(owners) or "default"
                    rows.append([label, i + 1, f"{int(rss) / 1024:.0f}", row.get("objects", "-"),
                                 f"{row['wall']:.1f}", f"{row.get('census', 0):.2f}", f"{census_cpu(row):.2f}",
                                 row.get("max_pause_ms", "-"), row.get("max_hold_ms", "-"), row.get("yields", "-"),
                                 row.get("error", row.get("owner1", ""))[:40]])
                    phase_rows.append([label, i + 1] + [", ".join(f"{n} {w:.2f}/{c:.2f}" for (k, n), (w, c)
                                                                  in row["phases"].items() if k == "census")])
        finally:
            stop.set()
            thread.join(timeout=700)
    print(table(["owners", "run", "RSS MiB", "objects", "attach-to-report s", "census s", "census CPU s",
                 "max step ms", "max hold ms", "yields", "owner #1"], rows,
                title="the real verifiers worker under continuous rollouts"))
    print()
    print(table(["owners", "run", "census phases (wall s / CPU s)"], phase_rows))


def heartbeat(repeat: int, budgets: list[str]) -> None:
    rows = []
    for budget in budgets:
        for i in range(repeat):
            # A fresh target per run: its worst lag is a maximum since it started.
            with target("busy_worker.py", env={"FIXTURE_C_THREADS": "1"}) as t:
                t.settle(2.0)
                before = float(t.report()["max_lag_ms"])
                row = inspect(t.pid, ["--owners", "census", "--max-pause", budget])
                lag = t.lag_after()
            rows.append([budget, i + 1, f"{row['wall']:.2f}", row.get("max_pause_ms", "-"),
                         row.get("max_hold_ms", "-"), row.get("yields", "-"), f"{before:.1f}", f"{lag:.1f}"])
    print(table(["--max-pause ms", "run", "attach-to-report s", "max step ms", "max hold ms", "yields",
                 "worst lag before ms", "worst lag after ms"], rows,
                title="fixtures/busy_worker.py (1 C thread), its 5 ms heartbeat's worst lag"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--warm", type=float, default=20.0, help="seconds of rollouts before the first inspection")
    parser.add_argument("--no-real", action="store_true", help="only the heartbeat part")
    args = parser.parse_args()
    header("the busy real worker (issue 12)", sys.argv)
    if not args.no_real:
        real_worker(args.repeat, args.warm)
        print()
    heartbeat(args.repeat, ["50", "20"])
    return 0


if __name__ == "__main__":
    main_guard(main)
