"""The verifiers probe on the real verifiers 0.1.14 EnvWorker under continuous rollouts (issue
12): the payload's ``probes`` phase (wall / CPU seconds of the payload's thread), with the
probes sizing through the compiled walk and with ``LEAKHOUND_WALKER=python`` (the census and
the probes in pure Python: the probes then size with ``sizes.deep_size``, as they all did
before), alternating, in one session, so the machine's load is the same for both.

Spawns the worker as benchmarks/busy_real_worker.py does (tests/verifiers_target.py, batches of
rollouts in a thread the whole time), waits ``--warm`` seconds, then runs ``leakhound -v inspect
PID --owners census --json`` ``--repeat`` times per walker. Per run: the heap's objects, the
probe's registry entries and retained bytes (the worker moves between runs: not comparable
run to run), which walk sized the registry and the intercept bodies, and the phases.

Usage: .venv/bin/python benchmarks/busy_probes.py [--repeat N] [--warm S]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import LEAKHOUND, header, main_guard, run_timed, table, verbose_phases  # noqa: E402


def inspect(pid: int, walker: str) -> dict[str, Any]:
    env = {"LEAKHOUND_WALKER": "python" if walker == "python" else "compiled"}
    argv = [str(LEAKHOUND), "-v", "inspect", str(pid), "--owners", "census", "--json", "--timeout", "180"]
    wall, proc = run_timed(argv, timeout=300, env=env)
    row: dict[str, Any] = {"wall": wall, "rc": proc.returncode,
                           "phases": {name: spent for (kind, name), spent in verbose_phases(proc.stderr).items()
                                      if kind == "payload"}}
    if proc.returncode == 0:
        doc = json.loads(proc.stdout)
        row["objects"] = doc["heap"]["objects"]
        row["probe"] = doc.get("probes", {}).get("verifiers", {})
    else:
        row["error"] = (proc.stderr.strip().splitlines() or ["?"])[-1]
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--warm", type=float, default=30.0, help="seconds of rollouts before the first inspection")
    args = parser.parse_args()
    header("the verifiers probe on the busy real worker (issue 12)", sys.argv)
    from tests.verifiers_target import (  # noqa: PLC0415
        COUNTS_ONLY_ENV,
        continuous_rollouts,
        spawn_verifiers_worker,
    )

    tmp = Path(subprocess.run(["mktemp", "-d"], capture_output=True, text=True).stdout.strip())
    rows = []
    with spawn_verifiers_worker(tmp, rollouts=4, turns=3, park=0, extra_env=COUNTS_ONLY_ENV) as worker, \
            continuous_rollouts(worker):
        time.sleep(args.warm)
        for i in range(args.repeat):
            for walker in ("compiled", "python"):
                row = inspect(worker.worker_pid, walker)
                probe = row.get("probe") or {}
                registry = probe.get("registry") or {}
                probes_w, probes_c = row["phases"].get("probes", (0.0, 0.0))
                census_w, census_c = row["phases"].get("census", (0.0, 0.0))
                rows.append([walker, i + 1, row.get("objects", "-"), registry.get("entries", "-"),
                             f"{registry.get('retained_bytes', 0):,}", ",".join(probe.get("sizing", [])) or "-",
                             f"{probes_w:.3f} / {probes_c:.3f}",
                             "{} / {}".format(*[(probe.get("pace") or {}).get(k, "-")
                                                for k in ("max_hold_ms", "yields")]),
                             f"{census_w:.2f} / {census_c:.2f}",
                             f"{row['wall']:.1f}", row.get("error", "")[:40]])
                time.sleep(2.0)
    print(table(["walker", "run", "objects", "registry entries", "retained bytes", "sizing",
                 "probes wall / CPU s", "probes max hold ms / yields", "census wall / CPU s",
                 "attach-to-report s", "error"], rows,
                title="the verifiers probe on the real worker under continuous rollouts"))
    return 0


if __name__ == "__main__":
    main_guard(main)
