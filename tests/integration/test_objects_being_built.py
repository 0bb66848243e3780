"""Objects another thread is still building are never held by the inspection.

CPython grows a new tuple (``tuple(generator)``) or fills a new frozenset only while its
builder holds its one reference. ``gc.get_objects()`` lists them too; the census and the
graph keep that list across GIL yields, and before payload/tracked.py a target thread running
``tuple(x for x in range(2000))`` in a loop met ``SystemError: bad argument to internal
function`` on every inspection. The target counts what it built and the errors it met."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.pythons import installed_pythons
from tests.utils import spawn_target

pytestmark = pytest.mark.integration

PYTHONS = installed_pythons()
VERSIONS = [v for v in ("3.11", "3.12") if v in PYTHONS]


def _leakhound(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "leakhound", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("version", VERSIONS)
def test_inspections_and_watch_never_break_a_tuple_being_built(version: str, tmp_path: Path) -> None:
    with spawn_target("objects_being_built", tmp_path, python=PYTHONS[version]) as child:
        before = child.report(timeout=30)["truth"]
        runs = [("inspect", str(child.pid), "--json"), ("inspect", str(child.pid), "--owners", "census", "--json"),
                ("watch", str(child.pid), "-d", "4", "--interval", "1", "--json")]
        for args in runs * 2:
            done = _leakhound(*args)
            assert done.returncode == 0, done.stderr[-2000:]
            if args[0] == "inspect":
                assert json.loads(done.stdout)["owners"]
        after = child.report(timeout=30)["truth"]
    assert after["built"] > before["built"] + 1000  # the builders ran all along
    assert after["errors"] == 0, after["messages"]
