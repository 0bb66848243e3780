"""A watch's cheap sample comes from inside the target, whose owner controls it: one of the
wrong types is ProtocolViolation (exit 19), never a traceback (docs/security.md)."""

from __future__ import annotations

from typing import Any

import pytest

from leakhound.attach import RemoteResult
from leakhound.attach.process import Target
from leakhound.core import watch
from leakhound.core.request import RequestOptions
from leakhound.errors import ProtocolViolation
from leakhound.model import Owner
from leakhound.model.growth import Sample
from leakhound.model.names import Method
from leakhound.payload import wire
from tests.factories import make_snapshot

TARGET = Target(pid=4242, uid=1000, exe="/usr/bin/python3", version=(3, 11), name="python", cmdline="")


def _cheap(monkeypatch: pytest.MonkeyPatch, result: dict[str, Any]) -> Sample:
    answer = {**result, "payload_version": wire.PAYLOAD_VERSION}
    monkeypatch.setattr(watch, "ask", lambda *a, **k: RemoteResult(TARGET, Method.AGENT, answer, 0.0, 0.0))
    monkeypatch.setattr(watch, "rss_bytes", lambda pid: 1 << 20)
    reference = Sample(pid=TARGET.pid, taken_at=0.0, rss_bytes=1, full=True, owner_model="dominator")
    w = watch.Watched(target=TARGET, request=RequestOptions(method=Method.AGENT, timeout=5.0),
                      last_full=reference, reference=reference,
                      reference_snapshot=make_snapshot(
                          owners=(Owner("m.A", "dict", 4, 400, object_id=7, path_ids=(1, 7)),)))
    return watch._cheap(w)


WRONG = {
    "owners a dict": {"ok": True, "owners": {"m.A": 1}},
    "an answer short": {"ok": True, "owners": []},
    "found a word": {"ok": True, "owners": [{"found": "yes", "items": 1}]},
    "an item count a word": {"ok": True, "owners": [{"found": True, "items": "many"}]},
    "an item count negative": {"ok": True, "owners": [{"found": True, "items": -1}]},
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
    sample = _cheap(monkeypatch, {"ok": True, "owners": [{"found": True, "items": 8}],
                                  "types": [{"type": "dict", "count": 3, "bytes": 300}], "max_step_ms": 1.5})
    assert sample.types[0].bytes == 300 and sample.pause_ms == 1.5
    assert [(o.path, o.items, o.bytes, o.object_id) for o in sample.owners] == [("m.A", 8, 800, 7)]
    assert sample.owner_model == "dominator" and sample.unresolved == ()


def test_an_owner_not_found_again_is_said_not_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    sample = _cheap(monkeypatch, {"ok": True, "owners": [{"found": False, "items": None}]})
    assert sample.owners == () and sample.unresolved == ("m.A",)
