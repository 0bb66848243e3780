"""The verifiers==0.1.14 fixture really leaks, by the worker's own account.

These pin the fixture other integration tests attach to: if verifiers changes
shape, these fail before the detector tests do.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.verifiers_target import (
    SERVER_TITLE,
    WORKER_TITLE,
    ensure_verifiers_venv,
    proc_title,
    spawn_verifiers_worker,
)

pytestmark = [pytest.mark.integration, pytest.mark.verifiers, pytest.mark.timeout(600)]


@pytest.fixture(scope="module", autouse=True)
def verifiers_venv() -> Path:
    return ensure_verifiers_venv()


def test_finished_rollouts_and_delivered_intercepts_stay_referenced(tmp_path: Path) -> None:
    rollouts, turns = 3, 3
    with spawn_verifiers_worker(tmp_path, rollouts=rollouts, turns=turns, park=1) as worker:
        assert worker.ready["errors"] == []
        assert worker.ready["rollouts_done"] == rollouts
        assert proc_title(worker.worker_pid).startswith(WORKER_TITLE)
        assert proc_title(worker.env_server_pid).startswith(SERVER_TITLE)

        report = worker.read_report()
        assert report["pid"] == worker.worker_pid
        assert report["rollouts"]["finished"] == rollouts
        assert report["rollouts"]["parked"] == 1

        # Leak 2: every finished rollout is still in Runtime.trajectories.
        registry = report["trajectory_registry"]
        assert registry["finished_entries"] == rollouts
        assert registry["entries"] == rollouts + 1
        assert registry["finished_steps"] == rollouts * turns
        # Leak 1: each step keeps the whole serialized response, tokens included.
        step_response = registry["step_response"]
        assert step_response["responses"] == registry["steps"]
        assert step_response["tokens_json_bytes"] > step_response["message_json_bytes"] > 0

        # Leak 3: the parked rollout's delivered request bodies are still held.
        intercepts = report["intercepts"]
        assert intercepts["delivered"] == turns
        assert intercepts["pending"] == 1
        assert intercepts["delivered_body_json_bytes"] > 0
        assert intercepts["body_base64_chars"] > 0


def test_grouped_rollouts_resolve_borrowed_trajectories(tmp_path: Path) -> None:
    rollouts, turns, group_size = 4, 2, 2
    with spawn_verifiers_worker(
        tmp_path, rollouts=rollouts, turns=turns, grouped=True, group_size=group_size
    ) as worker:
        # The group stage ran each rollout's judge child, which resolves the
        # parent's trajectory from the registry after cleanup_rollout.
        assert worker.ready["errors"] == []
        assert worker.ready["rollouts_done"] == rollouts
        report = worker.read_report()
        assert report["rollouts"]["finished"] == rollouts
        assert report["rollouts"]["judges_finished"] == rollouts
        registry = report["trajectory_registry"]
        assert registry["distinct_trajectories"] == rollouts
        assert registry["steps"] == rollouts * (turns + 1)
        assert registry["finished_entries"] == registry["entries"] == 2 * rollouts
