"""How long the ptrace method stops the target: the tracer's own measure (SEIZE to DETACH)
over N no-op injections into an idle fixture, and the time inject() takes end to end (with
the tracer helper's start). ``--old PATH`` interleaves injections by the single-file
injector of another checkout (e.g. a git worktree at 2b787ef), under the same load.

    .venv/bin/python benchmarks/ptrace_stop.py -n 60 [--quick] [--old /tmp/lh_old/leakhound/attach/ptrace.py]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import _common as c  # noqa: E402

from leakhound.attach import ptrace  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=60)
    parser.add_argument("--quick", action="store_true", help="5 injections: checks the script")
    parser.add_argument("--old", help="path of an older single-file ptrace.py to compare with")
    args = parser.parse_args()
    if args.quick:
        args.n = 5
    c.header(f"the ptrace injector's stop, {args.n} no-op injections into an idle target", sys.argv)
    injectors = {"helper": ptrace.inject}
    if args.old:
        spec = importlib.util.spec_from_file_location("old_ptrace", args.old)
        assert spec is not None and spec.loader is not None
        old = importlib.util.module_from_spec(spec)
        sys.modules["old_ptrace"] = old
        spec.loader.exec_module(old)
        injectors["in-process"] = old.inject
    ready = os.path.join(tempfile.mkdtemp(), "ready.json")
    target = subprocess.Popen([sys.executable, str(ROOT / "fixtures/growing_cache.py"), ready],
                              start_new_session=True)
    stops: dict[str, list[float]] = {name: [] for name in injectors}
    walls: dict[str, list[float]] = {name: [] for name in injectors}
    try:
        while not os.path.exists(ready):
            time.sleep(0.05)
        for _ in range(args.n):
            for name, inject in injectors.items():
                began = time.perf_counter()
                injection = inject(target.pid, "0", timeout=10, log=lambda _: None)
                walls[name].append((time.perf_counter() - began) * 1000.0)
                stops[name].append(injection.attach_stop_ms)
                time.sleep(0.05)
    finally:
        target.kill()
        target.wait()
    rows = []
    for name in injectors:
        s = sorted(stops[name])
        rows.append([name, f"{statistics.median(s):.3f} ms", f"{s[int(len(s) * 0.9)]:.3f} ms", f"{s[-1]:.3f} ms",
                     f"{statistics.median(walls[name]):.1f} ms"])
    print(c.table(["injector", "stop median", "stop p90", "stop max", "inject() median"], rows,
                  title=f"{args.n} no-op injections (stop: the tracer's SEIZE to DETACH)"))


if __name__ == "__main__":
    c.main_guard(main)
