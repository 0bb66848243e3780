"""The target waits for the CLI's owner paths for as long as the CLI's dominator pass runs (its
beats, wire.names_working), not a fixed 10 s: a pass slowed past that (a loaded machine, a big
heap) still gets the owners named in the target, not by type."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from leakhound.analysis import dominators
from leakhound.core.capture import capture
from leakhound.core.request import RequestOptions
from leakhound.model.names import Method
from leakhound.payload import runner
from tests.utils import spawn_target, wait_for_agent_socket

pytestmark = pytest.mark.integration

# past the payload's own wait for the paths when no beat comes (and its margin for the census)
SLOW_PASS = runner.NAMES_WAIT_MIN + 6.0


@pytest.mark.parametrize("method", ["ptrace", "agent"])
def test_a_slow_dominator_pass_still_gets_its_owners_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           method: str) -> None:
    plan_owners = dominators.plan_owners

    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(SLOW_PASS)
        return plan_owners(*args, **kwargs)

    monkeypatch.setattr(dominators, "plan_owners", slow)
    env = {"SHAPE": "callbacks", "LEAKHOUND_AGENT": "1" if method == "agent" else ""}
    with spawn_target("dominator_shapes", tmp_path, env=env) as child:
        if method == "agent":
            wait_for_agent_socket(child.pid)
        started = time.monotonic()
        taken = capture(child.pid, top=10, request=RequestOptions(method=Method(method)))
        took = time.monotonic() - started
        truth = child.report()["truth"]
    snap = taken.snapshot
    assert took >= SLOW_PASS
    assert snap.heap.owner_model == "dominator", snap.heap.owner_model_note
    assert snap.owners[0].path == truth["expected_path"]
    assert "did not answer names" not in snap.heap.owner_model_note
