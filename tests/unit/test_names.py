"""One name per thing: the fix names, methods and special owners agree across the layers."""

from __future__ import annotations

import inspect

import pytest

from leakhound import patches
from leakhound.model.names import CODE_OWNER, FIX_NAMES, Method, parse_fixes
from leakhound.payload import census_roots
from leakhound.payload import patches as payload_patches
from leakhound.simulate import fixes as simulated_fixes


def test_every_layer_names_the_same_fixes_in_the_same_order() -> None:
    assert FIX_NAMES == ("steps", "registry", "intercepts", "trim")
    assert tuple(patches.FIXES) == FIX_NAMES
    assert tuple(payload_patches.FIXES) == FIX_NAMES  # the payload's own copy (stdlib only)
    assert simulated_fixes.ALL_FIXES == FIX_NAMES


def test_the_payload_books_the_code_under_the_models_name() -> None:
    # The payload imports nothing of leakhound: it spells the name itself.
    assert f'"{CODE_OWNER}"' in inspect.getsource(census_roots)


def test_auto_tries_every_method() -> None:
    from leakhound.attach import AUTO_ORDER

    assert set(AUTO_ORDER) == set(Method) - {Method.AUTO}


@pytest.mark.parametrize(
    "text, allow_none, expected",
    [
        ("all", False, FIX_NAMES),
        ("trim, steps", False, ("steps", "trim")),
        ("trim,all", False, FIX_NAMES),
        ("none", True, ()),
        ("", True, ()),
        ("Registry", False, ("registry",)),
    ],
)
def test_one_grammar_for_fix_lists(text: str, allow_none: bool, expected: tuple[str, ...]) -> None:
    assert parse_fixes(text, allow_none=allow_none) == expected


@pytest.mark.parametrize("text, allow_none", [("bogus", False), ("none", False), ("", False), ("steps,x", True)])
def test_unknown_fixes_are_refused_with_the_choices(text: str, allow_none: bool) -> None:
    with pytest.raises(ValueError, match="unknown fix.*choose from"):
        parse_fixes(text, allow_none=allow_none)


def test_the_simulator_parses_with_the_same_grammar() -> None:
    assert simulated_fixes.parse_fixes("registry_eager,trim") == frozenset({"registry_eager", "trim"})
    assert simulated_fixes.parse_fixes("all") == frozenset(FIX_NAMES)
    with pytest.raises(ValueError, match="unknown fix"):
        simulated_fixes.parse_fixes("everything")


@pytest.mark.parametrize(
    "text, allow_none, said",
    [
        ("regsitry", False, "unknown fix regsitry; did you mean registry? (choose from"),
        ("steps,Regsitry,trm", False, "unknown fix Regsitry, trm; did you mean registry, trim?"),
        ("nonne", True, "unknown fix nonne; did you mean none?"),
        ("trim,no-such-thing", False, "unknown fix no-such-thing (choose from all, steps, registry, intercepts, trim)"),
    ],
)
def test_a_typo_names_the_fix_it_is_close_to(text: str, allow_none: bool, said: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_fixes(text, allow_none=allow_none)
    assert said in str(info.value)
