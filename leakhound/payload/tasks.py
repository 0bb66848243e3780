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
