"""An inspection leaves the target's collector as the target set it, for every thread and for
every child it forks meanwhile (fixtures/gc_state_worker.py: the real verifiers worker's
``gc.set_threshold(150000, 10, 10)``; the target counts, from inside, each gc state it did not
set itself).

A child forked while the payload runs inherits the payload's state, not its thread: it is
born with the collector as its parent's threads had set it, and a later inspection of it is
answered (no "another leakhound request is running", exit 9).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from leakhound.core.capture import take_snapshot
from leakhound.core.request import RequestOptions
from leakhound.model.names import Method, Owners
from tests.pythons import installed_pythons
from tests.utils import spawn_target

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]

PYTHONS = {v: p for v, p in installed_pythons().items() if v in ("3.10", "3.11", "3.12", "3.13")}
LEAKHOUND = [sys.executable, "-m", "leakhound"]


def _children(path: Path) -> list[dict[str, object]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("version", sorted(PYTHONS))
def test_children_forked_during_inspections_keep_the_collector_and_can_be_inspected(
        tmp_path: Path, version: str) -> None:
    children = tmp_path / "children.jsonl"
    env = {"FIXTURE_FORK_EVERY_MS": "20", "FIXTURE_CHILDREN": str(children), "FIXTURE_LINGER": "120"}
    with spawn_target("gc_state_worker", tmp_path, env=env, python=PYTHONS[version]) as target:
        for _ in range(3):
            take_snapshot(target.pid, request=RequestOptions(method=Method.PTRACE, timeout=90), owners=Owners.DOMINATOR)
            time.sleep(0.3)
        time.sleep(3.5)  # the last children look at their collector 3 s after birth
        born = _children(children)
        during = [c for c in born if c["during"]]
        assert during, f"no child was forked during an inspection ({len(born)} children)"
        # The last child forked mid-inspection (mid-request, the payload loaded), and one forked
        # while the payload was first loading, if any was (it loads the payload again).
        loading = [c for c in during if c["loading"]]
        inspected = {}
        for child in during[-1:] + loading[:1]:
            pid = int(child["pid"])  # type: ignore[call-overload]
            inspected[pid] = subprocess.run([*LEAKHOUND, "inspect", str(pid), "--method", "ptrace", "--json",
                                             "--owners", "census", "--timeout", "30"],
                                            capture_output=True, text=True, timeout=90)
        parent = target.report()["truth"]
    off = [c for c in born if not c["born_gc"] or not c["later_gc"]]
    exits = {pid: run.returncode for pid, run in inspected.items()}
    print(f"{len(born)} children, {len(during)} forked mid-inspection, {len(off)} with the collector off;"
          f" children inspected afterwards, exit codes: {exits}")
    assert parent["gc_enabled"] and parent["threshold"][0] == 150000
    assert (len(off), sorted(set(exits.values()))) == (0, [0]), (
        f"{len(off)} of {len(born)} children had the collector off ({len(during)} forked mid-inspection);"
        f" inspecting children forked mid-inspection: exit codes {exits}: "
        + " | ".join(run.stderr[-600:] for run in inspected.values()))
    assert all(json.loads(run.stdout)["heap"]["objects"] > 0 for run in inspected.values())


@pytest.mark.parametrize("version", sorted(PYTHONS))
def test_a_child_forked_while_the_bootstrap_is_queued_never_runs_it(tmp_path: Path, version: str) -> None:
    """A pending call is part of the process's memory: a child forked after the debugger
    queued the bootstrap and before the main thread ran it inherits it. The target's loop forks
    while another thread holds the import lock, so its main thread waits inside os.fork (its
    before-fork hooks done, the GIL released) where the tracer stops it. The child must not run
    the parent's request (it did, in its at-fork handlers, with a payload thread of its own):
    each child counts its threads in its first 0.5 s, and every one had only its own."""
    children = tmp_path / "children.jsonl"
    env = {"FIXTURE_FORK_EVERY_MS": "1", "FIXTURE_CHILDREN": str(children), "FIXTURE_LINGER": "1",
           "FIXTURE_HOLD_IMPORT_LOCK": "1"}
    with spawn_target("gc_state_worker", tmp_path, env=env, python=PYTHONS[version]) as target:
        for _ in range(8):
            take_snapshot(target.pid, request=RequestOptions(method=Method.PTRACE, timeout=90), owners=Owners.CENSUS)
        time.sleep(3.5)
        born = _children(children)
        assert target.report()["truth"]["forks"] > 0
    ran = [c for c in born if c["threads_max"] != 1]
    print(f"{len(born)} children, {len(ran)} with a thread they did not start")
    assert born and not ran, ran[:5]


@pytest.mark.parametrize("version", sorted(PYTHONS))
def test_no_thread_of_the_target_sees_a_gc_state_it_did_not_set(tmp_path: Path, version: str) -> None:
    env = {"FIXTURE_GC_POLL": "1", "FIXTURE_GC_SECTIONS": "1"}
    with spawn_target("gc_state_worker", tmp_path, env=env, python=PYTHONS[version]) as target:
        for i in range(5):
            take_snapshot(target.pid, request=RequestOptions(method=Method.PTRACE, timeout=90),
                          owners=Owners.DOMINATOR if i % 2 else Owners.CENSUS)
        truth = target.report()["truth"]
    told = json.dumps(truth)
    print(told)
    # both threads ran during the inspections (the payload's thread was alive as they looked)
    assert truth["polls_during"] > 0 and truth["sections_during"] > 0, told
    assert (truth["seen_off"], truth["switched_on_under_us"]) == (0, 0), told
    assert truth["gc_enabled"], told
