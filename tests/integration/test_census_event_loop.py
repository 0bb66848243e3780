"""The event loop is not an owner (first-reacher census): what a loop's timers and ready queue
reach at that moment belongs to the task or global that holds it.

``fixtures/loop_reach.py``: an app held only by a task's coroutine, and by a timer's bound
method. Before event loops were claimed up front and walked after the tasks and threads, the
census walked module globals first, reached the loop through the event loop policy's
thread-local and named ``asyncio.events._event_loop_policy._local`` the owner of the app (on
the simulated worker: all of its state, 92 MiB).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from leakhound.core.capture import take_snapshot
from leakhound.core.request import RequestOptions
from leakhound.model.names import Owners
from tests.pythons import installed_pythons
from tests.utils import spawn_target, within

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]

PYTHONS = {v: p for v, p in installed_pythons().items() if v in ("3.11", "3.12")}


@pytest.mark.parametrize("walker", ["compiled", "python"])
@pytest.mark.parametrize("version", sorted(PYTHONS))
def test_the_task_owns_what_the_loop_also_reaches(tmp_path: Path, version: str, walker: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    if walker == "python":
        monkeypatch.setenv("LEAKHOUND_WALKER", "python")
    else:
        monkeypatch.delenv("LEAKHOUND_WALKER", raising=False)
    with spawn_target("loop_reach", tmp_path, python=PYTHONS[version]) as child:
        snap = take_snapshot(child.pid, request=RequestOptions(timeout=60), max_pause_ms=None, owners=Owners.CENSUS)
        truth = child.report()["truth"]
    top = snap.owners[0]
    # the task's (first reacher: through whichever of its locals the walk met first)
    assert top.path.startswith("task:") and "/serve_app (" in top.path, \
        [(o.path, o.retained_bytes) for o in snap.owners[:4]]
    assert within(top.retained_bytes, truth["rows_bytes"]), (top.retained_bytes, truth)
    assert not [o for o in snap.owners if "_event_loop_policy" in o.path], [o.path for o in snap.owners]


def test_the_dominator_owner_is_named_from_the_task_not_through_the_loop(tmp_path: Path) -> None:
    # Task-1 (the fixture's main) has the loop in a local: a path through the loop's timers
    # is longer but starts at a better-ranked task; it pays a back-reference's cost.
    with spawn_target("loop_reach", tmp_path) as child:
        snap = take_snapshot(child.pid, request=RequestOptions(timeout=60), max_pause_ms=None, owners=Owners.DOMINATOR)
        truth = child.report()["truth"]
    top = snap.owners[0]
    # (the app is a cell: the timer's closure shares it; the cell is named by its variable) --
    # old name: task:Task-1/main.<_UnixSelectorEventLoop>._scheduled[]._callback.<tuple>[].<App>.<list>
    assert top.path.endswith("/serve_app.app.rows") and "EventLoop" not in top.path, \
        [(o.path, o.retained_bytes) for o in snap.owners[:4]]
    assert within(top.retained_bytes, truth["rows_bytes"]), (top.retained_bytes, truth)
