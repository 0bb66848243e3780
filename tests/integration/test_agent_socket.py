"""The agent's socket: found where the worker put it (its TMPDIR, its own mount and pid
namespaces), stale sockets removed and fallen back from, and the agent started only in the
process it is meant for (docs/inspect.md, "agent")."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from leakhound.attach.agent import find_socket
from leakhound.core.capture import take_snapshot
from leakhound.core.request import RequestOptions
from leakhound.model.names import Method
from leakhound.payload.agent_server import is_leakhound_cli, wanted
from tests.namespaces import shared_dir, spawn_in_namespaces
from tests.utils import FIXTURES, spawn_target, within

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]

LEAKHOUND = [sys.executable, "-m", "leakhound"]
UID = os.getuid()


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A worker TMPDIR short enough for its socket's path to fit in sun_path (108 bytes);
    pytest's own tmp_path can be longer (see the deep-TMPDIR test)."""
    path = Path(tempfile.mkdtemp(prefix="lh-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _agent_socket(tmpdir: Path | str, nspid: int) -> Path:
    return Path(tmpdir) / f"leakhound-agent-{UID}" / f"agent-{nspid}.sock"


def _wait_for(path: Path, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def _leave_stale_socket(path: Path) -> None:
    """A socket file nobody listens on, as a worker killed before its atexit leaves it."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.close()


def test_socket_under_the_workers_tmpdir_is_found(tmp_path: Path, short_tmp: Path) -> None:
    worker_tmp = short_tmp / "worker-tmp"
    worker_tmp.mkdir()
    env = {"LEAKHOUND_AGENT": "1", "TMPDIR": str(worker_tmp)}
    with spawn_target("growing_cache", tmp_path, env=env) as child:
        _wait_for(_agent_socket(worker_tmp, child.pid))
        snap = take_snapshot(child.pid, request=RequestOptions(method=Method.AUTO, timeout=60))
        truth = child.report()["truth"]
    assert snap.method == "agent"  # not ptrace, silently
    assert snap.owners[0].path == "__main__.CACHE"
    assert within(snap.owners[0].retained_bytes, truth["cache_bytes"])


@pytest.mark.parametrize("as_init", [False, True], ids=["child", "pid1"])
def test_agent_in_its_own_mount_and_pid_namespaces(as_init: bool) -> None:
    """Its socket is in its TMPDIR on its private /tmp, named after the pid it sees."""
    env = {"LEAKHOUND_AGENT": "1", "TMPDIR": "/tmp/worker-tmp"}
    setup = "mount -t tmpfs tmpfs /tmp && mkdir /tmp/worker-tmp"
    with shared_dir() as ready_dir, spawn_in_namespaces(
        "growing_cache", ready_dir, env=env, setup=setup, as_init=as_init
    ) as child:
        nspid = child.report()["pid"]
        assert nspid != child.pid
        _wait_for(child.inside(str(_agent_socket("/tmp/worker-tmp", nspid))))
        assert find_socket(child.pid) == str(child.inside(str(_agent_socket("/tmp/worker-tmp", nspid))))
        snap = take_snapshot(child.pid, request=RequestOptions(method=Method.AUTO, timeout=60))
        truth = child.report()["truth"]
    assert snap.method == "agent"
    assert snap.owners[0].path == "__main__.CACHE"
    assert within(snap.owners[0].retained_bytes, truth["cache_bytes"])


def test_stale_socket_under_a_reused_pid_is_removed_and_fallen_back_from(tmp_path: Path, short_tmp: Path) -> None:
    """A socket named after the target's pid, left by an earlier worker with that pid: the
    target runs no agent. Explicit agent: exit 7 saying so; auto: the next method."""
    worker_tmp = short_tmp / "worker-tmp"
    worker_tmp.mkdir()
    env = {"LEAKHOUND_AGENT": "", "TMPDIR": str(worker_tmp)}
    with spawn_target("growing_cache", tmp_path, env=env) as child:
        stale = _agent_socket(worker_tmp, child.pid)
        _leave_stale_socket(stale)
        explicit = subprocess.run([*LEAKHOUND, "inspect", str(child.pid), "--method", "agent"],
                                  capture_output=True, text=True, timeout=120)
        assert not stale.exists()
        _leave_stale_socket(stale)
        auto = subprocess.run([*LEAKHOUND, "inspect", str(child.pid), "--json"],
                              capture_output=True, text=True, timeout=120)
        assert not stale.exists()
        truth = child.report()["truth"]
    assert explicit.returncode == 7, explicit.stderr
    assert "no leakhound agent listening" in explicit.stderr and "stale socket" in explicit.stderr
    assert auto.returncode == 0, auto.stderr
    doc = json.loads(auto.stdout)
    assert doc["method"] == "ptrace"
    assert doc["owners"][0]["path"] == "__main__.CACHE"
    assert doc["owners"][0]["items"] == truth["cache_items"]


WORKER = FIXTURES / "agent" / "worker.py"  # named worker.py: the argv test matches that name


def _run_worker(tmp_path: Path, role: str, agent: str, tmpdir: Path | None = None) -> dict[str, object]:
    script = WORKER
    ready = tmp_path / f"{role}.json"
    env = {**os.environ, "LEAKHOUND_AGENT": agent, "TMPDIR": str(tmpdir or tmp_path)}
    subprocess.run([sys.executable, str(script), str(ready), role], env=env, check=True, timeout=60)
    return dict(json.loads(ready.read_text()))


def test_agent_1_starts_in_the_first_process_only(tmp_path: Path) -> None:
    launcher = _run_worker(tmp_path, "launcher", "1")
    worker = json.loads((tmp_path / "launcher.json.worker").read_text())
    assert launcher["agent"] is True
    assert worker["agent"] is False
    assert worker["env"] == f"started:{launcher['pid']}"


def test_agent_argv_starts_where_the_command_line_matches(tmp_path: Path) -> None:
    assert _run_worker(tmp_path, "alpha", r"argv:worker\.py .* beta$")["agent"] is False
    assert _run_worker(tmp_path, "beta", r"argv:worker\.py .* beta$")["agent"] is True


def test_forked_child_leaves_the_parents_socket(tmp_path: Path) -> None:
    doc = _run_worker(tmp_path, "forks", "1")
    assert doc["agent"] is True
    assert doc["socket_exists"] is True


def test_socket_of_a_worker_killed_by_sigterm_is_removed_by_the_next_agent(tmp_path: Path, short_tmp: Path) -> None:
    script = WORKER
    env = {**os.environ, "LEAKHOUND_AGENT": "1", "TMPDIR": str(short_tmp)}
    first = subprocess.Popen([sys.executable, str(script), str(tmp_path / "first.json"), "sleeps"], env=env)
    try:
        _wait_for(tmp_path / "first.json")
        left = _agent_socket(short_tmp, first.pid)
        assert left.exists()
        first.send_signal(signal.SIGTERM)  # default action: no atexit
        assert first.wait(timeout=10) == -signal.SIGTERM
    finally:
        first.kill()
        first.wait()
    assert left.exists()  # what the killed worker left
    second = _run_worker(tmp_path, "plain", "1", tmpdir=short_tmp)
    assert second["agent"] is True
    assert not left.exists()


def test_leakhound_itself_never_runs_an_agent(tmp_path: Path) -> None:
    cli_tmp = tmp_path / "cli-tmp"
    cli_tmp.mkdir()
    with spawn_target("growing_cache", tmp_path, env={"LEAKHOUND_AGENT": ""}) as child:
        console_script = str(Path(sys.executable).parent / "leakhound")
        cli = subprocess.Popen(
            [sys.executable, console_script, "watch", str(child.pid), "-i", "0.5", "-d", "30"],
            env={**os.environ, "LEAKHOUND_AGENT": "1", "TMPDIR": str(cli_tmp)},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        try:
            # Once the CLI has had the payload run in the target, it is well past its start-up.
            deadline = time.monotonic() + 60
            while "_leakhound_payload" not in child.report()["leakhound_modules"]:
                assert time.monotonic() < deadline and cli.poll() is None
                time.sleep(0.2)
            assert cli.poll() is None
            assert find_socket(cli.pid) is None
            assert not (cli_tmp / f"leakhound-agent-{UID}").exists()
        finally:
            cli.kill()
            cli.wait()


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["/venv/bin/python", "/venv/bin/leakhound", "inspect", "42"], True),
        (["python3", "-X", "dev", "-m", "leakhound", "watch"], True),
        (["python3", "-u", "-m", "leakhound.cli"], True),
        (["python3", "-m", "leakhound.simulate.worker"], False),  # a target, not the CLI
        (["python3", "-c", "leakhound"], False),
        (["python3", "-X", "leakhound", "worker.py"], False),
        (["python3", "worker.py", "leakhound"], False),
    ],
)
def test_which_command_lines_are_leakhound_itself(argv: list[str], expected: bool) -> None:
    assert is_leakhound_cli(argv) is expected
    assert wanted("1", argv) is not expected


def test_a_tmpdir_too_deep_for_a_socket_path_puts_it_under_tmp(tmp_path: Path) -> None:
    # A socket path longer than sun_path cannot be bound: the agent did not start at all
    # ("AF_UNIX path too long") under a deep TMPDIR, and auto silently used ptrace.
    deep = tmp_path / ("d" * 60) / "worker-tmp"
    deep.mkdir(parents=True)
    assert len(str(_agent_socket(deep, 4194304))) > 107
    with spawn_target("growing_cache", tmp_path, env={"LEAKHOUND_AGENT": "1", "TMPDIR": str(deep)}) as child:
        _wait_for(_agent_socket("/tmp", child.pid))
        snap = take_snapshot(child.pid, request=RequestOptions(method=Method.AUTO, timeout=60))
    assert snap.method == "agent"
