"""A patch request's answer comes from inside the target, whose owner controls it: one of the
wrong shape is ProtocolViolation (exit 20), never a traceback (docs/security.md)."""

from __future__ import annotations

from typing import Any

import pytest

from leakhound.attach import RemoteResult
from leakhound.attach.process import Target
from leakhound.core import patch
from leakhound.errors import ProtocolViolation
from leakhound.model.names import Method
from leakhound.patches import FIXES
from leakhound.payload import wire

TARGET = Target(pid=4242, uid=1000, exe="/usr/bin/python3", version=(3, 11), name="python", cmdline="")
FIX = next(iter(FIXES))


def _status(monkeypatch: pytest.MonkeyPatch, doc: dict[str, Any]) -> object:
    answer = {**doc, "payload_version": wire.PAYLOAD_VERSION}
    monkeypatch.setattr(patch, "ask", lambda *a, **k: RemoteResult(TARGET, Method.AGENT, answer, 0.0, 0.0))
    monkeypatch.setattr(patch, "resolve_target", lambda pid: TARGET)
    return patch.patch_process(TARGET.pid, fixes=[FIX], action="status")


WRONG = {
    "no results": {"ok": True},
    "results an object": {"ok": True, "results": {"fix": FIX}},
    "a fix nobody asked for": {"ok": True, "results": [{"fix": "rm -rf", "status": "applied"}]},
    "a status a number": {"ok": True, "results": [{"fix": FIX, "status": 1}]},
    "counters a string": {"ok": True, "results": [{"fix": FIX, "status": "applied", "counters": "lots"}]},
    "a measurement a list": {"ok": True, "results": [{"fix": FIX, "status": "applied"}], "measure": [1]},
    "applied numbers": {"ok": True, "results": [{"fix": FIX, "status": "applied"}], "applied": [1, 2]},
}


@pytest.mark.parametrize("doc", list(WRONG.values()), ids=list(WRONG))
def test_a_wrong_answer_is_a_protocol_violation(monkeypatch: pytest.MonkeyPatch, doc: dict[str, Any]) -> None:
    with pytest.raises(ProtocolViolation, match="malformed document"):
        _status(monkeypatch, doc)


def test_a_right_answer_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    (outcome,) = _status(monkeypatch, {"ok": True, "results": [{"fix": FIX, "status": "not-applied", "reason": ""}],
                                       "applied": []})  # type: ignore[misc]
    assert outcome.fix == FIX and outcome.status == "not-applied"
