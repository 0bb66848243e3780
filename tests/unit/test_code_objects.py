"""What a code object holds counts to whoever holds the code (issue 11).

Code objects are not gc-tracked: ``gc.get_referents(code)`` is empty on every CPython, so
their constants, names and line tables were counted nowhere (the live heap read 0.89-0.93
of tracemalloc's total; tests/integration/test_instances_tracemalloc.py). They are read
through the code type's member descriptors (``sizes._CODE_MEMBERS``), never a getter that
builds or (3.12+) caches a new object in the code.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from leakhound.payload import census, sizes
from tests.unit.test_census_sizes import _walk

BLOB = 1 << 20


def _function_with_a_big_constant() -> types.FunctionType:
    namespace: dict[str, Any] = {}
    exec("def handler():\n    return " + repr(b"x" * BLOB) + "\n", namespace)  # noqa: S102 - test data
    return namespace["handler"]


@pytest.mark.parametrize("compiled", [False, pytest.param(True, marks=pytest.mark.skipif(
    census._walk is None, reason="the C walk was not built here"))])
def test_a_functions_code_constants_count_to_its_owner(compiled: bool) -> None:
    handlers = {"h": _function_with_a_big_constant()}
    _objects, nbytes = _walk(handlers, compiled=compiled)
    # before: the function and its code object's header only (~1 KB)
    assert nbytes >= BLOB, nbytes


@pytest.mark.skipif(census._walk is None, reason="the C walk was not built here")
def test_the_compiled_walk_and_the_python_loop_agree_on_code() -> None:
    heap = [_function_with_a_big_constant(), sizes.native_extra, census.Census.__init__]
    assert _walk(heap, compiled=True) == _walk(heap, compiled=False)


def test_only_members_are_read() -> None:
    for descr in sizes._CODE_MEMBERS:
        assert type(descr).__name__ == "member_descriptor", descr
    names = {descr.__name__ for descr in sizes._CODE_MEMBERS}
    assert {"co_consts", "co_names", "co_linetable"} <= names
    if sys.version_info >= (3, 11):
        # getters there: co_varnames builds a tuple (and 3.12+ keep it in the code object)
        assert not names & {"co_varnames", "co_code", "co_freevars", "co_cellvars"}


@pytest.mark.skipif(census._walk is None, reason="the C walk was not built here")
def test_the_compiled_walk_reads_code_members_itself() -> None:
    # No call back into Python per code object (tens of thousands in a big program: ~0.2 s
    # of the census's CPU on the verifiers worker's heap): the compiled walks are handed the
    # natively sized types without the code type, and read the same members in C.
    codes = sizes.native_codes(sizes.native_types()[0])
    assert id(types.CodeType) in codes  # the Python loops read them through native_extra
    assert census._walk.READS_CODE
    assert id(types.CodeType) not in sizes.for_compiled_walk(codes, census._walk)
    assert sizes.for_compiled_walk(codes, None) is codes
