"""Spawn a real verifiers==0.1.14 env worker for integration tests.

``ensure_verifiers_venv()`` builds (once) a venv holding verifiers==0.1.14 and
not leakhound, cached under ``~/.cache/leakhound/verifiers-0.1.14-venv``.
``spawn_verifiers_worker()`` runs ``fixtures/verifiers_env/driver.py`` in it,
waits for the ready file and always kills the whole process group on exit.
The worker writes its own ground truth to ``<report_dir>/<worker pid>.json``
(see fixtures/verifiers_env/leakhound_vf_truth.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

VERIFIERS_VERSION = "0.1.14"
# The interpreter the worker runs on: $LEAKHOUND_VERIFIERS_BASE_PYTHON, else this one (a
# worker on another CPython is asked for with ``python=``, e.g. from tests.pythons).
BASE_PYTHON = os.environ.get("LEAKHOUND_VERIFIERS_BASE_PYTHON") or sys.executable
REPO_ROOT = Path(__file__).resolve().parent.parent
DRIVER = REPO_ROOT / "fixtures" / "verifiers_env" / "driver.py"
WORKER_TITLE = "Verifiers::EnvWorker"
SERVER_TITLE = "Verifiers::EnvServer"
_MARKER = ".leakhound-venv-complete"


class VerifiersFixtureError(RuntimeError):
    """The verifiers venv could not be built or the driver did not get ready."""


def _minor(python: str) -> str:
    out = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                         capture_output=True, text=True, timeout=30)
    return out.stdout.strip()


def verifiers_venv_dir(python: str | None = None) -> Path:
    """One venv per base interpreter's minor version (the default one keeps its old name)."""
    override = os.environ.get("LEAKHOUND_VERIFIERS_VENV")
    if override and python is None:
        return Path(override)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    if python is None or python == BASE_PYTHON:
        return cache / "leakhound" / f"verifiers-{VERIFIERS_VERSION}-venv"
    return cache / "leakhound" / f"verifiers-{VERIFIERS_VERSION}-py{_minor(python)}-venv"


def _venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _is_complete(venv: Path) -> bool:
    marker = venv / _MARKER
    return (
        marker.is_file()
        and marker.read_text().strip() == VERIFIERS_VERSION
        and _venv_python(venv).exists()
    )


def ensure_verifiers_venv(*, python: str | None = None, timeout: float = 1800.0) -> Path:
    """Return the venv directory, building it first if needed.

    A flock on a sibling lock file serialises concurrent builders; the
    completion marker is written last, so an interrupted build is detected
    and redone from scratch.
    """
    venv = verifiers_venv_dir(python)
    if _is_complete(venv):
        return venv
    venv.parent.mkdir(parents=True, exist_ok=True)
    lock_path = venv.with_name(venv.name + ".lock")
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _is_complete(venv):
            return venv
        shutil.rmtree(venv, ignore_errors=True)
        python = python or BASE_PYTHON
        env = _clean_env()
        steps = [
            [python, "-m", "venv", str(venv)],
            [
                str(_venv_python(venv)),
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--quiet",
                f"verifiers=={VERIFIERS_VERSION}",
            ],
            [
                str(_venv_python(venv)),
                "-c",
                "import importlib.metadata as m, verifiers.v1; "
                f"assert m.version('verifiers') == {VERIFIERS_VERSION!r}",
            ],
        ]
        deadline = time.monotonic() + timeout
        for command in steps:
            result = subprocess.run(
                command,
                env=env,
                capture_output=True,
                text=True,
                timeout=max(1.0, deadline - time.monotonic()),
                cwd="/",
            )
            if result.returncode != 0:
                raise VerifiersFixtureError(
                    f"building the verifiers venv failed: {' '.join(command)}\n"
                    f"{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
                )
        (venv / _MARKER).write_text(VERIFIERS_VERSION + "\n")
    return venv


def _clean_env() -> dict[str, str]:
    env = dict(os.environ)
    # Keep the project's own import path and venv out of the target.
    for key in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP"):
        env.pop(key, None)
    return env


@dataclass
class VerifiersWorker:
    """A running fixture: driver (fake model + client), EnvServer, EnvWorker."""

    driver_pid: int
    env_server_pid: int
    worker_pids: list[int]
    report_dir: Path
    ready: dict[str, Any]
    log_path: Path
    process: subprocess.Popen[bytes] = field(repr=False)
    command_dir: Path | None = None
    _batches: int = 0

    @property
    def worker_pid(self) -> int:
        return self.worker_pids[0]

    def report_path(self, pid: int | None = None) -> Path:
        return self.report_dir / f"{pid or self.worker_pid}.json"

    def read_report(self, pid: int | None = None) -> dict[str, Any]:
        """The worker's latest ground-truth report (rewritten after each change)."""
        return dict(json.loads(self.report_path(pid).read_text()))

    def wait_for_report(self, *, newer_than: int, timeout: float = 10.0) -> dict[str, Any]:
        """Wait for a report with seq > newer_than (heartbeats come every ~2 s)."""
        deadline = time.monotonic() + timeout
        while True:
            report = self.read_report()
            if int(report.get("seq", 0)) > newer_than:
                return report
            if time.monotonic() > deadline:
                raise VerifiersFixtureError(f"no report newer than seq {newer_than}")
            time.sleep(0.1)

    def run_batch(
        self,
        *,
        rollouts: int,
        turns: int | None = None,
        park: int = 0,
        task: dict[str, Any] | None = None,
        timeout: float = 120.0,
    ) -> dict[str, Any]:
        """Have the driver run more rollouts (groups, in grouped mode) and wait until the
        worker's own report shows them finished/parked. Returns the driver's result:
        errors, example_ids, parked_example_ids, report_seq."""
        if self.command_dir is None:
            raise VerifiersFixtureError("this worker was spawned without a command dir")
        self._batches += 1
        name = f"batch-{self._batches:03d}"
        command = {"rollouts": rollouts, "park": park, "task": task or {}}
        if turns is not None:
            command["turns"] = turns
        tmp = self.command_dir / f".{name}.tmp"
        tmp.write_text(json.dumps(command))
        os.replace(tmp, self.command_dir / f"{name}.json")
        done = self.command_dir / f"{name}.done.json"
        deadline = time.monotonic() + timeout
        while not done.exists():
            if self.process.poll() is not None:
                raise VerifiersFixtureError(f"driver exited during {name}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise VerifiersFixtureError(f"{name} did not finish in {timeout}s:\n{self.log_tail()}")
            time.sleep(0.05)
        result = dict(json.loads(done.read_text()))
        if "error" in result:
            raise VerifiersFixtureError(f"{name} failed in the driver:\n{result['error']}")
        return result

    def registry_freed(self, *, timeout: float = 600.0) -> dict[str, Any]:
        """What freeing every runtime's ``trajectories`` gives back, as the worker measures
        it in a forked child that clears them (leakhound_vf_truth.py): {"registry_freed_bytes"
        (the heap's bytes in use, before less after), "registry_sizeof_bytes" (sys.getsizeof
        over what the registries reach, each object once), "entries", "seconds"}. Ask while
        the worker is idle: then nothing else holds a finished rollout."""
        answer = self.report_dir / f"{self.worker_pid}.registry-freed.json"
        answer.unlink(missing_ok=True)
        (self.report_dir / f"{self.worker_pid}.free-registry").touch()
        deadline = time.monotonic() + timeout
        while not answer.exists():
            if time.monotonic() > deadline:
                raise VerifiersFixtureError(f"the worker did not measure its registry in {timeout}s")
            time.sleep(0.2)
        result = dict(json.loads(answer.read_text()))
        if "error" in result:
            raise VerifiersFixtureError(f"the worker could not measure its registry: {result['error']}")
        return result

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def proc_title(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


@contextlib.contextmanager
def spawn_verifiers_worker(
    tmp_path: Path,
    *,
    rollouts: int,
    turns: int,
    grouped: bool = False,
    group_size: int = 2,
    park: int = 0,
    screenshot_kb: int = 24,
    image_tokens: int = 256,
    completion_repeat: int = 3,
    ready_timeout: float = 120.0,
    extra_env: dict[str, str] | None = None,
    python: str | None = None,
) -> Iterator[VerifiersWorker]:
    """Start the driver in the verifiers venv and yield once rollouts are done.

    ``park`` extra rollouts stop after their turns with every intercept
    delivered and one more request pending, so the worker holds live
    intercept bodies. ``VerifiersWorker.run_batch`` runs more rollouts later
    (e.g. after a live patch). ``image_tokens`` and ``completion_repeat`` shape the
    fake model's answers (fake_model_server.py). The process group is SIGKILLed on
    exit, always.
    """
    venv = ensure_verifiers_venv(python=python)
    run_dir = Path(tmp_path) / "verifiers-worker"
    run_dir.mkdir(parents=True, exist_ok=True)
    ready_file = run_dir / "ready.json"
    command_dir = run_dir / "commands"
    command_dir.mkdir(exist_ok=True)
    report_dir = run_dir / "reports"
    log_path = run_dir / "driver.log"
    command = [
        str(_venv_python(venv)),
        str(DRIVER),
        "--ready-file",
        str(ready_file),
        "--report-dir",
        str(report_dir),
        "--rollouts",
        str(rollouts),
        "--turns",
        str(turns),
        "--park",
        str(park),
        "--screenshot-kb",
        str(screenshot_kb),
        "--image-tokens",
        str(image_tokens),
        "--completion-repeat",
        str(completion_repeat),
        "--timeout",
        str(ready_timeout),
        "--command-dir",
        str(command_dir),
    ]
    if grouped:
        command += ["--grouped", "--group-size", str(group_size)]
    env = _clean_env()
    env.update(extra_env or {})
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=str(run_dir),
            start_new_session=True,
        )
    try:
        ready = _wait_ready(process, ready_file, log_path, ready_timeout + 30.0)
        yield VerifiersWorker(
            driver_pid=process.pid,
            env_server_pid=int(ready["env_server_pid"]),
            worker_pids=[int(pid) for pid in ready["worker_pids"]],
            report_dir=report_dir,
            ready=ready,
            log_path=log_path,
            process=process,
            command_dir=command_dir,
        )
    finally:
        _kill_group(process)


def _wait_ready(
    process: subprocess.Popen[bytes], ready_file: Path, log_path: Path, timeout: float
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready_file.exists():
            ready = dict(json.loads(ready_file.read_text()))
            if "error" in ready:
                raise VerifiersFixtureError(f"driver failed:\n{ready['error']}")
            if not ready.get("worker_pids"):
                raise VerifiersFixtureError(f"driver found no worker process: {ready}")
            return ready
        if process.poll() is not None:
            break
        time.sleep(0.1)
    tail = log_path.read_text(errors="replace")[-4000:] if log_path.exists() else ""
    state = "exited" if process.poll() is not None else "timed out"
    raise VerifiersFixtureError(f"verifiers driver {state} before ready:\n{tail}")


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    # The driver leads its own session; the spawned EnvServer/EnvWorker stay in it.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)


if __name__ == "__main__":  # python tests/verifiers_target.py: build the venv
    print(ensure_verifiers_venv(), file=sys.stderr)


# The worker's ground-truth reports with the rollout counts only (what the driver waits on):
# measuring the registries JSON-encodes them on the worker's loop several times a second under
# continuous rollouts (json.dumps holding the GIL up to hundreds of ms), which benchmarks
# would time as the worker's own work.
COUNTS_ONLY_ENV = {"LEAKHOUND_FIXTURE_TRUTH_WATCH": "counts"}


@contextlib.contextmanager
def continuous_rollouts(worker: VerifiersWorker, *, rollouts: int = 6, turns: int = 4,
                        timeout: float = 600.0) -> Iterator[threading.Thread]:
    """Batches of rollouts, one after another in a thread, until the block ends (the busy
    worker of benchmarks/busy_*.py); a batch's error is printed and ends them."""
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            try:
                worker.run_batch(rollouts=rollouts, turns=turns, timeout=timeout)
            except Exception as exc:  # noqa: BLE001, PERF203 - said, and the benchmark goes on
                print(f"# batch error: {exc}", file=sys.stderr)
                return

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        stop.set()
        thread.join(timeout=timeout + 100)
