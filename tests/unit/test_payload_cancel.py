"""The payload's cancellation point and the atomic landing of patches, in-process."""

from __future__ import annotations

import json
import socket
import time
import types
from pathlib import Path
from typing import Any

import pytest

from leakhound.payload import runner, transport
from leakhound.payload.patches import _apply_all, _state


class Owner:
    def first(self) -> str:
        return "first"

    def second(self) -> str:
        return "second"


def _fix(name: str, attribute: str, *, broken: bool = False) -> Any:
    def make(original: Any, counters: dict[str, int]) -> Any:
        if broken:
            raise RuntimeError("cannot wrap")
        return lambda self: "fixed"

    return types.SimpleNamespace(FIX=name, DESCRIPTION=name, recognise=lambda: ([(Owner, attribute, make)], None))


def test_a_patch_that_fails_while_landing_takes_back_what_it_landed() -> None:
    original = Owner.__dict__["first"]
    with pytest.raises(RuntimeError):
        _apply_all([_fix("a", "first"), _fix("b", "second", broken=True)], False, {}, lambda phase: None)
    assert Owner.__dict__["first"] is original
    assert _state.peek() == {}


def test_a_patch_cancelled_at_its_commit_point_changes_nothing() -> None:
    def cancelled(phase: str) -> None:
        raise runner.Cancelled("deadline", phase)

    with pytest.raises(runner.Cancelled):
        _apply_all([_fix("a", "first")], False, {}, cancelled)
    assert Owner().first() == "first"
    assert _state.peek() == {}


def test_the_agent_cancel_is_a_cancel_line_or_the_connection_closing() -> None:
    ours, theirs = socket.socketpair()
    try:
        cancelled = transport.socket_cancelled(ours)
        assert cancelled() is False
        theirs.sendall(b'{"cancel": true}\n')
        assert cancelled() is True
    finally:
        ours.close()
        theirs.close()
    ours, theirs = socket.socketpair()
    try:
        ours.settimeout(5.0)  # as the agent's connection: never blocks on it anyway
        cancelled = transport.socket_cancelled(ours)
        theirs.close()
        assert cancelled() is True
    finally:
        ours.close()


def test_a_request_past_its_deadline_answers_cancelled_and_releases_the_lock(tmp_path: Any) -> None:
    stop = runner._Stop(0.0)
    with pytest.raises(runner.Cancelled) as caught:
        stop.check("census")
    assert (caught.value.reason, caught.value.phase) == ("deadline", "census")
    (tmp_path / "cancel").write_text("")
    assert transport.directory_cancelled(str(tmp_path))() is True
    assert transport.directory_cancelled(str(tmp_path / "gone"))() is True
    result = runner.handle({"op": "patch", "action": "apply", "fixes": ["trim"], "timeout": 1e-9})
    applied = result.get("applied")
    if applied:  # never leave the fix running in the test process
        runner.handle({"op": "patch", "action": "revert", "fixes": ["trim"]})
    assert result.get("kind") == "Cancelled", {k: v for k, v in result.items() if "measure" not in k}
    assert result["phase"] == "commit"
    assert runner._busy.acquire(blocking=False)
    runner._busy.release()


def test_a_graph_out_of_time_falls_back_to_the_census_owners(monkeypatch: pytest.MonkeyPatch) -> None:
    # It used to cancel the whole request: the census's owners were lost and the next
    # commands were refused while the walk ran on (seen at the simulator's default size).
    from leakhound.payload import graph

    seen: dict[str, float] = {}

    def too_slow(**kwargs: Any) -> Any:
        seen["timeout"] = kwargs["timeout"]
        raise graph.GraphTimeout("the object graph did not finish within its time budget")

    monkeypatch.setattr(graph, "build", too_slow)
    stop = runner._Stop(100.0)
    out = runner._graph({"graph": True}, lambda phase, done: None, stop, heap={"objects": 10})
    assert "did not finish" in out["skipped"] and out["skipped_code"] == "graph_out_of_time"
    assert seen["timeout"] <= 0.6 * 100.0 + 0.01  # its share of the time left, not all of it
    assert stop.reason is None  # the request goes on: arena, probes, the census's owners


def test_a_cancel_during_the_graph_still_cancels(monkeypatch: pytest.MonkeyPatch) -> None:
    from leakhound.payload import graph

    def cancelled(**kwargs: Any) -> Any:
        raise graph.GraphCancelled("the object graph was cancelled")

    monkeypatch.setattr(graph, "build", cancelled)
    with pytest.raises(runner.Cancelled):
        runner._graph({"graph": True}, lambda phase, done: None, runner._Stop(100.0), heap={"objects": 10})


def test_the_names_the_cli_posts_are_read_and_waited_for_a_bounded_time(tmp_path: Path) -> None:
    """The graph handed over early: the payload waits for the CLI's names (transport.DirectoryExchange)
    until they come, the request is cancelled, or its bound (a few times the walk's time), not
    until the request's deadline: a CLI killed without a word (gdb, no janitor) would hold the
    request's lock that long."""
    exchange = transport.DirectoryExchange(str(tmp_path))
    stop = runner._Stop(60.0)
    assert exchange.receive("names", stop, time.monotonic() + 0.05) is None  # nobody posted: the bound
    assert stop.reason is None
    (tmp_path / "names.request.json").write_text(json.dumps({"paths": [[1, 2]]}))
    assert exchange.receive("names", stop, time.monotonic() + 5) == {"paths": [[1, 2]]}
    cancelled = runner._Stop(60.0, explicit=lambda: True, every=0.0)
    (tmp_path / "names.request.json").unlink()
    assert exchange.receive("names", cancelled, time.monotonic() + 60) is None
    assert cancelled.reason == "cancel"
