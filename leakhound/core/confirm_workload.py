"""``confirm --worker-cmd``: the A/B table on the user's own workload instead of the simulator.

For each fix configuration (no fixes, each fix alone, all), the user's command is started
afresh, the fixes are applied live to its worker process (as ``leakhound patch`` does:
ptrace, gdb or the agent), the workload runs, and the worker's peak RSS (the kernel's VmHWM)
and resting RSS (VmRSS ``rest`` seconds after the workload is done, so the trim cadence has
run) are read. The command's whole process group is killed after each run, always.

The command may name four paths, which leakhound fills in per run (a fresh directory each):

* ``{dir}``: a private directory for the run (logs, reports);
* ``{ready}``: the workload creates it once its worker is up with its code loaded (fixes are
  applied then; without ``{ready}`` they are applied as soon as the worker process is seen);
* ``{go}``: leakhound creates it once the fixes are applied: the workload starts its load;
* ``{done}``: the workload creates it when the load is over and its worker idles (without it,
  the run ends when the command exits: peak RSS is then the last VmHWM read, resting RSS the
  last VmRSS).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from leakhound.attach.process import status_bytes
from leakhound.core.confirm import CONFIGS
from leakhound.core.patch import patch_process
from leakhound.core.request import RequestOptions
from leakhound.errors import FleetError, LeakhoundError
from leakhound.model.names import Fix, Method

PLACEHOLDERS = ("{dir}", "{ready}", "{go}", "{done}")
WORKER_CONFIRM_SCHEMA = "leakhound.confirm-worker/1"


@dataclass(frozen=True)
class WorkerCommand:
    """The user's workload: ``command`` (shell-like words, placeholders above) and which of
    its processes is the worker to patch and measure (``match``, a regular expression on the
    command line; the command's own process when None)."""

    command: str
    match: str | None = None
    method: Method = Method.AUTO
    ready_timeout: float = 300.0
    run_timeout: float = 1800.0
    rest: float = 5.0
    trim_every: float = 2.0
    patch_timeout: float = 120.0


class WorkloadFailed(FleetError):
    """The user's workload exited or did not get ready in time (exit 15, as a simulated one)."""


def _argv(command: str, paths: dict[str, Path]) -> list[str]:
    words = shlex.split(command)
    out = []
    for word in words:
        for key, path in paths.items():
            word = word.replace("{" + key + "}", str(path))
        out.append(word)
    return out


def _tail(log: Path, chars: int = 2000) -> str:
    try:
        return log.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def _find_worker(leader: int, match: str | None) -> int | None:
    if match is None:
        return leader
    pattern = re.compile(match, re.IGNORECASE)  # as every --match: title or command line, any case
    try:
        family = [psutil.Process(leader), *psutil.Process(leader).children(recursive=True)]
    except psutil.NoSuchProcess:
        return None
    for proc in family:
        try:
            line, name = " ".join(proc.cmdline()), proc.name()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if pattern.search(line) or pattern.search(name):
            return proc.pid
    return None


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(grace)
            # The leader is gone; its group may not be: SIGKILL what is left.
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            break
        except subprocess.TimeoutExpired:
            continue
        break


def _wait(what: str, done: Callable[[], bool], process: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if process.poll() is not None:
            raise WorkloadFailed(f"the workload exited (status {process.returncode}) before {what}; "
                                 f"its log ends:\n{_tail(log)}")
        if time.monotonic() > deadline:
            raise WorkloadFailed(f"the workload did not {what} within {timeout:.0f}s; its log ends:\n{_tail(log)}")
        time.sleep(0.05)


def run_workload_once(label: str, fixes: list[str], worker: WorkerCommand) -> dict[str, Any]:
    """One configuration: start the command, apply ``fixes`` to its worker, run, measure."""
    with tempfile.TemporaryDirectory(prefix="leakhound-confirm-") as tmp:
        run_dir = Path(tmp)
        paths = {"dir": run_dir, "ready": run_dir / "ready", "go": run_dir / "go", "done": run_dir / "done"}
        log = run_dir / "workload.log"
        began = time.monotonic()
        with open(log, "wb") as out:
            process = subprocess.Popen(_argv(worker.command, paths), stdin=subprocess.DEVNULL, stdout=out,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        try:
            if "{ready}" in worker.command:
                _wait("create {ready}", paths["ready"].exists, process, log, worker.ready_timeout)
            found: list[int] = []

            def seen() -> bool:
                pid = _find_worker(process.pid, worker.match)
                if pid is not None:
                    found.append(pid)
                return pid is not None

            _wait(f"start a process matching {worker.match!r}", seen, process, log, worker.ready_timeout)
            pid = found[-1]
            statuses: dict[str, str] = {}
            if fixes:
                try:
                    outcomes = patch_process(
                        pid, fixes=fixes, request=RequestOptions(method=worker.method, timeout=worker.patch_timeout),
                        trim_every=worker.trim_every if Fix.TRIM in fixes else None)
                    statuses = {o.fix: o.status for o in outcomes}
                except LeakhoundError as exc:  # every fix refused: the run measures no fixes
                    statuses = dict.fromkeys(fixes, f"refused: {exc}")
            paths["go"].touch()
            peak = resting = 0
            if "{done}" in worker.command:
                _wait("create {done}", paths["done"].exists, process, log, worker.run_timeout)
                time.sleep(worker.rest)
                status = status_bytes(pid)
                peak = status.get("VmHWM") or 0
                resting = status.get("VmRSS") or 0
            else:
                deadline = time.monotonic() + worker.run_timeout
                while process.poll() is None and time.monotonic() < deadline:
                    status = status_bytes(pid)
                    peak = status.get("VmHWM") or peak
                    resting = status.get("VmRSS") or resting
                    time.sleep(0.1)
            if not peak:
                raise WorkloadFailed(f"the worker (pid {pid}) exited before its memory could be read; "
                                     f"its log ends:\n{_tail(log)}")
        finally:
            _kill_group(process)
    return {
        "fixes": label,
        "worker_pid": pid,
        "peak_rss_bytes": peak,
        "resting_rss_bytes": resting,
        "applied": sorted(f for f, s in statuses.items() if s in ("applied", "already-applied")),
        "refused": sorted(f for f, s in statuses.items() if s not in ("applied", "already-applied")),
        "statuses": statuses,
        "seconds": round(time.monotonic() - began, 1),
    }


def _fixes(spec: str) -> list[str]:
    if spec == "none":
        return []
    if spec == "all":
        return [name for name, _ in CONFIGS if name not in ("none", "all")]
    return [spec]


def run_workload_confirm(
    *, worker: WorkerCommand, configs: tuple[tuple[str, str], ...] = CONFIGS,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    rows = []
    for i, (label, spec) in enumerate(configs, 1):
        if progress is not None:
            progress(f"[{i}/{len(configs)}] fixes={label}: {worker.command}")
        rows.append(run_workload_once(label, _fixes(spec), worker))
    return rows
