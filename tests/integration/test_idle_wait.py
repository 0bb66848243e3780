"""A worker at rest: its main thread blocked in epoll_wait, or in a lock's futex wait, with
nothing to do.

Before, every method failed there (TargetBlocked after 10 s: the queued bootstrap waits for a
bytecode that an idle asyncio loop with nothing scheduled, or a sync worker in
``Event().wait()``, ``Queue().get()`` or ``join()``, never runs). The ptrace stop now ends an
epoll_wait of CPython's select module with "no events" (the loop goes round once), and a futex
wait of CPython's lock acquisition with EINTR, as when a signal's handler ran (the lock wait
runs the pending calls and waits again): stop.idle_wait. A wait of a C library's is never
ended early.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.native_target import uvloop_python
from tests.pythons import installed_pythons
from tests.utils import assert_only_the_payload_stays, run_cli, spawn_target, wait_until, within

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]

_PYTHONS = installed_pythons()
_THIS = f"{sys.version_info[0]}.{sys.version_info[1]}"
LEAKHOUND = str(Path(sys.executable).with_name("leakhound"))


def _ask(path: Path, command: bytes = b"") -> dict[str, Any]:
    """The idle worker's report, through its own server (the loop's: it answers only if the
    loop runs), after ``command``."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(str(path))
        try:  # (the loop's server answers at once and closes: it may be gone already)
            if command:
                s.sendall(command)
            s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return dict(json.loads(data))


def _idle_wait(pid: int) -> list[int]:
    """The main thread's system call and its first four arguments, once it is blocked in one
    (/proc/PID/syscall says "running" while it runs)."""
    def blocked() -> list[str]:
        fields = Path(f"/proc/{pid}/syscall").read_text().split()
        return fields if fields[0].isdigit() else []

    fields = wait_until(blocked, what="the main thread blocked in a system call")
    return [int(fields[0])] + [int(f, 16) for f in fields[1:5]]


def _inspect(pid: int, env: dict[str, str] | None = None) -> tuple[dict[str, Any], str, float]:
    """``inspect -v --json`` by ptrace, which must succeed: its document, its stderr, seconds."""
    began = time.monotonic()
    done = run_cli("-v", "inspect", str(pid), "--json", "--method", "ptrace", timeout=120, env=env)
    took = time.monotonic() - began
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout)), done.stderr, took


def _assert_registry_first(doc: dict[str, Any], truth: dict[str, Any]) -> None:
    """Owner #1 is the fixture's REGISTRY, its bytes within 2% of the target's deep size."""
    assert doc["heap"]["owner_model"] == "dominator"
    owner = doc["owners"][0]
    assert owner["path"] == "__main__.REGISTRY", [o["path"] for o in doc["owners"][:5]]
    assert within(owner["retained_bytes"], truth["registry_bytes"], 0.02), (owner["retained_bytes"], truth)


@pytest.mark.parametrize(("mode", "version"), [
    ("timer", _THIS),
    *(("forever", version) for version in _PYTHONS),
])
def test_an_idle_asyncio_worker_is_inspected_and_keeps_serving(tmp_path: Path, mode: str, version: str) -> None:
    sock = tmp_path / "idle.sock"
    env = {"FIXTURE_IDLE": mode, "FIXTURE_SOCKET": str(sock)}
    with spawn_target("idle_loop", tmp_path, python=_PYTHONS[version], env=env) as child:
        truth = child.report(refresh=False)["truth"]
        call = _idle_wait(child.pid)
        assert call[0] == 232, call  # epoll_wait(epfd, events, maxevents, timeout)
        assert (call[4] == 2**32 - 1) if mode == "forever" else (3_590_000 < call[4] <= 3_600_000), call
        doc, stderr, took = _inspect(child.pid)
        assert "for CPython's select module: woken with no events" in stderr, stderr[-3000:]
        after = _ask(sock)  # the loop still serves
        # ... and waits again as it did, its hour-long timer not run early
        assert _idle_wait(child.pid)[0] == 232
    assert took < 10.0, took  # (it was TargetBlocked at the 10 s safe-point wait)
    assert after["fired"] is False
    assert_only_the_payload_stays(after["modules"])
    _assert_registry_first(doc, truth)


def test_a_watch_wakes_an_idle_loop_at_every_sample_and_leaves_it_as_it_was(tmp_path: Path) -> None:
    # Every sample is an injection into the idle loop (woken each time): a few dozen of them,
    # then the loop still serves, its timer an hour away not run, nothing of leakhound's left
    # but the payload, and its RSS as it was (within what the payload's first load keeps).
    sock = tmp_path / "idle.sock"
    env = {"FIXTURE_IDLE": "timer", "FIXTURE_SOCKET": str(sock)}
    with spawn_target("idle_loop", tmp_path, env=env) as child:
        done = run_cli("watch", str(child.pid), "-i", "0.2", "-d", "6", "--full-every", "3", "--json",
                       "--method", "ptrace", timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        after = _ask(sock)
        assert _idle_wait(child.pid)[0] == 232
    samples = [json.loads(line) for line in done.stdout.splitlines() if '"sample"' in line]
    in_target = [s for s in samples if s["method"] != "rss"]
    assert len(in_target) >= 5, len(in_target)  # ~25 on a quiet machine (8 under CI's load)
    assert after["fired"] is False
    assert_only_the_payload_stays(after["modules"])
    rss = [s["rss_bytes"] for s in samples]
    assert max(rss[1:]) - rss[1] < 4 << 20, rss  # (the first sample's request loads the payload)


@pytest.mark.parametrize("version", list(_PYTHONS))
def test_an_idle_uvloop_worker_runs_the_bootstrap_in_its_wait(tmp_path: Path, version: str) -> None:
    # libuv retries an interrupted epoll_wait in C and runs no Python code until an event
    # comes (TargetBlocked at the 10 s safe-point wait before): the stop runs the bootstrap in
    # the wait, as a libuv callback runs (PyGILState_Ensure, the code, PyGILState_Release).
    sock = tmp_path / "idle.sock"
    env = {"FIXTURE_IDLE": "uvloop", "FIXTURE_SOCKET": str(sock)}
    with spawn_target("idle_loop", tmp_path, python=uvloop_python(version), env=env) as child:
        truth = child.report(refresh=False)["truth"]
        call = _idle_wait(child.pid)
        assert call[0] in (232, 281) and call[4] == 2**32 - 1, call  # epoll_(p)wait, no timeout
        doc, stderr, took = _inspect(child.pid)
        assert "for a C library, the GIL let go: the bootstrap ran there" in stderr, stderr[-3000:]
        after = _ask(sock)  # the loop still serves ...
        assert _idle_wait(child.pid)[0] == call[0]  # ... and waits again as it did
    assert took < 10.0, took
    assert_only_the_payload_stays(after["modules"])
    _assert_registry_first(doc, truth)


@pytest.mark.parametrize(("mode", "version"), [
    *(("read", version) for version in _PYTHONS),
    ("select", _THIS),
    *(("pool", version) for version in _PYTHONS),
])
def test_a_main_thread_blocked_in_a_read_runs_the_bootstrap_in_it(tmp_path: Path, mode: str, version: str) -> None:
    # os.read of a pipe nobody writes to, select.select with no timeout, and a multiprocessing
    # pool's idle workers (one reading the next task, the other in sem_wait for that read's
    # SemLock): the kernel restarts the call after any stop and no Python code runs until data
    # comes (TargetBlocked at the 10 s safe-point wait before). The bootstrap runs inside the
    # call; the call goes on and returns what is written after.
    sock = tmp_path / "idle.sock"
    with spawn_target("idle_loop", tmp_path, python=_PYTHONS[version],
                      env={"FIXTURE_IDLE": mode, "FIXTURE_SOCKET": str(sock)}) as child:
        ready = child.report(refresh=False)
        docs, calls = [], []
        for pid in ready.get("worker_pids", [child.pid]):
            call = _idle_wait(pid)
            assert call[0] in (0, 23, 270, 202), call  # read; select or pselect6; a SemLock's futex
            calls.append(call[0])
            doc, stderr, took = _inspect(pid)
            assert re.search(r"the main thread waits (in (read|select|pselect6) for CPython|for a multiprocessing "
                             r"lock \(sem_wait\)), the GIL let go: the bootstrap ran there", stderr), stderr[-3000:]
            assert took < 10.0, took
            docs.append(doc)
            assert _idle_wait(pid)[0] == call[0]  # in the same call again
        answer = _ask(sock, b"set")  # data comes: the call returns it (a pool's worker runs a task)
    if mode == "pool":
        assert sorted(calls) == [0, 202], calls
        assert_only_the_payload_stays(answer["returned"])  # a worker's own modules, from its task
    else:
        assert answer["returned"] == ("x" if mode == "read" else 1), answer
        assert_only_the_payload_stays(answer["modules"])
    for doc in docs:
        _assert_registry_first(doc, ready["truth"])


@pytest.mark.parametrize("version", list(_PYTHONS))
def test_a_poll_the_kernel_restarts_runs_the_bootstrap_in_it_every_time(tmp_path: Path, version: str) -> None:
    """A main thread in poll() with no timeout (pyzmq's recv(), select.poll): the first
    inspection ran the bootstrap inside it, and every later one failed at the 10 s safe-point
    wait. The kernel restarts an interrupted poll as restart_syscall (its restart block), which
    was no call known to be a blocking wait. It is one when it restarts libc's poll()."""
    sock = tmp_path / "idle.sock"
    with spawn_target("idle_loop", tmp_path, python=_PYTHONS[version],
                      env={"FIXTURE_IDLE": "poll", "FIXTURE_SOCKET": str(sock)}) as child:
        ready = child.report(refresh=False)
        assert _idle_wait(child.pid)[0] == 7, _idle_wait(child.pid)  # poll(fds, 1, -1)
        for attempt in range(3):
            doc, stderr, took = _inspect(child.pid)
            assert "waits in poll (no timeout) for CPython, the GIL let go: the bootstrap ran there" in stderr, \
                (attempt, stderr[-3000:])
            assert took < 10.0, (attempt, took)
            _assert_registry_first(doc, ready["truth"])
            assert _idle_wait(child.pid)[0] == 219  # restart_syscall, restarting the poll
        answer = _ask(sock, b"set")  # data comes: the poll returns it
    assert answer["returned"] == 1, answer
    assert_only_the_payload_stays(answer["modules"])


def _traced(pid: int) -> bool:
    with open(f"/proc/{pid}/status") as fh:
        return any(line.startswith("TracerPid:") and line.split()[1] != "0" for line in fh)


def _inspect_while_hogged(pid: int, sock: Path, *, signal_in_stop: int = 0) -> tuple[str, bool]:
    """``inspect -v`` by ptrace started while a thread of the target's holds the GIL ~3 s
    (the fixture's ``hog``); ``signal_in_stop`` sent to the target once its main thread is
    seen stopped (traced): stderr, and whether it was sent (on a loaded machine the CLI may
    reach the stop only once the hold is over, and the stop is then too short to be seen)."""
    _ask(sock, b"hog")
    cli = subprocess.Popen([LEAKHOUND, "-v", "inspect", str(pid), "--method", "ptrace"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    sent = False
    if signal_in_stop:
        seen = wait_until(lambda: "stop" if _traced(pid) else "over" if cli.poll() is not None else "",
                          what="the stop, or the CLI's end", timeout=60)
        if seen == "stop":
            time.sleep(0.02)  # (its signals blocked by then)
            os.kill(pid, signal_in_stop)
            sent = True
    stderr = cli.communicate(timeout=120)[1]
    assert cli.returncode == 0, stderr[-3000:]
    assert "the GIL let go: the bootstrap ran there" in stderr, stderr[-3000:]
    return stderr, sent


def test_a_ctrl_c_that_comes_during_the_stop_is_raised_in_the_targets_own_read(tmp_path: Path) -> None:
    # SIGINT sent while the main thread is stopped (its signals blocked, here while it waits
    # for the GIL) is taken by another thread, whose C handler trips it. Its Python handler
    # (the default: KeyboardInterrupt) used to run at the bootstrap's first bytecode, outside
    # any try: the traceback printed in the target's stderr, the Ctrl-C lost, no bootstrap.
    # Now the handlers run first (PyErr_CheckSignals); the raised one is handed back (a spare
    # signal's one-shot handler, tripped from C) and the read returns EINTR: os.read raises
    # the KeyboardInterrupt in the target's own frame, once, and the next stop runs inside.
    sock = tmp_path / "idle.sock"
    stderr_file = tmp_path / "target.stderr"
    with spawn_target("idle_loop", tmp_path, env={"FIXTURE_IDLE": "read", "FIXTURE_SOCKET": str(sock)},
                      stderr=stderr_file) as child:
        for _ in range(3):
            _idle_wait(child.pid)
            stderr, sent = _inspect_while_hogged(child.pid, sock, signal_in_stop=signal.SIGINT)
            if sent:
                break
        else:
            pytest.skip("the stop was never seen on this loaded machine: no signal sent in it")
        assert "its exception handed back to the target's own frame" in stderr, stderr[-3000:]
        report = wait_until(lambda: (r := _ask(sock))["interrupts"] and r, what="the KeyboardInterrupt", timeout=5)
        assert report["interrupts"] == 1 and report["returned"] is None  # raised once; the read goes on
        assert _idle_wait(child.pid)[0] == 0
        answer = _ask(sock, b"set")
        assert answer["returned"] == "x"
        assert_only_the_payload_stays(answer["modules"])
    printed = stderr_file.read_text()
    assert "KeyboardInterrupt" not in printed and "Traceback" not in printed, printed


def test_running_in_a_read_waits_for_the_gil_another_thread_holds(tmp_path: Path) -> None:
    # PyGILState_Ensure on the stopped main thread waits for the GIL a thread of the target's
    # holds in a long C call, past the 0.2 s an injected call is given before it is looked at,
    # and is waited for (never taken back halfway); then the run goes on and the read with it.
    sock = tmp_path / "idle.sock"
    with spawn_target("idle_loop", tmp_path, env={"FIXTURE_IDLE": "read", "FIXTURE_SOCKET": str(sock)}) as child:
        stops: list[float] = []
        for _ in range(3):
            _idle_wait(child.pid)
            stderr, _sent = _inspect_while_hogged(child.pid, sock)
            stops += [float(ms) for ms in re.findall(r"attempt 1: stopped ([\d.]+) ms", stderr)]
            assert _idle_wait(child.pid)[0] == 0
            if max(stops) > 200:
                break
        answer = _ask(sock, b"set")
    print(f"\nstops (ms): {stops}")
    assert answer["returned"] == "x"
    assert_only_the_payload_stays(answer["modules"])
    if max(stops) <= 200:  # (the CLI reached the stop only after the hold on a loaded machine)
        pytest.skip(f"no stop overlapped the hold (stops {stops} ms): the GIL wait was not exercised")


def test_a_signal_that_comes_while_the_bootstrap_runs_in_a_read_has_its_handler_run(tmp_path: Path) -> None:
    # While the main thread runs the bootstrap inside its read (here waiting for the GIL), it
    # blocks signals: SIGUSR2 sent then is taken by another thread, and its Python handler (a
    # counter) runs at the main thread's next bytecode: the bootstrap's first. The read goes on.
    sock = tmp_path / "idle.sock"
    with spawn_target("idle_loop", tmp_path, env={"FIXTURE_IDLE": "read", "FIXTURE_SOCKET": str(sock)}) as child:
        for _ in range(3):
            _idle_wait(child.pid)
            if _inspect_while_hogged(child.pid, sock, signal_in_stop=signal.SIGUSR2)[1]:
                break
        else:
            pytest.skip("the stop was never seen on this loaded machine: no signal sent in it")
        report = wait_until(lambda: (r := _ask(sock))["signals"] and r, what="the handler run", timeout=5)
        assert report["signals"] == 1 and report["returned"] is None  # the read goes on
        assert _idle_wait(child.pid)[0] == 0
        assert _ask(sock, b"set")["returned"] == "x"
    assert_only_the_payload_stays(report["modules"])


def test_a_watch_runs_in_an_idle_uvloop_at_every_sample(tmp_path: Path) -> None:
    # A few dozen runs in the wait: the loop still serves and waits as before, nothing of
    # leakhound's left but the payload, its RSS as it was.
    sock = tmp_path / "idle.sock"
    env = {"FIXTURE_IDLE": "uvloop", "FIXTURE_SOCKET": str(sock)}
    with spawn_target("idle_loop", tmp_path, python=uvloop_python(_THIS), env=env) as child:
        call = _idle_wait(child.pid)
        done = run_cli("watch", str(child.pid), "-i", "0.2", "-d", "6", "--full-every", "3", "--json",
                       "--method", "ptrace", timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        after = _ask(sock)
        assert _idle_wait(child.pid)[0] == call[0]
    samples = [json.loads(line) for line in done.stdout.splitlines() if '"sample"' in line]
    in_target = [s for s in samples if s["method"] != "rss"]
    assert len(in_target) >= 5, len(in_target)
    assert_only_the_payload_stays(after["modules"])
    rss = [s["rss_bytes"] for s in samples]
    assert max(rss[1:]) - rss[1] < 4 << 20, rss


@pytest.mark.parametrize(("mode", "version"), [
    ("queue", _THIS),
    *(("event", version) for version in _PYTHONS),
])
def test_a_sync_worker_waiting_for_a_lock_is_inspected_and_its_wait_goes_on(tmp_path: Path, mode: str,
                                                                            version: str) -> None:
    # The main thread in Event().wait() / Queue().get(): a futex wait under CPython's lock
    # acquisition, which the stop ends with EINTR; lock.acquire runs the pending calls (the
    # bootstrap) and waits again: it returns only when the event is set, the item put.
    sock = tmp_path / "idle.sock"
    env = {"FIXTURE_IDLE": mode, "FIXTURE_SOCKET": str(sock)}
    with spawn_target("idle_loop", tmp_path, python=_PYTHONS[version], env=env) as child:
        truth = child.report(refresh=False)["truth"]
        assert _idle_wait(child.pid)[0] == 202  # futex
        doc, stderr, took = _inspect(child.pid)
        assert "in CPython's lock wait: woken with EINTR" in stderr, stderr[-3000:]
        waiting = _ask(sock)
        assert waiting["returned"] is None  # still waiting: nothing returned early
        assert _idle_wait(child.pid)[0] == 202
        done_waiting = _ask(sock, b"set")
    assert took < 10.0, took
    assert done_waiting["returned"] == (True if mode == "event" else "item")
    assert_only_the_payload_stays(waiting["modules"])
    _assert_registry_first(doc, truth)


@pytest.mark.gdb
@pytest.mark.parametrize("mode", ["forever", "event"])
def test_the_gdb_fallback_wakes_a_worker_at_rest_by_the_same_rules(tmp_path: Path, mode: str) -> None:
    # gdb_inject.py: the same registers, the same return-address rule (gdb run --readnever does
    # not unwind libc's frames), set through gdb's $rax / $orig_rax.
    sock = tmp_path / "idle.sock"
    env = {"FIXTURE_IDLE": mode, "FIXTURE_SOCKET": str(sock)}
    with spawn_target("idle_loop", tmp_path, env=env) as child:
        wait = _idle_wait(child.pid)[0]
        done = run_cli("-v", "inspect", str(child.pid), "--json", "--method", "gdb", timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        said = "woken with no events" if mode == "forever" else "woken with EINTR"
        assert "gdb: the main thread waits in " in done.stderr and said in done.stderr, done.stderr[-3000:]
        after = _ask(sock)
        assert _idle_wait(child.pid)[0] == wait
    assert after.get("fired") is not True and after.get("returned") is None
    assert_only_the_payload_stays(after["modules"])
    assert json.loads(done.stdout)["owners"][0]["path"] == "__main__.REGISTRY"


@pytest.mark.parametrize("version", sorted({_THIS, "3.10"} & set(_PYTHONS)))
def test_a_main_thread_in_time_sleep_is_waited_for_not_woken(tmp_path: Path, version: str) -> None:
    # time.sleep cannot be ended early: the bootstrap waits for it (past the 10 s it would
    # wait for a safe point), the deadline's stall window with it (here 5 s: the sleep is
    # longer; the injection's progress restarted the window, and a 100 s sleep was given up
    # at the default 45 s). clock_nanosleep on 3.11+, pselect6 with no descriptors on 3.10.
    env = {"FIXTURE_IDLE": "sleep", "FIXTURE_SLEEP": "13"}
    with spawn_target("idle_loop", tmp_path, python=_PYTHONS[version], env=env) as child:
        doc, stderr, _took = _inspect(child.pid, env={"LEAKHOUND_STALL_SECONDS": "5"})
        assert "the main thread sleeps in time.sleep for up to" in stderr, stderr[-3000:]
        assert "woken" not in stderr and "ran there" not in stderr
        truth = child.report(refresh=False)["truth"]
    _assert_registry_first(doc, truth)


@pytest.mark.parametrize("version", sorted({"3.11", "3.12", "3.13"} & set(_PYTHONS)))
def test_a_main_thread_waiting_for_the_others_at_its_end(tmp_path: Path, version: str) -> None:
    """The main thread has run its script to the end and waits for a thread of its own
    (threading._shutdown: a lock's futex wait, woken with EINTR; the bootstrap runs there).
    3.12 starts no new thread then: said at once as such (it was "did not reach a safe
    point" 10 s later), the worker unharmed; 3.11 and 3.13 are inspected."""
    with spawn_target("idle_loop", tmp_path, python=_PYTHONS[version], env={"FIXTURE_IDLE": "shutdown"}) as child:
        began = time.monotonic()
        done = run_cli("inspect", str(child.pid), "--json", "--method", "ptrace", timeout=120)
        took = time.monotonic() - began
        alive = child.proc.poll() is None
        truth = child.report(refresh=False)["truth"]
    assert alive
    if version == "3.12":
        assert done.returncode == 6, done.stderr[-3000:]
        assert "when Python 3.12 starts no new thread" in done.stderr, done.stderr[-3000:]
        assert "LEAKHOUND_AGENT=1" in done.stderr
        assert took < 8.0, took
    else:
        assert done.returncode == 0, done.stderr[-3000:]
        _assert_registry_first(json.loads(done.stdout), truth)


def test_a_bootstrap_that_fails_in_the_target_is_said_with_its_error(tmp_path: Path) -> None:
    """The bootstrap ran but raised before the payload's thread started (an import its
    worker's standard library no longer answers, replaced or removed since the worker
    started): its error is said at once (exit 8); it was "did not reach a safe point" 10 s
    later, for a main thread that ran Python code five times a second."""
    with spawn_target("idle_loop", tmp_path, env={"FIXTURE_IDLE": "no_threading"}) as child:
        began = time.monotonic()
        done = run_cli("inspect", str(child.pid), "--method", "ptrace", timeout=120)
        took = time.monotonic() - began
        alive = child.proc.poll() is None
    assert alive
    assert done.returncode == 8, done.stderr[-3000:]
    said = "failed there before the payload started (ModuleNotFoundError: import of threading halted; None"
    assert said in done.stderr, done.stderr[-3000:]
    assert "safe point" not in done.stderr
    assert took < 8.0, took


def test_a_sleep_past_the_requests_time_is_said_at_once(tmp_path: Path) -> None:
    env = {"FIXTURE_IDLE": "sleep", "FIXTURE_SLEEP": "3600"}
    with spawn_target("idle_loop", tmp_path, env=env) as child:
        began = time.monotonic()
        done = run_cli("inspect", str(child.pid), "--method", "ptrace", timeout=120)
        took = time.monotonic() - began
        still = _idle_wait(child.pid)[0]
    assert done.returncode == 6, done.stderr
    assert re.search(r"main thread sleeps in time\.sleep for 3,[56]\d\d s more", done.stderr), done.stderr
    assert "nothing was injected" in done.stderr
    assert "idle_loop.py" in done.stderr  # where it sleeps, from py-spy
    assert still in (230, 270)  # still asleep, untouched
    assert took < 10.0, took  # not the 10 s safe-point wait: nothing was queued to wait for


@pytest.mark.parametrize(("method", "mode"), [("ptrace", "libc"), ("gdb", "libc"), ("ptrace", "libc-gil")])
def test_a_wait_of_a_c_librarys_is_never_ended_early(tmp_path: Path, method: str, mode: str) -> None:
    # epoll_wait called through ctypes (libffi's code returns to it, not the select module):
    # the stop interrupts it (EINTR, as any ptrace attach does) and never makes it return
    # early. ptrace runs the bootstrap inside the wait (ctypes let the GIL go, as libuv does);
    # through PyDLL the call keeps the GIL, so it is queued, and ctypes hands the EINTR to the
    # Python code that called it, whose next bytecode runs it (so does gdb's).
    with spawn_target("idle_loop", tmp_path, env={"FIXTURE_IDLE": mode}) as child:
        assert _idle_wait(child.pid)[0] == 232
        frozen = mode == "libc-gil"  # no thread runs Python code: the payload's does not either
        done = run_cli("-v", "inspect", str(child.pid), "--method", method, *(("--timeout", "6") if frozen else ()),
                       timeout=60)
        assert done.returncode == (14 if frozen else 0), done.stderr[-3000:]
        assert "woken" not in done.stderr
        ran_there = "for a C library, the GIL let go: the bootstrap ran there" in done.stderr
        assert ran_there is ((method, mode) == ("ptrace", "libc")), done.stderr[-3000:]
        if frozen:
            assert "holding the GIL (PyGILState_Check): the bootstrap is queued" in done.stderr
        report = child.signal_and_report(signal.SIGUSR1)  # (the payload then sees it was cancelled)
    returns = report["returns"]
    assert returns and all(rc == -1 and err == 4 for rc, err in returns), returns  # EINTR only, never a 0
    assert_only_the_payload_stays(report["modules"])


@pytest.mark.parametrize("mode", ["uvloop", "forever"])
def test_killing_leakhound_while_it_wakes_or_runs_in_a_resting_loop_leaves_it_unharmed(tmp_path: Path,
                                                                                    mode: str) -> None:
    # The CLI SIGKILLed right after each step of a stop that ends an idle wait (asyncio's) or
    # runs the bootstrap in it (uvloop's): the helper finishes the stop, the loop serves and
    # waits again as before, its main thread untraced with its signal mask as it was, and
    # nothing is left (no private directory, no bootstrap page).
    from tests.integration.test_ptrace_kills import check_nothing_left, kill_at, main_thread_status

    sock = tmp_path / "idle.sock"
    env = {"FIXTURE_IDLE": mode, "FIXTURE_SOCKET": str(sock)}
    python = uvloop_python(_THIS) if mode == "uvloop" else _PYTHONS[_THIS]
    with spawn_target("idle_loop", tmp_path, python=python, env=env) as child:
        call = _idle_wait(child.pid)
        mask = main_thread_status(child.pid)["SigBlk"]
        for step in ("written", "called", "restored", "detached"):
            log = kill_at(child, tmp_path, step, signal.SIGKILL, ["-v", "inspect"])
            assert ("the bootstrap ran there" if mode == "uvloop" else "woken with no events") in log, log
            check_nothing_left(child, log)
            status = main_thread_status(child.pid)
            assert status["TracerPid"].strip() == "0" and status["SigBlk"] == mask, status
            after = _ask(sock)
            assert_only_the_payload_stays(after["modules"])
            assert _idle_wait(child.pid)[0] == call[0]
