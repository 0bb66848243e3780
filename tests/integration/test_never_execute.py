"""leakhound never runs anything of the target's (docs/security.md): its version is read from
its files, gdb loads no script or library from beside them, and remote-exec asks with
leakhound's own interpreter. The attacks are made as an unprivileged user (uid 65534) against
leakhound running as root."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from leakhound.attach import process
from leakhound.attach.gdb import command as gdb_command
from tests.utils import AS_NOBODY, NOBODY, spawn_target

pytestmark = pytest.mark.integration

LEAKHOUND = [sys.executable, "-m", "leakhound"]



@contextlib.contextmanager
def swapped_sleep(home: Path) -> Iterator[tuple[int, Path]]:
    """The attack: uid 65534 starts ``~/python 600`` (a copy of sleep), then moves a script
    over that file. Yields the pid and the file the script would create if it ever ran."""
    exe = home / "python"
    shutil.copy("/bin/sleep", exe)
    os.chown(exe, NOBODY, NOBODY)
    proc = subprocess.Popen([*AS_NOBODY, str(exe), "600"], start_new_session=True)
    marker = home / "ran-as-root"
    try:
        deadline = time.monotonic() + 10
        while not os.path.realpath(f"/proc/{proc.pid}/exe").startswith(str(exe)):
            assert time.monotonic() < deadline, "the fake python never started"
            time.sleep(0.02)
        script = f"#!/bin/sh\nid -u > {marker}\n"
        subprocess.run([*AS_NOBODY, "sh", "-c", f"printf '{script}' > {home}/evil && chmod 755 {home}/evil "
                        f"&& mv {home}/evil {exe}"], check=True, timeout=10)
        yield proc.pid, marker
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _one_error_line(stderr: str) -> None:
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("leakhound: error:")]
    assert len(errors) == 1, stderr


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv")
def test_a_swapped_executable_is_never_run_by_inspect(nobody_dir: Path) -> None:
    with swapped_sleep(nobody_dir) as (pid, marker):
        result = subprocess.run([*LEAKHOUND, "inspect", str(pid)], capture_output=True, text=True, timeout=60)
        time.sleep(0.2)
        assert not marker.exists(), f"the target's script ran as uid {marker.read_text().strip()}"
    assert result.returncode == 4, result.stderr
    _one_error_line(result.stderr)
    assert "not a CPython process" in result.stderr


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv")
@pytest.mark.parametrize("command", [["watch", "-d", "1"], ["export", "--listen", "127.0.0.1:0"]],
                         ids=["watch", "export"])
def test_a_swapped_executable_is_never_run_by_match(nobody_dir: Path, command: list[str]) -> None:
    """``--match`` looks at every process whose command line matches: the swapped one is not
    CPython, so nothing matches (exit 3, TargetNotFound), and its script never ran."""
    with swapped_sleep(nobody_dir) as (pid, marker):
        result = subprocess.run([*LEAKHOUND, *command, "--match", f"{nobody_dir}/python 600"],
                                capture_output=True, text=True, timeout=60)
        time.sleep(0.2)
        assert not marker.exists(), f"the target's script ran as uid {marker.read_text().strip()}"
    assert result.returncode == 3, result.stderr
    _one_error_line(result.stderr)
    assert str(pid) not in result.stdout


def _no_subprocess(*args: object, **kwargs: object) -> None:
    raise AssertionError(f"leakhound ran a program to read a version: {args!r}")


def _pythons() -> dict[str, str]:
    """pyenv's 3.10-3.13 (shared builds: libpython mapped), the venv's interpreter (the same
    kind), and Debian's /usr/bin/python3 (a static build: libpython linked into the
    executable, no libpython mapped)."""
    from tests.pythons import installed_pythons

    found = {f"shared-{version}": path for version, path in installed_pythons().items()}
    found["venv"] = sys.executable
    if os.path.exists("/usr/bin/python3"):
        found["static-system"] = "/usr/bin/python3"
    return found


PYTHONS = _pythons()


@pytest.mark.parametrize("python", sorted(PYTHONS.values()), ids=sorted(PYTHONS))
def test_version_is_read_from_the_elf_without_running_anything(
    python: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    truth = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:2])"],
                           capture_output=True, text=True, check=True, timeout=30).stdout.split()
    with spawn_target("growing_cache", tmp_path, python=python) as child:
        # Any program started from here on fails the test (subprocess, os.exec*, os.spawn*).
        for name in ("run", "Popen", "call", "check_output"):
            monkeypatch.setattr(subprocess, name, _no_subprocess)
        for name in ("execv", "execve", "execvp", "execvpe", "posix_spawn", "posix_spawnp", "system"):
            monkeypatch.setattr(os, name, _no_subprocess)
        mapped = process._libpython_mapping(child.pid)
        version = process.python_version(child.pid)
        from_elf = process._elf_version(f"/proc/{child.pid}/map_files/{mapped[0]}", mapped[2]) if mapped else None
    assert version == (int(truth[0]), int(truth[1]))
    if python == "/usr/bin/python3":
        assert mapped is None  # the static build: the version came from the executable's ELF
    else:
        assert from_elf == version  # libpython's ELF data says it, not only its name


def test_a_static_build_renamed_still_reads_its_version(tmp_path: Path) -> None:
    """The executable's name says nothing: a static CPython named ``worker`` is CPython."""
    if not os.path.exists("/usr/bin/python3.11"):
        pytest.skip("needs Debian's static python3.11")
    renamed = tmp_path / "worker"
    shutil.copy("/usr/bin/python3.11", renamed)
    with spawn_target("growing_cache", tmp_path, python=str(renamed)) as child:
        assert process.python_version(child.pid) == (3, 11)


def test_sleep_named_python3_11_is_not_python(tmp_path: Path) -> None:
    """The executable's name alone never makes a process CPython."""
    fake = tmp_path / "python3.11"
    shutil.copy("/bin/sleep", fake)
    proc = subprocess.Popen([str(fake), "60"])
    try:
        time.sleep(0.2)
        assert process.python_version(proc.pid) is None
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(shutil.which("gdb") is None or not os.path.exists("/usr/bin/python3.11"),
                    reason="needs gdb and Debian's python3.11")
def test_gdb_loads_nothing_planted_beside_the_target(nobody_dir: Path) -> None:
    """Scripts a target's owner plants where gdb would auto-load them (``<objfile>-gdb.py``
    and ``-gdb.gdb`` beside the executable, ``.gdbinit`` in the target's cwd, which is the
    executable's directory) never run in root's gdb, even run from that directory."""
    exe = nobody_dir / "python3"
    shutil.copy("/usr/bin/python3.11", exe)
    os.chown(exe, NOBODY, NOBODY)
    marker = nobody_dir / "gdb-ran-it"
    Path(f"{exe}-gdb.py").write_text(f"open({str(marker)!r}, 'a').write('python\\n')\n")
    Path(f"{exe}-gdb.gdb").write_text(f"shell echo gdb >> {marker}\n")
    (nobody_dir / ".gdbinit").write_text(f"shell echo gdbinit >> {marker}\n")
    ready = nobody_dir / "ready"
    proc = subprocess.Popen(
        [*AS_NOBODY, str(exe), "-c", f"open({str(ready)!r}, 'w').close()\nimport time\nwhile True: time.sleep(0.05)"],
        cwd=nobody_dir, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 20
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the target never started"
            time.sleep(0.05)
        # A site whose gdb trusts every directory: plain gdb then runs the planted script
        # (the control: the plant works); leakhound's command line does not.
        permissive = ["-iex", "set auto-load safe-path /"]
        subprocess.run(["gdb", "-batch", *permissive, "-p", str(proc.pid)], cwd=nobody_dir,
                       capture_output=True, timeout=60)
        assert marker.exists(), "the control run did not load the planted script"
        marker.unlink()
        argv = gdb_command(proc.pid, str(nobody_dir / "status.json"))
        script = nobody_dir / "inject.py"  # leakhound's script swapped for one that does nothing
        script.write_text("")
        argv[argv.index("-x") + 1] = str(script)
        subprocess.run([argv[0], *permissive, *argv[1:]], cwd=nobody_dir, capture_output=True, timeout=60)
        assert not marker.exists(), marker.read_text()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
