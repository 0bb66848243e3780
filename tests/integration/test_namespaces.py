"""A target in its own mount and pid namespaces (as in a container or beside a sidecar), with
the real ptrace and gdb methods: the payload is handed over inside the target's filesystem
and nothing is left there; when it cannot be, the error says so."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from leakhound.attach import run_request
from leakhound.attach.process import namespace_pid
from leakhound.core.capture import take_snapshot
from leakhound.core.request import RequestOptions
from leakhound.model.names import Method
from tests.namespaces import shared_dir, spawn_in_namespaces
from tests.utils import assert_only_the_payload_stays, within

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]

LEAKHOUND = [sys.executable, "-m", "leakhound"]
NOBODY = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]


def _leakhound_entries(directory: Path) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.startswith("leakhound-"))


@pytest.mark.parametrize("as_init", [False, True], ids=["child", "pid1"])
@pytest.mark.parametrize("method", ["ptrace", "gdb"])
def test_inspect_a_target_with_its_own_tmp_and_pids(method: str, as_init: bool) -> None:
    with shared_dir() as ready_dir, spawn_in_namespaces("growing_cache", ready_dir, as_init=as_init) as child:
        before = child.report()
        # The target's own pid differs from the one leakhound is given, and is read from NStgid.
        assert before["pid"] != child.pid
        assert namespace_pid(child.pid) == before["pid"]
        assert (before["pid"] == 1) == as_init
        snap = take_snapshot(child.pid, request=RequestOptions(method=Method(method), timeout=60))
        after = child.report()
        assert _leakhound_entries(child.inside("/tmp")) == []
        assert child.proc.poll() is None
    assert snap.method == method
    assert snap.owners[0].path == "__main__.CACHE"
    assert snap.owners[0].items == after["truth"]["cache_items"]
    assert within(snap.owners[0].retained_bytes, after["truth"]["cache_bytes"])
    assert_only_the_payload_stays(after["leakhound_modules"])


OTHER_PYTHONS = {
    version: str(path)
    for version in ("3.10", "3.12", "3.13")
    for path in sorted(Path("/root/.pyenv/versions").glob(f"{version}.*/bin/python"))[-1:]
}


@pytest.mark.parametrize("version", sorted(OTHER_PYTHONS))
def test_inspect_across_namespaces_on_other_pythons(version: str) -> None:
    """Targets run on the CPython the worker uses, not leakhound's: the payload copied into
    the target's own /tmp loads there."""
    with shared_dir() as ready_dir, spawn_in_namespaces(
        "growing_cache", ready_dir, python=OTHER_PYTHONS[version]
    ) as child:
        snap = take_snapshot(child.pid, request=RequestOptions(method=Method.PTRACE, timeout=60))
        after = child.report()
        assert _leakhound_entries(child.inside("/tmp")) == []
    assert snap.python_version.startswith(version + ".")
    assert snap.owners[0].path == "__main__.CACHE"
    assert within(snap.owners[0].retained_bytes, after["truth"]["cache_bytes"])


def test_private_directory_is_the_targets_user_only_and_removed() -> None:
    """The directory made inside the target's /tmp is owned by the target's user (here not
    leakhound's), mode 0700, holds the payload, and is gone afterwards."""
    seen: list[tuple[int, int, list[str]]] = []
    with shared_dir() as ready_dir, spawn_in_namespaces("growing_cache", ready_dir, prefix=NOBODY) as child:
        tmp = child.inside("/tmp")

        def progress(_phase: str, _done: int) -> None:
            for name in _leakhound_entries(tmp):
                st = os.stat(tmp / name)
                seen.append((st.st_uid, stat.S_IMODE(st.st_mode), sorted(os.listdir(tmp / name))))

        remote = run_request(child.pid, {"op": "snapshot", "top_types": 5, "top_owners": 5},
                             method=Method.PTRACE, timeout=60, progress=progress)
        truth = child.report()
        assert _leakhound_entries(tmp) == []
    assert remote.result["ok"]
    assert seen, "the payload reported no progress while its directory existed"
    uid, mode, names = seen[0]
    assert (uid, mode) == (65534, 0o700)
    assert "payload" in names and "boot.py" in names
    assert truth["truth"]["cache_items"] > 0


def test_payload_loads_inside_a_target_that_cannot_see_leakhound() -> None:
    """The target's filesystem has no leakhound at all (its /work is an empty tmpfs, as in a
    container built without it): the payload it runs came through the private directory."""
    with shared_dir() as ready_dir:
        # The fixture and its interpreter stay reachable; leakhound's checkout does not.
        fixture_copy = ready_dir / "fixtures"
        subprocess.run(["cp", "-r", str(Path(__file__).parents[2] / "fixtures"), str(fixture_copy)], check=True)
        base = getattr(sys, "_base_executable", sys.executable)
        # (a checkout under /tmp is already out of its sight once /tmp is a fresh tmpfs)
        root = Path(__file__).parents[2]
        check = f"mount -t tmpfs tmpfs /tmp && {{ [ ! -d {root} ] || mount -t tmpfs tmpfs {root}; }}"
        with spawn_in_namespaces("growing_cache", ready_dir, setup=check, python=base,
                                 fixtures=fixture_copy) as child:
            assert not child.inside(str(Path(__file__).parents[2] / "leakhound")).exists()
            snap = take_snapshot(child.pid, request=RequestOptions(method=Method.PTRACE, timeout=60))
            truth = child.report()["truth"]
            assert _leakhound_entries(child.inside("/tmp")) == []
    assert snap.owners[0].path == "__main__.CACHE"
    assert within(snap.owners[0].retained_bytes, truth["cache_bytes"])


def test_no_writable_directory_in_the_target_is_said_clearly() -> None:
    ro = "mount -t tmpfs -o ro tmpfs"
    setup = f"{ro} /tmp && {ro} /dev/shm && {ro} /var/tmp"
    with shared_dir() as ready_dir, spawn_in_namespaces("growing_cache", ready_dir, setup=setup) as child:
        began = child.report()["ticks"]
        out = subprocess.run([*LEAKHOUND, "inspect", str(child.pid), "--method", "ptrace", "--timeout", "20"],
                             capture_output=True, text=True, timeout=120)
        time.sleep(0.1)
        after = child.report()
        with open(f"/proc/{child.pid}/status") as fh:
            state = next(line.split()[1] for line in fh if line.startswith("State:"))
    assert out.returncode == 7, out.stderr
    assert "another mount namespace" in out.stderr and "/proc/" in out.stderr
    assert "hint:" in out.stderr and "writable /tmp" in out.stderr and "LEAKHOUND_AGENT=1" in out.stderr
    # Said before anything was done to the target: it kept running, never stopped.
    assert after["ticks"] > began and state in ("S", "R")
    assert after["leakhound_modules"] == []
