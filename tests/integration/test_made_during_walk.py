"""Objects made while the object graph is walked, after what holds them was walked, look like
nothing named reaches them: they are named ``<made during the walk: Type>``, never ``<held from
C: Type>``, while an object only C holds (a reference a C extension took) still is."""

from __future__ import annotations

from pathlib import Path

import pytest

from leakhound.core.capture import capture
from tests.utils import spawn_target, within

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]

INSPECTIONS = 5
ROWS = 4000  # the fixture's FIXTURE_ITEMS


def test_what_a_fast_allocating_target_makes_during_the_walk_is_not_held_from_c(tmp_path: Path) -> None:
    with spawn_target("made_during_walk", tmp_path, env={"FIXTURE_ITEMS": str(ROWS)}) as child:
        before = child.report()["truth"]["appended"]
        snaps = [capture(child.pid, top=20).snapshot for _ in range(INSPECTIONS)]
        truth = child.report()["truth"]
    assert truth["appended"] > before  # it kept allocating while inspected
    churn_held: list[list[str]] = []
    for snap in snaps:
        assert snap.heap.owner_model == "dominator", snap.heap.owner_model_note
        paths = [(o.path, o.items, o.retained_bytes) for o in snap.owners]
        held = [o for o in snap.owners if o.path.startswith("<held from C:")]
        # the rows C holds: held from C, all their bytes
        rows = [o for o in held if o.path == "<held from C: list>" and o.items == ROWS]
        assert rows and within(rows[0].retained_bytes, truth["held_bytes"]), (paths, truth)
        # LOG's new entries ([bytes(CHUNK)], one item each)
        churn_held.append([o.path for o in held if o.items == 1])
    # Whether an entry is made while the walk runs, after LOG, is up to the scheduler: on the
    # old code 2 of 3 inspections named one held from C. When a collection of the older
    # generations ran meanwhile, what shares the walk's generation is not known to be new by
    # its place (tracked.made_after), and 2 of 5 inspections of a CI run named some held from
    # C; now any candidate something in the heap references is not (census_unreached.
    # still_outside). One in five is still allowed: an entry made after the listing, in a list
    # made after it too, is referenced from nothing the listing holds.
    # test_graph_made_during_walk makes one at a known point, with each kind of collection.
    assert sum(1 for found in churn_held if found) <= 1, churn_held
