"""The A/B experiment behind ``leakhound confirm``: the same churn workload, once per fix
configuration, each in fresh simulated worker processes; peak and resting RSS come from the
kernel (/proc/PID/status VmHWM, VmRSS), what each leak retained from the worker's own report.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from leakhound.attach.process import status_bytes
from leakhound.errors import FleetError
from leakhound.simulate.fleet import start_fleet
from leakhound.simulate.workload import Workload

__all__ = ["CONFIGS", "CONFIRM_SCHEMA", "STATS_INTERVAL", "Workload", "run_confirm", "run_one"]

CONFIGS: tuple[tuple[str, str], ...] = (
    ("none", "none"),
    ("steps", "steps"),
    ("registry", "registry"),
    ("intercepts", "intercepts"),
    ("trim", "trim"),
    ("all", "all"),
)
CONFIRM_SCHEMA = "leakhound.confirm/1"


# confirm's stats tick: resting RSS is read one tick after the worker goes idle (and trim
# runs on it), so a short one keeps each run short.
STATS_INTERVAL = 2.0


def run_one(label: str, fixes: str, workload: Workload) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="leakhound-confirm-") as tmp:
        began = time.monotonic()
        # One worker, held idle (up to 600 s) while its resting RSS is read.
        with start_fleet(workers=1, workload=replace(workload, hold=600.0), fixes=fixes, report_dir=tmp) as fleet:
            # Idle, and one stats tick later (the trim cadence runs on it): resting state.
            (report,) = fleet.wait_idle(timeout=600, stats_ticks=1)
            pid = fleet.pids[0]
            status = status_bytes(pid)  # one reading: the peak and the resting RSS together
            if "VmHWM" not in status or "VmRSS" not in status:
                raise FleetError(f"the {label} worker (pid {pid}) was gone before its RSS was read")
            peak, resting = status["VmHWM"], status["VmRSS"]
            fleet.stop()
    traj = report.get("trajectories", {})
    held = report.get("intercepts", {})
    return {
        "fixes": label,
        "peak_rss_bytes": peak,
        "resting_rss_bytes": resting,
        "registry_retained_bytes": int(traj.get("retained_bytes", 0)) if traj.get("finished_entries") else 0,
        "registry_finished_entries": int(traj.get("finished_entries", 0)),
        "intercept_peak_body_bytes": int(held.get("peak_body_bytes", 0)),
        "intercept_peak_delivered": int(held.get("peak_delivered", 0)),
        "step_redundant_bytes": int(traj.get("redundant_bytes", 0)),
        "rollouts_completed": int(report.get("rollouts_completed", 0)),
        "seconds": round(time.monotonic() - began, 1),
    }


def run_confirm(
    *, workload: Workload, progress: Callable[[str], None] | None = None
) -> list[dict[str, Any]]:
    rows = []
    for i, (label, fixes) in enumerate(CONFIGS, 1):
        if progress is not None:
            progress(f"[{i}/{len(CONFIGS)}] fixes={label}: {workload.rollouts} rollouts x {workload.turns} turns")
        rows.append(run_one(label, fixes, workload))
    return rows
