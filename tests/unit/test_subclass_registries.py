"""A class's registry of its subclasses (``tp_subclasses``: ``{id(subclass): weakref}``, shown
by no traversal) is known for its class's (payload/objects.py ``subclasses_owner``), and a
dict's ``__name__`` is read without running a key's ``__eq__`` (``module_dict_name``)."""

from __future__ import annotations

import gc
import weakref

from leakhound.payload.objects import module_dict_name, subclasses_owner


class Base:
    pass


SUBS = [type(f"Sub{i}", (Base,), {}) for i in range(5)]


def _registry_of(cls: type) -> dict[int, weakref.ref[type]]:
    """The dict the interpreter keeps (found the slow way: every tracked dict, compared)."""
    wanted = {id(sub) for sub in type.__subclasses__(cls)}
    found = [d for d in gc.get_objects() if type(d) is dict and d and set(d) == wanted
             and all(type(v) is weakref.ref for v in d.values())]
    assert found
    return found[0]


def test_a_class_registry_of_subclasses_is_the_class() -> None:
    assert subclasses_owner(_registry_of(Base)) is Base


def test_a_dict_that_is_no_registry_is_no_class() -> None:
    assert subclasses_owner({}) is None
    assert subclasses_owner({id(SUBS[0]): weakref.ref(SUBS[0])}) is None  # not every subclass
    assert subclasses_owner({1: 2}) is None
    assert subclasses_owner({id(sub): sub for sub in SUBS}) is None  # no weakrefs
    assert subclasses_owner([weakref.ref(SUBS[0])]) is None  # no dict


class _Sneaky(weakref.ref):  # type: ignore[type-arg]
    calls = 0

    def __call__(self):  # type: ignore[no-untyped-def]  # noqa: ANN204
        _Sneaky.calls += 1
        return super().__call__()


def test_a_weakref_subclass_is_never_called() -> None:
    registry = {id(sub): _Sneaky(sub) for sub in SUBS}
    assert subclasses_owner(registry) is None
    assert _Sneaky.calls == 0


class _Key(str):
    compared = 0

    def __eq__(self, other: object) -> bool:
        _Key.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_a_module_dicts_name_is_read_without_a_keys_code() -> None:
    assert module_dict_name({"__name__": "_leakhound_payload._walk", "x": 1}) == "_leakhound_payload._walk"
    assert module_dict_name({_Key("__name__"): "app"}) is None
    assert _Key.compared == 0
    assert module_dict_name({"__name__": 3}) is None
    assert module_dict_name([("__name__", "app")]) is None
