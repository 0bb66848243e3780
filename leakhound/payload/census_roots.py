"""The census's walk from the named roots (roots.py), in the priority order it claims them in
(first to reach an object owns it): every module's globals, ``__main__`` first, then
non-stdlib, then stdlib; every class's attributes; every pending task's context variables and
the coroutines along its await chain; every other thread's frames. Phases of
:class:`census.Census`, each claiming through its ``walk`` (census_walk.ClaimWalk).
"""

import gc
import sys

from . import roots
from .objects import instance_dict, is_payload_name, own_class_dict, short_type_name, type_name
from .roots import frame_locals
from .tasks import await_chain, c_future_class, context_variables, event_loops, task_context


def task_coroutines(tick=None):
    """(name, task or None, coroutine) along every pending task's await chain (roots.tasks),
    each coroutine named after its task, itself and where it is paused; the task goes with
    its outermost coroutine."""
    out = []
    for task, name, _kind, _tier in roots.tasks(tick):
        prefix = name[:name.rindex("/") + 1]  # "task:<task name>/" (a code name has no "/")
        owner_task = task
        for coro in await_chain(task, limit=32):
            code = getattr(coro, "cr_code", None) or getattr(coro, "gi_code", None)
            frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
            line = frame.f_lineno if frame is not None else 0
            if code is None:
                continue
            out.append(("%s%s (%s:%d)" % (prefix, code.co_name, code.co_filename.rsplit("/", 1)[-1], line or 0),
                        owner_task, coro))
            owner_task = None
    return out


def running_task_registries():
    """asyncio's ``{loop: task being stepped}`` dicts (the C one and the pure-Python one)."""
    out = []
    for name in ("_asyncio", "asyncio.tasks"):
        module = sys.modules.get(name)
        d = instance_dict(module) if module is not None else None
        registry = d.get("_current_tasks") if d is not None else None
        if type(registry) is dict:
            out.append(registry)
    return out


def modules_in_claim_order(is_stdlib, tick=None):
    """(name, module, module dict or None) for every module (roots.modules), in the census's
    priority order: ``__main__``, then non-stdlib, then stdlib, each by name."""
    out = [(name, module, instance_dict(module), tier) for module, name, _kind, tier in roots.modules(is_stdlib, tick)]
    out.sort(key=lambda nmdt: (nmdt[3] != roots.TIER_MAIN, nmdt[3] == roots.TIER_STDLIB, nmdt[0]))
    return [(name, module, md) for name, module, md, _tier in out]


def classes(tick=None):
    """Every class (roots.classes), in a flat list: a tuple per class kept at once would be
    tens of thousands of gc-tracked objects on a big program."""
    return [cls for cls, _name, _kind, _tier in roots.classes(tick=tick, named=False)]


def thread_frames():
    """(name with where it runs, frame) for every other thread's frame (roots.thread_frames).
    The caller must drop the list when done (frames hold a thread's locals alive)."""
    out = []
    for frame, name, _kind, _tier in roots.thread_frames():
        code = frame.f_code
        out.append(("%s (%s:%d)" % (name, code.co_filename.rsplit("/", 1)[-1], frame.f_lineno or 0), frame))
    frame = None
    return out


_MISSING = object()
# What the payload's own package holds (objects.is_payload_name): its functions and classes
# are leakhound's, one owner, never the target's.
PAYLOAD_OWNER = "<leakhound payload>"
NAMED_ROOTS = "<named roots>"  # the one owner of the census without owners (walk_all)


def walk_all(walk, objects, is_stdlib, exclude):
    """The census without owners (``Census(owners=False)``: the object graph names them,
    graph.py): every named root in one list, one walk from it for one owner,
    ``<named roots>``. The same totals and types as ``walk_from_roots`` (each object is
    counted once whoever claims it), at a fraction of its cost: no path per global and
    attribute, no call per owner (on the busy real worker ~0.3 s of CPU against ~1.1 s).
    One difference: what only an object's C members hold (read by ``_claim_named``
    through member descriptors, not seen by a referent walk) is left to the split of
    what no root reached, or, without gc.get_objects()'s list, not counted (0.56% of
    the bytes on the real verifiers worker's heap)."""
    claim_own(walk, objects, exclude)
    owner = walk.owner_slot(NAMED_ROOTS, sys)
    found = roots_list(walk, is_stdlib, with_locals=True)
    walk.claimed.add(id(found))
    walk.progress("roots", 0)
    walk.clock.phase("roots")
    walk.claim_tree(owner, found, root_claimed=True)
    del found
    walk.clock.phase("walk")
    walk.progress("unreached", walk.total_objects)
    walk.bookkeeping_bytes = walk.own_bytes(objects)


def roots_list(walk, is_stdlib, with_locals):
    """Every named root in one list, for a walk from it (walk_all, Census._sizing_walk):
    modules and their dicts, asyncio's running-task registries, classes, tasks and their
    coroutines, event loops, the other threads' frames and, ``with_locals``, what their
    running frames' locals hold (3.11+: not a frame's referents; read as walk_from_roots
    does, a frame it cannot read counted in ``unread_frames``), signal handlers and what
    atexit's callbacks hold."""
    check = walk.clock.check
    found = []  # type: list
    for _name, module, md in modules_in_claim_order(is_stdlib, check):
        found.append(module)
        if md is not None:
            found.append(md)
    found.extend(running_task_registries())
    found.extend(classes(check))
    task_coros = task_coroutines(check)
    for _label, task, coro in task_coros:
        if task is not None:
            found.append(task)
        found.append(coro)
    found.extend(event_loops(task for _label, task, _coro in task_coros))
    del task_coros
    for _name, frame in thread_frames():
        found.append(frame)
        if not with_locals:
            continue
        local_values = frame_locals(frame, walk.walk_module)
        if local_values is None:
            walk.unread_frames += 1
        else:
            found.extend(value for _name, value in local_values)
        del local_values
    frame = None
    found.extend(handler for handler, _name, _kind, _tier in roots.signal_handlers())
    found.extend(roots.atexit_callbacks(walk.walk_module))
    return found


def claim_own(walk, objects, exclude):
    """Marks the walk's own bookkeeping, ``objects`` (gc.get_objects()'s list, or None) and
    ``exclude`` (the caller's, the census itself): not part of the target's heap."""
    walk.mark_own()
    if objects is not None:
        walk.claimed.add(id(objects))
    for obj in exclude:
        walk.claimed.add(id(obj))


def _unclaimed_attributes(d, claimed, check):
    """(name, value) for each attribute in ``d`` (a module's or a class's dict: str keys,
    dunders left out) whose value nobody claimed yet. The keys are listed, then each value
    looked up: no (key, value) tuple per entry kept at once, and an entry the target's
    threads removed meanwhile is passed over. Most values are claimed already (a class, a
    function another module's global reached first): the mark is read here (as Marks does)
    and ``check`` (the clock) called every few hundred of them; a walk runs the clock
    itself."""
    regions = claimed.regions
    skipped = 0
    for key in list(d):
        if type(key) is not str or (key.startswith("__") and key.endswith("__")):
            continue
        value = d.get(key, _MISSING)
        if value is _MISSING:
            continue
        address = id(value)
        region = regions.get(address >> 20)
        if region is not None and region[(address & 0xFFFFF) >> 7] & (1 << ((address >> 4) & 7)):
            skipped += 1
            if skipped & 255 == 0:
                check()
            continue
        yield key, value
    value = None


def walk_from_roots(walk, objects, is_stdlib, exclude):
    """Claim everything the named roots reach; ``objects`` is gc.get_objects()'s list, or
    None when the census runs without it; ``exclude``: objects that are not the target's."""
    claimed = walk.claimed
    claim_own(walk, objects, exclude)
    # Code containers are walls between owners: modules, their dicts and classes are
    # claimed up front so no data owner walks through them into someone else's globals.
    # What hangs off the walls and no named root took (dunders, dict keys, method
    # objects) is swept into the wall owner once the named roots are done.
    wall = walk.owner_slot("<modules and classes>", sys)
    walls = []

    check = walk.clock.check  # the duty cycle (and deadline) in these long Python loops

    def add_wall(obj):
        check()
        if id(obj) not in claimed:
            # Marked now (no data owner walks through it); counted with what hangs off
            # it in one walk once the named roots are done (below).
            claimed.add(id(obj))
            walls.append(obj)

    module_dicts = []
    for name, module, md in modules_in_claim_order(is_stdlib, check):
        add_wall(module)
        if md is not None:
            add_wall(md)
            module_dicts.append((name, md))
    # asyncio's registry of the task each loop is stepping right now is not an owner: a
    # task caught mid-step belongs to its own task root (5 below), like every other task.
    # The dict is counted with the walls but not swept.
    for registry in running_task_registries():
        if id(registry) not in claimed:
            claimed.add(id(registry))
            walk.count(registry, wall)
    # The classes, their dicts and __mro__/__bases__ tuples, in flat lists: a pair and a
    # list per class would be tens of thousands of gc-tracked objects alive at once, which
    # makes the target's collector run (a full collection, 130-250 ms in one step, in the
    # census's thread) on a big program's heap.
    every_class = classes(check)
    for cls in every_class:
        add_wall(cls)
    class_dicts = []  # class, its dict, class, its dict...
    for cls in every_class:
        refs = gc.get_referents(cls)
        for ref in refs:
            if type(ref) is tuple:
                add_wall(ref)
        ref = own_class_dict(cls, refs)
        if ref is not None:
            class_dicts.append(cls)
            class_dicts.append(ref)
            add_wall(ref)
    del every_class
    cls = ref = refs = None  # type: ignore[assignment]  # (the last class's referents: let go)
    walk.progress("roots", 0)
    walk.clock.phase("roots")

    # Tasks and their coroutines are claimed up front, like the walls: a path from a module
    # global to a task (an event loop's ready queue and timers, a handle kept in a global,
    # asyncio's _current_tasks) stops there, and each task's state goes to its own root (5).
    task_coros = task_coroutines(check)
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
    for name, md in module_dicts:
        check()
        ours = is_payload_name(name)  # the payload's own module: one owner for all of it
        for key, value in _unclaimed_attributes(md, claimed, check):
            if ours:
                walk.claim_tree(walk.owner_slot(PAYLOAD_OWNER, value), value)
                continue
            walk.claim_named(name + "." + key, value, 1)
    walk.clock.phase("module globals")
    # 4: class attributes.
    for k in range(0, len(class_dicts), 2):
        cls, cdict = class_dicts[k], class_dicts[k + 1]
        check()
        base = None
        for key, value in _unclaimed_attributes(cdict, claimed, check):
            if base is None:
                base = type_name(cls)
            if is_payload_name(base):
                walk.claim_tree(walk.owner_slot(PAYLOAD_OWNER, value), value)
                continue
            walk.claim_named(base + "." + key, value, 1)
    key = value = None
    walk.clock.phase("class attributes")
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
    walk.claim_tree(wall, walls, root_claimed=True)
    walk.clock.phase("walls")
    # 5: asyncio tasks. First each task's context variables, by name: a pending future's
    # callback holds the context of the task that waits on it, and a path from another
    # task's coroutine to the future (a Queue.get's waiter, through the queue) named the
    # consumer's variable after the task holding the queue. Then what a suspended
    # coroutine's frames hold (no thread stack shows it). A suspended coroutine's locals
    # are visible through the coroutine object, not its frame (the frame object does not
    # own its data).
    c_future = c_future_class()
    for label, task, _coro in task_coros:
        ctx = task_context(task, c_future) if task is not None else None
        for name, value in context_variables(ctx) if ctx is not None else ():
            walk.claim_named(label + ".<contextvar " + name + ">", value, 2)
        ctx = value = None
    for label, task, coro in task_coros:
        owner = walk.owner_slot(label, coro)
        if task is not None:
            walk.count(task, owner)
        walk.count(coro, owner)
        for ref in gc.get_referents(coro):
            if type(ref).__name__ in ("frame", "coroutine", "generator", "async_generator"):
                continue
            walk.claim_named(label + ".<" + short_type_name(type(ref)) + ">", ref, 2)
        if task is not None:
            walk.claim_tree(owner, task, root_claimed=True)
    # 6: thread stacks, each frame its own root. The census's own thread is left out:
    # a local naming its frame would be a cycle (frame -> locals -> frame) holding
    # everything the census holds, gc.get_objects()'s list included, until the target's
    # next full collection.
    walk.clock.phase("tasks")
    frames = thread_frames()
    for _path, frame in frames:
        claimed.add(id(frame))
    for path, frame in frames:
        owner = walk.owner_slot(path, frame)
        walk.count(frame, owner)
        local_values = frame_locals(frame, walk.walk_module)
        if local_values is None:
            walk.unread_frames += 1
        else:
            for name, value in local_values:
                walk.claim_named(path + "." + name, value, 2)
        del local_values
        for ref in gc.get_referents(frame):
            if type(ref).__name__ == "frame":
                continue
            walk.claim_named(path + ".<" + short_type_name(type(ref)) + ">", ref, 2)
    del frames
    frame = None
    walk.clock.phase("frames")
    # 7: what the interpreter keeps for the program in C state: signal handlers, by signal,
    # and atexit's callbacks, one owner (as the graph's owners name them): a closure
    # registered per connection was ``<held from C: function>``
    for handler, name, _kind, _tier in roots.signal_handlers():
        walk.claim_named(name, handler, 2)
    handler = None
    callbacks = roots.atexit_callbacks(walk.walk_module)  # (a list of leakhound's: not counted)
    if callbacks:
        walk.claim_tree(walk.owner_slot(roots.ATEXIT_OWNER, callbacks), callbacks, root_claimed=True)
    callbacks = None
    for loop in loops:
        claimed.discard(id(loop))
    walk.claim_tree(wall, loops, root_claimed=True)
    del loops
    walk.progress("unreached", walk.total_objects)
    walk.bookkeeping_bytes = walk.own_bytes(objects)
