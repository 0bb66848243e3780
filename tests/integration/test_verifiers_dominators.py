"""Dominator owners on the real verifiers==0.1.14 env worker, with the real anyio in its loop,
while it runs rollouts: owner #1 is the runtime's ``trajectories`` (not anyio's weak-keyed
``_task_states``, which reaches the worker first), and it retains at least 80% of what the
registry probe measures in the same snapshot (the probe walks the registry's entries itself).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from leakhound.core.capture import capture
from leakhound.core.request import RequestOptions
from leakhound.model.names import Owners
from tests.utils import within
from tests.verifiers_target import COUNTS_ONLY_ENV, ensure_verifiers_venv, spawn_verifiers_worker

pytestmark = [
    pytest.mark.integration,
    pytest.mark.verifiers,
    pytest.mark.timeout(900),
    pytest.mark.usefixtures("ptrace_ok"),
]


@pytest.fixture(scope="module", autouse=True)
def verifiers_venv() -> Path:
    return ensure_verifiers_venv()


def test_owner_one_is_the_trajectories_under_rollouts(tmp_path: Path) -> None:
    with spawn_verifiers_worker(tmp_path, rollouts=12, turns=3, park=1, screenshot_kb=64) as worker:
        outcome: dict[str, Any] = {}

        def rollouts() -> None:
            try:
                outcome["batch"] = worker.run_batch(rollouts=8, turns=4, timeout=300)
            except Exception as exc:  # reported below, with the worker's log
                outcome["error"] = exc

        busy = threading.Thread(target=rollouts)
        busy.start()
        try:
            during = capture(worker.worker_pid, request=RequestOptions(timeout=180), top=10, owners=Owners.DOMINATOR,
                             why="verifiers.v1.runtime.Runtime")
        finally:
            busy.join(timeout=320)
        assert "error" not in outcome, f"{outcome.get('error')}\n{worker.log_tail()}"
    snap = during.snapshot
    assert snap.heap.owner_model == "dominator", snap.heap.owner_model_note
    registry = snap.probes["verifiers"]["registry"]
    first = snap.owners[0]
    print(f"\nowner #1 {first.path} {first.retained_bytes:,} B; registry probe {registry['retained_bytes']:,} B "
          f"({registry['finished_bytes']:,} B finished); "
          f"graph {snap.heap.graph_nodes:,} nodes {snap.heap.graph_edges:,} edges, walked in "
          f"{snap.heap.graph_seconds:.2f}s, analysed in {snap.heap.dominator_seconds:.2f}s; "
          f"longest pause {snap.heap.max_pause_ms:.0f} ms")
    for owner in snap.owners[:5]:
        print(f"  {owner.retained_bytes:>12,}  {owner.path}")
    for path in first.retainers:
        print(f"  kept alive by {path}")
    for runtime in during.why:
        print(f"why {runtime.path} ({runtime.retained_bytes:,} B):")
        for path in runtime.retainers:
            print(f"  kept alive by {path}")
    assert "trajectories" in first.path.rsplit(".", 1)[-1], first.path
    # The probe counts what the registry reaches (each object once); the dominator what
    # freeing it alone returns. The probes run seconds after the graph's walk began, and on
    # a busy worker rollouts finish in between: one in flight at the walk (its task's in
    # the graph) was counted finished by the probe (52-96% seen, by the moment). The probe
    # now counts in flight what was in flight as the walk began (runner: in_flight_before).
    assert first.retained_bytes >= 0.8 * registry["finished_bytes"], (first, registry)
    assert first.retained_bytes <= 1.1 * registry["retained_bytes"], (first, registry)


def test_owner_one_is_what_the_registry_alone_holds_in_an_idle_worker(tmp_path: Path) -> None:
    # No rollout running: every finished rollout is held by the registry alone, so what
    # freeing it returns is the probe's finished bytes (measured: 6,868,485 B against
    # 6,883,018 B, and the graph's reachable set against the probe's retained bytes: 0.03%).
    with spawn_verifiers_worker(tmp_path, rollouts=12, turns=3, park=1, screenshot_kb=64) as worker:
        snap = capture(worker.worker_pid, request=RequestOptions(timeout=180), top=10, owners=Owners.DOMINATOR).snapshot
    assert snap.heap.owner_model == "dominator", snap.heap.owner_model_note
    registry = snap.probes["verifiers"]["registry"]
    first = snap.owners[0]
    assert "trajectories" in first.path.rsplit(".", 1)[-1], first.path
    assert within(first.retained_bytes, registry["finished_bytes"], 0.10), (first, registry)


def test_owner_one_with_prompts_of_many_tokens_is_the_registry_by_the_workers_own_measure(tmp_path: Path) -> None:
    # Each stored step holds its prompt's token ids twice, the same ints in two lists (the
    # response's and the step's tokens'): 50k-150k ids a list here (a VLM's screenshots,
    # 50,000 tokens an image). The walk folds them into the registry once it has met both
    # lists; when it could keep only 16k leaves waiting, the rest of each list were nodes:
    # ~1M more here than the worker's ~750k, past this graph's budget (first-reacher owners),
    # as the real worker's 21M objects at 2 GB were past the default 6M. The truth: the worker
    # sizes what its registry reaches, in a forked child, while idle (nothing else holds a
    # finished rollout); its reports carry counts only (measuring the registries holds their
    # ints in the report's own lists and sets, on the main thread, now and then).
    with spawn_verifiers_worker(tmp_path, rollouts=4, turns=3, image_tokens=50_000,
                                extra_env=COUNTS_ONLY_ENV) as worker:
        truth = worker.registry_freed()
        snap = capture(worker.worker_pid, request=RequestOptions(timeout=300), top=10,
                       max_graph_nodes=1_200_000).snapshot
    assert snap.heap.owner_model == "dominator", snap.heap.owner_model_note
    first = snap.owners[0]
    print(f"\nowner #1 {first.path} {first.retained_bytes:,} B; the worker's truth {truth}; "
          f"graph {snap.heap.graph_nodes:,} nodes for {snap.heap.objects:,} objects")
    assert first.path.endswith(".trajectories"), first.path
    assert within(first.retained_bytes, truth["registry_freed_bytes"], 0.05), (first, truth)
