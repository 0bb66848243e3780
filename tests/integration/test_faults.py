"""Faults and bad input: one clear line, a documented exit code, no traceback, target alive."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path

import pytest

from leakhound.core.capture import take_snapshot
from leakhound.core.request import RequestOptions
from leakhound.errors import LeakhoundError, TargetBusy, TargetExited, TargetNotFound
from tests.utils import ROOT, assert_only_the_payload_stays, gdb_calls_broken, run_cli, spawn_target, within

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]

SYSTEM_PYTHON = "/usr/bin/python3"
AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def _clean(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stderr.startswith("leakhound: error: ")
    assert "hint: " in result.stderr


@pytest.mark.gdb  # (ptrace runs the bootstrap inside such a read: test_idle_wait.py)
def test_main_thread_blocked_in_a_syscall_times_out_with_its_stack(tmp_path: Path) -> None:
    # (a read nobody answers: a time.sleep is refused at once, test_idle_wait.py)
    with spawn_target("blocked_main", tmp_path, env={"FIXTURE_BLOCK": "read"}) as child:
        result = run_cli("inspect", str(child.pid), "--method", "gdb", "--timeout", "3")
        assert child.proc.poll() is None, "the target must survive"
    assert result.returncode == 6, result.stderr
    _clean(result)
    assert "did not reach a safe point" in result.stderr
    assert "blocked_main.py" in result.stderr  # where the main thread is, from py-spy


def test_zombie_is_reported_as_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while open(f"/proc/{child.pid}/stat").read().split()[2] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    try:
        result = run_cli("inspect", str(child.pid))
    finally:
        child.wait()
    assert result.returncode == 3
    _clean(result)
    assert "zombie" in result.stderr


def test_gdb_missing_is_a_clear_error(tmp_path: Path) -> None:
    with spawn_target("growing_cache", tmp_path) as child:
        result = run_cli("inspect", str(child.pid), "--method", "gdb", env={"PATH": str(tmp_path)})
    assert result.returncode == 7
    _clean(result)
    assert "gdb is not installed" in result.stderr


@pytest.mark.skipif(not os.path.exists(SYSTEM_PYTHON) or shutil.which("setpriv") is None,
                    reason="needs the system python and setpriv")
def test_another_users_target_on_another_python_build() -> None:
    """A target owned by nobody, on Debian's python (a different build), nothing installed."""
    shared = Path(tempfile.mkdtemp(prefix="leakhound-test-"))  # pytest's tmp is private to root
    os.chmod(shared, 0o777)
    with spawn_target("growing_cache", shared, python=SYSTEM_PYTHON, prefix=AS_NOBODY) as child:
        snap = take_snapshot(child.pid, request=RequestOptions(timeout=60))
        truth = child.report()["truth"]
        # Without CAP_SYS_PTRACE, root may not trace another user's process.
        denied = run_cli("inspect", str(child.pid), prefix=["setpriv", "--bounding-set=-sys_ptrace",
                                                          "--inh-caps=-sys_ptrace"])
        assert child.proc.poll() is None
    shutil.rmtree(shared, ignore_errors=True)
    assert snap.owners[0].path == "__main__.CACHE"
    assert within(snap.owners[0].retained_bytes, truth["cache_bytes"])
    assert denied.returncode == 5, denied.stderr
    _clean(denied)
    assert "CAP_SYS_PTRACE" in denied.stderr


# What the ptrace and gdb methods call in the target: Py_AddPendingCall(PyRun_SimpleString, code).
CALLED = ("Py_AddPendingCall", "PyRun_SimpleString")


def _rename_symbols(path: Path, names: tuple[str, ...]) -> set[str]:
    """Rename ``names`` in place in every symbol table of the ELF file (``Py_X`` -> ``Xy_X``,
    same length, so nothing moves). Returns the names it found."""
    data = bytearray(path.read_bytes())
    (shoff,) = struct.unpack_from("<Q", data, 0x28)  # ELF64 header: e_shoff, e_shentsize, e_shnum
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    wanted = {name.encode() for name in names}
    found = set()
    for _, sh_type, _, _, offset, size, link, _, _, entsize in sections:
        if sh_type not in (2, 11) or entsize != 24:  # SHT_SYMTAB, SHT_DYNSYM
            continue
        strings = sections[link][4]
        for entry in range(offset, offset + size, entsize):
            start = strings + struct.unpack_from("<I", data, entry)[0]
            name = bytes(data[start:data.index(b"\0", start)]).split(b"@")[0]
            if name in wanted:
                data[start] = ord("X")
                found.add(name.decode())
    path.write_bytes(data)
    return found


def _python_without_the_called_symbols(build: str, tmp_path: Path) -> tuple[str, dict[str, str], str]:
    """A working interpreter whose symbol tables lack ``CALLED``: this venv's interpreter on a
    patched copy of its libpython ("libpython"), or a patched copy of Debian's statically
    linked executable ("executable"). Returns the interpreter, its environment and the file
    that was patched. Internal calls in both builds are direct, so the renamed exports are
    not needed to run Python code (checked below)."""
    if build == "libpython":
        with open("/proc/self/maps") as fh:
            libs = {line.split()[-1] for line in fh if "/libpython" in line}
        if len(libs) != 1:
            pytest.skip("this interpreter is not linked against one shared libpython")
        original = Path(libs.pop())
        patched = tmp_path / "lib" / original.name
        patched.parent.mkdir()
        shutil.copy(original, patched)
        # The executable's RUNPATH yields to LD_LIBRARY_PATH (an RPATH would not: the probe
        # below checks the copy is the one loaded).
        python, env = os.path.realpath(sys.executable), {"LD_LIBRARY_PATH": str(patched.parent)}
    else:
        if not os.path.exists(SYSTEM_PYTHON):
            pytest.skip("needs the system python")
        real = Path(os.path.realpath(SYSTEM_PYTHON))
        patched = tmp_path / real.name
        shutil.copy(real, patched)
        python, env = str(patched), {}
    if _rename_symbols(patched, CALLED) != set(CALLED):
        pytest.skip(f"{patched.name} does not have both symbols to remove")
    # Ground truth from the dynamic linker: the interpreter runs, maps the patched file, and
    # neither name resolves in it any more.
    probe = subprocess.run(
        [python, "-c", "import ctypes, sys; maps = open('/proc/self/maps').read(); "
         f"print(sys.argv[1] in maps, [hasattr(ctypes.pythonapi, n) for n in {CALLED!r}])", str(patched)],
        capture_output=True, text=True, timeout=30, env={**os.environ, **env},
    )
    assert probe.stdout.split(None, 1) == ["True", "[False, False]\n"], probe.stdout + probe.stderr
    return python, env, str(patched)


def _stopped_or_traced(pid: int) -> str:
    with open(f"/proc/{pid}/status") as fh:
        fields = dict(line.split(":", 1) for line in fh if ":" in line)
    state, tracer = fields["State"].split()[0], int(fields["TracerPid"])
    return f"state {state}, traced by {tracer}" if state in ("t", "T") or tracer else ""


@pytest.mark.parametrize("build", ["libpython", "executable"])
def test_python_without_the_symbols_leakhound_calls(build: str, tmp_path: Path) -> None:
    python, env, patched = _python_without_the_called_symbols(build, tmp_path)
    with spawn_target("growing_cache", tmp_path, python=python, env=env) as child:
        before = child.report()
        results = {m: run_cli("inspect", str(child.pid), "--method", m, "--timeout", "30")
                   for m in ("ptrace", "gdb", "auto")}
        after = child.report()  # it still answers signals: running, not stopped
        assert child.proc.poll() is None
        assert _stopped_or_traced(child.pid) == ""
    for method, result in results.items():
        assert result.returncode == 7, (method, result.stderr)
        _clean(result)
        if method == "gdb" and gdb_calls_broken():  # refused before it looks at the target
            assert "gdb cannot call functions in a process on this machine" in result.stderr
            continue
        assert ("lacks the symbols leakhound calls: Py_AddPendingCall, PyRun_SimpleString"
                in result.stderr), (method, result.stderr)
        assert patched in result.stderr, (method, result.stderr)
        assert "LEAKHOUND_AGENT=1" in result.stderr and "--method agent" in result.stderr
    # Nothing was queued or loaded in the target.
    assert after["leakhound_modules"] == []
    assert after["main_globals"] == before["main_globals"]
    assert after["threads"] == before["threads"]


def _cli_as_nobody(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI as uid 65534. The venv's interpreter may live under root's 0700 home, so it
    runs on the system interpreter (same minor version) with this checkout and the venv's
    packages on its path; skips where nobody cannot import it that way."""
    version = subprocess.run([SYSTEM_PYTHON, "-c", "import sys; print(sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
    if version != str(tuple(sys.version_info[:2])):
        pytest.skip(f"the system python is {version}, the venv {sys.version_info[:2]}")
    paths = sysconfig.get_paths()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), paths["purelib"], paths["platlib"]])}
    argv = [*AS_NOBODY, SYSTEM_PYTHON, "-m", "leakhound"]
    probe = subprocess.run([*argv, "--version"], capture_output=True, text=True, timeout=60, env=env, cwd="/")
    if probe.returncode != 0:
        pytest.skip(f"nobody cannot run leakhound from this checkout: {probe.stderr.strip()[-200:]}")
    return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=60, env=env, cwd="/")


@pytest.mark.skipif(not os.path.exists(SYSTEM_PYTHON) or shutil.which("setpriv") is None,
                    reason="needs the system python and setpriv")
@pytest.mark.parametrize("method", ["auto", "gdb"])
def test_root_target_from_a_non_root_user(method: str, tmp_path: Path) -> None:
    with spawn_target("growing_cache", tmp_path) as child:
        assert os.stat(f"/proc/{child.pid}").st_uid == 0
        denied = _cli_as_nobody("inspect", str(child.pid), "--method", method)
        after = child.report()
        assert child.proc.poll() is None
        assert _stopped_or_traced(child.pid) == ""
    assert denied.returncode == 5, denied.stderr
    _clean(denied)
    assert str(child.pid) in denied.stderr.splitlines()[0]
    assert "CAP_SYS_PTRACE" in denied.stderr and "LEAKHOUND_AGENT=1" in denied.stderr
    assert after["leakhound_modules"] == []


def test_target_exiting_mid_inspect(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"FIXTURE_ENTRIES": "1500000"}
    # The pure-Python census loop: a census of a few seconds (the compiled one may finish
    # before the kill).
    monkeypatch.setenv("LEAKHOUND_WALKER", "python")
    with spawn_target("growing_cache", tmp_path, env=env, timeout=120) as child:
        killer = threading.Timer(0.8, child.proc.kill)
        killer.start()
        with pytest.raises((TargetExited, TargetNotFound)):
            take_snapshot(child.pid, request=RequestOptions(timeout=60))
        killer.join()


def test_two_inspections_of_one_process_at_once(tmp_path: Path) -> None:
    # The first inspection is held inside the target (its payload thread stalls 8 s at its
    # first progress report, the target's own trap), so the second one surely comes while the
    # first holds the target: it must be told "busy", and the first must still finish.
    env = {"TRAP_AT": "progress", "TRAP": "stall", "TRAP_SECONDS": "8"}
    outcomes: list[object] = []

    def inspect(pid: int) -> None:
        try:
            outcomes.append(take_snapshot(pid, request=RequestOptions(timeout=60)))
        except LeakhoundError as exc:
            outcomes.append(exc)

    with spawn_target("payload_trap", tmp_path, env=env) as child:
        first = threading.Thread(target=inspect, args=(child.pid,))
        first.start()
        deadline = time.monotonic() + 30
        while not child.report()["truth"]["trapped"]:
            assert time.monotonic() < deadline, "the first inspection never reached the trap"
            time.sleep(0.1)
        inspect(child.pid)  # the second, while the first is held in the target
        first.join()
        while (after := child.report())["truth"]["payload_threads"]:  # it exits right after its answer
            assert time.monotonic() < deadline + 60, after
            time.sleep(0.1)
    errors = [o for o in outcomes if isinstance(o, LeakhoundError)]
    assert len(outcomes) - len(errors) >= 1
    assert all(isinstance(e, TargetBusy) for e in errors), errors
    assert len(errors) == 1 and outcomes[0] is errors[0], outcomes  # the second was refused, first
    assert after["truth"]["stall_over"]
    assert_only_the_payload_stays(after["leakhound_modules"])


def test_target_exiting_mid_patch(tmp_path: Path) -> None:
    from leakhound.core.patch import patch_process
    from leakhound.simulate.fleet import start_fleet

    with start_fleet(workers=1, concurrency=2, turns=6, rollouts=None, image_kb=8, group_size=1, fixes="none",
                     hold=0, report_dir=tmp_path, stats_interval=1.0) as fleet:
        fleet.wait_ready(timeout=60)
        pid = fleet.pids[0]
        killer = threading.Timer(1.0, fleet.kill)
        killer.start()
        with pytest.raises((TargetExited, TargetNotFound)):
            patch_process(pid, fixes=["registry"], verify_seconds=3)
        killer.join()


def test_a_target_ignoring_sigtrap_keeps_ignoring_it(tmp_path: Path) -> None:
    # ptrace's single step raises SIGTRAP as a forced signal: the kernel would reset the
    # ignored SIGTRAP to its default (dump core) for the whole process, so ptrace declines
    # before stopping anything; gdb's inferior calls leave the disposition alone (checked
    # here), so auto falls back to it.
    with spawn_target("ignores_sigtrap", tmp_path) as child:
        results = {m: run_cli("inspect", str(child.pid), "--method", m) for m in ("ptrace", "gdb", "auto")}
        with open(f"/proc/{child.pid}/status") as fh:
            ignored = next(int(line.split()[1], 16) for line in fh if line.startswith("SigIgn:"))
        report = child.report()
    assert ignored & (1 << (5 - 1)), "SIGTRAP must still be ignored"
    assert report["truth"]["sigtrap_ignored"] is True
    assert results["ptrace"].returncode == 7, results["ptrace"].stderr
    _clean(results["ptrace"])
    assert "ignores SIGSEGV or SIGTRAP" in results["ptrace"].stderr
    if gdb_calls_broken():  # gdb refused before touching the target; auto says ptrace's reason
        assert results["gdb"].returncode == 7 and "gdb cannot call functions" in results["gdb"].stderr
        assert results["auto"].returncode == 7 and "ignores SIGSEGV or SIGTRAP" in results["auto"].stderr
        return
    for method in ("gdb", "auto"):
        assert results[method].returncode == 0, (method, results[method].stderr)
        assert "__main__.CACHE" in results[method].stdout
