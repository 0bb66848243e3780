"""inspect against real target programs, checked against what each target knows about itself."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from leakhound.cli import app
from leakhound.core.capture import take_snapshot
from leakhound.core.request import RequestOptions
from leakhound.model.names import Method, Owners
from tests.utils import assert_only_the_payload_stays, spawn_target, wait_for_agent_socket, within

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]

METHODS = ["ptrace", "gdb", "agent"]


def _env(method: str) -> dict[str, str]:
    return {"LEAKHOUND_AGENT": "1"} if method == "agent" else {"LEAKHOUND_AGENT": ""}


def _wait_agent(pid: int, method: str) -> None:
    if method != "agent":
        return
    wait_for_agent_socket(pid)


def _user_owners(snapshot):  # noqa: ANN001, ANN202
    return [o for o in snapshot.owners if not o.path.startswith("<")]


@pytest.mark.parametrize("method", METHODS)
def test_module_cache_is_top_owner_with_its_own_size(tmp_path: Path, method: str) -> None:
    with spawn_target("growing_cache", tmp_path, env=_env(method)) as child:
        _wait_agent(child.pid, method)
        snap = take_snapshot(child.pid, request=RequestOptions(method=Method(method), timeout=60))
        truth = child.report()["truth"]
    top = snap.owners[0]
    assert snap.method == method
    assert top.path == "__main__.CACHE"
    assert top.items == truth["cache_items"]
    assert within(top.retained_bytes, truth["cache_bytes"]), (top.retained_bytes, truth)


@pytest.mark.parametrize("method", METHODS)
def test_attribute_chain_owners_and_cyclic_garbage(tmp_path: Path, method: str) -> None:
    with spawn_target("instance_graph", tmp_path, env=_env(method)) as child:
        _wait_agent(child.pid, method)
        snap = take_snapshot(child.pid, request=RequestOptions(method=Method(method), timeout=60))
        truth = child.report()["truth"]
    owners = _user_owners(snap)
    assert owners[0].path == "__main__.APP.bus._listeners"
    assert within(owners[0].retained_bytes, truth["listeners_bytes"])
    rows = next(o for o in owners if o.path == "__main__.APP.store.rows")
    assert owners.index(rows) == 1
    assert within(rows.retained_bytes, truth["rows_bytes"])
    nodes = {t.type: t for t in snap.cyclic_garbage.types}["__main__.Node"]
    assert nodes.count == truth["garbage_objects"] * 2 // 3
    assert snap.cyclic_garbage.bytes >= truth["garbage_bytes"] * 0.9
    assert any(f.kind == "cyclic_garbage" for f in snap.findings)


@pytest.mark.parametrize("method", METHODS)
def test_trimmable_prediction_matches_what_trim_releases(tmp_path: Path, method: str) -> None:
    with spawn_target("fragmentation", tmp_path, env=_env(method)) as child:
        _wait_agent(child.pid, method)
        snap = take_snapshot(child.pid, request=RequestOptions(method=Method(method), timeout=60))
        released = child.signal_and_report(signal.SIGUSR2)["truth"]["trim_released_bytes"]
    finding = next(f for f in snap.findings if f.kind == "arena_fragmentation")
    assert finding.fix == "trim"
    assert within(snap.arena.trimmable_bytes, released, 0.10), (snap.arena.trimmable_bytes, released)
    # The freed buffers are not live: the ledger must not count them as Python objects.
    assert snap.heap.bytes < snap.process.rss_bytes - released * 0.8


@pytest.mark.gdb
def test_gdb_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private_tmp))  # where the channel is made
    with spawn_target("growing_cache", tmp_path) as child:
        before = child.report()
        take_snapshot(child.pid, request=RequestOptions(method=Method.GDB, timeout=60))
        time.sleep(0.3)  # the payload thread exits right after writing its result
        after = child.report()
        assert len(os.listdir(f"/proc/{child.pid}/task")) == 1
    assert after["main_globals"] == before["main_globals"]
    assert_only_the_payload_stays(after["leakhound_modules"])
    assert after["threads"] == before["threads"]
    assert list(private_tmp.iterdir()) == []


@pytest.fixture(scope="session")
def bare_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with nothing installed: the target must not need leakhound."""
    path = tmp_path_factory.mktemp("bare") / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(path)], check=True)
    return path / "bin" / "python"


def test_target_in_a_separate_venv_without_leakhound(tmp_path: Path, bare_venv: Path) -> None:
    check = subprocess.run([str(bare_venv), "-c", "import leakhound"], capture_output=True, cwd=tmp_path)
    assert check.returncode != 0, "the bare venv must not see leakhound"
    with spawn_target("growing_cache", tmp_path, python=str(bare_venv)) as child:
        snap = take_snapshot(child.pid, request=RequestOptions(method=Method.AUTO, timeout=60))
        truth = child.report()["truth"]
    assert snap.method == "ptrace"  # auto: no agent here, Python < 3.14, x86-64
    assert snap.owners[0].path == "__main__.CACHE"
    assert within(snap.owners[0].retained_bytes, truth["cache_bytes"])


def test_cli_json_document(tmp_path: Path) -> None:
    with spawn_target("growing_cache", tmp_path) as child:
        result = CliRunner().invoke(app, ["inspect", str(child.pid), "--json", "--save", str(tmp_path / "s.json")])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["schema"] == "leakhound.snapshot/2"
    assert set(doc) >= {"pid", "taken_at", "python_version", "method", "process", "heap", "arena"}
    assert set(doc) >= {"types", "owners", "findings"}
    assert set(doc["process"]) >= {"rss_bytes", "uss_bytes", "pss_bytes", "swap_bytes", "num_threads"}
    assert set(doc["heap"]) >= {"objects", "bytes", "census_seconds", "max_pause_ms"}
    assert set(doc["arena"]) >= {"malloc_in_use_bytes", "malloc_free_bytes", "trimmable_bytes"}
    assert "pymalloc_free_bytes" in doc["arena"]
    assert json.loads((tmp_path / "s.json").read_text())["pid"] == doc["pid"]
    bytes_ = [o["retained_bytes"] for o in doc["owners"]]
    assert bytes_ == sorted(bytes_, reverse=True)


def test_not_a_python_process_is_a_clear_error() -> None:
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        result = CliRunner().invoke(app, ["inspect", str(sleeper.pid)])
    finally:
        sleeper.kill()
        sleeper.wait()
    assert result.exit_code == 4
    assert "not a CPython process" in result.output
    assert "Traceback" not in result.output


def _python314() -> str | None:
    for name in ("python3.14", "python3.15"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.mark.skipif(_python314() is None, reason="no Python 3.14+ interpreter installed here")
def test_remote_exec_method_on_python_314(tmp_path: Path) -> None:
    python = _python314()
    assert python is not None
    with spawn_target("growing_cache", tmp_path, python=python) as child:
        snap = take_snapshot(child.pid, request=RequestOptions(method=Method.REMOTE_EXEC, timeout=60))
        truth = child.report()["truth"]
    assert snap.method == "remote-exec"
    assert snap.owners[0].path == "__main__.CACHE"
    assert within(snap.owners[0].retained_bytes, truth["cache_bytes"])


@pytest.mark.parametrize("owners", ["census", "dominator"])
def test_the_payload_is_one_owner_of_its_own(tmp_path: Path, owners: str) -> None:
    """The payload stays loaded between inspections (docs/inspect.md): its functions and
    classes are leakhound's, one owner named so, never a list of the target's owners
    (``_leakhound_payload.runner._Stop.check`` was owner #11 of the real worker)."""
    from leakhound.model.names import PAYLOAD_OWNER, PAYLOAD_PACKAGE
    from leakhound.payload import census_roots

    assert census_roots.PAYLOAD_OWNER == PAYLOAD_OWNER  # one name, spelt on both sides
    with spawn_target("growing_cache", tmp_path) as child:
        take_snapshot(child.pid, owners=Owners(owners))
        again = take_snapshot(child.pid, owners=Owners(owners), top=200)
    paths = [o.path for o in again.owners]
    assert not [p for p in paths if p.startswith(PAYLOAD_PACKAGE)], paths
    assert paths.count(PAYLOAD_OWNER) == 1, paths
