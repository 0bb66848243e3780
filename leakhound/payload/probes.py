"""Known-shape probes: facts about recognised structures, measured inside the target.

Each probe returns a JSON-able dict, or ``{"skipped": reason}`` when the shape is absent.
Detectors on the CLI side (``leakhound/analysis/detectors``) turn the facts into findings.

The ``verifiers`` probe recognises the v1 env-worker runtime of ``verifiers`` (0.1.14) and
leakhound's own simulated worker, which mirrors its names:

* runtimes: the module global ``_RUNTIME_REGISTRY`` (runtime_id -> Runtime, weak values) in
  ``verifiers.v1.runtime`` / ``leakhound.simulate.runtime``. Workers call ``gc.freeze()``,
  which hides these objects from ``gc.get_objects()``, so we never search for them there.
* ``Runtime.trajectories``: trajectory_id -> the rollout's live trajectory list. An entry is
  *in flight* when a live asyncio task's coroutine holds a rollout state (a dict with that
  ``trajectory_id``, directly or in a list/tuple of states), now or, with the object graph,
  as its walk began (``in_flight_before``: the owners are the graph's); every other entry
  belongs to a rollout that has finished and is retained only by the registry.
* ``InterceptionServer.intercepts`` (reached as ``runtime.harness.endpoint.server``):
  request_id -> intercept dict holding the parsed request body. Delivered = its
  ``response_future`` is done.
* step bloat: a step's stored ``response`` still carrying ``message`` beyond the minimal
  truncation sidecar (``{"is_truncated", "tokens": {"prompt_ids", "completion_ids"}}``).

Only built-in descriptors, dict/list C methods and ``Future.done()`` are called; no user code.

Sizes are ``sizes.deep_size``'s (sys.getsizeof over what dicts, lists, tuples, sets and
frozensets hold, each object once per seen-set), computed by the census's compiled walk
(``_walk.claim``, a fresh bitmap per seen-set) as long as everything it meets is data
``deep_size`` would walk the same way (exact containers and objects without referents):
one object of any other type (an instance, a class, a code object, a container subclass)
stops it at once, and that section is sized again by ``deep_size`` in Python. The two give
the same bytes (tests/unit/test_probes.py). The real verifiers worker's trajectories and
intercept bodies are plain JSON data: 300k objects took 0.25-1.1 s of the payload's CPU in
``deep_size`` on the busy worker, tens of ms in C.

The probes keep the census's pause budget (``_Clock``): they yield the GIL (a short sleep)
once they have run ``max_hold`` seconds of CPU since they last did, and they stop when the
request is cancelled or its deadline passes (``run_all(stop=...)``).
"""

import array
import gc
import sys
import time

from . import wire  # noqa: F401 - its types, in type comments
from .census_tallies import Marks
from .objects import HEAPTYPE, builtin_iter, builtin_length, dict_pairs, instance_dict, plain_text, type_flags
from .pacing import Clock
from .sizes import deep_size as _deep_size

try:  # the census's compiled walk (_walk.abi3.so, one build for CPython 3.10+)
    from . import _walk
except ImportError:  # pragma: no cover - a target without the build: deep_size in Python
    _walk = None  # type: ignore[assignment]
from .tasks import await_chain, live_tasks

RUNTIME_MODULES = ("verifiers.v1.runtime", "leakhound.simulate.runtime")
BODY_FIELDS = ("messages", "prompt", "input", "system", "tools")
SIDECAR_MESSAGE_KEYS = frozenset(("is_truncated", "tokens"))
SIDECAR_TOKEN_KEYS = frozenset(("prompt_ids", "completion_ids"))
_BASE64_MARK = ";base64,"


# The pause budget when the request gives none (the census's default --max-pause of 50 ms
# yields every 25 ms, census.Census: max_pause_ms / 2): at most this much CPU between yields.
DEFAULT_MAX_HOLD = 0.025
# Units of work per call into the compiled walk (one per container and per referent): about
# a millisecond, so a call is never a long pause by itself (census._WORK_PER_CALL).
WORK_PER_CALL = 20000


class ProbeStopped(Exception):
    """The request was cancelled or its deadline passed while a probe ran."""


class _Clock(Clock):
    """The probes' pacing (pacing.Clock): ``tick()``, called between short pieces of work,
    yields once the probes have run ``max_hold`` seconds of this thread's CPU since they last
    yielded, and raises ``ProbeStopped`` once ``stop()`` (the request's cancellation point,
    runner._Stop) answers True. ``ticks`` counts the looks at the clock."""

    def __init__(self, stop=None, max_hold=DEFAULT_MAX_HOLD):
        Clock.__init__(self, float("inf"), max_hold=DEFAULT_MAX_HOLD if max_hold is None else max_hold,
                       check_every=0.0)
        self.stop = stop
        self.ticks = 0

    def tick(self):
        self.ticks += 1
        self.hold()
        stop = self.stop
        if stop is not None and stop():
            raise ProbeStopped("the request was %s while the probes ran" % (
                "cancelled" if getattr(stop, "reason", None) == "cancel" else "stopped at its deadline"))

    def slept(self):
        """The probes released the GIL some other way (a sleep of their own): a new stretch."""
        self.yielded()


_HAVE_GC = 1 << 14  # Py_TPFLAGS_HAVE_GC
_CODE_TYPE = type((lambda: 0).__code__)
# What deep_size walks into, as the compiled walk does only for these exact types (a
# container's tp_traverse lists what iterating it gives; a dict's keys are added to it).
_FOLLOWED = (dict, list, tuple, set, frozenset)
_LEAVES = (str, bytes, int, float, bool, complex, type(None))


class _Diverged(Exception):
    """The compiled walk met an object deep_size would size but not walk into the same way."""


class _PythonSizer(object):
    """``deep_size`` with one seen-set for a section's parts, under the clock."""

    walk = "python"

    def __init__(self, clock):
        self.clock = clock
        self.seen = set()  # type: set

    def mark(self, obj):
        self.seen.add(id(obj))

    def unmark(self, obj):
        self.seen.discard(id(obj))

    def size(self, root):
        # deep_size ticks every 1024 objects of one root; many small roots tick here
        size = _deep_size(root, self.seen, tick=self.clock.tick)
        self.clock.tick()
        return size


class _CompiledSizer(object):
    """``deep_size`` through the census's compiled walk: its bitmap of claimed addresses
    (``census_tallies.Marks``, fresh per section) is the seen-set; a list holding the root is the walk's
    way in (it sizes and marks the root as any referent). Each call does at most
    ``WORK_PER_CALL`` units, the clock ticks between calls.

    Same bytes as deep_size as long as every object met is of an exact type in
    ``_FOLLOWED`` (the walk lists the referents deep_size pushes: a container's items, a
    dict's keys and values) or has no referents for the walk (a type neither GC-capable nor
    a heap type, nor a code object, whose members the walk reads). The walk asks for a type's
    tally slot the first time it meets it (``new_slot``): any other type raises _Diverged
    there, before the walk has looked inside one such object, and the caller sizes the
    section again in Python. A leaf the walk counts without marking (held by its container
    alone) cannot be met again: the same count as deep_size's seen-set. ``limit`` bounds the
    objects per part as deep_size's (checked between calls)."""

    walk = "compiled"

    def __init__(self, clock, claim, limit=5000000):
        self.clock = clock
        self.claim = claim
        self.limit = limit
        self.marks = Marks()  # the walk's bitmap (its ``regions``): this section's seen-set
        self.keys = list(_FOLLOWED + _LEAVES)  # keeps the types alive: their ids stay theirs
        self.index = {id(tp): slot for slot, tp in enumerate(self.keys)}
        self.counts = array.array("q", [0] * len(self.keys))
        self.sizes = array.array("q", [0] * len(self.keys))

    def new_slot(self, tp):
        if type_flags(tp) & (_HAVE_GC | HEAPTYPE) or tp is _CODE_TYPE:
            raise _Diverged(type.__dict__["__name__"].__get__(tp, type))
        slot = len(self.keys)
        self.keys.append(tp)
        self.index[id(tp)] = slot
        self.counts.append(0)
        self.sizes.append(0)
        return slot

    def mark(self, obj):
        self.marks.add(id(obj))

    def unmark(self, obj):
        self.marks.discard(id(obj))

    def size(self, root):
        holder = [root]
        stack = [holder]  # type: list
        pending = []  # type: list
        claim, tick = self.claim, self.clock.tick
        regions, index, new_slot, counts, sizes = self.marks.regions, self.index, self.new_slot, self.counts, self.sizes
        objects = total = 0
        try:
            while (stack or pending) and objects < self.limit:
                added, nbytes = claim(stack, pending, regions, index, new_slot, counts, sizes, WORK_PER_CALL)
                objects += added
                total += nbytes
                tick()
        finally:
            del stack[:], pending[:]
            holder[0] = None
        return total


def _sizer(clock, compiled):
    claim = getattr(_walk, "claim", None) if compiled else None
    return _CompiledSizer(clock, claim) if claim is not None else _PythonSizer(clock)


def own_attr(obj, name):
    """An instance attribute from its ``__dict__`` only (no descriptors, no getattr)."""
    d = instance_dict(obj)
    return dict.get(d, name) if d is not None else None


def _base64_chars(root, limit=200000, tick=None):
    total = 0
    stack = [root]
    steps = 0
    while stack and steps < limit:
        obj = stack.pop()
        steps += 1
        if tick is not None and not steps & 0x3FF:
            tick()
        if type(obj) is str:
            at = obj.find(_BASE64_MARK)
            if at >= 0:
                total += len(obj) - at - len(_BASE64_MARK)
        elif issubclass(type(obj), dict):
            stack.extend(dict.values(obj))
        elif issubclass(type(obj), (list, tuple)):
            stack.extend(builtin_iter(obj))  # not its subclass's __iter__
    return total


def find_runtimes():
    found = []
    for modname in RUNTIME_MODULES:
        module = sys.modules.get(modname)
        if module is None:
            continue
        registry = own_attr(module, "_RUNTIME_REGISTRY")
        data = own_attr(registry, "data") if registry is not None else None
        if type(data) is not dict:
            continue
        for ref in gc.get_referents(data):
            try:
                runtime = ref()
            except TypeError:
                continue
            if runtime is not None and type(own_attr(runtime, "trajectories")) is dict:
                found.append((modname, runtime))
    return found


def _live_trajectory_ids(samples=3, pause=0.002, clock=None):
    """trajectory_ids of rollout states that a live asyncio task's coroutines still hold.

    The coroutine chain the main thread is executing at the instant we look shows no locals
    (a running frame's stack is not traversable), so we look a few times, letting the loop
    move on in between, and take the union.
    """
    ids = set()  # type: set
    for i in range(samples):
        if i:
            time.sleep(pause)
            if clock is not None:
                clock.slept()
        ids |= _live_trajectory_ids_once(clock.tick if clock is not None else None)
    return ids


# Before 3.11 a coroutine's referents are its frame object, not the frame's locals.
_LOCALS_IN_FRAME = sys.version_info < (3, 11)
_FRAME_TYPE = type(sys._getframe())


def _live_trajectory_ids_once(tick=None):
    ids = set()  # type: set

    def note_state(value):
        if issubclass(type(value), dict) and dict.__contains__(value, "trajectory_id"):
            tid = dict.get(value, "trajectory_id")
            if tid is not None:
                ids.add(plain_text(tid))

    for n, task in enumerate(live_tasks()):
        if tick is not None and not n & 63:
            tick()
        for coro in await_chain(task):
            held = gc.get_referents(coro)
            if _LOCALS_IN_FRAME:
                # 3.10: a coroutine lists its frame object, whose referents are its locals
                # (a running frame's value stack is not listed: f_stackdepth is -1 then)
                held = [r for h in held for r in (gc.get_referents(h) if type(h) is _FRAME_TYPE else (h,))]
            for local in held:
                note_state(local)
                entries = builtin_iter(local) if issubclass(type(local), (list, tuple)) else None
                if entries is not None and (builtin_length(local) or 0) < 10000:
                    for item in entries:
                        note_state(item)
                entries = None
    return ids


def _message(step):
    """The ``response["message"]`` dict a trajectory step stores, or None."""
    response = dict.get(step, "response") if issubclass(type(step), dict) else None
    message = dict.get(response, "message") if response is not None and issubclass(type(response), dict) else None
    return message if issubclass(type(message), dict) else None


def _is_bloated(message):
    """More than the steps fix's truncation sidecar."""
    tokens = dict.get(message, "tokens")
    # (str keys only: a set of any other would call its __hash__)
    token_keys = ({k for k in list(dict.keys(tokens)) if type(k) is str}
                  if tokens is not None and issubclass(type(tokens), dict) else set())
    message_keys = {k for k in list(dict.keys(message)) if type(k) is str}
    return not (len(message_keys) == dict.__len__(message) and message_keys <= SIDECAR_MESSAGE_KEYS
                and token_keys <= SIDECAR_TOKEN_KEYS)


def find_servers(runtimes):
    seen = set()
    out = []
    for _mod, runtime in runtimes:
        harness = own_attr(runtime, "harness")
        endpoint = own_attr(harness, "endpoint") if harness is not None else None
        server = own_attr(endpoint, "server") if endpoint is not None else None
        if server is not None and id(server) not in seen and type(own_attr(server, "intercepts")) is dict:
            seen.add(id(server))
            out.append(server)
    return out


def _size_registry(unique, messages, sizer):
    """The registry's and the steps' bytes, with one seen-set (``sizer``) for both.

    Bloated messages are what the steps fix drops. Their bytes are those reachable only
    through them: a first pass sizes everything else (the messages pre-marked, so the walk
    stops there), a second pass the messages with what is left unseen."""
    out = {"retained_bytes": 0, "finished_bytes": 0, "redundant_bytes": 0, "sidecar_bytes": 0}
    for message, _finished, _bloated in messages:
        sizer.mark(message)
    for step_list, finished in unique:
        size = sizer.size(step_list)
        out["retained_bytes"] += size
        if finished:
            out["finished_bytes"] += size
    for message, _finished, _bloated in messages:
        sizer.unmark(message)
    for message, finished, bloated in messages:
        size = sizer.size(message)
        out["retained_bytes"] += size
        if finished:
            out["finished_bytes"] += size
        out["redundant_bytes" if bloated else "sidecar_bytes"] += size
    return out


def _size_bodies(entries, sizer):
    """Per intercept (in order) its body's bytes, with one seen-set for all of them."""
    out = []
    for intercept in entries:
        body = 0
        for field in BODY_FIELDS:
            value = dict.get(intercept, field)
            if value is not None:
                body += sizer.size(value)
        out.append(body)
    return out


def _sized(measure, clock, compiled, walks):
    """``measure(sizer)`` through the compiled walk, or in Python where it cannot be used or
    met data it would walk differently (_Diverged): ``walks`` gets which one answered."""
    sizer = _sizer(clock, compiled)
    if sizer.walk == "compiled":
        try:
            out = measure(sizer)
            walks.append(sizer.walk)
            return out
        except _Diverged:
            pass
    walks.append("python")
    return measure(_PythonSizer(clock))


def in_flight_before():
    """The trajectory_ids in flight now, for a request to pass to :func:`run_all` when the
    walk its owners come from runs before the probes (runner.py): on a busy worker rollouts
    finish in between, and an entry finished by the probes' time but in flight at the
    walk's is held by its task in the walk's graph; it is counted in flight. Never raises."""
    try:
        return _live_trajectory_ids()
    except Exception:
        return set()


def registered_before():
    """The trajectory_ids registered now, for a request to pass to :func:`run_all` with
    ``in_flight_before()``: an entry registered after the walk its owners come from began is
    in no owner of that walk; finished by the probes' time, it is counted in flight, not
    finished (with the graph walked before the census, seconds pass in between). None when
    there is no runtime or it cannot be read. Never raises."""
    try:
        runtimes = find_runtimes()
        if not runtimes:
            return None
        out = set()  # type: set
        for _mod, runtime in runtimes:
            out.update(plain_text(k) for k in list(dict.keys(own_attr(runtime, "trajectories"))))
        return out
    except Exception:
        return None


def verifiers_probe(clock=None, compiled=True, in_flight=(), registered=None):
    """The verifiers facts (module docstring). ``clock``: the duty cycle and cancel check
    (a default budget without a stop when None); ``compiled``: size through the compiled walk where it
    loads (False: deep_size in Python, as a request's ``walker: python``); ``in_flight`` and
    ``registered``: what was in flight and registered as the owners' walk began."""
    clock = clock if clock is not None else _Clock()
    runtimes = find_runtimes()
    if not runtimes:
        return {"skipped": "no verifiers v1 runtime in this process (no live Runtime in _RUNTIME_REGISTRY)"}
    # Registry first, live rollouts second: an entry registered in between is not in our
    # copy, and one still running when we look at the tasks is seen as live.
    # read_at (the target's clock, as the snapshot's taken_at): the owners table counted the
    # same dicts earlier in the request, and a busy worker's counts move in between
    registry_read_at = time.time()
    registries = [dict_pairs(own_attr(runtime, "trajectories")) for _mod, runtime in runtimes]
    live_ids = _live_trajectory_ids(clock=clock) | set(in_flight)
    registry = {  # type: dict
        "runtimes": len(runtimes),
        "modules": sorted({m for m, _ in runtimes}),
        "entries": 0,
        "finished_entries": 0,
        "inflight_entries": 0,
        "retained_bytes": 0,
        "finished_bytes": 0,
        "finished_steps": 0,
        "read_at": round(registry_read_at, 3),
    }
    steps = {"steps": 0, "bloated_steps": 0, "redundant_bytes": 0, "sidecar_steps": 0, "sidecar_bytes": 0}
    # (trajectory list, finished?) once per list: judge states alias their parent's list.
    unique = []
    seen_lists = set()  # type: set
    for items in registries:
        registry["entries"] += len(items)
        for tid, trajectory in items:
            finished = plain_text(tid) not in live_ids and (registered is None or plain_text(tid) in registered)
            registry["finished_entries" if finished else "inflight_entries"] += 1
            if issubclass(type(trajectory), list) and id(trajectory) not in seen_lists:
                seen_lists.add(id(trajectory))
                unique.append((list(trajectory), finished))
    messages = []  # (message, finished, bloated)
    for step_list, finished in unique:
        steps["steps"] += len(step_list)
        if finished:
            registry["finished_steps"] += len(step_list)
        for n, step in enumerate(step_list):
            if not n & 1023:
                clock.tick()
            message = _message(step)
            if message is not None:
                bloated = _is_bloated(message)
                messages.append((message, finished, bloated))
                steps["bloated_steps" if bloated else "sidecar_steps"] += 1
    walks = []  # type: list
    sized = _sized(lambda sizer: _size_registry(unique, messages, sizer), clock, compiled, walks)
    for key in ("retained_bytes", "finished_bytes"):
        registry[key] = sized[key]
    for key in ("redundant_bytes", "sidecar_bytes"):
        steps[key] = sized[key]
    intercepts = {"servers": 0, "entries": 0, "delivered": 0, "pending": 0, "body_bytes": 0,
                  "delivered_body_bytes": 0, "base64_bytes": 0}  # type: dict
    servers = find_servers(runtimes)
    intercepts["servers"] = len(servers)
    intercepts["read_at"] = round(time.time(), 3)
    held = []  # (intercept, delivered)
    for server in servers:
        for n, intercept in enumerate(list(dict.values(own_attr(server, "intercepts")))):
            if not n & 255:
                clock.tick()
            if not issubclass(type(intercept), dict):
                continue
            future = dict.get(intercept, "response_future")
            try:
                delivered = bool(future is not None and future.done() and not future.cancelled())
            except Exception:
                delivered = False
            held.append((intercept, delivered))
    bodies = _sized(lambda sizer: _size_bodies([i for i, _d in held], sizer), clock, compiled, walks)
    for i, (intercept, delivered) in enumerate(held):
        body = bodies[i]
        if not i & 63:
            clock.tick()
        intercepts["entries"] += 1
        b64 = 0
        for field in BODY_FIELDS:
            value = dict.get(intercept, field)
            if value is not None:
                b64 += _base64_chars(value, tick=clock.tick)
        intercepts["body_bytes"] += body
        intercepts["base64_bytes"] += b64
        if delivered:
            intercepts["delivered"] += 1
            intercepts["delivered_body_bytes"] += body
        else:
            intercepts["pending"] += 1
    # which walk sized the registry and the intercept bodies: "compiled" or "python"; the
    # longest the probes ran between two yields of the GIL (CPU ms) and how often they yielded
    pace = {"max_hold_ms": round(clock.max_held * 1000.0, 2), "yields": clock.yields}  # type: wire.ProbePace
    out = {"registry": registry, "steps": steps, "intercepts": intercepts, "sizing": walks,
           "pace": pace}  # type: wire.VerifiersProbe
    return out


def registry_counts():
    """Entries and finished entries of the trajectory registries, without sizing anything:
    cheap enough to read at the instant a fix is applied."""
    runtimes = find_runtimes()
    registries = [list(dict.keys(own_attr(runtime, "trajectories"))) for _mod, runtime in runtimes]
    live_ids = _live_trajectory_ids()
    keys = [plain_text(k) for keys in registries for k in keys]
    counts = {"entries": len(keys),
              "finished_entries": sum(1 for k in keys if k not in live_ids)}  # type: wire.RegistryCounts
    return counts


# patches/_state.STATE_MODULE (not imported: the patches package imports this module)
_PATCH_STATE_MODULE = "_leakhound_state"


def patches_probe(clock=None, compiled=True, in_flight=(), registered=None):
    """The fixes leakhound applied in this process: each one's name, the functions it
    replaced, when (Unix time, read here) and by whom (as the applying CLI said it). Fixes
    applied by a leakhound that recorded neither have ``applied_at`` None."""
    state = sys.modules.get(_PATCH_STATE_MODULE)
    fixes = getattr(state, "fixes", None)
    applied = []  # type: list[wire.AppliedEntry]
    if type(fixes) is dict:
        for name, entry in sorted(fixes.items()):
            if type(entry) is not dict:
                continue
            by = entry.get("applied_by")
            functions = entry.get("functions", entry.get("targets"))
            applied.append({
                "fix": str(name),
                "functions": [str(f) for f in functions] if type(functions) is list else [],
                "applied_at": entry.get("applied_at"),
                "applied_by": dict(by) if type(by) is dict else {},
            })
    out = {"applied": applied}  # type: wire.PatchesProbe
    return out


# patches first: it is cheap, and a probe stopped on its budget ends those after it.
PROBES = {"patches": patches_probe, "verifiers": verifiers_probe}


def run_all(stop=None, max_pause_ms=None, compiled=True, in_flight=(), registered=None):
    """Every probe's facts. ``stop``: the request's cancellation point (runner._Stop: True
    once cancelled or past its deadline); ``max_pause_ms``: the request's pause budget, kept
    as the census keeps it (a yield after at most half of it, and at least every
    DEFAULT_MAX_HOLD); ``compiled``: False sizes in Python (a request's ``walker: python``);
    ``in_flight``: trajectory_ids seen in flight earlier in the request (in_flight_before),
    ``registered``: the ones registered then (registered_before). A stopped probe ends
    them all: ``stop.check("probes")`` raises where ``stop`` has one
    (runner._Stop: the request answers Cancelled in phase ``probes``); else the probe answers
    ``{"skipped": reason}`` and the probes after it do not run."""
    max_hold = DEFAULT_MAX_HOLD
    if type(max_pause_ms) in (int, float) and max_pause_ms > 0:
        max_hold = min(max_hold, max_pause_ms / 2000.0)
    clock = _Clock(stop, max_hold)
    out = {}  # type: wire.Probes
    for name, probe in PROBES.items():
        try:
            out[name] = probe(clock=clock, compiled=compiled, in_flight=in_flight, registered=registered)
        except ProbeStopped as exc:
            check = getattr(stop, "check", None)
            if check is not None:
                check("probes")
            out[name] = {"skipped": str(exc)}
            break
        except Exception as exc:  # a probe that cannot run is a result, not a failure
            out[name] = {"skipped": "probe failed: %s: %s" % (type(exc).__name__, exc)}
    return out
