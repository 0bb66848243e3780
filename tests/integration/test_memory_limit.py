"""Targets in a cgroup v1 memory cgroup whose limit is a little above their usage (made here,
removed after): below max(16 MiB, 1% RSS) of headroom every command refuses with exit 19 and
the target lives; above it an inspection succeeds within that cost, measured and reported, and
the target lives (issue 23: all of these were OOM-killed)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from leakhound.attach.memory_limit import MIB
from leakhound.errors import HeadroomTooSmall
from tests.memory_cgroup import MemoryCgroup, memory_cgroup, v1_memory_available
from tests.namespaces import shared_dir, spawn_in_namespaces
from tests.pythons import installed_pythons
from tests.utils import Child, spawn_target, wait_for_agent_socket

pytestmark = [
    pytest.mark.integration,
    pytest.mark.usefixtures("ptrace_ok"),
    pytest.mark.skipif(not v1_memory_available(), reason="needs root and a cgroup v1 memory hierarchy"),
]

LEAKHOUND = [sys.executable, "-m", "leakhound"]
EXIT_HEADROOM = HeadroomTooSmall.EXIT_CODE


@contextlib.contextmanager
def limited_target(heap_mb: int, headroom_mb: float, *, tmp: str | None = None, tmp_path: Path | None = None,
                   python: str | None = None) -> Iterator[tuple[Child, MemoryCgroup]]:
    """``fixtures/heap_of_size.py`` holding ``heap_mb`` MB, started inside a fresh memory
    cgroup whose limit is then set to its usage + ``headroom_mb`` MB. ``tmp``: the target in
    its own mount namespace with that tmpfs on /tmp ("" for a plain one, "noexec")."""
    env = {"FIXTURE_HEAP_MB": str(heap_mb)}
    with memory_cgroup() as group, shared_dir() as ready_dir:
        if tmp is None:
            assert tmp_path is not None
            spawned = spawn_target("heap_of_size", tmp_path, env=env, prefix=group.prefix, timeout=60, python=python)
        else:
            setup = f"mount -t tmpfs {'-o ' + tmp if tmp else ''} tmpfs /tmp"
            spawned = spawn_in_namespaces("heap_of_size", ready_dir, env=env, prefix=group.prefix, setup=setup,
                                          timeout=60, python=python)
        with spawned as child:
            group.limit_to(group.usage + int(headroom_mb * 1e6))
            group.reset_peak()
            yield child, group


def _alive(child: Child, group: MemoryCgroup) -> bool:
    return os.path.exists(f"/proc/{child.pid}") and child.pid in group.pids() and group.oom_kills() == 0


def _leakhound(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*LEAKHOUND, *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("command", [
    ["inspect"], ["inspect", "--owners", "dominator"], ["watch", "-d", "5", "-i", "1"], ["patch", "--fix", "trim"],
], ids=["inspect", "dominator", "watch", "patch"])
def test_too_little_headroom_is_refused_and_the_target_lives(command: list[str], tmp_path: Path) -> None:
    with limited_target(100, 7, tmp_path=tmp_path) as (child, group):
        before = group.usage
        done = _leakhound(command[0], str(child.pid), *command[1:])
        assert done.returncode == EXIT_HEADROOM, done.stderr
        error = [line for line in done.stderr.splitlines() if "error:" in line]
        assert len(error) == 1 and "of memory left under its limit" in error[0], done.stderr
        assert "at least 16.0 MiB" in error[0] and "--force" in done.stderr
        assert _alive(child, group)
        # refused before the target was touched: nothing of leakhound's charged to it
        assert group.peak - before < 1 * MIB


def test_rlimit_as_too_close_is_refused(tmp_path: Path) -> None:
    env = {"FIXTURE_HEAP_MB": "20"}
    with spawn_target("heap_of_size", tmp_path, env=env) as child:
        status = Path(f"/proc/{child.pid}/status").read_text()
        vm_size = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmSize"))) * 1024
        subprocess.run(["prlimit", f"--pid={child.pid}", f"--as={vm_size + 7 * MIB}"], check=True)
        done = _leakhound("inspect", str(child.pid))
        assert done.returncode == EXIT_HEADROOM, done.stderr
        assert "RLIMIT_AS" in done.stderr
        assert child.proc.poll() is None


def test_force_is_the_documented_override() -> None:
    for command in ("inspect", "watch", "patch", "export"):
        shown = _leakhound(command, "--help")
        assert "--force" in shown.stdout, command
    assert "| 19 | HeadroomTooSmall" in (Path(__file__).parents[2] / "docs" / "errors.md").read_text()


def _inspect_json(pid: int, *args: str) -> dict[str, Any]:
    done = _leakhound("inspect", str(pid), "--json", *args)
    assert done.returncode == 0, done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def _assert_cost_within_budget_and_measured(doc: dict[str, Any], group: MemoryCgroup, before: int) -> None:
    cost = doc["cost"]
    rss = doc["process"]["rss_bytes"]
    allowed = max(16 * MIB, rss // 100)
    assert cost["budget_bytes"] is not None and cost["budget_bytes"] <= allowed
    assert "cgroup v1" in cost["limit"]
    # the cgroup's own high-water mark over the request (reset before it) is what was reported
    charged = group.peak - before
    assert cost["cgroup_peak_bytes"] is not None
    assert abs(cost["cgroup_peak_bytes"] - charged) <= 1 * MIB, (cost, charged)
    assert charged <= allowed, (cost, charged)
    assert 0 < cost["hwm_bytes"] <= allowed


def test_enough_headroom_with_tmp_on_tmpfs_succeeds_within_the_budget() -> None:
    # 100 MB heap, +50 MB: a default inspection charged its cgroup +54 MB here before (killed)
    with limited_target(100, 50, tmp="") as (child, group):
        before = group.usage
        doc = _inspect_json(child.pid)
        assert _alive(child, group)
        _assert_cost_within_budget_and_measured(doc, group, before)
        # the census counted the target's records all the same
        records = child.report()["truth"]["records"]
        assert any(t["type"] == "dict" and t["count"] >= records for t in doc["types"])


def test_a_bigger_heap_near_its_limit_succeeds_or_gives_up_the_graph() -> None:
    # 300 MB heap, +20 MB: killed by a default inspection before
    with limited_target(300, 20, tmp="") as (child, group):
        before = group.usage
        doc = _inspect_json(child.pid)
        assert _alive(child, group)
        _assert_cost_within_budget_and_measured(doc, group, before)
        assert doc["heap"]["owner_model"] in ("dominator", "not-attributed")
        if doc["heap"]["owner_model"] == "dominator":
            assert doc["owners"][0]["path"] == "__main__.RECORDS"
        else:  # the graph given up: no owner named, rather than a first reacher
            assert doc["heap"]["owner_model_reason"] == "graph_no_headroom", doc["heap"]
            assert doc["owners"][0]["path"] == "<not attributed: no room for the graph under the memory limit>"


def test_the_pure_python_fallback_keeps_to_the_budget_too() -> None:
    # noexec /tmp: the compiled walk cannot load; its Python loop's graph took +85 MB before
    with limited_target(100, 50, tmp="noexec") as (child, group):
        before = group.usage
        doc = _inspect_json(child.pid)
        assert _alive(child, group)
        assert doc["heap"]["walker"] == "python"
        assert "Python loop" in doc["heap"]["owner_model_note"]
        _assert_cost_within_budget_and_measured(doc, group, before)


def test_a_watch_with_enough_headroom_keeps_the_target(tmp_path: Path) -> None:
    with limited_target(100, 50, tmp_path=tmp_path) as (child, group):
        before = group.usage
        done = _leakhound("watch", str(child.pid), "-d", "6", "-i", "2", "--full-every", "4", "--json")
        assert done.returncode == 0, done.stderr
        assert _alive(child, group)
        samples = [json.loads(line) for line in done.stdout.splitlines() if '"sample"' in line]
        assert len(samples) >= 3
        # Each request keeps to its budget over what the target held when it began, and that
        # includes what earlier requests left resident (the payload's modules, the allocator's
        # arenas of the first census): the watch's censuses are inspect's (the object graph).
        left = group.usage - before
        assert group.peak - before <= 16 * MIB + max(0, left), ((group.peak - before) / MIB, left / MIB)


def test_force_goes_ahead_below_the_needed_headroom(tmp_path: Path) -> None:
    # 20 MB heap, +12 MB (< 16 MiB): refused; forced, the census alone (~4 MB here) fits
    with limited_target(20, 12, tmp_path=tmp_path) as (child, group):
        assert _leakhound("inspect", str(child.pid), "--owners", "census").returncode == EXIT_HEADROOM
        before = group.usage
        doc = _inspect_json(child.pid, "--owners", "census", "--force")
        assert _alive(child, group)
        assert doc["cost"]["budget_bytes"] == 16 * MIB and doc["cost"]["headroom_bytes"] < 12 * MIB
        assert abs(doc["cost"]["cgroup_peak_bytes"] - (group.peak - before)) <= 1 * MIB


def test_export_skips_a_worker_without_the_headroom_and_says_so(tmp_path: Path) -> None:
    from leakhound.core.export import Exporter
    from leakhound.core.request import RequestOptions

    notes: list[str] = []
    with limited_target(100, 7, tmp_path=tmp_path) as (child, group):
        exporter = Exporter(pids=(child.pid,), match=None, request=RequestOptions(timeout=60.0), interval=60.0,
                            note=notes.append)
        exporter.refresh()
        assert _alive(child, group)
        (view,) = exporter.views()
        assert view.snapshot is None and view.errors == 0
        assert len(notes) == 1 and "skipped this round" in notes[0] and "of memory left" in notes[0]


def test_the_agent_keeps_to_the_budget_too(tmp_path: Path) -> None:
    env = {"FIXTURE_HEAP_MB": "100", "LEAKHOUND_AGENT": "1"}
    with memory_cgroup() as group, spawn_target("heap_of_size", tmp_path, env=env, prefix=group.prefix,
                                                timeout=60) as child:
        wait_for_agent_socket(child.pid)
        group.limit_to(group.usage + 50_000_000)
        group.reset_peak()
        before = group.usage
        doc = _inspect_json(child.pid, "--method", "agent")
        assert _alive(child, group)
        assert doc["method"] == "agent"
        _assert_cost_within_budget_and_measured(doc, group, before)


def test_the_payloads_first_load_is_not_the_targets_growth(tmp_path: Path) -> None:
    # a small steady target: what the first request leaves (its modules, ~4 MB; the allocator's
    # arenas of its first census, ~2 MB) read as growth of MiB a minute before
    with spawn_target("heap_of_size", tmp_path, env={"FIXTURE_HEAP_MB": "2"}) as child:
        done = _leakhound("watch", str(child.pid), "-d", "8", "-i", "2", "--json")
        assert done.returncode == 0, done.stderr
        rss = [json.loads(line)["rss_bytes"] for line in done.stdout.splitlines() if '"sample"' in line]
        truth = child.report()["rss_bytes"]
    assert len(rss) >= 4
    assert max(rss) - min(rss) < 1 * MIB, rss
    # the series is the worker's own RSS (less what leakhound left in it)
    assert rss[0] <= truth


# A process of the target's cgroup that takes 40 MB when told to (a line on its stdin).
_CGROUP_MATE = (
    "import sys\n"
    "print('ready', flush=True)\n"
    "sys.stdin.readline()\n"
    "b = bytearray(40 << 20)\n"
    "for i in range(0, len(b), 4096): b[i] = 1\n"
    "print('grown', flush=True)\n"
    "sys.stdin.readline()\n"
)


def _in_private_dir(parent: Path, name: str, timeout: float = 60.0) -> None:
    """Wait for ``name`` in the request's private directory (made under ``parent``)."""
    deadline = time.monotonic() + timeout
    while not list(parent.glob(f"leakhound-*/{name}")):
        assert time.monotonic() < deadline, f"no {name} in the request's private directory after {timeout}s"
        time.sleep(0.002)


def test_the_cli_stops_a_request_while_the_cgroup_grows_past_its_budget(tmp_path: Path) -> None:
    # Another process of the target's cgroup takes 40 MB during the inspection (the payload
    # cannot see it: its RSS is not the target's): the CLI cancels the request, exit 19.
    # In this order whatever the machine's load (on a loaded one a mate that grew after a
    # sleep grew after the census had finished): the payload reports progress, the target is
    # stopped (its census cannot finish meanwhile), the mate grows, the CLI asks the payload
    # to stop (its `cancel` file), the target goes on and answers that it stopped.
    private = tmp_path / "private"  # the CLI's TMPDIR: its private directory is made here
    private.mkdir(mode=0o700)
    env = {**os.environ, "LEAKHOUND_WALKER": "python", "TMPDIR": str(private)}  # a census of seconds
    with limited_target(100, 90, tmp_path=tmp_path) as (child, group):
        mate = subprocess.Popen([*group.prefix, sys.executable, "-c", _CGROUP_MATE], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        assert mate.stdin is not None and mate.stdout is not None
        try:
            assert mate.stdout.readline() == "ready\n"
            cli = subprocess.Popen([*LEAKHOUND, "inspect", str(child.pid), "--owners", "census"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
            try:
                _in_private_dir(private, "progress.json")
                os.kill(child.pid, signal.SIGSTOP)
                try:
                    mate.stdin.write("grow\n")
                    mate.stdin.flush()
                    assert mate.stdout.readline() == "grown\n"
                    _in_private_dir(private, "cancel")
                finally:
                    os.kill(child.pid, signal.SIGCONT)
                _, stderr = cli.communicate(timeout=120)
            finally:
                if cli.poll() is None:
                    cli.kill()
                    cli.wait()
            assert cli.returncode == EXIT_HEADROOM, stderr
            assert "its memory cgroup grew" in stderr and "nothing of it is left running" in stderr
            assert _alive(child, group) and mate.poll() is None
        finally:
            mate.kill()
            mate.wait()


@pytest.mark.parametrize("version", sorted(installed_pythons()))
def test_targets_on_every_python_keep_to_the_budget(version: str) -> None:
    with limited_target(100, 50, tmp="", python=installed_pythons()[version]) as (child, group):
        before = group.usage
        doc = _inspect_json(child.pid)
        assert _alive(child, group)
        assert doc["python_version"].startswith(version + ".")
        _assert_cost_within_budget_and_measured(doc, group, before)
