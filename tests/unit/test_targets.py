"""What a --match that found nothing suggests, and how inspect names the EnvServer's workers."""

from __future__ import annotations

import os

import pytest

import leakhound.core.targets as targets
from leakhound.analysis.detectors import analyse
from tests.factories import make_snapshot


def test_no_match_lists_the_largest_python_processes_with_their_titles(monkeypatch: pytest.MonkeyPatch) -> None:
    processes = [(100 + i, f"python worker-{i}.py") for i in range(10)]
    processes.append((7, "Verifiers::EnvWorker0 " + "x" * 80))
    monkeypatch.setattr(targets, "python_processes", lambda: processes)
    monkeypatch.setattr(targets, "_rss", lambda pid: 10**9 if pid == 7 else pid)
    error = targets.no_process_matches("verifiers-worker")
    assert str(error) == "no Python process matches 'verifiers-worker'"
    assert error.EXIT_CODE == 3
    assert "ps -p PID" not in error.hint
    listed = error.hint.split("leakhound can read: ", 1)[1]
    # Biggest first (the worker whose memory grows is likely the biggest), titles cut at 40.
    assert listed.startswith("7 Verifiers::EnvWorker0 xxxxxxxxxxxxxxxxx…; 109 python worker-9.py; ")
    assert "(and 3 more)." in listed


def test_no_match_and_no_python_process_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(targets, "python_processes", lambda: [])
    assert "leakhound can read no Python process here" in targets.no_process_matches("x").hint


def _server_snapshot(children: object) -> object:
    section: dict[str, object] = {"skipped": "no verifiers v1 runtime in this process"}
    if children is not None:
        section["env_worker_children"] = children
    return analyse(make_snapshot(probes={"verifiers": section}))


def _skipped_reasons(snapshot: object) -> set[str]:
    return {f.summary for f in snapshot.findings if f.severity == "skipped"  # type: ignore[attr-defined]
            and f.kind in ("registry", "intercepts", "steps")}


def test_a_process_without_runtime_names_its_env_worker_to_inspect() -> None:
    reasons = _skipped_reasons(_server_snapshot([{"pid": 4243, "title": "Verifiers::EnvWorker0"}]))
    assert reasons == {"no verifiers v1 runtime in this process; its env worker 4243 (Verifiers::EnvWorker0) "
                       "runs it: leakhound inspect 4243"}
    two = _skipped_reasons(_server_snapshot([{"pid": 4243, "title": "Verifiers::EnvWorker0"},
                                             {"pid": 4244, "title": "Verifiers::EnvWorker1"}]))
    assert two == {"no verifiers v1 runtime in this process; its env workers 4243 (Verifiers::EnvWorker0), "
                   "4244 (Verifiers::EnvWorker1) run it: leakhound inspect 4243"}


@pytest.mark.parametrize("children", [None, [], "4243", [{"pid": "4243", "title": 1}], [4243]])
def test_without_named_workers_the_reason_is_as_the_target_said(children: object) -> None:
    # A saved file's section is someone else's input: a malformed one adds nothing.
    assert _skipped_reasons(_server_snapshot(children)) == {"no verifiers v1 runtime in this process"}


def test_a_process_that_exits_while_its_maps_are_read_is_not_a_python_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading /proc/PID/maps of a process that is exiting fails with ESRCH (its memory is
    gone, its pid not yet): shell completion over a machine whose workers fork and exit
    raised it (CI, python_processes). It is a process that is gone."""
    import builtins

    from leakhound.attach import process
    from leakhound.errors import TargetNotFound

    real_open = builtins.open

    def exiting(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        if str(path).endswith("/maps"):
            raise ProcessLookupError(3, "No such process")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", exiting)
    with pytest.raises(TargetNotFound):
        process.python_version(os.getpid())
    assert not process._readable_python(os.getpid(), {}, named_python=True)
