"""The payload reads the target's objects without running their code: no ``isinstance()`` on
them (it reads a ``__class__`` property when the type does not match: Django's
SimpleLazyObject evaluates itself, werkzeug's proxies look up a request), and a list
subclass's entries by the built-in type's own ``__iter__``, a key's text without its
``__str__``."""

from __future__ import annotations

import ast
from pathlib import Path

from leakhound.payload.objects import builtin_iter, plain_text

PAYLOAD = Path(__file__).resolve().parents[2] / "leakhound" / "payload"
# isinstance() on the payload's own values only: (module, the first argument's name)
OWN_VALUES = {("fork_guard.py", "running"), ("fork_guard.py", "locks"), ("graph.py", "estimate"),
              ("graph.py", "exc"), ("runner.py", "estimate")}


def test_no_isinstance_on_the_targets_objects() -> None:
    found = []
    for path in sorted(PAYLOAD.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
                arg = node.args[0]
                name = arg.id if isinstance(arg, ast.Name) else ast.unparse(arg)
                if (path.name, name) not in OWN_VALUES:
                    found.append(f"{path.name}:{node.lineno} isinstance({name}, ...)")
    assert not found, "use issubclass(type(x), T): " + ", ".join(found)


class _Lying:
    reads = 0

    @property  # type: ignore[misc]
    def __class__(self):  # noqa: ANN204
        _Lying.reads += 1
        return list


class _Rows(list):  # type: ignore[type-arg]
    def __iter__(self):  # noqa: ANN204
        raise AssertionError("a subclass's __iter__ ran")


def test_builtin_iter_reads_entries_by_the_built_in_type() -> None:
    rows = _Rows([1, 2, 3])
    iterator = builtin_iter(rows)
    assert iterator is not None and list(iterator) == [1, 2, 3]
    assert builtin_iter(frozenset({4})) is not None
    assert builtin_iter(_Lying()) is None and _Lying.reads == 0
    assert builtin_iter({"a": 1}) is None  # dicts are read by dict.keys / dict.values


class _Loud:
    def __str__(self) -> str:
        raise AssertionError("__str__ ran")


def test_plain_text_calls_no_str() -> None:
    assert plain_text("t-1") == "t-1" and plain_text(42) == "42"
    loud = _Loud()
    assert plain_text(loud) == f"<_Loud at 0x{id(loud):x}>"
