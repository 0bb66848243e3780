"""The object graph's roots, walked inside the target: the named roots (roots.py) with what is
theirs by name (a module's and a class's dict, a task's context variables, a running frame's
variables), and the objects held from C that no root reached.

Standard library only, as ``graph.py`` (whose ``Graph.run`` calls these, and which
imports this module, so that it is loaded with the payload).
"""

# mypy: disable-error-code="assignment, var-annotated, arg-type, unused-ignore"
# (payload code, Python 3.8+ without annotations: locals are rebound to None to drop references)

import gc
import sys
import time

from . import roots
from .census import ns_per_object
from .census_unreached import referenced_from_outside, still_outside
from .graph_wire import MAX_LABEL_CHARS
from .objects import (
    LEAF_TYPE_IDS,
    OURS,
    SHARED_LEAF,
    SUBCLASSES_LABEL,
    ModuleType,
    c_holder,
    dict_columns,
    held_what,
    instance_dict,
    is_payload_name,
    own_class_dict,
)
from .pacing import UNSPLIT_STEP_MARGIN, unsplit_step_fits
from .roots import ATEXIT_OWNER, FINALIZE_OWNER, TIER_HELD
from .tasks import c_future_class, context_variables, task_context
from .tracked import among, made_after, tracked_objects

try:  # running frames' variables are read through the compiled walk's module (3.11+)
    from . import _walk as _walk_module  # type: ignore[attr-defined]
except Exception:
    _walk_module = None


def add_roots(graph, stack):
    """Every named root of ``graph`` (a ``Graph``) but the threads' frames (add_thread_roots)
    onto ``stack``, each an edge of the super-root (roots.py), with what is theirs by name: a
    module's and a class's dict, a task's context variables."""
    # The duty cycle, the deadline and the cancel every 256 modules and classes: thousands of
    # modules and tens of thousands of classes were one 170 ms stretch (the real verifiers
    # worker's heap; its heartbeat thread waited 182 ms).
    check = graph.check
    check()
    # weakref.finalize's registry is never walked as its class's attribute: its finalizers are
    # one soft root (below), so that what they hold is theirs only where nothing else holds
    # it (urllib3 2's pools: each one's connections held by the pool and by its finalizer's
    # arguments were "<shared by __main__, weakref.finalize._registry>")
    registry = roots.finalize_registry()
    if registry is not None:
        graph.own(registry)
    tiers = {}
    for module, name, kind, tier in roots.modules(graph.is_stdlib, check, tiers):
        m = graph.root(module, name, kind, tier, wall=True)
        d = instance_dict(module)
        if d is not None and m > 0:
            dn = graph.node(d)
            if dn > 0:
                graph.wall(dn)
                graph.edge(m, dn, graph.label("d"))
                graph.push(stack, dn, d)
    module = d = None
    check()
    for cls, name, kind, tier in roots.classes(tiers, check):
        c = graph.root(cls, name, kind, tier, wall=True)
        if c > 0:
            d = own_class_dict(cls)
            if d is not None:
                dn = graph.node(d)
                if dn > 0:
                    graph.wall(dn)
                    graph.edge(c, dn, graph.label("d"))
                    graph.push(stack, dn, d)
            graph.push(stack, c, cls)
    cls = d = None
    check()
    # Each task's context variables are its own, by name: what a pending future's callback
    # also reaches through the context (a Queue.get's waiter) is a back-reference (passes.py).
    c_future = c_future_class()
    for task, name, kind, tier in roots.tasks(check):
        t = graph.root(task, name, kind, tier)
        if t > 0:
            graph.push(stack, t, task)
            ctx = task_context(task, c_future)
            if ctx is not None:
                for var_name, value in context_variables(ctx):
                    _variable_edge(graph, stack, t, value, "c" + var_name[:MAX_LABEL_CHARS])
                value = None
            ctx = None
    task = None
    for handler, name, kind, tier in roots.signal_handlers():
        h = graph.root(handler, name, kind, tier)
        if h > 0:
            graph.push(stack, h, handler)
    handler = None
    # atexit's callbacks, which the interpreter holds in C state: one group, as the objects of
    # a type held from C are (a list of the payload's at no size of its own: an owner of the
    # callbacks, not a root apiece), walked after every other named root but the threads'
    _held_group(graph, stack, roots.atexit_callbacks(_walk_module), ATEXIT_OWNER)
    # and weakref.finalize's live finalizers (a finalizer's referent is
    # weakly held: what its arguments hold is the referent's to let go of)
    # (its keys and values one moment's: no key's __hash__ or __eq__ runs)
    # (the group at the registry's own size: the dict is walked no other way; its infos only,
    # an entry an item: each info reaches its finalizer, the key, through its weakref's
    # callback)
    columns = dict_columns(registry) if registry is not None else None
    if columns is not None:
        _held_group(graph, stack, columns[1], FINALIZE_OWNER, graph.size_of(registry), type(registry))
    columns = None
    registry = None
    graph.progress("graph", graph.node_count())


def _held_group(graph, stack, parts, name, size=0, as_type=None):
    """``parts`` (a list of the payload's) as one soft root named ``name``, at ``size`` (0: no
    size of its own), of type ``as_type`` (None: list; the registry's dict, which cheap samples
    count by its name): an owner of what they hold that nothing else holds, not a root apiece."""
    tried = 0
    while parts and graph.known(parts) and tried < 8:
        parts = list(parts)  # (where an object of leakhound's was: never a node)
        tried += 1
    a = 0
    if parts and not graph.known(parts):
        a = graph.root(parts, name, "held", TIER_HELD, size=size, as_type=as_type)
    if a > 0:
        graph.push(stack, a, parts)


def _subclass_registries(graph, stack, held, new):
    """The classes' registries of their subclasses among ``held`` (objects.subclasses_owner),
    each its class's, by an edge ``<subclasses>``, and walked: what C holds for a class is the
    class's, not ``<held from C: dict>``. And the copy of the payload's extension module's
    dict the import system keeps (a single-phase module's ``m_copy``): leakhound's."""
    label = -1
    for n, obj in enumerate(held):
        if n & 255 == 255:
            graph.check()
        if type(obj) is not dict or id(obj) in new or graph.known(obj):
            continue
        cls = c_holder(obj)
        if cls is OURS:
            graph.own(obj)
            continue
        if cls is None or not graph.known(cls):
            continue
        c = graph.node(cls)
        d = graph.node(obj) if c > 0 else -1
        if d > 0:
            if label < 0:
                label = graph.label("a" + SUBCLASSES_LABEL)
            graph.edge(c, d, label)
            graph.push(stack, d, obj)
            graph.walk(stack)
    cls = obj = None


def add_thread_roots(graph, stack):
    """The other threads' frames onto ``stack``, each a root (soft: passes.soften) with what
    its variables hold. Called once every other root has been walked: a running function's
    temporary (the simulated verifiers worker's report copies its registry,
    ``dict(trajectories)``) dies within milliseconds, and the compiled walk names a node by
    its address; walked first, its address was taken by a new object (a step's
    ``tool_calls[0]``) that the rest of the walk then met as the copy, with the copy's edges
    to every entry of the registry. Walked last, only other soft roots can meet that address."""
    check = graph.check
    check()
    # Each frame its own root, with what its variables hold (3.11+ keep a running frame's
    # variables outside the frame object: gc.get_referents does not show them, and without
    # these edges they were "<held from C: ...>").
    for frame, name, kind, tier in roots.thread_frames():
        # (a frame the walk met already, through a coroutine it runs: a root, not walked again)
        known = graph.known(frame)
        f = graph.root(frame, name, kind, tier)
        if f > 0:
            if not known:
                graph.push(stack, f, frame)
            # (the agent's other thread runs the payload's code: its variables are ours)
            variables = roots.frame_locals(frame, _walk_module) if not _runs_payload_code(frame) else None
            for var_name, value in variables or ():
                _variable_edge(graph, stack, f, value, "a" + var_name[:MAX_LABEL_CHARS])
            variables = value = None
            check()
    frame = None
    graph.progress("graph", graph.node_count())


def _runs_payload_code(frame):
    """Whether ``frame`` runs a function of the payload's package (its globals' ``__name__``)."""
    try:
        name = dict.get(frame.f_globals, "__name__")
    except Exception:
        return False
    return type(name) is str and is_payload_name(name)


def _variable_edge(graph, stack, src, value, label):
    """An edge labelled ``label`` from node ``src`` (a task, a frame) to ``value``, what one of
    its variables holds (read from the frame or the context, not a referent the walk would
    meet); ``value`` walked if it is new. Modules and classes are roots of their own; None,
    True, False and a leaf shared by everyone (``objects.SHARED_LEAF``) belong to no
    one; any other leaf (a big bytes in a local) is a node of its own."""
    tp = type(value)
    if issubclass(tp, type) or tp is ModuleType or value is None or tp is bool:
        return
    leaf = id(tp) in LEAF_TYPE_IDS
    # the caller's variable, the list it came from, this call's argument, getrefcount's
    if leaf and sys.getrefcount(value) > SHARED_LEAF + 4:
        return
    known = graph.known(value)
    j = graph.node(value)
    if j <= 0:
        return
    graph.edge(src, j, graph.label(label))
    if not known and not leaf:
        graph.push(stack, j, value)


# Objects per step when held_from_c goes over gc.get_objects()'s list.
_SLICE = 1 << 15


def held_from_c_over_budget(tracked, estimate_ms, max_pause_ms):
    """Why the graph did not list every tracked object, in words: the numbers it says are the
    ones it compared (twice the estimate against the budget; "~40 ms, over the 50 ms budget"
    read as a contradiction)."""
    return ("listing the ~%s gc-tracked objects (gc.get_objects(), one call) takes ~%.0f ms "
            "here, up to ~%.0f ms on a loaded machine: over the %.0f ms pause budget, so objects "
            "held from C only were not looked for"
            % (format(tracked, ","), estimate_ms, UNSPLIT_STEP_MARGIN * estimate_ms, max_pause_ms))


def _older_collections():
    """How many collections of generations 1 and 2 have run."""
    return [generation.get("collections", 0) for generation in gc.get_stats()[1:]]


def listing_over_budget_at(max_pause_ms):
    """The tracked count from which held_from_c skips its listing (its estimate over the
    budget: the rate it reads does not change during a walk), or -1: no budget, it never
    skips. Past it the C walk need not mark the containers it folds (_graph_walk.c's
    fold_marks_until)."""
    if max_pause_ms is None:
        return -1
    return int(max_pause_ms * 1e6 / (ns_per_object() * UNSPLIT_STEP_MARGIN)) + 2


def _listing(graph):
    """Every tracked object (tracked_objects: one call, held_from_c's estimate found it within
    the pause budget), its time one of the walk's steps (``max_step``), the list leakhound's."""
    t0 = time.perf_counter()
    objects = tracked_objects()
    took = time.perf_counter() - t0
    if took > graph.max_step:
        graph.max_step = took
    graph.own(objects)
    return objects


def held_from_c(graph, stack):
    """Tracked objects no root reached but something outside the heap references (C
    state, a thread's stack): roots named ``<held from C: Type>``. Needs the list of
    every tracked object, one call that cannot be split: skipped over the pause budget."""
    tracked = graph.tracked_count()
    estimate = tracked * ns_per_object() / 1e6
    graph.unreached["estimated_pause_ms"] = round(estimate, 1)
    if not unsplit_step_fits(estimate, graph.max_pause_ms):
        graph.unreached["reason"] = held_from_c_over_budget(tracked, estimate, graph.max_pause_ms)
        return
    graph.check()
    collections = _older_collections()
    objects = _listing(graph)
    # What was made after the walk began (its referrer walked already, the new reference
    # not seen) is no more held from C than what the walk reached: named for what it is.
    # Read after the list: anything in it made after the marker is in ``made`` or, with
    # ``older``, after the marker in the list, unless a collection of the older generations
    # moved the marker meanwhile, or a full one ran since the walk began (it appends
    # generation 0, then 1, to the oldest: older objects after newer ones): then what follows
    # the marker in the list is not known to be new, and is named as held from C. What was
    # in a young generation as the walk began is old wherever a collection put it since.
    marker = graph.walk_began
    young = graph.young_at_start
    made, older = made_after(marker) if marker is not None and young is not None else (set(), False)
    graph.own(made)
    if older and (_older_collections() != collections or collections[-1:] != graph.gc_before[2:3]):
        older = False
    # In slices, the clock looked at between them: one pass over every tracked object (700k
    # on the busy real worker) and the arithmetic below were a 470 ms hold of the GIL.
    unreached = []
    mark = id(marker) if older else None  # looked for in the oldest generation, the list's tail
    for start in range(0, len(objects), _SLICE):
        graph.check()
        piece = objects[start:start + _SLICE]
        found = graph.unknown(piece)
        if mark is not None:
            ids = list(map(id, piece))
            if mark in ids:
                made.update(map(id, graph.unknown(piece[ids.index(mark) + 1:])))
                mark = None
            ids = None
        elif older:
            made.update(map(id, found))
        unreached.extend(found)
        piece = found = None
    graph.own(unreached)
    while objects:  # let go in pieces: the last reference to what died meanwhile
        graph.check()
        del objects[-_SLICE:]
    del objects
    held = referenced_from_outside(unreached, held=1, tick=graph.check)
    # What the marker could not tell apart (a collection of the older generations during the
    # walk, as on a fast-allocating target: 2 of 5 inspections named its new entries held
    # from C) is looked for among every tracked object's referents: a reference from the heap
    # made after its holder was walked is no reference from C. A second listing (it fit the
    # budget a moment ago), made once referenced_from_outside's index is gone: kept through
    # it, the first was its ~110 bytes an unreached object on top of 8 a tracked one.
    new = {id(obj) for obj in held if id(obj) in made and not among(young, id(obj))}  # known new
    graph.own(new)
    unsure = [obj for obj in held if id(obj) not in new]
    if unsure:
        graph.own(unsure)
        graph.check()
        referrers = _listing(graph)
        # (each candidate held by referrers, unreached, held and unsure: the last three listed)
        outside = set(map(id, still_outside(unsure, referrers, held=4, tick=graph.check,
                                            ours=(unreached, held, unsure))))
        new.update(id(obj) for obj in unsure if id(obj) not in outside)
        outside = None
        while referrers:
            graph.check()
            del referrers[-_SLICE:]
        del referrers
    del unsure
    _subclass_registries(graph, stack, held, new)
    # One root per name: the objects of a type held from C (or made during the walk) are one
    # group, a list of the payload's at no size of its own (an owner of many held objects is
    # the group: 450 lists an atexit.register() each holds were 450 roots of 88 KiB, none
    # listed, 40 MB named nowhere). A name held once is that object.
    groups = {}
    for n, obj in enumerate(held):
        if n & 255 == 255:
            graph.check()
        if graph.known(obj):
            continue
        form = "<made during the walk: %s>" if id(obj) in new else "<held from C: %s>"
        name = form % held_what(obj)
        members = groups.get(name)
        if members is None:
            groups[name] = [obj]
        else:
            members.append(obj)
    obj = members = None
    for name in list(groups):
        members = groups.pop(name)
        graph.check()
        # A new list can be where an object of leakhound's was (the listings, their slices),
        # an address the graph marks as ours: never a node. Another is made (a few at most).
        tried = []
        while len(members) > 1 and graph.known(members) and len(tried) < 8:
            tried.append(members)
            members = list(members)
        tried = None
        group = len(members) > 1 and not graph.known(members)  # else its objects one by one
        for one in ([members] if group else members):
            if not group and graph.known(one):  # reached from a group walked before it
                continue
            i = graph.root(one, name, "held", TIER_HELD, size=0 if group else None)
            if i > 0:
                graph.push(stack, i, one)
                graph.walk(stack)
        one = members = None
    graph.unreached["examined"] = True
    graph.unreached["held"] = len(held)
    graph.unreached["garbage_objects"] = sum(len(graph.unknown(unreached[k:k + _SLICE]))
                                             for k in range(0, len(unreached), _SLICE))
    del unreached, held, made, new
    obj = None

# -- the result ------------------------------------------------------------------------

