"""The census must not harm the process it runs in, whatever the CPython or the classes.

Each case runs the payload's census in a fresh interpreter of every installed CPython a
worker might use (the payload is standard library only), the way it runs in a target: from
its own thread while the main thread keeps working.
"""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

from leakhound.payload.census_unreached import cyclic_only
from leakhound.payload.objects import dict_pairs, safe_referents

REPO = Path(__file__).resolve().parents[2]
PYENV = Path("/root/.pyenv/versions")


def _target_pythons() -> list[str]:
    found = [sys.executable]
    for version in ("3.10", "3.12", "3.13"):
        candidates = sorted(PYENV.glob(f"{version}.*/bin/python")) if PYENV.is_dir() else []
        if candidates:
            found.append(str(candidates[-1]))
    return found


def _run(python: str, fixture: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    """``fixtures/FIXTURE.py`` in a fresh ``python``, from the repository (it imports the payload)."""
    return subprocess.run(
        [python, "-X", "faulthandler", str(REPO / "fixtures" / f"{fixture}.py")],
        capture_output=True, text=True, timeout=timeout, cwd=str(REPO),
    )


# CPython 3.12 and 3.13.0's _asyncio module visits its free list of FutureIter objects
# (refcount 0) in its traverse (gh-122695). A census that walked the module with
# gc.get_referents held freed iterators and freed them again: the target's next awaits failed
# ("await wasn't used with future", "Result is not set") or it segfaulted.
FREELIST = "census_asyncio_freelist"  # fixtures/census_asyncio_freelist.py


@pytest.mark.integration  # a target spinning its event loop under ten censuses, per CPython: 3-5 s of CPU each
@pytest.mark.parametrize("python", _target_pythons())
def test_walking_asyncio_never_revives_its_freed_future_iterators(python: str) -> None:
    out = _run(python, FREELIST)
    assert out.returncode == 0 and "alive" in out.stdout, out.stderr[-2000:]


def test_modules_are_walked_through_their_dict_only() -> None:
    import _asyncio

    assert safe_referents(_asyncio) == [_asyncio.__dict__]


METACLASS_HASH = "census_metaclass_hash"  # fixtures/census_metaclass_hash.py


@pytest.mark.parametrize("python", _target_pythons())
def test_a_metaclass_hash_never_runs_and_never_fails_the_census(python: str) -> None:
    out = _run(python, METACLASS_HASH)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-2000:]


CHURN = "census_thread_churn"  # fixtures/census_thread_churn.py


@pytest.mark.parametrize("python", _target_pythons())
def test_objects_a_thread_drops_during_the_census_are_not_cyclic_garbage(python: str) -> None:
    # No cycles anywhere: what the thread replaces dies at once, except that the census's own
    # list of tracked objects still holds it. That is not garbage the GC would find.
    out = _run(python, CHURN)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[0, 0, 0]"


def test_a_dead_acyclic_structure_is_peeled_and_a_cycle_stays() -> None:
    chain = [[1], (2,)]
    head = [chain]
    cycle: list[object] = []
    cycle.append(cycle)
    hanger = [cycle, {"x": 1}]
    cycle.append(hanger)
    left = cyclic_only([head, chain, chain[0], chain[1], cycle, hanger, hanger[1]])
    assert [id(o) for o in left] == [id(cycle), id(hanger), id(hanger[1])]


NO_GARBAGE = "census_no_garbage"  # fixtures/census_no_garbage.py


@pytest.mark.parametrize("python", _target_pythons())
def test_the_census_leaves_no_cyclic_garbage_behind(python: str) -> None:
    # It used to: its own frame, named by a local while it walked the thread stacks, held
    # everything it held (gc.get_objects()'s list too) until the target's next full collection.
    out = _run(python, NO_GARBAGE)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[[], [], []]"


def test_a_dicts_pairs_are_read_as_one_moment_with_no_lookup() -> None:
    class Key(str):
        def __eq__(self, other: object) -> bool:  # the target's code: never run
            raise AssertionError("__eq__ ran")

        __hash__ = str.__hash__

    key = Key("a")
    pairs = dict_pairs({key: 1, "b": [2]})
    assert pairs[0][0] is key and [v for _k, v in pairs] == [1, [2]]

    class Klass:
        x = 3

    assert ("x", 3) in dict_pairs(type.__dict__["__dict__"].__get__(Klass, type))

    # A mapping whose keys change at every read (behind a mappingproxy): no pairs, never
    # wrong ones; and anything else is not read at all.
    restless = {"k": 0}
    reads = iter(range(100))

    class Restless(dict):  # (a mappingproxy calls its mapping's own keys())
        def keys(self):  # type: ignore[override]
            restless.clear()
            restless[f"k{next(reads)}"] = 0
            return dict.keys(restless)

        def values(self):  # type: ignore[override]
            return dict.values(restless)

    assert dict_pairs(types.MappingProxyType(Restless())) == []
    assert dict_pairs([("a", 1)]) == []
