"""A patch outcome lists the functions a fix replaced as ``functions`` (``targets`` is the word
leakhound uses for processes). A fix an older leakhound landed in a long-running worker keeps
its state entry as it was, so the payload reads both words there; an older payload's reply is
refused by its version (tests/unit/test_wire.py)."""

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


def test_an_older_state_entry_still_reads() -> None:
    assert _functions({"swaps": [], "targets": ["m.g"], "counters": {}}) == ["m.g"]
    assert _functions({"swaps": [], "functions": ["m.h"], "counters": {}}) == ["m.h"]
