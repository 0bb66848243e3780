"""Targets on every CPython a worker might run (3.10-3.13 here), not only leakhound's own.

The fixtures are asyncio programs with a 5 ms heartbeat: every tick awaits a future, so the
_asyncio free list the 3.12 census used to corrupt (CPython gh-122695) is in use throughout.
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

OTHER_PYTHONS = {v: p for v, p in installed_pythons().items() if v in ("3.10", "3.12", "3.13")}
VERSIONS = pytest.mark.parametrize("version", sorted(OTHER_PYTHONS))


@VERSIONS
def test_the_module_cache_is_top_owner_on_each_version(tmp_path: Path, version: str) -> None:
    with spawn_target("growing_cache", tmp_path, python=OTHER_PYTHONS[version]) as child:
        snap = take_snapshot(child.pid, request=RequestOptions(timeout=60))
        truth = child.report()["truth"]
    assert snap.python_version.startswith(version + ".")
    top = snap.owners[0]
    assert top.path == "__main__.CACHE"
    assert top.items == truth["cache_items"]
    assert within(top.retained_bytes, truth["cache_bytes"]), (top.retained_bytes, truth)


@VERSIONS
def test_attribute_chains_and_cyclic_garbage_on_each_version(tmp_path: Path, version: str) -> None:
    with spawn_target("instance_graph", tmp_path, python=OTHER_PYTHONS[version]) as child:
        snap = take_snapshot(child.pid, request=RequestOptions(timeout=60), max_pause_ms=None)
        truth = child.report()["truth"]
    owners = [o for o in snap.owners if not o.path.startswith("<")]
    assert owners[0].path == "__main__.APP.bus._listeners", [(o.path, o.retained_bytes) for o in snap.owners[:8]]
    assert within(owners[0].retained_bytes, truth["listeners_bytes"])
    nodes = {t.type: t for t in snap.cyclic_garbage.types}["__main__.Node"]
    assert nodes.count == truth["garbage_objects"] * 2 // 3


@VERSIONS
@pytest.mark.parametrize("method", ["ptrace", "gdb"])
def test_repeated_inspections_leave_the_worker_alive_and_ticking(tmp_path: Path, version: str, method: str) -> None:
    # On 3.12.1 the 2nd-5th inspection of such a program segfaulted it, or its next await
    # failed with InvalidStateError; with gdb as with ptrace, only with the pause budget.
    with spawn_target("growing_cache", tmp_path, python=OTHER_PYTHONS[version]) as child:
        ticks = child.report()["ticks"]
        for _ in range(6):
            take_snapshot(child.pid, request=RequestOptions(method=Method(method), timeout=60))
            after = child.report()
            assert child.proc.poll() is None, f"the target died: exit {child.proc.returncode}"
            assert after["ticks"] > ticks, "the target's event loop stopped ticking"
            ticks = after["ticks"]
