"""Parent-side launcher for simulated env workers (standard library only; its error is a
``LeakhoundError`` when the rest of leakhound is there).

``start_fleet`` spawns ``python -m leakhound.simulate.worker`` subprocesses, each in its
own process group, with a ``PYTHONPATH`` that makes ``leakhound.simulate`` importable
without the rest of leakhound (a namespace-package shim holding only ``simulate``), so
the target python needs nothing installed.

No worker outlives the parent: each dies with it (``worker.die_with_parent``: the kernel's
parent-death signal, so even a SIGKILLed parent leaves none), and while a ``Fleet`` is
entered, SIGTERM and SIGHUP end the parent through the ``with`` block, which kills every
worker's process group (SIGKILL after ``stop``'s grace period).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any

from . import fixes as fix_names
from .report import read_report
from .worker import PARENT_ENV
from .workload import Workload

try:
    from leakhound.errors import FleetError
except ImportError:  # leakhound.simulate alone (through the import shim): no CLI to map it

    class FleetError(RuntimeError):  # type: ignore[no-redef]
        HELP_TEXT = ""

        def __init__(self, message: str, *, hint: str | None = None) -> None:
            super().__init__(message)
            self.hint = hint or ""

SIMULATE_DIR = Path(__file__).resolve().parent
__all__ = ["Fleet", "FleetError", "make_import_shim", "start_fleet"]

#: Signals whose default action ends the parent without running its ``finally`` blocks.
_ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Fleet:
    """Running simulated workers; use as a context manager so they are always killed."""

    def __init__(
        self,
        processes: Sequence[subprocess.Popen[bytes]],
        report_dir: Path,
        ready_file: Path | None,
        shim_dir: Path,
        logs: Sequence[Path],
    ) -> None:
        self.processes = list(processes)
        self.report_dir = report_dir
        self.ready_file = ready_file
        self.logs = list(logs)
        self._shim_dir = shim_dir
        self._handlers: dict[int, Any] = {}

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self.processes]

    def report(self, pid: int) -> dict[str, Any] | None:
        return read_report(self.report_dir / f"{pid}.json")

    def reports(self) -> list[dict[str, Any]]:
        """The latest report of every worker that has written one, in spawn order."""
        found = (self.report(pid) for pid in self.pids)
        return [report for report in found if report is not None]

    def wait_ready(self, timeout: float = 120.0) -> list[dict[str, Any]]:
        """Block until every worker has completed its first rollout; write the ready file."""
        reports = self.wait_for(
            lambda report: int(report.get("rollouts_completed", 0)) >= 1,
            timeout=timeout,
            what="complete a first rollout",
        )
        if self.ready_file is not None:
            payload = {"pids": self.pids, "report_dir": str(self.report_dir)}
            tmp = self.ready_file.with_name(self.ready_file.name + ".tmp")
            try:
                tmp.write_text(json.dumps(payload), encoding="utf-8")
                os.replace(tmp, self.ready_file)
            except OSError as exc:
                raise FleetError(
                    f"cannot write the ready file {self.ready_file}: {exc.strerror or exc}",
                    hint="Pass --ready-file a path in a directory you can write.",
                ) from None
        return reports

    def wait_idle(self, timeout: float = 300.0, stats_ticks: int = 0) -> list[dict[str, Any]]:
        """Block until every worker is idle and has run ``stats_ticks`` stats ticks since."""
        return self.wait_for(
            lambda report: report.get("phase") in ("idle", "stopped")
            and int(report.get("stats_ticks_since_idle", 0)) >= stats_ticks,
            timeout=timeout,
            what="go idle",
        )

    def wait_for(
        self, predicate: Any, *, timeout: float, what: str, poll: float = 0.05
    ) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while True:
            reports = {pid: self.report(pid) for pid in self.pids}
            if all(r is not None and predicate(r) for r in reports.values()):
                return [r for r in reports.values() if r is not None]
            for process, log in zip(self.processes, self.logs, strict=True):
                code = process.poll()
                report = reports.get(process.pid)
                if code is not None and not (report is not None and predicate(report)):
                    raise FleetError(
                        f"worker {process.pid} exited with code {code} before it could "
                        f"{what}:\n{_tail(log)}"
                    )
            if time.monotonic() >= deadline:
                raise FleetError(f"workers did not {what} within {timeout:.0f}s")
            time.sleep(poll)

    def stop(self, timeout: float = 10.0) -> list[int | None]:
        """SIGTERM every worker, SIGKILL what is left after ``timeout``; always reaps."""
        for process in self.processes:
            _signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for process in self.processes:
            _reap(process, max(0.0, deadline - time.monotonic()))
        self.kill()
        return [process.returncode for process in self.processes]

    def kill(self) -> None:
        """SIGKILL every worker's process group and reap it."""
        for process in self.processes:
            if process.poll() is None:
                _signal_group(process, signal.SIGKILL)
        for process in self.processes:
            _reap(process, 10.0)
        shutil.rmtree(self._shim_dir, ignore_errors=True)

    def __enter__(self) -> Fleet:
        # SIGTERM/SIGHUP would end the parent at once, leaving the workers to the kernel's
        # parent-death signal and the report directory behind: make them an exception
        # (exit status 128 + signal) so that the with blocks stop the workers and clean up.
        # Only where nobody handles them already, and only the main thread can.
        if threading.current_thread() is threading.main_thread():
            for signum in _ENDING_SIGNALS:
                if signal.getsignal(signum) is signal.SIG_DFL:
                    self._handlers[signum] = signal.signal(signum, _exit_on_signal)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.kill()
        finally:
            for signum, previous in self._handlers.items():
                if signal.getsignal(signum) is _exit_on_signal:
                    signal.signal(signum, previous)
            self._handlers.clear()


def _exit_on_signal(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def start_fleet(
    *,
    workers: int,
    fixes: str | Sequence[str],
    report_dir: str | os.PathLike[str],
    workload: Workload | None = None,
    ready_file: str | os.PathLike[str] | None = None,
    python: str = sys.executable,
    extra_args: Sequence[str] = (),
    extra_env: dict[str, str] | None = None,
    **fields: Any,
) -> Fleet:
    """Spawn ``workers`` simulated env workers running ``workload`` (``Workload()``'s defaults),
    with any of its ``fields`` given by name (``turns=6``); ``rollouts=None`` churns forever.
    Worker ``i`` runs with seed ``workload.seed + i``."""
    workload = replace(workload or Workload(), **fields)
    directory = Path(report_dir).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    fix_spec = fixes if isinstance(fixes, str) else fix_names.format_fixes(fixes)
    fix_names.parse_fixes(fix_spec)  # fail in the parent on a typo
    shim_dir = make_import_shim()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        part for part in (str(shim_dir), env.get("PYTHONPATH", "")) if part
    )
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra_env or {})
    env[PARENT_ENV] = str(os.getpid())  # the workers die with this process
    processes: list[subprocess.Popen[bytes]] = []
    logs: list[Path] = []
    try:
        for index in range(workers):
            argv = [
                python,
                "-m",
                "leakhound.simulate.worker",
                *replace(workload, seed=workload.seed + index).worker_args(),
                "--worker-id", str(index),
                "--fix", fix_spec,
                "--report-dir", str(directory),
                *extra_args,
            ]  # fmt: skip
            log = directory / f"worker-{index}.log"
            with open(log, "wb") as log_handle:
                processes.append(
                    subprocess.Popen(
                        argv,
                        cwd=directory,  # keep a source checkout in the cwd off sys.path
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=log_handle,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
            logs.append(log)
    except BaseException:
        Fleet(processes, directory, None, shim_dir, logs).kill()
        raise
    ready = Path(ready_file).resolve() if ready_file is not None else None
    return Fleet(processes, directory, ready, shim_dir, logs)


def make_import_shim() -> Path:
    """A directory where ``leakhound`` is a namespace package holding only ``simulate``.

    Importing ``leakhound.simulate`` through it never runs ``leakhound/__init__.py``, so the
    worker starts in a python without leakhound's dependencies. If that python has
    leakhound installed, the installed regular package takes precedence, which is fine.
    """
    shim = Path(tempfile.mkdtemp(prefix="leakhound-sim-path-"))
    (shim / "leakhound").mkdir()
    os.symlink(SIMULATE_DIR, shim / "leakhound" / "simulate", target_is_directory=True)
    # The fixes are leakhound's live patches (standard library only too).
    os.symlink(SIMULATE_DIR.parent / "payload", shim / "leakhound" / "payload", target_is_directory=True)
    # The fix names, alone: ``leakhound.model`` as a namespace holding only names.py (its
    # __init__ and the rest of the model need leakhound's top level).
    (shim / "leakhound" / "model").mkdir()
    os.symlink(SIMULATE_DIR.parent / "model" / "names.py", shim / "leakhound" / "model" / "names.py")
    return shim


def _signal_group(process: subprocess.Popen[bytes], signum: signal.Signals) -> None:
    try:
        os.killpg(process.pid, signum)
    except (ProcessLookupError, PermissionError):
        try:
            process.send_signal(signum)
        except ProcessLookupError:
            pass


def _reap(process: subprocess.Popen[bytes], timeout: float) -> None:
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pass


def _tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
