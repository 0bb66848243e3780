"""The census of a target holding one very wide container, in a memory cgroup: its cost in the
target does not grow with the container's width (issue 23: a 2.3M-item list made the compiled
walk hold a reference per entry, ~18 MB, and a default inspection of a 1 GB heap stopped at
its 16 MiB budget with exit 19 instead of answering)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from leakhound.attach.memory_limit import MIB
from tests.memory_cgroup import MemoryCgroup, memory_cgroup, v1_memory_available
from tests.pythons import installed_pythons
from tests.utils import Child, spawn_target

pytestmark = [
    pytest.mark.integration,
    pytest.mark.usefixtures("ptrace_ok"),
    pytest.mark.skipif(not v1_memory_available(), reason="needs root and a cgroup v1 memory hierarchy"),
]


@contextlib.contextmanager
def _limited(fixture: str, env: dict[str, str], headroom_mb: int, tmp_path: Path,
             python: str | None = None) -> Iterator[tuple[Child, MemoryCgroup]]:
    with memory_cgroup() as group, spawn_target(fixture, tmp_path, env=env, prefix=group.prefix, timeout=180,
                                                python=python) as child:
        group.limit_to(group.usage + headroom_mb * 1_000_000)
        group.reset_peak()
        yield child, group


def _inspect(pid: int, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
    done = subprocess.run([sys.executable, "-m", "leakhound", "inspect", str(pid), "--json", *args],
                          capture_output=True, text=True, timeout=300)
    return done, json.loads(done.stdout) if done.returncode == 0 else None


def _alive(child: Child, group: MemoryCgroup) -> bool:
    return os.path.exists(f"/proc/{child.pid}") and child.pid in group.pids() and group.oom_kills() == 0


@pytest.mark.parametrize("version", sorted(installed_pythons()))
def test_a_wide_list_of_objects_is_counted_within_the_budget(version: str, tmp_path: Path) -> None:
    # 2.5M 1-tuples in one list (~230 MB RSS), +100 MB headroom. Before: the target's RSS
    # +17.5 MiB when the census stopped at its 16 MiB budget (exit 19); now +6.5 MiB.
    env = {"FIXTURE_ITEMS": "2500000"}
    with _limited("wide_list", env, 100, tmp_path, python=installed_pythons()[version]) as (child, group):
        items = child.report()["truth"]["items"]
        before = group.usage
        done, doc = _inspect(child.pid, "--owners", "census")
        assert done.returncode == 0 and doc is not None, done.stderr
        assert _alive(child, group)
        charged = group.peak - before
        allowed = max(16 * MIB, doc["process"]["rss_bytes"] // 100)
        assert charged <= allowed and doc["cost"]["hwm_bytes"] <= allowed, (doc["cost"], charged)
        # Far below a reference per entry (the walk's stack held items * 8 bytes before).
        assert charged < items * 8 // 2, (doc["cost"], charged)
        assert doc["owners"][0]["path"] == "__main__.WIDE" and doc["owners"][0]["items"] == items
        assert any(t["type"] == "tuple" and t["count"] >= items for t in doc["types"])


@pytest.mark.slow
def test_a_default_inspection_of_a_1gb_heap_answers_under_50mb_of_headroom(tmp_path: Path) -> None:
    # fixtures/heap_of_size.py at 1 GB: 2.3M records in one list. Before: exit 19 (stopped at
    # +16.2 MiB of RSS, the cgroup +16.6 MiB); now 0, the cgroup +13.1 MiB.
    with _limited("heap_of_size", {"FIXTURE_HEAP_MB": "1000"}, 50, tmp_path) as (child, group):
        records = child.report()["truth"]["records"]
        before = group.usage
        done, doc = _inspect(child.pid)
        assert done.returncode == 0 and doc is not None, done.stderr
        assert _alive(child, group)
        charged = group.peak - before
        allowed = max(16 * MIB, doc["process"]["rss_bytes"] // 100)
        assert charged <= allowed and doc["cost"]["hwm_bytes"] <= allowed, (doc["cost"], charged)
        # No room under the limit for the object graph: no owner is named rather than a first
        # reacher presented as one (the header says so and that --owners census lists them).
        assert doc["heap"]["owner_model"] == "not-attributed", doc["heap"]
        assert doc["owners"][0]["path"].startswith("<not attributed"), doc["owners"][0]
        assert records > 2_000_000


def _inspect_wide(kind: str, version: str, tmp_path: Path, *args: str) -> tuple[dict[str, Any], dict[str, Any], int]:
    """fixtures/wide_list.py's ``kind`` of 1.5M entries on CPython ``version``, in a memory
    cgroup with 100 MB of headroom, inspected by default (and ``args``): its truth, the
    inspection's JSON and what the inspection charged its cgroup at its peak."""
    python = installed_pythons().get(version)
    if python is None:
        pytest.skip(f"no CPython {version} installed here")
    env = {"FIXTURE_ITEMS": "1500000", "FIXTURE_KIND": kind}
    with _limited("wide_list", env, 100, tmp_path, python=python) as (child, group):
        truth = child.report()["truth"]
        before = group.usage
        done, doc = _inspect(child.pid, *args)
        assert done.returncode == 0 and doc is not None, done.stderr
        assert _alive(child, group)
        return truth, doc, group.peak - before


@pytest.mark.parametrize("kind", ["defaultdict", "ordereddict", "counter", "dict_subclass", "deque"])
@pytest.mark.parametrize("version", ["3.10", "3.12", "3.13"])
def test_a_wide_dict_subclass_or_deque_is_read_a_slice_at_a_time(kind: str, version: str, tmp_path: Path) -> None:
    """A dict subclass (a defaultdict registry, an OrderedDict LRU cache, a Counter) was read
    whole by the object graph's walk, its traverse a reference per entry in one step: 2M
    entries were a 650 ms stall and ~140 MB of the target's memory for a moment (the exact dict
    beside it: slices); a deque (a replay buffer) a reference per item. Their entries are read
    a slice at a time now, and what a subclass alone holds (a factory's closure, an instance
    attribute) still counts: the owner is what freeing it returns, and the walk's cost stays
    far below a reference per entry."""
    truth, doc, charged = _inspect_wide(kind, version, tmp_path)
    # the payload's fixed part and half a reference per entry (the marks of what was folded, a
    # bit per 16 bytes of heap; records not yet written out, more of them on a loaded
    # machine), not a reference each and more (read whole: 15 MB at 1.5M items)
    assert charged < 4 * MIB + truth["items"] * 4, (doc["cost"], charged)
    top = doc["owners"][0]
    assert doc["heap"]["owner_model"] == "dominator" and top["path"] == "__main__.WIDE", doc["owners"][:3]
    assert abs(top["retained_bytes"] / truth["bytes"] - 1) < 0.02, (top["retained_bytes"], truth)


@pytest.mark.parametrize("kind", ["list_subclass", "tuple_subclass", "set_subclass", "lru"])
@pytest.mark.parametrize("version", ["3.10", "3.12", "3.13"])
def test_a_wide_sequence_subclass_or_long_traverse_is_read_a_slice_at_a_time(kind: str, version: str,
                                                                             tmp_path: Path) -> None:
    """A list, tuple or set subclass (``class Rows(list)``) was read whole, its traverse a
    reference per item at once and its items on the walk's stack together: 2M rows, ~50 MB of
    the target's memory and a 36-54 ms step. The subclass is read from its items now, after
    what it holds itself. A bounded lru_cache's wrapper visits three references an entry (2M
    entries: ~100 MB, a 111 ms step); read through its traverse a slice at a time, each slice
    went through the ones before it (~40 ms at 2M), and its keys, met from the wrapper and
    from its cache far apart, waited in the walk's table (~30 MB, over the default budget
    under a limit: no owner named). Its fields and its links' are read now (_walk_objects.c
    typed_traverse), its entries from its cache a slice at a time: the owner is its cache
    (``.<lru cache>``), what freeing it returns, its links, keys and results folded into it."""
    truth, doc, charged = _inspect_wide(kind, version, tmp_path)
    # the payload's fixed part and a few bytes an entry (the walk's bitmaps), not a reference
    # an entry and more (read whole: ~45 MB at 1.5M rows, ~75 MB for the lru)
    assert charged < 4 * MIB + truth["items"] * 6, (doc["cost"], charged)
    assert doc["heap"]["owner_model"] == "dominator", (doc["heap"]["owner_model_note"], doc["cost"])
    top = doc["owners"][0]
    if kind == "lru":
        assert top["path"] == "__main__.WIDE.<lru cache>", doc["owners"][:3]
        assert abs(top["retained_bytes"] / truth["bytes"] - 1) < 0.02, (top, truth)
        return
    assert top["path"] == "__main__.WIDE", doc["owners"][:3]
    # the subclass's parts (its __dict__'s values) are rows of their own
    retained = sum(o["retained_bytes"] for o in doc["owners"]
                   if o["path"] == "__main__.WIDE" or o["path"].startswith("__main__.WIDE."))
    assert abs(retained / truth["bytes"] - 1) < 0.02, (retained, truth, doc["owners"][:4])
