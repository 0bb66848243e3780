"""leakhound against a real verifiers==0.1.14 env worker, attached with the default method (ptrace, gdb as fallback).

Every number is checked against the worker's own report (ground truth it
computes about its ``Runtime.trajectories``, ``InterceptionServer.intercepts``
and stored steps; see fixtures/verifiers_env/leakhound_vf_truth.py) or against
the work the test asked the driver to do, never against leakhound's output.
The fixture venv does not have leakhound installed: the injector loads the payload.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from leakhound.core.capture import take_snapshot
from leakhound.core.patch import patch_process
from leakhound.core.request import RequestOptions
from leakhound.errors import PatchRefused
from leakhound.model import Finding, Snapshot
from tests.pythons import installed_pythons
from tests.utils import gdb_or_ptrace, spawn_target
from tests.verifiers_target import (
    VerifiersWorker,
    ensure_verifiers_venv,
    spawn_verifiers_worker,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.verifiers,
    pytest.mark.timeout(600),
    pytest.mark.usefixtures("ptrace_ok"),
]

REFUSED_EXIT_CODE = 10
RUNTIME = "verifiers.v1.runtime.Runtime"
PATCHED_BY = {
    f"{RUNTIME}.cleanup_group": "registry",
    f"{RUNTIME}.submit_model_request": "steps",
    "verifiers.v1.utils.endpoint_utils.forward_request": "intercepts",
}
# Four turns, the same prompt every rollout (so the same token ids):
#   0  a normal answer;
#   1  an answer that stopped at max_tokens (finish_reason "length", ids present);
#   2  a prompt over the training budget: verifiers' parse_response_tokens(max_seq_len)
#      empties the step's tokens.completion_ids, response.message.tokens keeps the raw
#      ids, and renderer_client._step_token_ids falls back to them;
#   3  an answer cut off before its first token (raw completion_ids empty too).
TRUNCATING_TURNS = 4
TRUNCATING_TASK = {
    "prompt_text": "Book the cheapest flight to Lisbon.",
    "length_finish_turns": [1],
    "step_budget": 800,
    "empty_completion_turns": [3],
}
NORMAL, LENGTH_FINISH, OVER_BUDGET, CUT = range(TRUNCATING_TURNS)


@pytest.fixture(scope="module", autouse=True)
def verifiers_venv() -> Path:
    return ensure_verifiers_venv()


def fresh_report(worker: VerifiersWorker) -> dict[str, Any]:
    """A report written after this call (the worker re-measures every ~2 s)."""
    return worker.wait_for_report(newer_than=int(worker.read_report()["seq"]))


def findings(snapshot: Snapshot) -> dict[str, Finding]:
    return {f.kind: f for f in snapshot.findings if not f.skipped}


def by_example(report: dict[str, Any]) -> dict[Any, dict[str, Any]]:
    return {t["example_id"]: t for t in report["trajectory_registry"]["trajectories"]}


def cli(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "leakhound", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_detectors_match_the_workers_own_registry_intercepts_and_steps(tmp_path: Path) -> None:
    with spawn_verifiers_worker(tmp_path, rollouts=3, turns=3, park=1) as worker:
        assert worker.ready["errors"] == []
        before = fresh_report(worker)
        snapshot = take_snapshot(worker.worker_pid, request=RequestOptions(timeout=120))
        report = fresh_report(worker)
        # The worker is idle (everything finished or parked): nothing moved meanwhile.
        assert report["trajectory_registry"]["entries"] == before["trajectory_registry"]["entries"]
        assert report["intercepts"]["entries"] == before["intercepts"]["entries"]

    probe = snapshot.probes["verifiers"]
    assert "skipped" not in probe, probe
    registry, truth = probe["registry"], report["trajectory_registry"]
    assert registry["entries"] == truth["entries"]
    assert registry["finished_entries"] == truth["finished_entries"] == report["rollouts"]["finished"]
    # The parked rollout is held by a live task: in flight, not finished.
    assert registry["inflight_entries"] == truth["live_entries"] == report["rollouts"]["parked"]
    assert registry["finished_steps"] == truth["finished_steps"]

    steps = probe["steps"]
    assert steps["steps"] == truth["steps"]
    assert steps["bloated_steps"] == truth["heavy_steps"] == truth["steps"]
    assert steps["sidecar_steps"] == truth["sidecar_steps"] == 0

    intercepts, held = probe["intercepts"], report["intercepts"]
    assert intercepts["servers"] == held["servers"]
    assert intercepts["entries"] == held["entries"]
    assert intercepts["delivered"] == held["delivered"]
    assert intercepts["pending"] == held["pending"] == report["rollouts"]["parked"] == 1
    # The worker counts whole "data:...;base64," strings, the probe the payload after the mark.
    assert 0.95 * held["body_base64_chars"] <= intercepts["base64_bytes"] <= held["body_base64_chars"]

    found = findings(snapshot)
    assert found["registry"].count == truth["finished_entries"]
    assert found["intercepts"].count == held["delivered"]
    assert found["steps"].count == truth["steps"]


def test_patches_apply_live_move_their_numbers_and_revert_exactly(tmp_path: Path) -> None:
    with spawn_verifiers_worker(tmp_path, rollouts=2, turns=2, park=1) as worker:
        pid = worker.worker_pid
        # A truncating rollout before any fix: what verifiers' own fallback returns.
        unpatched = worker.run_batch(rollouts=1, turns=TRUNCATING_TURNS, task=TRUNCATING_TASK)
        assert unpatched["errors"] == []
        r0 = fresh_report(worker)
        assert all(f["is_original"] for f in r0["functions"].values())
        baseline = by_example(r0)[unpatched["example_ids"][0]]

        applied = patch_process(pid, fixes=["steps", "registry", "intercepts"], request=RequestOptions(timeout=120))
        assert {o.fix: o.status for o in applied} == {
            "steps": "applied",
            "registry": "applied",
            "intercepts": "applied",
        }
        registry_outcome = next(o for o in applied if o.fix == "registry")
        assert registry_outcome.before == r0["trajectory_registry"]["finished_entries"]

        r_applied = fresh_report(worker)
        for key, fix in PATCHED_BY.items():
            function = r_applied["functions"][key]
            assert not function["is_original"] and function["leakhound_fix"] == fix, key
            assert function["qualname"] == r0["functions"][key]["qualname"]  # functools.wraps

        rollouts, park = 2, 1
        patched = worker.run_batch(rollouts=rollouts, turns=TRUNCATING_TURNS, park=park, task=TRUNCATING_TASK)
        assert patched["errors"] == []
        r1 = fresh_report(worker)

        # registry: rollouts keep finishing, finished entries stop growing.
        assert r1["rollouts"]["finished"] == r0["rollouts"]["finished"] + rollouts
        assert r1["trajectory_registry"]["finished_entries"] == r0["trajectory_registry"]["finished_entries"]
        assert r1["trajectory_registry"]["entries"] == r0["trajectory_registry"]["entries"] + park
        # intercepts: the new parked rollout's delivered requests are gone, its pending one stays.
        assert r1["intercepts"]["delivered"] == r0["intercepts"]["delivered"]
        assert r1["intercepts"]["pending"] == r0["intercepts"]["pending"] + park
        assert r1["intercepts"]["entries"] == r0["intercepts"]["entries"] + park
        # steps: the parked rollout's steps (the only new ones still registered) carry no
        # heavy message, and verifiers' _step_token_ids returns exactly what it returned
        # for the same steps stored by the unpatched code.
        new = by_example(r1)[patched["parked_example_ids"][0]]
        assert new["steps"] == baseline["steps"] == TRUNCATING_TURNS
        assert new["heavy_steps"] == 0
        assert baseline["heavy_steps"] == TRUNCATING_TURNS
        assert r1["trajectory_registry"]["heavy_steps"] == r0["trajectory_registry"]["heavy_steps"]
        before_steps, after_steps = baseline["step_details"], new["step_details"]
        for before_step, after_step in zip(before_steps, after_steps, strict=True):
            assert after_step["step_token_ids"] == before_step["step_token_ids"], after_step["index"]
        assert after_steps[NORMAL]["kind"] == "slim"
        assert after_steps[NORMAL]["response_json_bytes"] < before_steps[NORMAL]["response_json_bytes"] / 4
        # The budget-truncated step: empty completion_ids, ids found through the sidecar.
        assert after_steps[OVER_BUDGET]["completion_ids"] == 0
        assert after_steps[OVER_BUDGET]["kind"] == "sidecar"
        assert after_steps[OVER_BUDGET]["step_token_ids"] is not None
        assert after_steps[OVER_BUDGET]["step_token_ids"]["completion_ids"] > 0
        # Cut before the first token: there are no ids to find, with or without the fix, so
        # no sidecar is kept.
        assert after_steps[CUT]["kind"] == "slim"
        assert before_steps[CUT]["step_token_ids"] is None
        assert new["response_json_bytes"] < baseline["response_json_bytes"]

        # The probe agrees with the worker on what is slim now.
        snapshot = take_snapshot(pid, request=RequestOptions(timeout=120))
        r_snap = fresh_report(worker)
        steps = snapshot.probes["verifiers"]["steps"]
        assert steps["bloated_steps"] == r_snap["trajectory_registry"]["heavy_steps"]
        assert steps["sidecar_steps"] == r_snap["trajectory_registry"]["sidecar_steps"]
        assert findings(snapshot)["steps"].count == r_snap["trajectory_registry"]["heavy_steps"]

        status = cli("patch", str(pid), "--fix", "all", "--status", "--method", gdb_or_ptrace(), "--json")
        assert status.returncode == 0, status.stderr
        listed = {o["fix"]: o for o in json.loads(status.stdout)["outcomes"]}
        assert {fix: o["status"] for fix, o in listed.items()} == {
            "steps": "applied",
            "registry": "applied",
            "intercepts": "applied",
            "trim": "not-applied",
        }
        submitted_steps = (rollouts + park) * TRUNCATING_TURNS
        assert listed["registry"]["counters"]["evicted"] == rollouts
        assert listed["intercepts"]["counters"]["bodies_discarded"] == submitted_steps
        assert listed["steps"]["counters"]["steps_slimmed"] == submitted_steps
        # Every rollout of the batch stored the same steps as the parked one.
        assert listed["steps"]["counters"]["sidecars"] == new["sidecar_steps"] * (rollouts + park)

        reverted = cli("patch", str(pid), "--fix", "steps,registry,intercepts", "--revert",
                       "--method", gdb_or_ptrace(), "--json")
        assert reverted.returncode == 0, reverted.stderr
        assert {o["status"] for o in json.loads(reverted.stdout)["outcomes"]} == {"reverted"}
        r_reverted = fresh_report(worker)
        for key, function in r_reverted["functions"].items():
            assert function["is_original"], key
            assert function["id"] == r0["functions"][key]["id"]
            assert function["code_id"] == r0["functions"][key]["code_id"]
            assert function["leakhound_fix"] is None
        assert "_leakhound_state" not in r_reverted["leakhound_modules"]

        # The original behaviour is back: the leaks grow again.
        after_revert = worker.run_batch(rollouts=1, turns=2, park=1)
        assert after_revert["errors"] == []
        r2 = fresh_report(worker)
        assert r2["trajectory_registry"]["finished_entries"] == r1["trajectory_registry"]["finished_entries"] + 1
        assert r2["intercepts"]["delivered"] == r1["intercepts"]["delivered"] + 2
        assert by_example(r2)[after_revert["parked_example_ids"][0]]["heavy_steps"] == 2

    registries = [r["trajectory_registry"]["finished_entries"] for r in (r0, r1, r2)]
    held = [(r["intercepts"]["delivered"], r["intercepts"]["pending"]) for r in (r0, r1, r2)]
    print(f"\nfinished registry entries (before, with the fix +2 rollouts, reverted +1): {registries}")
    print(f"intercepts delivered/pending at the same points: {held}")
    print(
        "stored response JSON bytes per step (normal, length-finish, over budget, cut): "
        f"{[d['response_json_bytes'] for d in before_steps]} unpatched, "
        f"{[d['response_json_bytes'] for d in after_steps]} with the steps fix "
        f"(kinds {[d['kind'] for d in after_steps]})"
    )


def test_steps_fix_keeps_no_sidecar_where_step_tokens_have_the_ids(tmp_path: Path) -> None:
    with spawn_verifiers_worker(tmp_path, rollouts=1, turns=1) as worker:
        patch_process(worker.worker_pid, fixes=["steps"], request=RequestOptions(timeout=120))
        batch = worker.run_batch(rollouts=0, park=1, turns=2, task={"length_finish_turns": [0, 1]})
        parked = by_example(fresh_report(worker))[batch["parked_example_ids"][0]]

    for step in parked["step_details"]:
        # step.tokens has both ids, so the fallback through response.message is never taken.
        assert step["is_truncated"] and step["completion_ids"] > 0
        assert step["step_token_ids"] is not None
        assert step["kind"] == "slim", step


def test_grouped_rollouts_with_the_registry_fix(tmp_path: Path) -> None:
    group_size = 2
    with spawn_verifiers_worker(
        tmp_path, rollouts=group_size, turns=2, grouped=True, group_size=group_size
    ) as worker:
        pid = worker.worker_pid
        r0 = fresh_report(worker)
        applied = patch_process(pid, fixes=["registry"], request=RequestOptions(timeout=120))
        assert [o.status for o in applied] == ["applied"]

        groups = 2
        batch = worker.run_batch(rollouts=groups, turns=2)
        assert batch["errors"] == []
        r1 = fresh_report(worker)
        status = patch_process(pid, fixes=["registry"], action="status", request=RequestOptions(timeout=120))
        log = worker.log_tail(200_000)

    assert "No live trajectory registered" not in log
    new_rollouts = groups * group_size
    assert r1["rollouts"]["finished"] == r0["rollouts"]["finished"] + new_rollouts
    # Every judge ran in the group stage, borrowing its parent's trajectory.
    assert r1["rollouts"]["judges_finished"] == r0["rollouts"]["judges_finished"] + new_rollouts
    assert r1["trajectory_registry"]["entries"] == r0["trajectory_registry"]["entries"]
    assert r1["trajectory_registry"]["finished_entries"] == r0["trajectory_registry"]["finished_entries"]
    (registry,) = status
    assert registry.status == "applied"
    # A rollout and its judge child are both registered, and both evicted.
    assert registry.counters["evicted"] == 2 * new_rollouts


def test_fixed_upstream_code_is_refused_and_left_alone(tmp_path: Path) -> None:
    python = str(ensure_verifiers_venv() / "bin" / "python")
    with spawn_target(
        "verifiers_env/fixed_upstream_target", tmp_path, python=python,
        env={"PYTHONPATH": ""}, timeout=60,
    ) as target:
        before = target.report()
        with pytest.raises(PatchRefused) as refused:
            patch_process(target.pid, fixes=["registry", "intercepts"], request=RequestOptions(timeout=120))
        assert str(refused.value).count("fixed upstream") == 2, refused.value
        result = cli("patch", str(target.pid), "--fix", "registry", "--method", gdb_or_ptrace(), "--json")
        assert result.returncode == REFUSED_EXIT_CODE, result.stdout + result.stderr
        after = target.report()

    assert after["pid"] == before["pid"]
    for key, function in after["functions"].items():
        assert function["is_original"], key
        assert function["id"] == before["functions"][key]["id"]
        assert function["leakhound_fix"] is None
    assert "_leakhound_state" not in after["leakhound_modules"]


def test_process_without_verifiers_is_refused(tmp_path: Path) -> None:
    with spawn_target("growing_cache", tmp_path) as target:
        with pytest.raises(PatchRefused) as refused:
            patch_process(target.pid, fixes=["registry"], request=RequestOptions(timeout=120))
        assert "no verifiers v1 Runtime" in str(refused.value)
        result = cli("patch", str(target.pid), "--fix", "registry", "--method", gdb_or_ptrace(), "--json")
        assert result.returncode == REFUSED_EXIT_CODE, result.stdout + result.stderr


PY312 = installed_pythons().get("3.12")


@pytest.mark.skipif(PY312 is None, reason="no CPython 3.12 installed here")
def test_the_real_worker_on_312_survives_inspections_while_it_runs_rollouts(tmp_path: Path) -> None:
    """Production's Python: the first inspection used to kill this worker (the census revived
    _asyncio's freed FutureIter free list, CPython gh-122695)."""
    assert PY312 is not None
    with spawn_verifiers_worker(tmp_path, rollouts=2, turns=3, park=1, python=PY312) as worker:
        outcome: dict[str, Any] = {}

        def rollouts() -> None:
            try:
                outcome["batch"] = worker.run_batch(rollouts=6, turns=4, timeout=300)
            except Exception as exc:  # reported below, with the worker's log
                outcome["error"] = exc

        busy = threading.Thread(target=rollouts)
        busy.start()
        # The default method and pause budget, as an on-call engineer runs it, mid-rollouts.
        during = [take_snapshot(worker.worker_pid, request=RequestOptions(timeout=120)) for _ in range(3)]
        busy.join(timeout=320)
        assert "error" not in outcome, f"{outcome.get('error')}\n{worker.log_tail()}"
        assert outcome["batch"]["errors"] == []
        before = fresh_report(worker)
        idle = take_snapshot(worker.worker_pid, request=RequestOptions(timeout=120))
        report = fresh_report(worker)
        assert os.path.exists(f"/proc/{worker.worker_pid}")
    assert all(s.python_version.startswith("3.12.") for s in [*during, idle])
    assert report["trajectory_registry"]["entries"] == before["trajectory_registry"]["entries"]
    registry = idle.probes["verifiers"]["registry"]
    assert registry["entries"] == report["trajectory_registry"]["entries"]
    assert registry["finished_entries"] == report["trajectory_registry"]["finished_entries"]
    assert findings(idle)["registry"].count == report["trajectory_registry"]["finished_entries"]
