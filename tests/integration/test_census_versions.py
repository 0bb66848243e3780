"""inspect a target on every CPython installed here, with leakhound on its own Python.

The compiled census walk is one stable-ABI build (_walk.abi3.so): a target on 3.10, 3.12 or
3.13 loads it as one on 3.11 does, and its census is checked against what the target
computes about itself. A target on 3.8/3.9 gets the pure-Python loop, with the same owners.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from leakhound.core.capture import take_snapshot
from leakhound.core.request import RequestOptions
from leakhound.model.names import Method
from tests.pythons import installed_pythons
from tests.utils import spawn_target, within

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]

PYTHONS = installed_pythons(minimum=(3, 8))


@pytest.mark.parametrize("version", list(PYTHONS))
def test_the_target_python_gets_the_compiled_walk_and_the_right_owner(tmp_path: Path, version: str) -> None:
    with spawn_target("growing_cache", tmp_path, python=PYTHONS[version], env={"LEAKHOUND_AGENT": ""}) as child:
        snap = take_snapshot(child.pid, request=RequestOptions(method=Method.PTRACE, timeout=120))
        truth = child.report()["truth"]
    assert snap.python_version.startswith(version + ".")
    compiled = tuple(int(p) for p in version.split(".")) >= (3, 10)
    assert snap.heap.walker == ("compiled" if compiled else "python")
    top = snap.owners[0]
    assert top.path == "__main__.CACHE"
    assert top.items == truth["cache_items"]
    assert within(top.retained_bytes, truth["cache_bytes"]), (top.retained_bytes, truth)
