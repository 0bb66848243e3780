"""Recognising the code a fix was written for, from its code object (no source needed)."""

import inspect
import sys

CO_COROUTINE = inspect.CO_COROUTINE


def find_class(modules, name):
    for modname in modules:
        module = sys.modules.get(modname)
        if module is None:
            continue
        cls = vars(module).get(name)
        if isinstance(cls, type):
            return modname, cls
    return None, None


def plain_function(owner, name):
    """The function stored at ``owner.name`` (not inherited, not wrapped by us), or None."""
    namespace = type.__dict__["__dict__"].__get__(owner, type) if isinstance(owner, type) else vars(owner)
    fn = namespace.get(name)
    if fn is None or getattr(fn, "__leakhound_fix__", None):
        return fn
    return fn if hasattr(fn, "__code__") else None


def names(fn):
    """co_names and string constants of ``fn`` and the code objects nested in it."""
    return _collect(fn, with_names=True)


def constants(fn):
    """String constants only (``d.pop("message")`` has one; ``response.message`` has none)."""
    return _collect(fn, with_names=False)


def _collect(fn, with_names):
    out = set()  # type: set
    stack = [fn.__code__]
    while stack:
        code = stack.pop()
        if with_names:
            out.update(code.co_names)
        consts = list(code.co_consts)
        while consts:
            const = consts.pop()
            if isinstance(const, str):
                out.add(const)
            elif isinstance(const, (tuple, frozenset)):
                consts.extend(const)  # e.g. the key tuple of a {"k": v, ...} display
            elif hasattr(const, "co_names"):
                stack.append(const)
    return out


def is_coroutine(fn):
    return bool(fn.__code__.co_flags & CO_COROUTINE)
