"""The target's live asyncio tasks and their await chains, read without running their code.

The tasks' weak set is read through ``gc.get_referents`` (one C call, so the main thread
adding tasks meanwhile cannot break the iteration); tasks and coroutines are only asked
through C-level getters.

A task that has finished (done or cancelled) is not a root: asyncio keeps it in its weak set
for as long as something else holds it, and that something (a set of background tasks never
discarded) is its owner, as of any other object (:func:`named_tasks` lists pending ones only).
"""

import contextvars
import gc
import sys
import types

from .objects import class_dict, instance_dict

COROUTINE_TYPES = ("coroutine", "generator")


def live_tasks():
    tasks_mod = sys.modules.get("asyncio.tasks")
    if tasks_mod is None:
        return []
    registry = getattr(tasks_mod, "_scheduled_tasks", None) or getattr(tasks_mod, "_all_tasks", None)
    data = getattr(registry, "data", None)
    if data is None:
        return []
    found = []
    for ref in gc.get_referents(data):
        try:
            task = ref()
        except TypeError:
            continue
        if task is not None:
            found.append(task)
    return found


def event_loops(tasks):
    """The event loops ``tasks`` run on (the referents of each task that are instances of
    ``asyncio.AbstractEventLoop``, uvloop's included), each once."""
    events = sys.modules.get("asyncio.events")
    base = vars(events).get("AbstractEventLoop") if type(events) is type(sys) else None
    if type(base) is not type:
        return []
    found = {}
    for task in tasks:
        for ref in gc.get_referents(task):
            if issubclass(type(ref), base):
                found[id(ref)] = ref
    return list(found.values())


def _natural(text):
    """A sort key for task names: Task-2 before Task-10."""
    head = text.rstrip("0123456789")
    tail = text[len(head):]
    return (head, int(tail) if tail else -1, text)


def c_future_class():
    """asyncio's C ``Future`` (``_asyncio.Future``, the base of its C ``Task``), or None."""
    module = sys.modules.get("_asyncio")
    d = instance_dict(module) if module is not None else None
    cls = d.get("Future") if d is not None else None
    return cls if type(cls) is type else None


# id(C Future class) -> (the class, its ``_state`` getset)
_STATE_GETSETS = {}  # type: dict


def is_pending(task, c_future=None):
    """Whether ``task`` has not finished: its ``_state`` read through the C Future's getset
    (``c_future``, from ``c_future_class()``), or a pure-Python future's instance dict. True
    when it cannot be read (a task of another kind stays a root)."""
    try:
        if c_future is not None and issubclass(type(task), c_future):
            known = _STATE_GETSETS.get(id(c_future))
            if known is None:
                known = _STATE_GETSETS[id(c_future)] = (c_future, class_dict(c_future)["_state"])
            state = known[1].__get__(task, c_future)
        else:
            d = instance_dict(task)
            state = d.get("_state") if d is not None else None
    except Exception:
        return True
    return state not in ("FINISHED", "CANCELLED")


# contextvars is C code (_contextvars), loaded with the interpreter's asyncio and decimal: its
# methods are read once, from the classes' own dicts.
_Context = contextvars.Context
_ContextVar = contextvars.ContextVar
_CONTEXT_ITEMS = class_dict(_Context)["items"]
_VARIABLE_NAME = class_dict(_ContextVar)["name"]


def task_context(task, c_future=None):
    """The ``contextvars.Context`` a task runs its steps in, or None: a C task's is the first
    Context among its referents (``TaskObj_traverse`` visits it first, 3.10-3.13), a
    pure-Python task's its ``_context`` attribute."""
    try:
        if c_future is not None and issubclass(type(task), c_future):
            for ref in gc.get_referents(task):
                if type(ref) is _Context:
                    return ref
            return None
        d = instance_dict(task)
        ctx = d.get("_context") if d is not None else None
    except Exception:
        return None
    return ctx if type(ctx) is _Context else None


def context_variables(ctx):
    """[(variable name, value)] of a ``contextvars.Context``, read with its C methods (the
    name through ``ContextVar.name``'s getset); a variable whose name is not a str is left out."""
    out = []
    try:
        for var, value in list(_CONTEXT_ITEMS(ctx)):
            if type(var) is not _ContextVar:
                continue
            name = _VARIABLE_NAME.__get__(var, _ContextVar)
            if type(name) is str:
                out.append((name, value))
    except Exception:
        return out
    return out


def named_tasks(tick=None):
    """(name, task) for every pending live task with a str name, Task-1 (usually the main
    coroutine) first, in natural order: ties between owners go the same way every time.
    ``tick``: called every 256 tasks (a walk's duty cycle: 20,000 request tasks were 60 ms)."""
    named = []
    c_future = c_future_class()
    for n, task in enumerate(live_tasks()):
        if tick is not None and n & 255 == 255:
            tick()
        if not is_pending(task, c_future):
            continue
        try:
            name = task.get_name()
        except Exception:
            continue
        if type(name) is str:
            named.append((_natural(name), name, task))
    named.sort(key=lambda t: t[0])
    return [(name, task) for _key, name, task in named]


def await_chain(task, limit=64):
    """The task's coroutine and the coroutines it awaits, outermost first.

    A coroutine that is running ends the chain: what it awaits is not asked. Its thread let
    the GIL go inside it (a blocking call, ``os.fork`` waiting for the import lock), and
    CPython reads what a coroutine awaits from the top of its frame's value stack, which a
    running frame does not keep (``_PyGen_yf``: below the frame's locals, then increfed):
    measured, the target killed by SIGSEGV (3.11, 3.12) with the payload's thread in
    ``PyObject_IsTrue`` on what ``cr_await`` gave. Whether it runs and what it awaits are
    read one after the other with nothing between that lets the GIL go (two C getters, a
    forward test: no eval-breaker check), so it cannot start running in between."""
    try:
        coro = task.get_coro()
    except Exception:
        return []
    chain = []  # type: list
    while coro is not None and len(chain) < limit:
        kind = type(coro)
        if kind is _CoroutineType:
            chain.append(coro)
            coro = not coro.cr_running and coro.cr_await or None
        elif kind is _GeneratorType:
            chain.append(coro)
            coro = not coro.gi_running and coro.gi_yieldfrom or None
        elif kind.__name__ in COROUTINE_TYPES:  # another implementation's (Cython's)
            chain.append(coro)
            if getattr(coro, "cr_running", False) or getattr(coro, "gi_running", False):
                break
            coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
        else:
            break
    return chain


_CoroutineType = types.CoroutineType
_GeneratorType = types.GeneratorType
