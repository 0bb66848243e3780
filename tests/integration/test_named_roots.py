"""Every root named, none invented: memory only a root of its own names (a finished task kept in
a set, a thread's local, a task's context variable, BytesIO buffers), on real targets
(fixtures/root_shapes.py), against what a forked child of the target gives back to its heap
when it frees the culprit."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from leakhound.cli import app
from tests.pythons import installed_pythons
from tests.utils import Child, spawn_target, wait_for_agent_socket, within

pytestmark = pytest.mark.integration

PYTHONS = installed_pythons()
# The task and thread shapes on the versions workers run; BytesIO on every version (3.12+
# list its buffer among its referents, 3.10 and 3.11 do not).
CASES = [(shape, v) for shape in ("finished_tasks", "thread_local", "contextvar") for v in ("3.11", "3.12")]
CASES += [("thread_local", "3.10")]  # 3.10's frame object holds its variables: named all the same
CASES += [("bytesio", v) for v in ("3.10", "3.11", "3.12", "3.13")]


def truth_once_built(child: Child, timeout: float = 60.0) -> dict[str, Any]:
    """The target's truth once its shape is built (tasks finished, the thread's list filled)."""
    deadline = time.monotonic() + timeout
    while True:
        truth: dict[str, Any] = child.report(timeout=30)["truth"]
        if truth["ready"]:
            return truth
        assert time.monotonic() < deadline, "the target never built its shape"
        time.sleep(0.2)


def _inspect(pid: int, *args: str) -> dict[str, Any]:
    done = CliRunner().invoke(app, ["inspect", str(pid), "--json", *args])
    assert done.exit_code == 0, done.output
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


@pytest.mark.parametrize(("shape", "version"), CASES)
def test_owner_one_is_the_culprit_by_its_root_with_what_freeing_it_returns(shape: str, version: str,
                                                                           tmp_path: Path) -> None:
    if version not in PYTHONS:
        pytest.skip(f"no Python {version} here")
    with spawn_target("root_shapes", tmp_path, python=PYTHONS[version], env={"SHAPE": shape}) as child:
        truth = truth_once_built(child)
        doc = _inspect(child.pid)
        census = _inspect(child.pid, "--owners", "census")
        why = _inspect(child.pid, "--why", "_background") if shape == "finished_tasks" else None
    assert truth["python"] == version
    assert doc["heap"]["owner_model"] == "dominator", doc["heap"]["owner_model_note"]
    first = doc["owners"][0]
    assert first["path"] == truth["expected_path"], [o["path"] for o in doc["owners"][:5]]
    assert within(first["retained_bytes"], truth["owner_bytes"]), (first["retained_bytes"], truth)
    # The first-reacher census names the same root (with the paused line: ``(file:line)``).
    assert census["heap"]["owner_model"] == "first-reacher"
    culprit = census["owners"][0]
    assert re.sub(r" \([^)]*:\d+\)", "", culprit["path"]) == truth["expected_path"], culprit["path"]
    assert within(culprit["retained_bytes"], truth["owner_bytes"]), (culprit["retained_bytes"], truth)
    if why is not None:
        (match,) = why["matches"]
        assert match["path"] == "__main__._background"


@pytest.mark.parametrize("shape", ["thread_local", "contextvar"])
def test_through_the_agent_the_main_threads_frames_are_roots_too(shape: str, tmp_path: Path) -> None:
    """The in-process agent runs the payload on a thread of its own: the main thread's frames
    (the event loop's) are roots beside the culprit's, and must not take it."""
    env = {"SHAPE": shape, "LEAKHOUND_AGENT": "1"}
    with spawn_target("root_shapes", tmp_path, env=env) as child:
        wait_for_agent_socket(child.pid)
        truth = truth_once_built(child)
        doc = _inspect(child.pid, "--method", "agent")
    first = doc["owners"][0]
    assert first["path"] == truth["expected_path"], [o["path"] for o in doc["owners"][:5]]
    assert within(first["retained_bytes"], truth["owner_bytes"]), (first["retained_bytes"], truth)
