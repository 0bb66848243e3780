"""The target's live asyncio tasks and their await chains, read without running their code.

The tasks' weak set is read through ``gc.get_referents`` (one C call, so the main thread
adding tasks meanwhile cannot break the iteration); tasks and coroutines are only asked
through C-level getters.
"""

import gc
import sys

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


def named_tasks():
    """(name, task) for every live task with a str name, Task-1 (usually the main coroutine)
    first, in natural order: ties between owners go the same way every time."""
    named = []
    for task in live_tasks():
        try:
            name = task.get_name()
        except Exception:
            continue
        if type(name) is str:
            named.append((_natural(name), name, task))
    named.sort(key=lambda t: t[0])
    return [(name, task) for _key, name, task in named]


def await_chain(task, limit=64):
    """The task's coroutine and the coroutines it awaits, outermost first."""
    try:
        coro = task.get_coro()
    except Exception:
        return []
    chain = []  # type: list
    while coro is not None and len(chain) < limit and type(coro).__name__ in COROUTINE_TYPES:
        chain.append(coro)
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return chain
