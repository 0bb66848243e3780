"""export says when a worker it serves ended, and how (the OOM killer, its own exit), and goes
on serving the others. Ground truth: the kernel's wait status (this test is the parent) and the
memory cgroup's own OOM kill count (cgroup v1, made here and removed after)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.integration.test_export import _free_port, _samples
from tests.integration.test_watch_ended import MEMORY_V1, _memory_cgroup, _oom_kills
from tests.utils import spawn_target

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]
ENDED = "leakhound_target_ended_timestamp_seconds"


def _scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            return _samples(resp.read().decode())
    except OSError:
        return {}


@pytest.mark.skipif(not (MEMORY_V1 / "memory.oom_control").exists(), reason="needs a cgroup v1 memory hierarchy")
def test_an_oom_killed_and_an_exited_worker_are_said_and_the_other_is_still_served(tmp_path: Path) -> None:
    port = _free_port()
    for sub in ("static", "quits"):
        (tmp_path / sub).mkdir()
    with contextlib.ExitStack() as stack:
        cgroup = stack.enter_context(_memory_cgroup(120 << 20))
        join = ["sh", "-c", f'echo $$ > {cgroup}/cgroup.procs && exec "$@"', "sh"]
        static = stack.enter_context(spawn_target("static_table", tmp_path / "static", env={"FIXTURE_ENTRIES": "200"}))
        quitter = stack.enter_context(spawn_target("static_table", tmp_path / "quits", env={"FIXTURE_ENTRIES": "200"}))
        leak = stack.enter_context(spawn_target("steady_leak", tmp_path, env={"FIXTURE_RATE": "30000"}, prefix=join))
        kills_before = _oom_kills(cgroup)
        exporter = subprocess.Popen(
            [sys.executable, "-m", "leakhound", "export", str(static.pid), str(quitter.pid), str(leak.pid),
             "--listen", f"127.0.0.1:{port}", "--interval", "1"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )
        try:
            time.sleep(2)
            quitter.proc.send_signal(signal.SIGTERM)  # its own handler: a clean exit(0)
            deadline = time.monotonic() + 90
            metrics = _scrape(port)
            while len(metrics.get(ENDED, [])) < 2:
                assert exporter.poll() is None, exporter.communicate()[1]
                assert time.monotonic() < deadline, metrics.get(ENDED)
                time.sleep(0.5)
                metrics = _scrape(port)
            assert leak.proc.wait(timeout=10) == -signal.SIGKILL
            assert quitter.proc.wait(timeout=10) == 0
            assert _oom_kills(cgroup) > kills_before
            time.sleep(2.5)  # more rounds: the live worker is still censused
            metrics = _scrape(port)
        finally:
            exporter.terminate()
            _out, err = exporter.communicate(timeout=30)
    ended = {labels["pid"]: labels["how"] for labels, _ in metrics[ENDED]}
    assert ended == {str(leak.pid): "oom_killed", str(quitter.pid): "exited"}
    assert [labels["pid"] for labels, value in metrics["leakhound_up"] if value == 1.0] == [str(static.pid)]
    assert [labels["pid"] for labels, _ in metrics["leakhound_live_heap_bytes"]] == [str(static.pid)]
    assert f"process {leak.pid} (steady_leak.py) ended, oom_killed: " in err
    assert "killed by the kernel's OOM killer" in err
    assert f"process {quitter.pid} (static_table.py) ended, exited: " in err
    assert "exited on its own with status 0" in err
