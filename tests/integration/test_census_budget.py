"""The census's two walks and its pause budget, on real targets.

* The compiled walk and the pure-Python loop give the same owners and sizes in a live target.
* ``--max-pause``: a budget smaller than listing every gc-tracked object skips that step
  (and says so); owners are still attributed; within the default budget (or with none) the
  full census runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from leakhound.attach import run_request
from leakhound.core.capture import take_snapshot
from leakhound.core.request import RequestOptions
from leakhound.model.names import Method
from leakhound.payload import census
from tests.utils import spawn_target, within

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]

LEAKHOUND = str(Path(sys.executable).with_name("leakhound"))


@pytest.mark.skipif(census._walk is None, reason="the C walk was not built here")
def test_compiled_and_python_walks_agree_in_a_live_target(tmp_path: Path) -> None:
    with spawn_target("instance_graph", tmp_path) as child:
        runs = {}
        for walker in ("python", "compiled"):
            remote = run_request(child.pid, {"op": "snapshot", "walker": walker}, method=Method.PTRACE, timeout=60)
            runs[walker] = remote.result["heap"]
        truth = child.report()["truth"]
    assert runs["python"]["walker"] == "python" and runs["compiled"]["walker"] == "compiled"

    def data_owners(heap: dict) -> dict[str, tuple[int, int]]:
        return {o["path"]: (o["retained_objects"], o["retained_bytes"]) for o in heap["owners"]
                if o["path"].startswith("__main__.APP")}

    assert data_owners(runs["compiled"]) == data_owners(runs["python"])
    listeners = data_owners(runs["compiled"])["__main__.APP.bus._listeners"]
    assert within(listeners[1], truth["listeners_bytes"])
    # The fixture's own garbage, identical; the total can differ between the two runs by what
    # the live target (and the first run's loading of the payload) left in cycles meanwhile.
    def nodes(heap: dict) -> dict:
        return next(t for t in heap["cyclic_garbage"]["types"] if t["type"] == "__main__.Node")

    assert nodes(runs["compiled"]) == nodes(runs["python"])
    assert nodes(runs["compiled"])["count"] == truth["garbage_objects"] * 2 // 3


def _inspect_json(pid: int, *extra: str) -> dict:
    result = subprocess.run([LEAKHOUND, "inspect", str(pid), "--json", *extra],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_a_small_pause_budget_skips_the_unsplittable_step_and_says_so(tmp_path: Path) -> None:
    with spawn_target("instance_graph", tmp_path) as child:
        tight = _inspect_json(child.pid, "--max-pause", "1")
        default = _inspect_json(child.pid)
        unlimited = _inspect_json(child.pid, "--max-pause", "0")
        truth = child.report()["truth"]
    heap = tight["heap"]
    assert heap["unreached_examined"] is False
    assert "pause budget" in heap["unreached_note"] and "gc.get_objects()" in heap["unreached_note"]
    # The owners are attributed all the same.
    owners = {o["path"]: o for o in tight["owners"]}
    assert within(owners["__main__.APP.bus._listeners"]["retained_bytes"], truth["listeners_bytes"])
    garbage = next(f for f in tight["findings"] if f["kind"] == "cyclic_garbage")
    assert garbage["severity"] == "skipped" and "not looked for" in garbage["summary"]
    assert tight["cyclic_garbage"]["objects"] == 0
    # Within the default budget (50 ms), and without one: the full census, cyclic garbage found.
    for full in (default, unlimited):
        assert full["heap"]["unreached_examined"] is True
        nodes = {t["type"]: t["count"] for t in full["cyclic_garbage"]["types"]}["__main__.Node"]
        assert nodes == truth["garbage_objects"] * 2 // 3  # two Nodes and a str per cycle
        assert any(f["kind"] == "cyclic_garbage" and f["severity"] != "skipped" for f in full["findings"])


def test_the_budget_is_also_a_library_option(tmp_path: Path) -> None:
    with spawn_target("growing_cache", tmp_path) as child:
        snap = take_snapshot(child.pid, request=RequestOptions(timeout=60), max_pause_ms=0.5)
        truth = child.report()["truth"]
    assert not snap.heap.unreached_examined
    assert snap.owners[0].path == "__main__.CACHE"
    assert within(snap.owners[0].retained_bytes, truth["cache_bytes"])
