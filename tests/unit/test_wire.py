"""The wire between the CLI and the payload (leakhound/payload/wire.py): every answer says its
payload version; the CLI decodes each answer once into the model (core/decode.py) and refuses
one of another version by that version, never by which fields it has."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from leakhound.attach import RemoteResult
from leakhound.attach.deadline import Deadline
from leakhound.attach.process import Target
from leakhound.core import capture, patch, verify, watch
from leakhound.core.decode import decode_names, decode_patch, decode_sample, decode_snapshot
from leakhound.core.request import RequestOptions
from leakhound.errors import PayloadVersionMismatch, ProtocolViolation
from leakhound.model.growth import Sample
from leakhound.model.names import FIX_NAMES, Method, PatchAction
from leakhound.payload import runner, wire

TARGET = Target(pid=4242, uid=1000, exe="/usr/bin/python3", version=(3, 11), name="python", cmdline="")


@pytest.fixture(scope="module")
def answer() -> dict[str, Any]:
    """A real snapshot answer: the payload run in this process, as the agent runs it."""
    out = runner.handle({"op": wire.OP_SNAPSHOT, "top_types": 5, "top_owners": 5, "timeout": 60})
    assert out["ok"], out
    return out


def test_every_answer_says_its_payload_version(answer: dict[str, Any]) -> None:
    assert answer["payload_version"] == wire.PAYLOAD_VERSION
    assert runner.handle({"op": wire.OP_PING})["payload_version"] == wire.PAYLOAD_VERSION
    refused = runner.handle({"op": "exec"})
    assert (refused["ok"], refused["kind"], refused["payload_version"]) == (False, wire.KIND_BAD_REQUEST,
                                                                             wire.PAYLOAD_VERSION)


def test_a_snapshot_answer_is_decoded_once_into_the_model(answer: dict[str, Any]) -> None:
    decoded = decode_snapshot(1, answer, method=Method.AGENT, taken_at=0.0, pause_ms=0.0)
    heap = answer["heap"]
    snap = decoded.snapshot
    assert decoded.payload_version == wire.PAYLOAD_VERSION
    assert (snap.heap.objects, snap.heap.bytes) == (heap["objects"], heap["bytes"])
    assert [t.type for t in snap.types] == [t["type"] for t in heap["types"]]
    assert [o.path for o in snap.owners] == [o["path"] for o in heap["owners"]]
    assert decoded.holds.payload_phases.keys() == answer["phases"].keys()
    assert decoded.holds.max_hold_ms == heap["max_hold_ms"]
    assert decoded.started_at == heap["started_at"]
    assert (decoded.graph, decoded.names) == (None, None)  # (the graph comes before the answer)


@pytest.mark.parametrize(("version", "said"), [
    (None, "no payload version (version 1 or older)"),  # version 1's snapshot answers said none
    (1, "payload version 1"),
    (wire.PAYLOAD_VERSION + 1, f"payload version {wire.PAYLOAD_VERSION + 1}"),
    ("2", "no payload version"),
])
def test_an_answer_of_another_payload_version_is_refused_by_its_version(
        answer: dict[str, Any], version: object, said: str) -> None:
    other = copy.deepcopy(answer)
    if version is None:
        del other["payload_version"]
    else:
        other["payload_version"] = version
    other["graph_sent"] = True  # what version 1 said of an early graph: not read as a version
    with pytest.raises(PayloadVersionMismatch, match=re.escape(f"answered with {said}")) as caught:
        decode_snapshot(4242, other, method=Method.AGENT, taken_at=0.0, pause_ms=0.0)
    assert "process 4242" in str(caught.value) and "another leakhound" in str(caught.value)
    assert isinstance(caught.value, ProtocolViolation) and caught.value.EXIT_CODE == 20
    assert "--method ptrace" in caught.value.HELP_TEXT


@pytest.mark.parametrize(("where", "value", "field"), [
    ("heap", {"objects": 1}, "bytes"),
    ("max_hold_where", ["only one"], "heap.max_hold_where"),
    ("phases", {"census": "fast"}, ""),
    ("target_gc_in_payload_thread", [1, 2], "target_gc_in_payload_thread"),
])
def test_a_malformed_answer_is_one_clear_error(answer: dict[str, Any], where: str, value: object,
                                               field: str) -> None:
    wrong = copy.deepcopy(answer)
    if where == "max_hold_where":
        wrong["heap"][where] = value
    else:
        wrong[where] = value
    with pytest.raises(ProtocolViolation, match="malformed snapshot") as caught:
        decode_snapshot(4242, wrong, method=Method.AGENT, taken_at=0.0, pause_ms=0.0)
    assert field in str(caught.value)


def test_capture_refuses_an_agent_of_an_older_payload(answer: dict[str, Any],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    older = {k: v for k, v in answer.items() if k != "payload_version"}
    older["graph_sent"] = True
    monkeypatch.setattr(capture, "resolve_target", lambda pid: TARGET)
    monkeypatch.setattr(capture, "graph_memory_budget", lambda pid: 64 << 20)
    monkeypatch.setattr(capture, "ask", lambda *a, **k: RemoteResult(TARGET, Method.AGENT, older, 0.0, 0.0))
    with pytest.raises(PayloadVersionMismatch, match="no payload version"):
        capture.capture(TARGET.pid, request=RequestOptions(method=Method.AGENT, timeout=5.0))


def test_a_graph_handed_over_says_its_version_and_one_of_another_is_not_analysed() -> None:
    """The graph comes before the answer: the CLI analyses it only when it is of a version it
    reads, and otherwise tells the target at once that it wants no names (its answer is then
    refused by its version)."""
    doc = wire.partial_graph({"format": "leakhound.graph/1", "nodes": 2})
    assert doc["graph"]["payload_version"] == wire.PAYLOAD_VERSION
    posted: list[tuple[str, object]] = []
    for graph in ({"format": "leakhound.graph/1", "nodes": 2}, {**doc["graph"], "payload_version": 1}):
        posted.clear()
        early = capture._EarlyOwners(top=5, retainers=1, why=None, deadline=Deadline.fixed(5.0))
        early.on_partial(wire.PARTIAL_GRAPH, graph, lambda name, reply: posted.append((name, reply)))
        assert posted == [(wire.REPLY_NAMES, {"paths": []})]
        assert early._thread is None  # nothing analysed


def _of_version(answer: dict[str, Any], version: object) -> dict[str, Any]:
    other = copy.deepcopy(answer)
    if version is None:
        del other["payload_version"]
    else:
        other["payload_version"] = version
    return other


def _refused(call: Callable[[], object]) -> None:
    with pytest.raises(PayloadVersionMismatch, match="process 4242 answered with") as caught:
        call()
    assert caught.value.EXIT_CODE == 20


@pytest.mark.parametrize("version", [None, 1, wire.PAYLOAD_VERSION + 1])
def test_every_kind_of_answer_is_refused_by_its_version(version: object) -> None:
    """The sample (watch's cheap samples, verify's points), the patch (its measurements carry
    the probes), and the names answers are decoded once, their version first, as the
    snapshot's is; each real answer of this payload decodes."""
    sample = runner.handle({"op": wire.OP_SAMPLE, "owners": [{"ids": [], "type": "dict", "path": "x"}],
                            "top_types": 3, "allocator": True, "timeout": 60})
    patch = runner.handle({"op": wire.OP_PATCH, "action": "status", "fixes": list(FIX_NAMES), "timeout": 60})
    names = runner.handle({"op": wire.OP_NAMES, "paths": [], "timeout": 60})
    for answer in (sample, patch, names):
        assert answer["ok"] and answer["payload_version"] == wire.PAYLOAD_VERSION, answer
    assert len(decode_sample(4242, sample, asked=1).types) == 3
    assert [r["fix"] for r in decode_patch(4242, patch)["results"]] == list(FIX_NAMES)
    assert decode_names(4242, names) == []
    _refused(lambda: decode_sample(4242, _of_version(sample, version), asked=1))
    _refused(lambda: decode_patch(4242, _of_version(patch, version)))
    _refused(lambda: decode_names(4242, _of_version(names, version)))


def test_watch_verify_and_patch_refuse_an_answer_of_another_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the commands read a sample or a patch answer, an answer of another version is
    refused (the cheap sample of watch, verify's sample, every patch request)."""
    sample = _of_version(runner.handle({"op": wire.OP_SAMPLE, "owners": [], "top_types": 0, "timeout": 60}), 1)
    status = _of_version(runner.handle({"op": wire.OP_PATCH, "action": "status", "fixes": ["trim"],
                                        "timeout": 60}), 1)
    target = replace(TARGET, pid=4242)
    for module, answer in ((watch, sample), (verify, sample), (patch, status)):
        monkeypatch.setattr(module, "ask", lambda *a, answer=answer, **k: RemoteResult(target, Method.AGENT, answer,
                                                                                       0.0, 0.0))
    monkeypatch.setattr(patch, "resolve_target", lambda pid: target)
    monkeypatch.setattr(watch, "rss_bytes", lambda pid: 0)
    monkeypatch.setattr(verify, "rss_bytes", lambda pid: 0)
    watched = watch.Watched(target=target, request=RequestOptions(method=Method.AGENT))
    watched.reference = Sample(pid=4242, taken_at=0.0, rss_bytes=0)
    _refused(lambda: watch._cheap(watched))
    sampler = verify._Sampler(target, request=RequestOptions(method=Method.AGENT), interval=1.0, tracked=[],
                              count_registry=False, say=lambda line: None)
    _refused(sampler._sample)
    _refused(lambda: patch.patch_process(4242, fixes=["trim"], action=PatchAction.STATUS))
