"""A watch's cheap sample comes from inside the target, whose owner controls it: one of the
wrong types is ProtocolViolation (exit 19), never a traceback (docs/security.md)."""

from __future__ import annotations

from typing import Any

import pytest

from leakhound.attach import RemoteResult
from leakhound.attach.process import Target
from leakhound.core import watch
from leakhound.errors import ProtocolViolation
from leakhound.model.growth import Sample

TARGET = Target(pid=4242, uid=1000, exe="/usr/bin/python3", version=(3, 11), name="python", cmdline="")


def _cheap(monkeypatch: pytest.MonkeyPatch, result: dict[str, Any]) -> Sample:
    monkeypatch.setattr(watch, "run_request", lambda *a, **k: RemoteResult(TARGET, "agent", result, 0.0, 0.0))
    monkeypatch.setattr(watch, "rss_bytes", lambda pid: 1 << 20)
    w = watch.Watched(target=TARGET, method="agent", last_full=Sample(pid=TARGET.pid, taken_at=0.0, rss_bytes=1))
    return watch._cheap(w, timeout=5.0, log=lambda _: None)


WRONG = {
    "items a list": {"ok": True, "items": [1, 2]},
    "an item count a word": {"ok": True, "items": {"a.b": "many"}},
    "types a string": {"ok": True, "types": "dict"},
    "a type with a field the model lacks": {"ok": True, "types": [{"type": "dict", "count": 1, "bytes": 1, "x": 1}]},
    "a type's bytes a string": {"ok": True, "types": [{"type": "dict", "count": 1, "bytes": "1 GB"}]},
    "max_step_ms an object": {"ok": True, "max_step_ms": {}},
}


@pytest.mark.parametrize("result", list(WRONG.values()), ids=list(WRONG))
def test_a_wrong_sample_is_a_protocol_violation(monkeypatch: pytest.MonkeyPatch, result: dict[str, Any]) -> None:
    with pytest.raises(ProtocolViolation, match="malformed sample"):
        _cheap(monkeypatch, result)


def test_a_right_sample_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    sample = _cheap(monkeypatch, {"ok": True, "items": {}, "types": [{"type": "dict", "count": 3, "bytes": 300}],
                                  "max_step_ms": 1.5})
    assert sample.types[0].bytes == 300 and sample.pause_ms == 1.5
