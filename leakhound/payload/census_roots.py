"""The named roots of the heap, and the census's walk from them.

The roots, in the priority order the census claims them in (first to reach an object owns it):

- :func:`module_roots`: every module's globals, ``__main__`` first, then non-stdlib, then stdlib;
- :func:`class_roots`: every class (from the subclass tree: ``gc.get_objects()`` misses classes a
  worker ``gc.freeze()``-d), its dict and its ``__mro__``/``__bases__`` tuples;
- :func:`task_roots`: every pending asyncio task (a finished one is owned by whoever holds it),
  its context variables and the coroutines along its await chain;
- :func:`thread_frames`: every frame on every thread's stack but the caller's.

Each is a plain function that reads the target without running its code; any payload operation
walking the heap can use them. ``_Roots._walk_roots`` is the census's use. Part of
:class:`census.Census`.
"""

import gc
import sys

from .census_walk import _Walk
from .objects import _instance_dict, _short_type_name, _type_name, is_payload_name, subclass_tree
from .tasks import _c_future_class, await_chain, context_variables, event_loops, named_tasks, task_context

if False:  # typing only; the payload imports nothing it does not need at run time
    from typing import Any  # noqa: F401


def task_roots(tick=None):
    """(label, task or None, coroutine) along every pending asyncio task's await chain; the
    task itself goes with the outermost coroutine. Task-1 (usually the main coroutine)
    first, so ties between owners go to it, deterministically. ``tick``: as named_tasks's."""
    out = []
    for name, task in named_tasks(tick):
        owner_task = task
        for coro in await_chain(task, limit=32):
            code = getattr(coro, "cr_code", None) or getattr(coro, "gi_code", None)
            frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
            line = frame.f_lineno if frame is not None else 0
            if code is None:
                continue
            label = "task:%s/%s (%s:%d)" % (name, code.co_name, code.co_filename.rsplit("/", 1)[-1], line or 0)
            out.append((label, owner_task, coro))
            owner_task = None
    return out


def _running_task_registries():
    """asyncio's ``{loop: task being stepped}`` dicts (the C one and the pure-Python one)."""
    out = []
    for name in ("_asyncio", "asyncio.tasks"):
        module = sys.modules.get(name)
        d = _instance_dict(module) if module is not None else None
        registry = d.get("_current_tasks") if d is not None else None
        if type(registry) is dict:
            out.append(registry)
    return out


def module_roots(is_stdlib, tick=None):
    """(name, module, module dict or None) for every module in ``sys.modules``, in the census's
    priority order: ``__main__``, then non-stdlib (``is_stdlib(name)`` false), then stdlib,
    each by name. A module listed under two names is listed once, under its first."""
    main = sys.modules.get("__main__")
    names_of = {}  # type: dict
    for name, module in list(sys.modules.items()):
        names_of.setdefault(id(module), name)
    out = []
    seen = set()  # type: set
    for module in [m for m in list(sys.modules.values()) if type(m).__name__ == "module"]:
        if tick is not None and len(seen) & 255 == 255:
            tick()  # thousands of modules in a big program
        if id(module) in seen:
            continue
        seen.add(id(module))
        out.append((names_of.get(id(module), "?"), module, _instance_dict(module)))
    out.sort(key=lambda nmd: (nmd[1] is not main, is_stdlib(nmd[0]), nmd[0]))
    return out


def _subclass_tree(tick=None):
    """Every class reachable from ``object``'s subclass tree, each once (objects.subclass_tree)."""
    return subclass_tree(object, tick)


def class_roots(tick=None):
    """(class, [its dict and __mro__/__bases__ tuples]) for every class reachable from
    ``object``'s subclass tree, each once. ``tick``: called now and then (the census's duty
    cycle: a big program has tens of thousands of classes)."""
    roots = []
    for i, cls in enumerate(_subclass_tree(tick)):
        if tick is not None and i & 255 == 255:
            tick()
        # ``is``, never ``in (dict, tuple)``: that compares with ==, which runs a
        # metaclass's __eq__
        roots.append((cls, [ref for ref in gc.get_referents(cls) if type(ref) is dict or type(ref) is tuple]))
    return roots


def thread_frames():
    """(thread name, frame) for every frame of every thread's stack, innermost first, except
    the calling thread's. The caller must drop the list when done (frames hold a thread's
    locals alive); nothing here binds the caller's own frame (that would be a cycle)."""
    import threading  # noqa: PLC0415 - imported lazily: the target may not use threads

    names = {}
    for thread in list(threading._active.values()):  # type: ignore[attr-defined]
        names[thread.ident] = thread.name
    current = sys._current_frames()
    current.pop(threading.get_ident(), None)
    frames = []
    top = frame = None  # type: Any
    for ident, top in list(current.items()):
        frame = top
        while frame is not None:
            frames.append((names.get(ident, str(ident)), frame))
            frame = frame.f_back
    return frames


# Where a 3.11-3.13 frame keeps its fast locals (64-bit builds): PyFrameObject.f_frame, then
# in the _PyInterpreterFrame it points to: f_code (3.11) / f_code or f_executable (3.12,
# 3.13), frame_obj and localsplus (Include/internal/pycore_frame.h of each version). _walk.c
# checks that the interpreter frame points back at the frame and its code before reading.
_FRAME_LAYOUTS = {(3, 11): (24, 32, 40, 72), (3, 12): (24, 0, 48, 72), (3, 13): (24, 0, 48, 72)}
_FrameType = type(sys._getframe())


def frame_locals(frame, walk_module):
    """[(name, value)] for a frame's bound variables (its fast locals, then its cells and free
    variables, as the interpreter lays them out: a variable a closure captures is its cell),
    read without changing the frame, or None when they cannot be read safely here (the
    reason is ``frame_locals_unreadable()``).

    On 3.11+ a running frame's locals live in the interpreter's frame, not the frame object:
    gc.get_referents(frame) does not show them, and ``f_locals`` on a running 3.11/3.12 frame
    writes them into a dict in the frame (PyFrame_FastToLocals). They are read in one C call
    of ``walk_module`` (_walk.c: frame_locals), which holds the GIL throughout. On 3.10 the
    frame object owns its locals and gc.get_referents(frame) lists them: [] here."""
    if sys.version_info < (3, 11):
        return []
    if frame_locals_unreadable(walk_module) or type(frame) is not _FrameType:
        return None
    code = frame.f_code
    try:
        names = _variable_names(code)
        layout = _FRAME_LAYOUTS[sys.version_info[:2]]
        values = walk_module.frame_locals(frame, _FrameType, code, len(names), *layout)
    except Exception:
        return None
    if values is None or len(values) > len(names):
        return None
    return [(names[i], v) for i, v in enumerate(values) if v is not None]


def _variable_names(code):
    """The names of a 3.11+ frame's variables in the order of its slots (``localsplus``): the
    locals (arguments first), the cells that are not arguments, the free variables."""
    varnames = code.co_varnames
    return varnames + tuple(name for name in code.co_cellvars if name not in varnames) + code.co_freevars


def frame_locals_unreadable(walk_module):
    """Why running frames' locals cannot be read in this process, or "" when they can."""
    if sys.version_info < (3, 11):
        return ""
    if sys.version_info[:2] not in _FRAME_LAYOUTS or sys.maxsize < 2**32:
        return "the frame layout of Python %d.%d on this build is not known" % sys.version_info[:2]
    if walk_module is None or not hasattr(walk_module, "frame_locals"):
        return "the compiled walk (_walk.abi3.so) is not loaded"
    return ""


_MISSING = object()
# What the payload's own package holds (objects.is_payload_name): its functions and classes
# are leakhound's, one owner, never the target's.
PAYLOAD_OWNER = "<leakhound payload>"


class _Roots(_Walk):
    """The census's walk from the named roots."""

    def _walk_all(self, objects):
        """The census without owners (``Census(owners=False)``: the object graph names them,
        graph.py): every named root in one list, one walk from it for one owner,
        ``<named roots>``. The same totals and types as :meth:`_walk_roots` (each object is
        counted once whoever claims it), at a fraction of its cost: no path per global and
        attribute, no call per owner (on the busy real worker ~0.3 s of CPU against ~1.1 s).
        One difference: what only an object's C members hold (read by ``_claim_named``
        through member descriptors, not seen by a referent walk) is left to the split of
        what no root reached, or, without gc.get_objects()'s list, not counted (0.56% of
        the bytes on the real verifiers worker's heap)."""
        self._claim_own(objects)
        owner = self._owner("<named roots>", sys)
        roots = self._every_root(with_locals=True)
        self.claimed.add(id(roots))
        self.progress("roots", 0)
        self.clock.phase("roots")
        self._claim_tree(owner, roots, root_claimed=True)
        del roots
        self.clock.phase("walk")
        self.progress("unreached", self.total_objects)
        self.bookkeeping_bytes = self._bookkeeping_bytes(objects)

    def _every_root(self, with_locals):
        """Every named root in one list, for a walk from it (_walk_all, census._sizing_walk):
        modules and their dicts, asyncio's running-task registries, classes, tasks and their
        coroutines, event loops, the other threads' frames and, ``with_locals``, what their
        running frames' locals hold (3.11+: not a frame's referents; read as _walk_roots
        does, a frame it cannot read counted in ``unread_frames``)."""
        check = self.clock.check
        roots = []  # type: list
        for _name, module, md in module_roots(self.is_stdlib, check):
            roots.append(module)
            if md is not None:
                roots.append(md)
        roots.extend(_running_task_registries())
        roots.extend(_subclass_tree(check))
        task_coros = task_roots(check)
        for _label, task, coro in task_coros:
            if task is not None:
                roots.append(task)
            roots.append(coro)
        roots.extend(event_loops(task for _label, task, _coro in task_coros))
        del task_coros
        for _tname, frame in thread_frames():
            roots.append(frame)
            if not with_locals:
                continue
            local_values = frame_locals(frame, self._walk_module)
            if local_values is None:
                self.unread_frames += 1
            else:
                roots.extend(value for _name, value in local_values)
            del local_values
        frame = None
        return roots

    def _bookkeeping_bytes(self, objects):
        """What the walk itself holds at its largest, the extra memory it costs the target:
        the marks, the list from gc.get_objects(), the owner and type tables."""
        return (
            self.claimed.nbytes()
            + (sys.getsizeof(objects) if objects is not None else 0)
            + self.owners.nbytes()
            + sys.getsizeof(self.owner_types)
            + self.owner_items.buffer_info()[1] * 8
            + self.types.nbytes()
        )

    def _claim_own(self, objects):
        """Marks the census's own bookkeeping (and ``objects``, gc.get_objects()'s list):
        not part of the target's heap."""
        claimed = self.claimed
        if objects is not None:
            claimed.add(id(objects))
        for own in (self, self.__dict__, self.claimed, self.claimed.regions, self.owners,
                    self.owners.index, self.owners.keys, self.owner_types, self.types,
                    self.types.index, self.types.keys, self.garbage_types,
                    self.garbage_types.index, self.garbage_types.keys,
                    # array.array is gc-tracked since 3.11 (heap type): without these its
                    # tallies were "<held from C: array.array>" in the census's own report
                    self.owners.counts, self.owners.bytes, self.owner_items, self.types.counts,
                    self.types.bytes, self.garbage_types.counts, self.garbage_types.bytes,
                    self._native, self._native_bases, self._native_seen, self._holder,
                    self._sized_types, self._class_attrs, self._getsizeof, self._getsizeof.known):
            claimed.add(id(own))
        for obj in self._exclude:
            claimed.add(id(obj))

    def _walk_roots(self, objects):
        """Claim everything the named roots reach; ``objects`` is gc.get_objects()'s list, or
        None when the census runs without it."""
        claimed = self.claimed
        self._claim_own(objects)
        # Code containers are walls between owners: modules, their dicts and classes are
        # claimed up front so no data owner walks through them into someone else's globals.
        # What hangs off the walls and no named root took (dunders, dict keys, method
        # objects) is swept into the wall owner once the named roots are done.
        wall = self._owner("<modules and classes>", sys)
        walls = []

        check = self.clock.check  # the duty cycle (and deadline) in these long Python loops

        def add_wall(obj):
            check()
            if id(obj) not in claimed:
                # Marked now (no data owner walks through it); counted with what hangs off
                # it in one walk once the named roots are done (below).
                claimed.add(id(obj))
                walls.append(obj)

        module_dicts = []
        for name, module, md in module_roots(self.is_stdlib, check):
            add_wall(module)
            if md is not None:
                add_wall(md)
                module_dicts.append((name, md))
        # asyncio's registry of the task each loop is stepping right now is not an owner: a
        # task caught mid-step belongs to its own task root (5 below), like every other task.
        # The dict is counted with the walls but not swept.
        for registry in _running_task_registries():
            if id(registry) not in claimed:
                claimed.add(id(registry))
                self._count(registry, wall)
        # class_roots' classes, dicts and __mro__/__bases__ tuples, in flat lists: a pair
        # and a list per class were tens of thousands of gc-tracked objects alive at once,
        # which made the target's collector run (a full collection, 130-250 ms in one step,
        # in the census's thread) on a big program's heap.
        classes = _subclass_tree(check)
        for cls in classes:
            add_wall(cls)
        class_dicts = []  # class, its dict, class, its dict...
        for cls in classes:
            for ref in gc.get_referents(cls):
                if type(ref) is dict:
                    class_dicts.append(cls)
                    class_dicts.append(ref)
                    add_wall(ref)
                elif type(ref) is tuple:
                    add_wall(ref)
        del classes
        cls = ref = None
        self.progress("roots", 0)
        self.clock.phase("roots")

        # Tasks and their coroutines are claimed up front, like the walls: a path from a module
        # global to a task (an event loop's ready queue and timers, a handle kept in a global,
        # asyncio's _current_tasks) stops there, and each task's state goes to its own root (5).
        task_coros = task_roots(check)
        for _label, task, coro in task_coros:
            claimed.add(id(task))
            claimed.add(id(coro))
        # Event loops are claimed up front too, and walked after the tasks and threads: a
        # loop's ready queue, timers and selector reach every callback's object and every
        # transport's protocol at that moment, and the policy's thread-local is a module
        # global (the simulated worker's whole state went to
        # asyncio.events._event_loop_policy._local, 92 MiB, and with the loop a wall walked
        # before the tasks, to the walls). What only a loop holds goes to the walls' owner.
        loops = event_loops(task for _label, task, _coro in task_coros)
        for loop in loops:
            claimed.add(id(loop))
        # 1-3: module globals, __main__ first, then non-stdlib, then stdlib.
        regions = claimed.regions
        skipped = 0
        for name, md in module_dicts:
            check()
            ours = is_payload_name(name)  # the payload's own module: one owner for all of it
            # the keys, then each value: no (key, value) tuple per global (as above)
            for key in list(md):
                if type(key) is not str or (key.startswith("__") and key.endswith("__")):
                    continue
                value = md.get(key, _MISSING)
                if value is _MISSING:  # removed meanwhile by the target's threads
                    continue
                # Most are claimed already (a class, a function another module's global
                # reached first): the mark is read here (as _Marks does) and the clock
                # every few hundred of them; a walk runs the clock itself.
                address = id(value)
                region = regions.get(address >> 20)
                if region is not None and region[(address & 0xFFFFF) >> 7] & (1 << ((address >> 4) & 7)):
                    skipped += 1
                    if skipped & 255 == 0:
                        check()
                    continue
                if ours:
                    self._claim_tree(self._owner(PAYLOAD_OWNER, value), value)
                    continue
                self._claim_named(name + "." + key, value, 1)
        self.clock.phase("module globals")
        # 4: class attributes.
        for k in range(0, len(class_dicts), 2):
            cls, cdict = class_dicts[k], class_dicts[k + 1]
            check()
            base = None
            for key in list(cdict):
                if type(key) is not str or (key.startswith("__") and key.endswith("__")):
                    continue
                value = cdict.get(key, _MISSING)
                if value is _MISSING:
                    continue
                address = id(value)
                region = regions.get(address >> 20)
                if region is not None and region[(address & 0xFFFFF) >> 7] & (1 << ((address >> 4) & 7)):
                    skipped += 1
                    if skipped & 255 == 0:
                        check()
                    continue
                if base is None:
                    base = _type_name(cls)
                if is_payload_name(base):
                    self._claim_tree(self._owner(PAYLOAD_OWNER, value), value)
                    continue
                self._claim_named(base + "." + key, value, 1)
        key = value = None
        self.clock.phase("class attributes")
        # The walls and what hangs off them, in one walk from the list of them (tens of
        # thousands of modules, classes and their dicts: one walk each was a second of the
        # census's CPU on a big worker): their marks are lifted and the walk marks and
        # counts them again, each once, all for the one owner, as a walk from each did.
        discard = claimed.discard
        for n, obj in enumerate(walls):
            if n & 4095 == 4095:
                check()
            discard(id(obj))
        obj = None
        self._claim_tree(wall, walls, root_claimed=True)
        self.clock.phase("walls")
        # 5: asyncio tasks. First each task's context variables, by name: a pending future's
        # callback holds the context of the task that waits on it, and a path from another
        # task's coroutine to the future (a Queue.get's waiter, through the queue) named the
        # consumer's variable after the task holding the queue. Then what a suspended
        # coroutine's frames hold (no thread stack shows it). A suspended coroutine's locals
        # are visible through the coroutine object, not its frame (the frame object does not
        # own its data).
        c_future = _c_future_class()
        for label, task, _coro in task_coros:
            ctx = task_context(task, c_future) if task is not None else None
            for name, value in context_variables(ctx) if ctx is not None else ():
                self._claim_named(label + ".<contextvar " + name + ">", value, 2)
            ctx = value = None
        for label, task, coro in task_coros:
            owner = self._owner(label, coro)
            if task is not None:
                self._count(task, owner)
            self._count(coro, owner)
            for ref in gc.get_referents(coro):
                if type(ref).__name__ in ("frame", "coroutine", "generator", "async_generator"):
                    continue
                self._claim_named(label + ".<" + _short_type_name(type(ref)) + ">", ref, 2)
            if task is not None:
                self._claim_tree(owner, task, root_claimed=True)
        # 6: thread stacks, each frame its own root. The census's own thread is left out:
        # a local naming its frame would be a cycle (frame -> locals -> frame) holding
        # everything the census holds, gc.get_objects()'s list included, until the target's
        # next full collection.
        self.clock.phase("tasks")
        frames = thread_frames()
        for _tname, frame in frames:
            claimed.add(id(frame))
        for tname, frame in frames:
            code = frame.f_code
            path = "thread:%s/%s (%s:%d)" % (
                tname,
                code.co_name,
                code.co_filename.rsplit("/", 1)[-1],
                frame.f_lineno or 0,
            )
            owner = self._owner(path, frame)
            self._count(frame, owner)
            local_values = frame_locals(frame, self._walk_module)
            if local_values is None:
                self.unread_frames += 1
            else:
                for name, value in local_values:
                    self._claim_named(path + "." + name, value, 2)
            del local_values
            for ref in gc.get_referents(frame):
                if type(ref).__name__ == "frame":
                    continue
                self._claim_named(path + ".<" + _short_type_name(type(ref)) + ">", ref, 2)
        del frames
        frame = None
        self.clock.phase("frames")
        for loop in loops:
            claimed.discard(id(loop))
        self._claim_tree(wall, loops, root_claimed=True)
        del loops
        self.progress("unreached", self.total_objects)
        self.bookkeeping_bytes = self._bookkeeping_bytes(objects)
