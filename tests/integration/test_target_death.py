"""A target that dies during a request is reported as what happened: its signal, whether a
core was written, and whether leakhound was inside it (issue 13).

The deaths are real and deterministic (fixtures/payload_trap.py): a segmentation fault or an
abort() on the payload's own thread at a chosen function, or a SIGKILL from outside while the
payload is stalled. The target's core size limit is set to 0 (prlimit), so nothing is written.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from leakhound.core.capture import take_snapshot
from leakhound.core.request import RequestOptions
from leakhound.errors import TargetDied
from tests.utils import LEAKHOUND, gdb_or_ptrace, run_cli, spawn_target

pytestmark = [
    pytest.mark.integration,
    pytest.mark.usefixtures("ptrace_ok"),
    pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs prlimit"),
]

NO_CORE = ["prlimit", "--core=0", "--"]
METHOD = gdb_or_ptrace()  # (of a target's death, not of gdb)


def test_a_crash_with_leakhound_inside_names_the_signal_and_says_it_may_be_leakhounds(tmp_path: Path) -> None:
    env = {"TRAP_AT": "progress", "TRAP": "segv"}
    with spawn_target("payload_trap", tmp_path, env=env, prefix=NO_CORE) as child:
        result = run_cli("inspect", str(child.pid), "--method", METHOD)
        # Ground truth: the kernel's own wait status of the child (this test is its parent).
        child.proc.wait(timeout=10)
        assert child.proc.returncode == -signal.SIGSEGV
    assert result.returncode == 12, result.stderr
    assert "Traceback" not in result.stderr
    assert "killed by SIGSEGV" in result.stderr
    assert "no core was written" in result.stderr
    assert "leakhound may have caused it: its payload was running inside the process (phase:" in result.stderr


def test_leakhound_as_the_parent_reads_the_exit_status_abort(tmp_path: Path) -> None:
    env = {"TRAP_AT": "progress", "TRAP": "abort"}
    with spawn_target("payload_trap", tmp_path, env=env, prefix=NO_CORE) as child:
        with pytest.raises(TargetDied) as caught:
            take_snapshot(child.pid, request=RequestOptions(timeout=60))
        assert child.proc.wait(timeout=10) == -signal.SIGABRT  # not reaped by leakhound: still ours
    err = caught.value
    assert (err.signal, err.core_dumped, err.leakhound_inside) == (signal.SIGABRT, False, True)
    assert "leakhound is its parent" in str(err)


def test_a_kill_from_outside_while_leakhound_waits_is_not_blamed_on_leakhound(tmp_path: Path) -> None:
    env = {"TRAP_AT": "progress", "TRAP": "stall", "TRAP_SECONDS": "30"}
    tmp = tmp_path / "cli-tmp"
    tmp.mkdir()
    with spawn_target("payload_trap", tmp_path, env=env, prefix=NO_CORE) as child:
        cli = subprocess.Popen([LEAKHOUND, "inspect", str(child.pid), "--method", METHOD, "--timeout", "60"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "TMPDIR": str(tmp)})
        try:
            deadline = time.monotonic() + 60
            while not list(tmp.glob("leakhound-*/started.json")):  # signals only after the injection
                assert time.monotonic() < deadline and cli.poll() is None
                time.sleep(0.05)
            while not child.report()["truth"]["trapped"]:
                assert time.monotonic() < deadline
                time.sleep(0.1)
            os.kill(child.pid, signal.SIGKILL)
            _out, err = cli.communicate(timeout=60)
        finally:
            if cli.poll() is None:
                cli.kill()
                cli.wait()
    assert cli.returncode == 12, err
    assert "killed by SIGKILL" in err
    assert "no core (SIGKILL does not write one)" in err
    assert "not leakhound's doing" in err


def test_nothing_inside_means_not_leakhound(tmp_path: Path) -> None:
    """The same explanation, for a target that died while leakhound was not inside it."""
    from leakhound.attach import death

    with spawn_target("payload_trap", tmp_path, prefix=NO_CORE) as child:
        facts = death.read_facts(child.pid)
        os.kill(child.pid, signal.SIGSEGV)
        _wait_zombie(child.pid)
        err = death.explain(facts, inside=None, doing="between two samples")
        assert child.proc.wait(timeout=10) == -signal.SIGSEGV
    assert err.signal == signal.SIGSEGV
    assert "leakhound was not inside it: leakhound did not cause this" in str(err)


def _wait_zombie(pid: int) -> None:
    deadline = time.monotonic() + 10
    while open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.01)


def _kernel_log_readable() -> bool:
    try:
        os.close(os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK))
    except OSError:
        return False
    return Path("/proc/sys/debug/exception-trace").read_text().strip() == "1"


@pytest.mark.skipif(not _kernel_log_readable(), reason="needs a readable kernel log that logs segfaults")
def test_a_crash_reaped_by_another_parent_is_read_from_the_kernel_log(tmp_path: Path) -> None:
    """Not leakhound's child, and reaped at once by its own parent (a shell here): the exit
    status is gone, the kernel log still names the fault."""
    env = {"TRAP_AT": "progress", "TRAP": "segv"}
    reaper = ["sh", "-c", '"$@" & wait; sleep 30', "sh", *NO_CORE]
    with spawn_target("payload_trap", tmp_path, env=env, prefix=reaper) as child:
        pid = child.report(refresh=False)["pid"]
        assert pid != child.pid
        result = run_cli("inspect", str(pid), "--method", METHOD)
    assert result.returncode == 12, result.stderr
    assert "killed by SIGSEGV (from " in result.stderr  # the kernel log, or the zombie if not reaped yet
    assert "segfault at 0" in result.stderr
    assert "leakhound may have caused it" in result.stderr


@pytest.mark.parametrize("status", [0, 3])
def test_a_target_that_exits_on_its_own_mid_inspection_is_said_so(tmp_path: Path, status: int) -> None:
    env = {"TRAP_AT": "progress", "TRAP": "exit", "TRAP_STATUS": str(status), "TRAP_SECONDS": "30"}
    with spawn_target("payload_trap", tmp_path, env=env, prefix=NO_CORE) as child:
        result = run_cli("inspect", str(child.pid), "--method", METHOD)
        assert child.proc.wait(timeout=10) == status  # ground truth: the kernel's wait status
    assert result.returncode == 12, result.stderr
    assert "Traceback" not in result.stderr
    assert f"it exited on its own with status {status}" in result.stderr
    assert "may have caused" not in result.stderr
    assert "killed by SIG" not in result.stderr
    if status == 0:
        assert "not leakhound's doing" in result.stderr
        assert "please report" not in result.stderr
    else:
        assert "most likely not leakhound's doing" in result.stderr
