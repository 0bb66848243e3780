"""The cheap sample for ``leakhound watch``, run inside the target between full censuses.

Standard library only. Given the owners of the last full snapshot, it finds each one again
and reads its item count with the C length slot, never user code. A dominator owner is found
by identity: the ids along its path from the root, each step a referent of the last (as the
``names`` request walks them, ``graph_wire``), and it is the owner only if the object at the
end is of the owner's type; a first-reacher owner by its path (module global, class attribute
or attribute chain, through built-in descriptors only). Optionally it counts gc-tracked
objects by type: one ``gc.get_objects()`` call (a C list build, skipped when the last count
of tracked objects says it would be longer than the request's pause budget) and a loop in this
thread, which hands the GIL back to the main thread between bytecodes. No ``gc.collect()``,
nothing kept.
"""

# mypy: disable-error-code="assignment, unused-ignore"
# (payload code, Python 3.8+ without annotations: locals are rebound to None to drop references)

import collections
import gc
import re
import sys
import threading
import time
import types

from . import arena, census, probes, wire  # noqa: F401 - wire: its types, in type comments
from .graph_wire import folded_step_label, step_label
from .objects import (
    SIZED,
    builtin_length,
    class_dict,
    dict_pairs,
    instance_dict,
    safe_referents,
    short_type_name,
    slot_values,
    subclass_tree,
    type_name,
)
from .roots import ATEXIT_OWNER, atexit_count, signal_handlers, task_name, thread_name_of
from .sizes import autograd_next_nodes, autograd_step, hidden_referents, object_size
from .tasks import await_chain, live_tasks, named_tasks
from .tracked import tracked_objects

try:
    from . import _walk as _walk_module  # type: ignore[attr-defined]
except ImportError:  # (a target the compiled walk cannot load into: no step by label)
    _walk_module = None

# "task:NAME/CORO (FILE:LINE).<Type>.attr...": an owner the census found under a coroutine
# of a task (census_roots.task_coroutines). The line is where the coroutine was paused then: it is
# not used to find it again.
_TASK_PATH = re.compile(r"^task:(.*)/([^/ ]+) \(([^)]*)\)\.<([^>]+)>(?:\.(.*))?$")

# The owners the dominator owners make of roots alike (analysis/dominators/owners.py), as
# leakhound names them (model/names.py ROOTS_ALIKE, the same grammar): "task:Task-*/CORO" (the
# tasks running a coroutine), "thread:Thread-* (serve)/FUNC" (the threads named so), "plugin_*"
# (the modules named so but for numbers); "*" stands for what was numbered.
_ROOTS_ALIKE = re.compile(r"^(?:(?P<kind>task|thread):(?P<name>[^/]*\*[^/]*)/(?P<what>[^/ .\[<(]+)"
                          r"|(?P<modules>[\w.]*\*[\w.*]*))$")

MAX_PATHS = 200
# A step followed by its type ("=list") only from an object of at most this many referents
# (its referents listed once; a registry's are not)
MAX_TYPED_REFERENTS = 1024
MAX_PATH_STEPS = 256
_ModuleType = type(sys)
# Containers whose length is an owner's item count (the graph's ``lengths``): read with the C
# slot of the built-in type, never a user ``__len__``.
_SAMPLED_SIZED = (*SIZED, collections.deque)
MAX_TRACKED = 5000000  # above this the type count is skipped (it would allocate a big list)


def _child(obj, name):
    """``obj.name`` through the built-in ``__dict__`` descriptors only; raises KeyError."""
    if issubclass(type(obj), type):  # not isinstance(): it would read a user __class__
        return class_dict(obj)[name]
    d = instance_dict(obj)
    if d is None:
        for slot, value in slot_values(obj):
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
    task_name, coro_name, _where, wanted_type, chain = match.groups()
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
                if short_type_name(type(obj)) != wanted_type:
                    continue
                try:
                    for name in chain.split(".") if chain else ():
                        obj = _child(obj, name)
                except (KeyError, TypeError):
                    return None
                return obj
        return None
    return None


def _roots_among(wanted):
    """id -> object for the roots whose ids are in ``wanted`` (a set): modules first, then
    tasks, other threads' frames and signal handlers, then classes, each looked at only while some root is
    still missing (every class of a big program is tens of thousands of objects to list)."""
    found = {}
    for module in list(sys.modules.values()):
        if type(module) is _ModuleType and id(module) in wanted:
            found[id(module)] = module
    if len(found) < len(wanted):
        for task in live_tasks():
            if id(task) in wanted:
                found[id(task)] = task
        current = sys._current_frames()
        current.pop(threading.get_ident(), None)
        for top in list(current.values()):
            frame = top
            while frame is not None:
                if id(frame) in wanted:
                    found[id(frame)] = frame
                frame = frame.f_back
        current = top = frame = None
        for handler, _name, _kind, _tier in signal_handlers():
            if id(handler) in wanted:
                found[id(handler)] = handler
        handler = None
    if len(found) < len(wanted):
        for cls in subclass_tree():
            if id(cls) in wanted:
                found[id(cls)] = cls
    return found


def _by_ids(ids, roots, steps=None):
    """The object at the end of ``ids`` (a root's id, then each step's), walked by identity:
    an id is only compared with the ids of the referents found, never turned into an object.
    A step whose id no longer leads on is followed by its label in ``steps`` (the owner's
    ``path_steps``: ``by_label``): what is there now (an attribute rebound as it grows,
    ``self.rows = self.rows + [row]``; a DataFrame's blocks concatenated anew). None when
    neither leads on."""
    obj = roots.get(ids[0])
    for k, address in enumerate(ids[1:MAX_PATH_STEPS]):
        if obj is None:
            return None
        label, nxt = step_label(obj, address)
        if label is None:  # a step through an entry the graph folded into its collection
            label, nxt = folded_step_label(obj, address)
        step = steps[k] if type(steps) is list and k < len(steps) else None
        if nxt is not None and not _step_agrees(label, nxt, step):
            nxt = None
        if nxt is None and step is not None:
            nxt = by_label(obj, step)
        obj = nxt
    return obj


def _step_agrees(label, nxt, step):
    """Whether ``nxt``, the referent found by the census's id under ``label``, is what its step
    named: the id of an object since freed may be another's now (its address reused: a
    DataFrame concatenated anew, the new one's ``_flags`` where the old one itself or its
    ``_mgr`` was, and the sample went on from the flags and found nothing: 1-4 samples of 11
    in a watch), under another attribute or key, through an entry folded into a collection
    where the step was not (or the other way), or of another type than a step by type
    (``=``) names."""
    if type(step) is not str or len(step) < 2:
        return True
    if step[0] == "=":
        return type_name(type(nxt)) == step[1:]
    if type(label) is not str:
        return True
    if (step[0] == "f") != (label[:1] == "f"):
        return False
    if step[0] == "f":
        step, label = step[1:], label[1:]
    if len(step) > 1 and step[0] in "ak" and len(label) > 1 and label[0] in "ak":
        n = min(len(step), len(label))  # (either may be cut: MAX_LABEL_CHARS)
        return label[1:n] == step[1:n]
    return True


def _one_of_type(obj, tp, wanted):
    """The one referent of ``obj`` whose type is named ``wanted``; else the one value of its
    ``__dict__`` (3.11+: attributes kept inline until a ``__dict__`` was made, then there) or
    of what it holds outside its referents (an ndarray view's base: sizes.hidden_referents);
    None when none or more than one is, or ``obj`` holds over MAX_TYPED_REFERENTS."""
    n = builtin_length(obj, _SAMPLED_SIZED)
    if n is not None and n > MAX_TYPED_REFERENTS:
        return None
    refs = safe_referents(obj)
    if len(refs) > MAX_TYPED_REFERENTS:
        return None
    found = [r for r in refs if type_name(type(r)) == wanted]
    if not found and n is None:
        d = None if issubclass(tp, (type, _ModuleType)) else instance_dict(obj)
        size = builtin_length(d, (dict,)) if d is not None else None
        more = [v for _k, v in dict_pairs(d)] if size is not None and size <= MAX_TYPED_REFERENTS else []
        found = [r for r in more if type_name(type(r)) == wanted]
        if not found:  # (a 3.11 StringIO's accumulated strs: a list in its C state)
            found = [r for r in hidden_referents(obj) if type_name(type(r)) == wanted]
        if not found:  # (an autograd node's next nodes, as the walks read them)
            found = [r for r in autograd_next_nodes(obj, {}) or () if type_name(type(r)) == wanted]
        more = d = None
    refs = None
    return found[0] if len(found) == 1 else None


def by_label(obj, label):
    """What ``obj`` holds now under a step's ``label``: an attribute ("a" and its name) or a
    str key ("k" and the key) of a dict, a module's or instance's ``__dict__``, a class's
    namespace or its ``__slots__``, read through built-in descriptors and the dict's own table
    (no hash or ``__eq__`` of the program's runs); an instance's ``__dict__`` ("d"); the one
    referent of a type ("=" and its name: a C field, a DataFrame's blocks) of an object with
    at most ``MAX_TYPED_REFERENTS``. None for another label, or nothing (or two) there."""
    if type(label) is not str or _walk_module is None:
        return None
    tp = type(obj)
    if label == "d":
        return None if issubclass(tp, (type, _ModuleType)) else instance_dict(obj)
    if len(label) < 2:
        return None
    if label[0] == "=":
        return _one_of_type(obj, tp, label[1:])
    if label[0] not in "ak":
        return None
    named = autograd_step(obj, label)  # (a tensor's autograd graph: no referent, no attribute)
    if named is not None:
        return named
    name = label[1:]
    if issubclass(tp, dict):
        return _walk_module.dict_value_of(obj, name)
    d = None if issubclass(tp, type) else instance_dict(obj)
    if d is not None:
        return _walk_module.dict_value_of(d, name)
    try:
        return _child(obj, name)  # a class's namespace, an instance's slots: as resolve reads them
    except (KeyError, TypeError):
        return None


def alike_items(path, wanted_type):
    """How many roots a roots-alike owner (``_ROOTS_ALIKE``) counts now, or None when ``path``
    names no such owner: the pending tasks of ``wanted_type`` whose root names
    (``roots.task_name``) match it, the live threads whose names (read as roots.thread_frames
    reads them) match it ("*" any part of a name), the modules in sys.modules whose names
    match it ("*" a number)."""
    alike = _ROOTS_ALIKE.match(path) if type(path) is str else None
    if alike is None:
        return None
    if alike["modules"] is not None:
        name = re.compile(r"\d+".join(re.escape(part) for part in path.split("*")) + "$")
        return sum(1 for key, module in list(sys.modules.items())
                   if type(key) is str and type(module) is _ModuleType and name.match(key))
    name = re.compile("[^/]*".join(re.escape(part) for part in alike["name"].split("*")) + "$")
    count = 0
    if alike["kind"] == "thread":
        import threading as _threading  # noqa: PLC0415 - as roots.thread_frames: the target may not use threads

        for ident, thread in list(_threading._active.items()):  # type: ignore[attr-defined]
            if name.match(thread_name_of(thread, ident)):
                count += 1
        thread = None
        return count
    for task_label, task in named_tasks():
        if type(wanted_type) is str and wanted_type and type_name(type(task)) != wanted_type:
            continue
        if not name.match(task_label):
            continue
        chain = await_chain(task, limit=1)
        if task_name(task_label, chain[0] if chain else None) == "task:%s/%s" % (task_label, alike["what"]):
            count += 1
        chain = None
    task = None
    return count


def atexit_items(path):
    """How many callbacks atexit keeps (``atexit._ncallbacks()``, its C function: no code of
    the program runs) when ``path`` names their owner (ATEXIT_OWNER, a group of no object of
    the target's: found by its name), else None. The watch reads it right after each census
    too: the group's items (each callback's function, arguments) are counted in its unit."""
    count = atexit_count() if path == ATEXIT_OWNER else None
    if count is None:
        return None
    try:
        n = count()
    except Exception:
        return None
    return n if type(n) is int else None


_FunctionType = types.FunctionType
_FUNCTION_CODE = _FunctionType.__dict__["__code__"]
# (getset descriptors: they return the C fields, run no code)
_FUNCTION_HOLDS = [_FunctionType.__dict__[name] for name in ("__defaults__", "__closure__", "__kwdefaults__")]
_CellType = types.CellType
_CELL_CONTENTS = _CellType.__dict__["cell_contents"]
# How long a sample counts one chain's links (holding the GIL) before it says it cannot
CHAIN_SECONDS = 0.02


def _function_held(obj, tp):
    """What the function ``obj`` holds in its defaults and closure cells, of its own code."""
    held = []  # type: list
    code = _FUNCTION_CODE.__get__(obj, tp)
    for descr in _FUNCTION_HOLDS:
        fields = descr.__get__(obj, tp)
        if type(fields) is dict:
            held.extend(v for _k, v in dict_pairs(fields))
        elif type(fields) is tuple:
            for value in fields:
                if type(value) is _CellType:
                    try:
                        value = _CELL_CONTENTS.__get__(value, _CellType)
                    except ValueError:  # (an empty cell)
                        continue
                held.append(value)
    return [h for h in held if type(h) is tp and _FUNCTION_CODE.__get__(h, tp) is code]


def _link_after(obj, tp, memo):
    """The link after ``obj`` in a chain of ``tp`` (``_chain_items``): the one object of that
    type (a function of the same code) that ``obj`` holds, directly, through its ``__dict__``,
    or, a function, in its defaults or closure cells, or, an autograd node, among the nodes
    after it (a summed loss's graph: ``total = total + loss``); None where there is none (the
    chain's end), False where there are several (a doubly linked list: not counted)."""
    held = autograd_next_nodes(obj, memo)
    if held is None and tp is _FunctionType:
        held = _function_held(obj, tp)
    elif held is None:
        held = safe_referents(obj)
        d = None if issubclass(tp, (type, _ModuleType)) else instance_dict(obj)
        if d is not None and builtin_length(d, (dict,)) is not None and any(r is d for r in held):
            held.extend(v for _k, v in dict_pairs(d))  # (3.10's, or one made: its attributes)
        d = None
    found = []  # type: list
    for h in held:
        if type(h) is tp and h is not obj and not any(f is h for f in found):
            found.append(h)
    held = None
    if not found:
        return None
    return found[0] if len(found) == 1 else False


def _chain_items(obj, end=0):
    """The links of the chain ``obj`` heads, itself the first (a chain owner's items, as the
    census counts them: analysis/dominators/owners.py ``_chain``), going from each link to the
    next (``_link_after``) up to the one whose id is ``end`` (others hold it and those after
    it: not the owner's); None where that is not one way, or takes over CHAIN_SECONDS (a
    cycle, a list too long to count in a sample: its full censuses count it)."""
    tp = type(obj)
    n = 1
    deadline = time.perf_counter() + CHAIN_SECONDS
    memo = {}  # type: dict
    while True:
        nxt = _link_after(obj, tp, memo)
        if nxt is None or (end and id(nxt) == end):
            return n
        if nxt is False:
            return None
        obj = nxt
        n += 1
        if n % 64 == 0 and time.perf_counter() > deadline:
            return None


def _items(obj):
    """A container's length (the C slot of a built-in), a ``queue.SimpleQueue``'s items (its
    own C ``qsize``: it has no length, and 3.13's keeps them in a ring buffer of its own, an
    owner the full samples name itself) or an ElementTree element's children (the C
    ``Element``'s own length: a log kept as an XML tree); None for any other object."""
    n = builtin_length(obj, _SAMPLED_SIZED)
    if n is not None:
        return n
    module = sys.modules.get("_elementtree")  # (not loaded: no C element exists)
    element = module.__dict__.get("Element") if type(module) is _ModuleType else None
    if type(element) is type and issubclass(type(obj), element):
        try:
            return class_dict(element)["__len__"](obj)
        except Exception:
            return None
    module = sys.modules.get("_queue")  # (not loaded: no SimpleQueue exists)
    simple = module.__dict__.get("SimpleQueue") if type(module) is _ModuleType else None
    if type(simple) is type and issubclass(type(obj), simple):
        try:
            return simple.qsize(obj)  # type: ignore[attr-defined]
        except Exception:
            return None
    return None


def owner_items(owners):
    """``[{"ids": [...], "steps": [...], "type": T, "path": P}, ...]`` -> one ``{"found": bool,
    "items": n}`` each: found when the object at the end of its ids (a step whose id no longer
    leads on followed by its label in ``steps``, ``_by_ids``; with no ids, the object its path
    names) is of type T; ``items`` its container length, None for an object with no length
    (with ``"chain": true``, the links of the chain it heads up to the id ``chain_end``:
    ``_chain_items``).
    Only where a step's attribute or key now holds another object of the owner's type is that
    object the owner: whatever else its path string names now is a different owner."""
    wanted = set()
    for owner in owners:
        ids = owner.get("ids") if type(owner) is dict else None
        if type(ids) is list and ids and type(ids[0]) is int:
            wanted.add(ids[0])
    roots = _roots_among(wanted) if wanted else {}
    out = []
    for owner in owners:
        if type(owner) is not dict:
            out.append({"found": False, "items": None})
            continue
        ids, path, wanted_type = owner.get("ids"), owner.get("path"), owner.get("type")
        obj = None
        if type(ids) is list and ids and all(type(a) is int for a in ids):
            steps = owner.get("steps")
            obj = _by_ids(ids, roots, steps if type(steps) is list else None)
        elif type(path) is str:
            count = alike_items(path, wanted_type)
            if count is None:
                count = atexit_items(path)
            if count is not None:
                out.append({"found": True, "items": count})
                continue
            obj = resolve(path)
        if obj is None or (type(wanted_type) is str and wanted_type and type_name(type(obj)) != wanted_type):
            out.append({"found": False, "items": None})
        else:
            end = owner.get("chain_end")
            found = {"found": True, "items": _chain_items(obj, end if type(end) is int else 0)
                     if owner.get("chain") is True else _items(obj)}
            if owner.get("size") is True:
                # an owner that retains only itself (an array.array, a 3.12+ StringIO):
                # its own size, as the census sizes one object (no __sizeof__ in Python runs)
                found["bytes"] = object_size(obj)
            out.append(found)
        obj = None
    roots = None
    return out


def _type_counts(top):
    # Keyed by id(type), never the type: hashing a class runs its metaclass's __hash__.
    counts = {}  # type: dict[int, int]
    kinds = {}  # type: dict[int, type]
    t0 = time.perf_counter()
    objects = tracked_objects(counts, kinds)  # (what it leaves out, counted in counts)
    took = time.perf_counter() - t0
    if len(objects) + sum(counts.values()) > MAX_TRACKED:
        return None, took
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
    return [{"type": type_name(kinds[tid]), "count": n, "bytes": 0} for tid, n in ranked], took


def sample(request, progress):
    """``{"op": "sample", "owners": [{"ids", "type", "path"[, "size": true]}...], "top_types": N,
    "allocator": true, "registry": true}`` -> ``owners`` (one ``{"found", "items"[, "bytes"]}``
    each, in order: ``owner_items``), type counts; with ``allocator`` the allocators' in-use bytes
    (``arena.in_use_bytes``), with ``registry`` the trajectory registries' entries and finished
    entries (``probes.registry_counts``: nothing sized)."""
    started = time.perf_counter()
    started_at = time.time()  # the sample's time (see runner._snapshot's started_at)
    owners = request.get("owners")
    found = owner_items(owners[:MAX_PATHS]) if type(owners) is list else []
    top = request.get("top_types")
    types, get_objects_ms, types_skipped = None, 0.0, None
    if type(top) is int and top > 0:
        budget = request.get("max_pause_ms")
        fits, estimate = census.listing_fits(budget if type(budget) in (int, float) and budget > 0 else None)
        if not fits:
            # The type counts list every tracked object in one call that cannot be split
            # (as the census does, under the same budget and headroom); the owners are still read.
            types_skipped = ("listing the tracked objects: ~%.0f ms when last counted, up to twice that if the "
                             "heap has doubled since, over the %.0f ms pause budget" % (estimate, budget))
        else:
            progress("types", 0)
            types, took = _type_counts(min(top, 1000))
            get_objects_ms = took * 1000.0
    in_use = arena.in_use_bytes() if request.get("allocator") is True else None
    registry = None
    if request.get("registry") is True:
        try:
            registry = probes.registry_counts()
        except Exception:
            registry = None  # not the verifiers shape the probe knows: not counted, not guessed
    out = {
        "registry": registry,
        "started_at": started_at,
        "owners": found,
        "allocator_in_use_bytes": in_use,
        "types": types,
        "types_skipped": types_skipped,
        "max_step_ms": get_objects_ms,
        "sample_seconds": time.perf_counter() - started,
    }  # type: wire.SampleAnswer
    return out
