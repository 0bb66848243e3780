"""A process of the target's user attacks the private directory of a root ``leakhound inspect``.

The target runs as uid 65534; a "planter" of the same uid watches the directory the private
directory is made in and, as soon as a ``leakhound-*`` directory there lets it in, plants
symlinks (to a root-owned 0644 canary file and a root-owned canary directory, both outside,
on the host) and FIFOs under every name root writes or reads there. leakhound runs as root
with ``--method ptrace`` and ``--method gdb``, the target on the host (the private directory
in leakhound's own $TMPDIR, a sticky 1777 directory as /tmp is) and in a "container" (its own
mount namespace and tmpfs /tmp, tests/namespaces.py), and once with a symlinked $TMPDIR in
the container pointing at a host directory.

Whatever is planted: the canaries are unchanged (content, owner, mode; the canary
directory's entries and mtime), the command succeeds or fails with one clear line and a
documented exit code (never a traceback, never a hang), no private directory is left, and a
planted ``cancel`` is never reported as "did not finish in time".
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.namespaces import shared_dir, spawn_in_namespaces
from tests.utils import spawn_target

pytestmark = [
    pytest.mark.integration,
    pytest.mark.usefixtures("ptrace_ok"),
    pytest.mark.skipif(shutil.which("setpriv") is None or not os.path.exists("/usr/bin/python3"),
                       reason="needs setpriv and the system python (runs as uid 65534)"),
]

ROOT = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = "/usr/bin/python3"  # readable by uid 65534 (the venv's lives under root's 0700 home)
NOBODY = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]
CANARY_TEXT = "root's canary: must never change\n"

# What the planter puts in each private directory, by mode: (name, "link", "fifo" or an empty
# "file", the link to what).
# "writes": every name root creates or replaces there (an inspection still succeeds);
# "reads": every name root reads, as FIFOs and links (it may fail, clearly: the payload, as the
# target's user, may also trip over them);
# "cancel": a cancel leakhound did not write.
PLANTS = {
    "writes": [("request.json.tmp", "link", "file"), ("names.request.json.tmp", "link", "file"),
               ("ptrace-helper.pid", "link", "file"), ("remote_exec_boot.py", "link", "file"),
               ("names.request.json", "link", "dir")],
    "reads": [("result.json", "fifo", ""), ("progress.json", "fifo", ""), ("started.json", "link", "file"),
              ("graph.json", "link", "file"), ("graph.bin", "link", "dir")],
    "cancel": [("cancel", "file", "")],
}

PLANTER = r'''
import os, sys, time
parent, canary_file, canary_dir, log, spec = sys.argv[1:6]
plan = [item.split(":") for item in spec.split(",")]
done = set()
while True:
    try:
        names = os.listdir(parent)
    except OSError:
        names = []
    for d in names:
        if not d.startswith("leakhound-") or d in done:
            continue
        where = os.path.join(parent, d)
        planted = []
        for name, kind, to in plan:
            path = os.path.join(where, name)
            try:
                if kind == "fifo":
                    os.mkfifo(path, 0o666)
                elif kind == "file":
                    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
                else:
                    os.symlink(canary_file if to == "file" else canary_dir, path)
                planted.append(name)
            except FileExistsError:
                pass
            except OSError:
                break  # not handed over yet (root's and 0700), or gone
        else:
            done.add(d)
            with open(log, "a") as fh:
                fh.write("%s %s\n" % (d, " ".join(planted)))
    time.sleep(0.0002)
'''


@dataclass
class Canaries:
    file: Path
    dir: Path

    def state(self) -> tuple[object, ...]:
        f, d = os.lstat(self.file), os.lstat(self.dir)
        return (self.file.read_text(), f.st_uid, f.st_gid, stat.S_IMODE(f.st_mode), f.st_nlink,
                sorted(os.listdir(self.dir)), d.st_uid, stat.S_IMODE(d.st_mode), d.st_mtime_ns)


@contextlib.contextmanager
def canaries() -> Iterator[Canaries]:
    """A root-owned 0644 file and a root-owned 0755 directory in the host's /tmp (out of a
    container's sight: it has its own /tmp)."""
    base = Path(tempfile.mkdtemp(prefix="lh-canary-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        file, directory = base / "canary", base / "dir"
        file.write_text(CANARY_TEXT)
        os.chmod(file, 0o644)
        directory.mkdir(mode=0o755)
        os.chmod(directory, 0o755)
        yield Canaries(file, directory)
    finally:
        shutil.rmtree(base, ignore_errors=True)


@contextlib.contextmanager
def planter(parent: str, canary: Canaries, mode: str, log: Path) -> Iterator[None]:
    """The planter as uid 65534, watching ``parent``; killed afterwards."""
    script = log.parent / "planter.py"
    script.write_text(PLANTER)
    os.chmod(script, 0o644)
    spec = ",".join(":".join(item) for item in PLANTS[mode])
    proc = subprocess.Popen([*NOBODY, SYSTEM_PYTHON, str(script), parent, str(canary.file), str(canary.dir),
                             str(log), spec], stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        time.sleep(0.3)
        assert proc.poll() is None, "the planter did not start"
        yield
    finally:
        proc.kill()
        proc.wait(timeout=10)


def _documented_exit_codes() -> set[int]:
    text = (ROOT / "docs" / "errors.md").read_text()
    return {int(code) for code in re.findall(r"^\| (\d+) \|", text, flags=re.M)}


def _inspect(pid: int, method: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "leakhound", "inspect", str(pid), "--method", method, "--timeout", "30", "-n", "3"]
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=90, env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"leakhound hung (planted FIFO?): {exc}")


def _leakhound_entries(directory: str) -> list[str]:
    try:
        return sorted(name for name in os.listdir(directory) if name.startswith("leakhound-"))
    except FileNotFoundError:
        return []


def _wait_gone(directory: str, timeout: float = 15.0) -> list[str]:
    """The private directories still in ``directory`` once the ptrace helper, which removes
    it after the CLI, has had ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while _leakhound_entries(directory) and time.monotonic() < deadline:
        time.sleep(0.1)
    return _leakhound_entries(directory)


def _check(out: subprocess.CompletedProcess[str], mode: str, canary: Canaries, before: tuple[object, ...],
           left: list[str], log: Path) -> None:
    assert canary.state() == before, "a canary outside the private directory was changed"
    assert left == [], f"private directories left behind: {left}"
    assert "Traceback" not in out.stderr, out.stderr
    assert out.returncode in _documented_exit_codes(), (out.returncode, out.stderr)
    if out.returncode != 0:
        errors = [line for line in out.stderr.splitlines() if line.startswith("leakhound: error:")]
        assert len(errors) == 1, out.stderr
    if mode == "writes":
        assert out.returncode == 0, out.stderr  # nothing it writes can be redirected: it works
    if mode == "cancel":
        assert "did not finish in time" not in out.stderr, out.stderr
        assert out.returncode == 0 or "private directory" in out.stderr, out.stderr
    assert log.exists() and log.read_text().strip(), "the planter never got into a private directory"


@contextlib.contextmanager
def _shared(prefix: str) -> Iterator[Path]:
    """A sticky 1777 directory outside /tmp (as /tmp is): the target's ready file, the
    planter's log, and, in the host layout, leakhound's $TMPDIR."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/run" if os.access("/run", os.W_OK) else None))
    os.chmod(path, 0o1777)
    try:
        yield path
    finally:
        subprocess.run(["rm", "-rf", str(path)], check=False)


@pytest.mark.parametrize("mode", sorted(PLANTS))
@pytest.mark.parametrize("method", ["ptrace", "gdb"])
def test_planted_names_in_the_host_layout(method: str, mode: str) -> None:
    with _shared("lh-attack-") as shared, canaries() as canary:
        parent = shared / "tmp"
        parent.mkdir()
        os.chmod(parent, 0o1777)
        log = shared / "planted.log"
        with spawn_target("growing_cache", shared, python=SYSTEM_PYTHON, prefix=NOBODY) as child:
            before = canary.state()
            with planter(str(parent), canary, mode, log):
                out = _inspect(child.pid, method, env={"TMPDIR": str(parent)})
                left = _wait_gone(str(parent))
            alive = child.proc.poll() is None
        _check(out, mode, canary, before, left, log)
        assert alive


@pytest.mark.parametrize("mode", sorted(PLANTS))
@pytest.mark.parametrize("method", ["ptrace", "gdb"])
def test_planted_names_in_the_container_layout(method: str, mode: str) -> None:
    with shared_dir() as ready_dir, canaries() as canary, \
            spawn_in_namespaces("growing_cache", ready_dir, prefix=NOBODY, python=SYSTEM_PYTHON) as child:
        parent = f"/proc/{child.pid}/root/tmp"
        log = ready_dir / "planted.log"
        before = canary.state()
        with planter(parent, canary, mode, log):
            out = _inspect(child.pid, method)
            left = _wait_gone(parent)
        alive = child.proc.poll() is None
        _check(out, mode, canary, before, left, log)
        assert alive


@pytest.mark.parametrize("method", ["ptrace", "gdb"])
def test_a_symlinked_tmpdir_in_the_container_is_skipped(method: str) -> None:
    """The target's $TMPDIR is a symlink (its user made it) to a host directory: leakhound
    makes nothing there (it used to: the link was resolved in the host's root) and uses the
    container's /tmp instead."""
    with shared_dir() as ready_dir, canaries() as canary:
        setup = (f"mount -t tmpfs tmpfs /tmp && chmod 1777 /tmp && ln -s {canary.dir} /tmp/redirect "
                 f"&& chown -h 65534:65534 /tmp/redirect")
        with spawn_in_namespaces("growing_cache", ready_dir, prefix=NOBODY, python=SYSTEM_PYTHON, setup=setup,
                                 env={"TMPDIR": "/tmp/redirect"}) as child:
            before = canary.state()
            out = _inspect(child.pid, method)
            left = _wait_gone(f"/proc/{child.pid}/root/tmp") + _wait_gone(str(canary.dir))
            alive = child.proc.poll() is None
        assert canary.state() == before, "leakhound made its private directory in the host directory"
        assert left == []
        assert out.returncode == 0, out.stderr
        assert alive
