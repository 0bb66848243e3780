"""watch says how a worker ended (the OOM killer, its own exit) and exits 12, and does not
take the payload's own first-load footprint for the worker's growth.

Ground truth: the kernel's wait status of the target (this test is its parent) and its memory
cgroup's own OOM kill count (cgroup v1, made here and removed after).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.utils import spawn_target

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]

LEAKHOUND = str(Path(sys.executable).with_name("leakhound"))
MEMORY_V1 = Path("/sys/fs/cgroup/memory")


def _watch(pid: int, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([LEAKHOUND, "watch", str(pid), "--json", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _report(stdout: str) -> dict:  # type: ignore[type-arg]
    return json.loads(stdout.strip().splitlines()[-1])


def _oom_kills(cgroup: Path) -> int:
    rows = dict(line.split() for line in (cgroup / "memory.oom_control").read_text().splitlines())
    return int(rows["oom_kill"])


@contextlib.contextmanager
def _memory_cgroup(limit_bytes: int) -> Iterator[Path]:
    cgroup = MEMORY_V1 / f"leakhound-test-{uuid.uuid4().hex[:8]}"
    cgroup.mkdir()
    try:
        (cgroup / "memory.limit_in_bytes").write_text(str(limit_bytes))
        yield cgroup
    finally:
        deadline = time.monotonic() + 10
        while True:
            try:
                cgroup.rmdir()
                break
            except OSError:  # its last task is still being torn down
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


def test_a_static_tiny_target_watched_reports_no_growth(tmp_path: Path) -> None:
    with spawn_target("static_table", tmp_path, env={"FIXTURE_ENTRIES": "200"}) as child:
        watch = _watch(child.pid, "-i", "1", "-d", "6")
        stdout, stderr = watch.communicate(timeout=120)
    assert watch.returncode == 0, stderr
    report = _report(stdout)
    (process,) = report["processes"]
    rss = process["rss"]
    # The worker allocates nothing that stays; the payload loaded by the first census does
    # (~5 MB), and is no growth of the worker's.
    assert rss["last_bytes"] - rss["first_bytes"] < 1 << 20, rss
    assert rss["verdict"] == "static", rss
    assert not [f for f in report["findings"] if f["kind"] == "growth"]


@pytest.mark.skipif(not (MEMORY_V1 / "memory.oom_control").exists(), reason="needs a cgroup v1 memory hierarchy")
def test_a_target_oom_killed_during_the_watch_is_said_so_and_watch_exits_12(tmp_path: Path) -> None:
    with _memory_cgroup(120 << 20) as cgroup:
        join = ["sh", "-c", f'echo $$ > {cgroup}/cgroup.procs && exec "$@"', "sh"]
        env = {"FIXTURE_RATE": "30000"}  # ~10 MB/s: the limit is reached within seconds
        with spawn_target("steady_leak", tmp_path, env=env, prefix=join) as child:
            kills_before = _oom_kills(cgroup)
            watch = _watch(child.pid, "-i", "0.5", "-d", "600")  # ends with its target, not its duration
            stdout, stderr = watch.communicate(timeout=120)
            assert child.proc.wait(timeout=10) == -signal.SIGKILL
            assert _oom_kills(cgroup) > kills_before
    assert watch.returncode == 12, stderr
    assert "Traceback" not in stderr
    (ended,) = _report(stdout)["ended"]
    assert (ended["pid"], ended["how"], ended["signal"]) == (child.pid, "oom_killed", signal.SIGKILL)
    assert "killed by the kernel's OOM killer" in ended["message"]
    assert "oom_killed" in stderr


def test_a_target_that_exits_on_its_own_during_the_watch_is_said_so(tmp_path: Path) -> None:
    with spawn_target("static_table", tmp_path, env={"FIXTURE_ENTRIES": "200"}) as child:
        watch = _watch(child.pid, "-i", "0.5", "-d", "600")  # ends with its target, not its duration
        time.sleep(3)
        os.kill(child.pid, signal.SIGTERM)  # its own handler: a clean shutdown, exit(0)
        stdout, stderr = watch.communicate(timeout=120)
        assert child.proc.wait(timeout=10) == 0
    assert watch.returncode == 12, stderr
    (ended,) = _report(stdout)["ended"]
    assert (ended["how"], ended["exit_status"]) == ("exited", 0)
    assert "exited on its own with status 0" in ended["message"]
