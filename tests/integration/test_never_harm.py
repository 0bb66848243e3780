"""Never harm the target: soak, busy C threads, the agent's fixed, private protocol, and the CLI
killed during the walk and the native scan."""

from __future__ import annotations

import glob
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from leakhound.core.capture import take_snapshot
from leakhound.core.request import RequestOptions
from leakhound.model.names import Method
from tests.native_target import lxml_python
from tests.pythons import installed_pythons
from tests.utils import agent_exchange, spawn_target, wait_for_agent_socket, within

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]


def _agent_target_socket(pid: int) -> str:
    return wait_for_agent_socket(pid)


def _ask(path: str, payload: bytes, timeout: float = 10.0) -> dict:  # type: ignore[type-arg]
    data = agent_exchange(path, payload, timeout, close_write=True)
    lines = [json.loads(line) for line in data.splitlines() if line.strip()]
    return lines[-1]["result"]


def _ask_or_none(path: str, payload: bytes) -> dict | None:  # type: ignore[type-arg]
    """The agent's answer, or None when it closed the connection without one."""
    try:
        return _ask(path, payload)
    except (IndexError, ConnectionError):
        return None


def _status(pid: int) -> dict[str, int]:
    out = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "Threads"):
                out[key] = int(value.split()[0])
    return out


PY312 = installed_pythons().get("3.12")


@pytest.mark.parametrize(
    ("method", "python"),
    [("agent", None), ("ptrace", None),
     pytest.param("ptrace", PY312, id="ptrace-3.12",
                  marks=pytest.mark.skipif(PY312 is None, reason="no CPython 3.12 here"))],
)
def test_soak_200_inspections_keep_the_worker_alive_and_flat(tmp_path: Path, method: str, python: str | None) -> None:
    # 3.12 is production's Python (and where the census once corrupted asyncio's free list).
    env = {"LEAKHOUND_AGENT": "1" if method == "agent" else ""}
    with spawn_target("busy_worker", tmp_path, env=env, python=python) as child:
        if method == "agent":
            _agent_target_socket(child.pid)
        # The target's own report allocates too (it sizes its cache): read it outside the window.
        served_before = child.report()["truth"]["requests"]
        for _ in range(10):  # warm-up: the first census grows the allocators once
            take_snapshot(child.pid, request=RequestOptions(method=Method(method), timeout=60))
        start = _status(child.pid)
        for _ in range(190):
            take_snapshot(child.pid, request=RequestOptions(method=Method(method), timeout=60))
        end = _status(child.pid)
        after = child.report()
        assert child.proc.poll() is None
    grown_kb = end["VmRSS"] - start["VmRSS"]
    assert grown_kb <= 1024, f"RSS grew by {grown_kb} KiB over 190 inspections"
    assert end["Threads"] == start["Threads"]
    assert after["truth"]["requests"] > served_before + 100  # it kept serving meanwhile


def test_busy_c_threads_do_not_stop_an_inspection(tmp_path: Path) -> None:
    with spawn_target("busy_worker", tmp_path, env={"FIXTURE_C_THREADS": "6"}) as child:
        snap = take_snapshot(child.pid, request=RequestOptions(timeout=60))
        truth = child.report()["truth"]
    cache = next(o for o in snap.owners if o.path == "__main__.CACHE")
    assert within(cache.retained_bytes, truth["cache_bytes"])
    assert snap.process.num_threads >= 7


def test_agent_socket_is_private_and_answers_only_fixed_requests(tmp_path: Path) -> None:
    with spawn_target("growing_cache", tmp_path, env={"LEAKHOUND_AGENT": "1"}) as child:
        path = _agent_target_socket(child.pid)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
        hostile = [
            b"not json at all\n",
            b"[1, 2, 3]\n",
            b'{"op": "exec", "code": "import os; os._exit(3)"}\n',
            b'{"op": "snapshot", "code": "__import__(\'os\')._exit(3)", "top_types": "many"}\n',
            b'{"op": "patch", "action": "apply", "fixes": ["../../evil"]}\n',
            b'{"op": "patch", "action": "eval", "fixes": ["trim"]}\n',
            b"{" + b'"x": "' + b"A" * 200_000 + b'"}\n',  # oversized
            b"",  # nothing at all
        ]
        answers = [_ask_or_none(path, payload) for payload in hostile]
        ping = _ask(path, b'{"op": "ping"}\n')
        report = child.report()
        assert child.proc.poll() is None
    by_payload = dict(zip(hostile, answers, strict=True))
    assert by_payload[hostile[0]]["kind"] == "BadRequest"
    assert by_payload[hostile[1]]["kind"] == "BadRequest"
    assert by_payload[hostile[2]]["kind"] == "BadRequest"  # unknown op: nothing executed
    assert by_payload[hostile[3]]["ok"] is True  # the code field is ignored; bad ints defaulted
    assert by_payload[hostile[4]]["ok"] is False and "fixes must be" in by_payload[hostile[4]]["error"]
    assert by_payload[hostile[5]]["ok"] is False and "unknown patch action" in by_payload[hostile[5]]["error"]
    assert by_payload[hostile[6]] is None or by_payload[hostile[6]]["kind"] == "BadRequest"
    assert ping["ok"] is True
    # The agent's own modules only: nothing else loaded, no patch state.
    assert "leakhound.payload.agent_server" in report["leakhound_modules"]
    assert all(m == "leakhound" or m.startswith("leakhound.payload") for m in report["leakhound_modules"])


def test_killing_leakhound_during_the_walk_and_the_native_scan_leaves_the_target_whole(tmp_path: Path) -> None:
    """400 lxml pages kept (220 MB of libxml2's trees, sized by the struct scan after the walk,
    with the GIL released, ~2 s of walk and scan in all): the CLI killed (SIGKILL) at one
    fraction after another of a whole inspection's time, through the walk and the scan. Each
    time the target lives, its loop keeps ticking, the payload's thread ends by itself (its
    work bounded: ~1.6 s after the earliest kill), no private directory is left, and the
    next inspection is right (1.0000 of what freeing the pages returns)."""
    leakhound = str(Path(sys.executable).with_name("leakhound"))
    with spawn_target("native_buffers", tmp_path, python=lxml_python(f"{sys.version_info[0]}.{sys.version_info[1]}"),
                      env={"SHAPE": "lxml", "FIXTURE_ITEMS": "400"}, timeout=300) as child:
        truth = child.report(refresh=False)["truth"]["bytes"]
        tasks = set(os.listdir(f"/proc/{child.pid}/task"))

        def inspect() -> dict:  # type: ignore[type-arg]
            done = subprocess.run([leakhound, "inspect", str(child.pid), "--json"], capture_output=True, text=True,
                                  timeout=120)
            assert done.returncode == 0, done.stderr[-2000:]
            return json.loads(done.stdout)  # type: ignore[no-any-return]

        def left_behind() -> tuple[list[str], list[str]]:
            return ([t for t in os.listdir(f"/proc/{child.pid}/task") if t not in tasks],
                    glob.glob(f"/tmp/leakhound-{child.pid}-*"))

        started = time.monotonic()
        first = inspect()
        whole = time.monotonic() - started
        assert first["owners"][0]["path"] == "__main__.DOCS" and within(first["owners"][0]["retained_bytes"], truth)
        for fraction in (0.15, 0.3, 0.45, 0.6, 0.75, 0.9):
            cli = subprocess.Popen([leakhound, "inspect", str(child.pid), "--json"], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
            time.sleep(whole * fraction)
            cli.send_signal(signal.SIGKILL)
            cli.wait(timeout=10)
            deadline = time.monotonic() + 30
            while any(left_behind()):
                assert time.monotonic() < deadline, (fraction, left_behind())
                time.sleep(0.05)
            report = child.report()
            assert child.proc.poll() is None
            assert report["max_lag_ms"] < 200, report["max_lag_ms"]
        last = inspect()
    top = last["owners"][0]
    assert top["path"] == "__main__.DOCS" and within(top["retained_bytes"], truth, 0.01), (top, truth)
