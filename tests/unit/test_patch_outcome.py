"""A patch outcome lists the functions a fix replaced as ``functions`` (it said ``targets``, the
word leakhound uses for processes); replies and target state of an older leakhound still read."""

from __future__ import annotations

from leakhound.core.patch import _outcome
from leakhound.payload.patches import _functions
from leakhound.render.patch import outcome_doc


def test_the_outcome_names_the_patched_functions() -> None:
    reply = {"fix": "steps", "status": "applied", "functions": ["m.Runtime.add_step"], "counters": {}}
    outcome = _outcome(7, reply)
    assert outcome.functions == ("m.Runtime.add_step",)
    doc = outcome_doc(outcome)
    assert doc["functions"] == ["m.Runtime.add_step"] and "targets" not in doc


def test_an_older_reply_and_an_older_state_entry_still_read() -> None:
    assert _outcome(7, {"fix": "steps", "status": "applied", "targets": ["m.f"]}).functions == ("m.f",)
    # A fix landed in a long-running worker by an older leakhound keeps its entry as it was.
    assert _functions({"swaps": [], "targets": ["m.g"], "counters": {}}) == ["m.g"]
    assert _functions({"swaps": [], "functions": ["m.h"], "counters": {}}) == ["m.h"]
