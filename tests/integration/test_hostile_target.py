"""A live target full of objects built to break the census walk (fixtures/hostile_heap.py),
with a thread mutating big containers throughout, inspected again and again the default way:
every inspection succeeds, the target stays alive and keeps working, no ``__sizeof__``
written in Python runs, no ``__class__`` property is read, and the target does not grow."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.utils import spawn_target

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]

LEAKHOUND = str(Path(sys.executable).with_name("leakhound"))


def test_a_hostile_heap_is_inspected_repeatedly_without_harm(tmp_path: Path) -> None:
    with spawn_target("hostile_heap", tmp_path) as child:
        before = child.report()
        for i in range(4):
            # the object graph's dominator owners and the census, in turn
            census = i % 2 == 1
            model = ["--owners", "census" if census else "dominator"]
            run = subprocess.run([LEAKHOUND, "inspect", str(child.pid), "--json", *model],
                                 capture_output=True, text=True, timeout=120)
            assert run.returncode == 0, run.stderr
            doc = json.loads(run.stdout)
            assert child.proc.poll() is None
            owners = {o["path"] for o in doc["owners"]}
            assert doc["heap"]["owner_model"] == ("first-reacher" if census else "dominator")
            assert "__main__.ROWS" in owners
            if census:  # every named root is a census owner; the graph lists only big ones
                assert "__main__.MOCKS" in owners
        after = child.report()
    assert doc["heap"]["walker"] == "compiled"
    assert after["truth"]["sizeof_calls"] == 0
    assert after["truth"]["class_reads"] == 0  # no isinstance() on the target's objects
    assert after["truth"]["churns"] > before["truth"]["churns"]  # the churn thread kept going
    assert after["ticks"] > before["ticks"]  # and so did the event loop
    # A mock's __sizeof__, were it run, grows its process by gigabytes in seconds.
    assert after["rss_bytes"] - before["rss_bytes"] < 100 * 2**20
