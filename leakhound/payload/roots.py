"""The named roots of the heap: what every walk starts from, each as (object, name, kind, tier).

- ``modules``: every module in ``sys.modules``, once, under its first name;
- ``classes``: every class of ``object``'s subclass tree (``gc.get_objects()`` misses the
  classes a worker ``gc.freeze()``-d), tiered as the module that defines it;
- ``tasks``: every pending asyncio task (a finished one is owned by whoever holds it), named
  after its outermost coroutine, Task-1 (usually the main coroutine) first;
- ``signal_handlers``: every Python handler ``signal.signal`` installed (the interpreter
  keeps it in C state: a closure's captured data was ``<held from C: ...>``), by its signal;
- ``atexit_callbacks``: every callback ``atexit.register`` keeps (in the interpreter's C state
  too: a bound method registered per connection held its connection as ``<held from C: ...>``,
  or in no owner at all on a heap too big to list), its func, args and kwargs;
- ``thread_frames``: every frame of every thread's stack but the caller's, innermost first.

The kinds are "module", "class", "task", "signal" and "thread". A root of a lower tier names an owner
before any other: the app's own globals and tasks before a library's registry that also
reaches them. No line number is in a name: a paused coroutine's or a running frame's line
changes between snapshots, its owner must not (a walk that wants the line adds it).

Each enumerator yields one root at a time: a tuple per root kept at once would be tens of
thousands of gc-tracked objects on a big program, counted towards the target's next
collection, which then runs in the payload's thread. ``tick``: called every 256 roots or so
(the caller's duty cycle). The roots' variables, which are not their referents (a running
frame's locals on 3.11+), are read by ``frame_locals``.

Standard library only; runs inside the target and reads it without running its code.
"""

# mypy: disable-error-code="assignment, var-annotated, arg-type, unused-ignore"
# (payload code, Python 3.8+ without annotations: locals are rebound to None to drop references)

import sys

from .objects import class_dict, class_module, dict_pairs, instance_dict, is_payload_name, subclass_tree, type_name
from .tasks import await_chain, named_tasks

TIER_MAIN, TIER_APP, TIER_THREAD, TIER_LIBRARY, TIER_STDLIB, TIER_HELD, TIER_OURS = range(7)
_ModuleType = type(sys)


def module_tier(name, module, is_stdlib):
    """The tier of ``module``, listed in ``sys.modules`` under ``name``."""
    if module is sys.modules.get("__main__"):
        return TIER_MAIN
    if name == "leakhound" or name.startswith("leakhound.") or is_payload_name(name):
        return TIER_OURS
    if is_stdlib(name):
        return TIER_STDLIB
    d = instance_dict(module)
    path = d.get("__file__") if d is not None else None
    if type(path) is str and ("site-packages" in path or "dist-packages" in path):
        return TIER_LIBRARY
    return TIER_APP


def modules(is_stdlib, tick=None, tiers=None):
    """(module, name, "module", tier) for every module, by tier, then name. ``tiers``: a dict
    filled with name -> tier (``classes`` tiers a class as its module)."""
    names_of = {}
    for name, module in dict_pairs(sys.modules):
        if type(module) is _ModuleType and type(name) is str:
            names_of.setdefault(id(module), (name, module))
    tiers = {} if tiers is None else tiers
    for n, (name, module) in enumerate(list(names_of.values())):
        if tick is not None and n & 255 == 255:
            tick()
        tiers[name] = module_tier(name, module, is_stdlib)
    ordered = sorted(names_of.values(), key=lambda nm: (tiers[nm[0]], nm[0]))
    names_of = None
    for n, (name, module) in enumerate(ordered):
        if tick is not None and n & 255 == 255:
            tick()
        yield module, name, "module", tiers[name]


def classes(tiers=None, tick=None, named=True):
    """(class, its name, "class", tier) for every class of ``object``'s subclass tree, each
    once. ``tiers``: module name -> tier (``modules``'), else every class is TIER_STDLIB;
    ``named``: False for a walk that does not use the names (None then; ~0.4 us a class)."""
    for n, cls in enumerate(subclass_tree(object, tick)):
        if tick is not None and n & 255 == 255:
            tick()
        tier = TIER_STDLIB
        if tiers:
            owner_module = class_module(cls)
            if owner_module is not None:
                tier = tiers.get(owner_module, TIER_STDLIB)
        yield cls, type_name(cls) if named else None, "class", tier


def task_name(name, coro):
    """A task's root name: its own and its coroutine's ("?" when it has no code)."""
    code = getattr(coro, "cr_code", None) or getattr(coro, "gi_code", None) if coro is not None else None
    return "task:%s/%s" % (name, code.co_name if code is not None else "?")


def tasks(tick=None):
    """(task, "task:<task name>/<its outermost coroutine>", "task", TIER_APP) for every pending
    task with a str name, Task-1 first, in natural order (tasks.named_tasks)."""
    for n, (name, task) in enumerate(named_tasks(tick)):
        if tick is not None and n & 63 == 63:
            tick()  # tens of thousands of request tasks: 20,000 were a 160 ms stretch
        chain = await_chain(task, limit=1)  # its own coroutine
        label = task_name(name, chain[0] if chain else None)
        chain = None
        yield task, label, "task", TIER_APP


def signal_handlers():
    """(handler, "signal:<SIGNAME>", "signal", TIER_APP) for every signal whose handler is an
    object of the program's (not SIG_DFL, SIG_IGN or the interpreter's own SIGINT handler),
    read from the interpreter's table (``_signal.getsignal``: no code of the program runs)."""
    import _signal  # type: ignore[import-not-found]  # noqa: PLC0415 - built in, initialized at startup

    names = {}
    for name in list(vars(_signal)):
        if name.startswith("SIG") and not name.startswith("SIG_") and type(getattr(_signal, name, None)) is int:
            names.setdefault(getattr(_signal, name), name)
    default = getattr(_signal, "default_int_handler", None)
    for number in range(1, getattr(_signal, "NSIG", 65)):
        try:
            handler = _signal.getsignal(number)
        except (ValueError, OSError):
            continue
        if handler is None or type(handler) is int or handler is default:
            continue
        yield handler, "signal:%s" % names.get(number, number), "signal", TIER_APP
    handler = None


# The owner atexit's callbacks are (atexit_callbacks), in the graph's and the census's owners
ATEXIT_OWNER = "atexit.<callbacks>"
# The owner of what only weakref.finalize's live finalizers hold (finalize_registry)
FINALIZE_OWNER = "weakref.finalize._registry"


def finalize_registry():
    """weakref.finalize's registry of live finalizers (finalizer -> its info: the referent's
    weak reference, the function and its arguments), read from the class's own dict; None
    where there is none. What a finalizer holds it lets go of when its referent dies: the
    object graph holds it as a soft root's (graph_roots.add_roots), not a module's."""
    module = sys.modules.get("weakref")
    d = instance_dict(module) if module is not None else None
    cls = d.get("finalize") if type(d) is dict else None
    if not issubclass(type(cls), type):
        return None
    registry = class_dict(cls).get("_registry")
    return registry if type(registry) is dict else None


def atexit_count():
    """``atexit._ncallbacks``, the module's C function counting the callbacks it keeps, read
    from the module's dict (no attribute hook of the program runs); None where atexit is not
    loaded or that name is not a built-in function."""
    module = sys.modules.get("atexit")
    count = instance_dict(module).get("_ncallbacks") if type(module) is _ModuleType else None
    return count if type(count).__name__ == "builtin_function_or_method" else None


def atexit_callbacks(walk_module):
    """What the callbacks the atexit module keeps hold, read from the interpreter's state by
    the compiled walk (_walk.c ``atexit_callbacks``: no code of the program runs): each
    callback's function (once, however many callbacks call it), its arguments and keyword
    arguments where it has any, so that a callback registered per connection
    (``atexit.register(conn.close)`` or ``atexit.register(flush, buffer)``) is one item; []
    where there are none or they cannot be read. The list is the caller's (leakhound's own)."""
    count = atexit_count()
    if count is None or not hasattr(walk_module, "atexit_callbacks"):
        return []
    flat = walk_module.atexit_callbacks(count) or []
    out = []
    functions = set()
    for k in range(0, len(flat) - 2, 3):
        func, args, kwargs = flat[k], flat[k + 1], flat[k + 2]
        if id(func) not in functions:
            functions.add(id(func))
            out.append(func)
        if type(args) is tuple and tuple.__len__(args):  # (the empty tuple: everyone's)
            out.append(args)
        if type(kwargs) is dict and dict.__len__(kwargs):
            out.append(kwargs)
    flat = func = args = kwargs = None
    return out


def thread_name_of(thread, ident):
    """A ``threading.Thread``'s name, its ``_name`` attribute read as the instance has it (no
    property of a subclass runs, and a 3.11+ instance's attributes are not made a dict), else
    its ident."""
    for klass in type.__dict__["__mro__"].__get__(type(thread), type):
        if "_name" in class_dict(klass):  # a descriptor or class attribute of that name: not read
            return str(ident)
    try:
        name = object.__getattribute__(thread, "_name")
    except Exception:
        return str(ident)
    return name if type(name) is str else str(ident)


def thread_frames():
    """(frame, "thread:<thread name>/<function>", "thread", TIER_THREAD) for every frame of
    every thread's stack, innermost first, except the calling thread's. Nothing here binds
    the caller's own frame (that would be a cycle holding its locals)."""
    import threading  # noqa: PLC0415 - imported lazily: the target may not use threads

    names = {}
    for ident, thread in list(threading._active.items()):  # type: ignore[attr-defined]
        names[ident] = thread_name_of(thread, ident)
    current = sys._current_frames()
    current.pop(threading.get_ident(), None)
    stacks = list(current.items())
    del current
    for ident, top in stacks:
        frame = top
        top = None
        thread_name = names.get(ident, str(ident))
        while frame is not None:
            yield frame, "thread:%s/%s" % (thread_name, frame.f_code.co_name), "thread", TIER_THREAD
            frame = frame.f_back
    stacks = None


def every_root(is_stdlib, tick=None, named=True):
    """Every named root, of every kind, in the order above (``named``: as ``classes``')."""
    tiers = {}
    for root in modules(is_stdlib, tick, tiers):
        yield root
    for root in classes(tiers, tick, named):
        yield root
    for root in tasks(tick):
        yield root
    for root in signal_handlers():
        yield root
    for root in thread_frames():
        yield root


# -- a root's variables --------------------------------------------------------------------

# Where a 3.11-3.13 frame keeps its fast locals (64-bit builds): PyFrameObject.f_frame, then
# in the _PyInterpreterFrame it points to: f_code (3.11) / f_code or f_executable (3.12,
# 3.13), frame_obj and localsplus (Include/internal/pycore_frame.h of each version). _walk.c
# checks that the interpreter frame points back at the frame and its code before reading.
_FRAME_LAYOUTS = {(3, 11): (24, 32, 40, 72), (3, 12): (24, 0, 48, 72), (3, 13): (24, 0, 48, 72)}
_FrameType = type(sys._getframe())
# 3.10: the frame object holds its variables (f_localsplus, at its end) after f_code (at 32,
# past the object header and f_back); read in place (_walk.c: f_frame_offset 0).
_FRAME_310 = (0, 32, 0, _FrameType.__basicsize__ - _FrameType.__itemsize__)


def frame_locals(frame, walk_module):
    """[(name, value)] for a frame's bound variables (its fast locals, then its cells and free
    variables, as the interpreter lays them out: a variable a closure captures is its cell),
    read without changing the frame, or None when they cannot be read safely here (the
    reason is ``frame_locals_unreadable()``).

    On 3.11+ a running frame's locals live in the interpreter's frame, not the frame object:
    gc.get_referents(frame) does not show them, and ``f_locals`` on a running 3.11/3.12 frame
    writes them into a dict in the frame (PyFrame_FastToLocals). They are read in one C call
    of ``walk_module`` (_walk.c: frame_locals), which holds the GIL throughout. On 3.10 the
    frame object owns its variables and gc.get_referents(frame) lists them, without their
    names: read the same way from the frame object itself, else [] (they are still walked)."""
    if sys.version_info < (3, 11):
        return _frame_locals_310(frame, walk_module)
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


def _frame_locals_310(frame, walk_module):
    if (sys.version_info[:2] != (3, 10) or sys.maxsize < 2**32 or walk_module is None
            or not hasattr(walk_module, "frame_locals") or type(frame) is not _FrameType):
        return []
    code = frame.f_code
    try:
        # 3.10's slots: the locals, every cell (an argument a closure captures too: its local
        # slot is then empty), the free variables
        names = code.co_varnames + code.co_cellvars + code.co_freevars
        values = walk_module.frame_locals(frame, _FrameType, code, len(names), *_FRAME_310)
    except Exception:
        return []
    if values is None or len(values) > len(names):
        return []
    return [(names[i], v) for i, v in enumerate(values) if v is not None]


def _variable_names(code):
    """The names of a 3.11+ frame's variables in the order of its slots (``localsplus``): the
    locals (arguments first), the cells that are not arguments, the free variables."""
    varnames = code.co_varnames
    # a list first: tuple(generator) fails while another thread lists gc.get_objects() (tracked.py)
    return varnames + tuple([name for name in code.co_cellvars if name not in varnames]) + code.co_freevars


def frame_locals_unreadable(walk_module):
    """Why running frames' locals cannot be read in this process, or "" when they can."""
    if sys.version_info < (3, 11):
        return ""
    if sys.version_info[:2] not in _FRAME_LAYOUTS or sys.maxsize < 2**32:
        return "the frame layout of Python %d.%d on this build is not known" % sys.version_info[:2]
    if walk_module is None or not hasattr(walk_module, "frame_locals"):
        return "the compiled census walk (_walk.abi3.so) is not loaded"
    return ""
