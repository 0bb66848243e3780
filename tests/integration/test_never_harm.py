"""Never harm the target: soak, busy C threads, and the agent's fixed, private protocol."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from leakhound.core.capture import take_snapshot
from leakhound.core.request import RequestOptions
from leakhound.model.names import Method
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
