"""How long the gdb injection stops an idle target, as shipped vs with gdb options that load
fewer shared-library symbols. Evidence for docs/performance.md; changes nothing in leakhound.

Each variant runs leakhound's own gdb command line and injection script
(leakhound.attach.gdb.command + gdb_inject.py) with a no-op bootstrap (``0``), so only the
attach itself is measured: gdb wall time, time the target's main thread was ptrace-stopped
(sampled from outside) and the target's worst loop lag.

Usage:

    .venv/bin/python benchmarks/gdb_stop.py [--quick] [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import _common as c

VARIANTS = {
    "as shipped": [],
    "no libthread_db": ["-iex", "set libthread-db-search-path /nonexistent"],
    # memray's attach does this: no automatic symbol loading, then only the libraries the
    # injection needs (libpython for Py_AddPendingCall/PyRun_SimpleString, libc for malloc).
    "solib off + libpython, libc only": [
        "-iex", "set auto-solib-add off",
        "-ex", "sharedlibrary libpython",
        "-ex", "sharedlibrary libc\\.so",
    ],
}


def attach_once(pid: int, extra: list[str]) -> tuple[float, float, float, str]:
    from leakhound.attach import gdb

    tmp = tempfile.mkdtemp(prefix="leakhound-bench-gdb-")
    try:
        status = os.path.join(tmp, "status.json")
        argv = gdb.command(pid, status)
        # Options go before "-p PID -x SCRIPT" so -ex runs after the attach, before the script.
        argv = argv[:-4] + extra + argv[-4:]
        env = {**os.environ, "LEAKHOUND_GDB_STATUS": status, "LEAKHOUND_GDB_CODE": "0"}
        with c.StopSampler(pid) as stops:
            wall, _ = c.run_timed(argv, timeout=60, env=env)
        try:
            with open(status) as fh:
                doc = json.load(fh)
            outcome = "ok" if doc.get("ok") else f"failed: {doc.get('reason')}"
        except (OSError, ValueError):
            outcome = "failed: no status"
        return wall, stops.stopped_s, stops.longest_s, outcome
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one round")
    parser.add_argument("--rounds", type=int, default=None, help="rounds over all variants (default 3)")
    args = parser.parse_args()
    rounds = args.rounds or (1 if args.quick else 3)
    if not shutil.which("gdb"):
        print("gdb is not installed: nothing to measure")
        return 0
    c.header("gdb injection stop time by gdb options (idle 20k-object target)",
             ["benchmarks/gdb_stop.py", *sys.argv[1:]])
    rows = []
    with c.target("bench_heap.py", env={"BENCH_OBJECTS": "20000"}) as t:
        t.settle(0.5)
        for rnd in range(1, rounds + 1):
            for name, extra in VARIANTS.items():
                t.reset_lag()
                wall, stopped, longest, outcome = attach_once(t.pid, extra)
                lag = t.lag_after()
                rows.append([f"{name} (round {rnd})", c.ms(wall), c.ms(stopped), c.ms(longest),
                             f"{lag:,.1f} ms", outcome])
                time.sleep(0.2)
    print(c.table(["gdb options", "gdb wall", "ptrace-stopped", "longest stop", "worst lag",
                   "injection"], rows, title="No-op injection, one row per attach"))
    return 0


if __name__ == "__main__":
    c.main_guard(main)
