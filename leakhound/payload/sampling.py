"""The cheap sample for ``leakhound watch``, run inside the target between full censuses.

Standard library only. Given owner paths from the last full snapshot, it resolves each one
(module global, class attribute or attribute chain) through built-in descriptors only and reads
its item count with the C length slot, never user code. Optionally it counts gc-tracked objects
by type: one ``gc.get_objects()`` call (a C list build) and a loop in this thread, which
hands the GIL back to the main thread between bytecodes. No ``gc.collect()``, nothing kept.
"""

import gc
import re
import sys
import time

from . import census
from .tasks import await_chain, live_tasks

# "task:NAME/CORO (FILE:LINE).<Type>.attr...": an owner the census found under a coroutine
# of a task (census_roots.task_roots). The line is where the coroutine was paused then: it is
# not used to find it again.
_TASK_PATH = re.compile(r"^task:(.*)/([^/ ]+) \(([^)]*)\)\.<([^>]+)>(?:\.(.*))?$")

MAX_PATHS = 200
MAX_TRACKED = 5000000  # above this the type count is skipped (it would allocate a big list)


def _child(obj, name):
    """``obj.name`` through the built-in ``__dict__`` descriptors only; raises KeyError."""
    if issubclass(type(obj), type):  # not isinstance(): it would read a user __class__
        return census._class_dict(obj)[name]
    d = census._instance_dict(obj)
    if d is None:
        for slot, value in census._slot_values(obj):
            if slot == name:
                return value
        raise KeyError(name)
    return d[name]


def resolve(path, modules=None):
    """The object an owner path names, or None. Module names may contain dots: the longest
    prefix that is a loaded module wins."""
    if type(path) is not str or path.startswith("<") or path.startswith("thread:"):
        return None
    if path.startswith("task:"):
        return _resolve_task_path(path)
    modules = sys.modules if modules is None else modules
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module = modules.get(".".join(parts[:cut]))
        if module is None:
            continue
        obj = module
        try:
            for name in parts[cut:]:
                obj = _child(obj, name)
        except (KeyError, TypeError):
            return None
        return obj
    return None


def _resolve_task_path(path):
    """The object a ``task:`` owner path names now, or None: the task by name, the coroutine
    on its await chain by code name, the coroutine's referent of that type, then attributes."""
    match = _TASK_PATH.match(path)
    if match is None:
        return None
    task_name, coro_name, _where, type_name, chain = match.groups()
    for task in live_tasks():
        try:
            if task.get_name() != task_name:
                continue
        except Exception:
            continue
        for coro in await_chain(task, limit=32):
            code = getattr(coro, "cr_code", None) or getattr(coro, "gi_code", None)
            if code is None or code.co_name != coro_name:
                continue
            for obj in gc.get_referents(coro):
                if census._short_type_name(type(obj)) != type_name:
                    continue
                try:
                    for name in chain.split(".") if chain else ():
                        obj = _child(obj, name)
                except (KeyError, TypeError):
                    return None
                return obj
        return None
    return None


def _type_counts(top):
    t0 = time.perf_counter()
    objects = gc.get_objects()
    took = time.perf_counter() - t0
    if len(objects) > MAX_TRACKED:
        return None, took
    # Keyed by id(type), never the type: hashing a class runs its metaclass's __hash__.
    counts = {}  # type: dict[int, int]
    kinds = {}  # type: dict[int, type]
    get = counts.get
    for obj in objects:
        tp = type(obj)
        tid = id(tp)
        n = get(tid)
        if n is None:
            kinds[tid] = tp
            n = 0
        counts[tid] = n + 1
    del objects
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])[:top]
    return [{"type": census._type_name(kinds[tid]), "count": n, "bytes": 0} for tid, n in ranked], took


def sample(request, progress):
    """``{"op": "sample", "paths": [...], "top_types": N}`` -> item counts and type counts."""
    started = time.perf_counter()
    started_at = time.time()  # the sample's time (see runner._snapshot's started_at)
    paths = request.get("paths")
    paths = [p for p in paths if type(p) is str][:MAX_PATHS] if type(paths) is list else []
    items = {}
    for path in paths:
        obj = resolve(path)
        if obj is not None:
            items[path] = census._items(obj)
        obj = None
    top = request.get("top_types")
    types, get_objects_ms = None, 0.0
    if type(top) is int and top > 0:
        progress("types", 0)
        types, took = _type_counts(min(top, 1000))
        get_objects_ms = took * 1000.0
    return {
        "started_at": started_at,
        "items": items,
        "types": types,
        "max_step_ms": get_objects_ms,
        "sample_seconds": time.perf_counter() - started,
    }
