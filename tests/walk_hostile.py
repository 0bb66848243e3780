"""A hostile workload for the census walk: ``python -m tests.walk_hostile [--so PATH]``.

Runs ``ClaimWalk.claim_tree`` with the compiled walk and with the pure-Python loop over
structures built to break it, each at several per-call budgets (1, 2, 7 and the default, so
big containers are split and resumed through ``pending``), and compares the two loops'
numbers where the structure cannot change under the walk. Exits 1 on any difference or
unexpected error. Hostile means: ``__sizeof__`` that raises, lies about its size or mutates
containers (the census must not run it), ``__class__`` properties that lie or raise, dict
subclasses whose methods raise, str/bytes subclasses, shared leaves, cycles, deep nesting,
containers bigger than one call's budget, dicts with non-str keys split mid-way, ``limit``
<= 0, and Python code that does run mid-walk mutating containers, switching threads, or
tearing down the census's own bitmap while a background thread churns shared containers:
destructors the compiled walk runs itself, inside claim(), when it drops the last reference
to what a big list held (the list is emptied between two calls), and a metaclass ``__hash__``
(run wherever a type is hashed; the type tallies look types up by id).

``--stable`` makes the compiled walk use the stable ABI only, as it does on an interpreter
that does not export the private helpers it prefers. ``--so`` loads another build of
``_census_walk.c`` (tests/unit/test_census_walk.py runs this under
AddressSanitizer with an ASan build: LD_PRELOAD=libasan.so, PYTHONMALLOC=malloc so every
object is a malloc block ASan watches).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import importlib.machinery
import importlib.util
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from leakhound.payload import census, census_walk
from leakhound.payload import sizes as payload_sizes
from leakhound.payload.objects import type_name

PER_CALLS = (1, 2, 7, census._WORK_PER_CALL)
SIZEOF_CALLS = [0]  # a __sizeof__ written in Python must never run
failures: list[str] = []
ONLY = [""]
COMPILED_ONLY = [False]


def _wall_off_code(walk: census_walk.ClaimWalk) -> None:
    """Claim modules, their dicts and every class up front (as census_roots.walk_from_roots does), so
    a walk stays inside the structure it was given."""
    for module in list(sys.modules.values()):
        walk.claimed.add(id(module))
        walk.claimed.add(id(vars(module)))
    todo: list[Any] = [object]
    while todo:
        cls = todo.pop()
        if id(cls) in walk.claimed:
            continue
        walk.claimed.add(id(cls))
        walk.claimed.add(id(type.__dict__["__dict__"].__get__(cls, type)))
        try:
            todo.extend(type.__subclasses__(cls))
        except TypeError:
            continue


def walk(root: Any, compiled: bool, per_call: int) -> tuple[int, int, dict[str, tuple[int, int]]]:
    census._WORK_PER_CALL = per_call
    w = census.Census(timeout=60, compiled=compiled, progress=_between_calls).walk
    assert w.walker == ("compiled" if compiled else "python")
    _wall_off_code(w)
    w.claim_tree(w.owner_slot("root", root), root)
    t = w.types
    return w.total_objects, w.total_bytes, {type_name(tp): (t.counts[i], t.bytes[i])
                                           for i, tp in enumerate(t.keys)}


def case(name: str, make: Callable[[], Any], *, compare: bool = True,
         per_calls: tuple[int, ...] = PER_CALLS) -> None:
    if ONLY[0] not in name:
        return
    started = time.perf_counter()
    default = census._WORK_PER_CALL
    try:
        for per_call in per_calls:
            results = {}
            for compiled in (True,) if COMPILED_ONLY[0] else (False, True):
                root = make()
                try:
                    results[compiled] = ("ok", walk(root, compiled, per_call))
                except Exception as exc:  # noqa: PERF203 - a failure is what we look for
                    results[compiled] = ("raised", repr(exc)[:200])
                del root
            for compiled, (status, detail) in results.items():
                if status != "ok":
                    failures.append(f"{name} per_call={per_call} compiled={compiled}: {detail}")
            if compare and not COMPILED_ONLY[0] and results[False] != results[True]:
                failures.append(f"{name} per_call={per_call}: python {str(results[False])[:300]}"
                                f" != compiled {str(results[True])[:300]}")
    finally:
        census._WORK_PER_CALL = default
        print(f"{name}: {time.perf_counter() - started:.1f}s", file=sys.stderr)


# -- __sizeof__ oddities: never run; the object counts object.__sizeof__(obj) ----------------
class Raises:
    def __init__(self, exc: type[BaseException]) -> None:
        self.exc = exc

    def __sizeof__(self) -> int:
        SIZEOF_CALLS[0] += 1
        raise self.exc()


class Returns:
    def __init__(self, value: Any) -> None:
        self.value = value

    def __sizeof__(self) -> Any:
        SIZEOF_CALLS[0] += 1
        return self.value


class Mutates:
    def __init__(self, target: list[Any]) -> None:
        self.target = target

    def __sizeof__(self) -> int:
        SIZEOF_CALLS[0] += 1
        self.target.clear()
        return 64


class LiesDict:
    @property  # type: ignore[misc]
    def __class__(self) -> type:  # noqa: F811 - the point: isinstance(x, dict) is True
        return dict


class ClassRaises:
    @property  # type: ignore[misc]
    def __class__(self) -> type:  # noqa: F811
        raise RuntimeError("no class")


class BrokenDict(dict):  # type: ignore[type-arg]
    def keys(self) -> Any:
        raise RuntimeError("keys")

    def __iter__(self) -> Any:
        raise RuntimeError("iter")

    def items(self) -> Any:
        raise RuntimeError("items")


class Text(str):
    pass


class Blob(bytes):
    pass


def odd_sizes() -> Any:
    values = [2**62, 2**63 - 1, 2**64, -1, 1.5, "x", None, True]
    parent: list[Any] = [[i, str(i)] for i in range(30)]
    parent.append(Mutates(parent))
    return [Raises(ValueError), Raises(MemoryError), Raises(TypeError),
            *[Returns(v) for v in values], parent]


def class_lies() -> Any:
    return [LiesDict(), {"in": LiesDict()}, ClassRaises(), [ClassRaises()]]


def subclasses() -> Any:
    text = Text("hello " * 10)
    text.extra = ["x" * 100, {"k": 1.5}]  # type: ignore[attr-defined]
    blob = Blob(b"\0" * 100)
    blob.extra = [b"y" * 200]  # type: ignore[attr-defined]
    broken = [BrokenDict({i: [i], f"s{i}": (i,)}) for i in range(40)]
    return [text, blob, text, blob, [text], broken]


def shapes() -> Any:
    shared = "shared-" * 20
    cycle: list[Any] = []
    for i in range(100):
        a: dict[Any, Any] = {"i": i}
        b = [a]
        a["b"] = b
        a[i] = (b, a)
        cycle.append(a)
    cycle.append(cycle)
    deep: list[Any] = []
    for i in range(20000):
        deep = [deep, i]
    return {
        "leaves": [[None, True, False, 0, 1, 255, -5, "a", "", shared] * 50, (None,) * 10],
        "cycle": cycle,
        "deep": deep,
        "big": [(f"item-{i}", i * 1000003, float(i)) for i in range(5000)],
        "keys": [{(i, i): i * 1000003 for i in range(500)}, {i * 1000003: "v" for i in range(500)}],
        "wide": [tuple(range(3000)), frozenset(range(-2000, 2000)), {i: str(i) for i in range(3000)}],
    }


class WideList(list):  # type: ignore[type-arg]
    pass


class WideDict(dict):  # type: ignore[type-arg]
    pass


class WideSet(set):  # type: ignore[type-arg]
    pass


class WideTuple(tuple):  # type: ignore[type-arg]
    pass


def _cached_row(i: int) -> tuple[str, int]:
    return (f"cached-{i}", i + 1_000_000)


def wide() -> Any:
    # Containers wider than a slice of _census_walk.c (SLICE entries), walked a slice at a time with
    # what each slice pushed walked in between: big ones nested in big ones, shared entries
    # met from several slices, wide containers that are not read in place (a deque, a list
    # subclass: their tp_traverse, held in a frame) and a dict subclass whose non-str keys are
    # listed twice (its tp_traverse, then its keys).
    shared = [("shared", i) for i in range(50)]
    inner = [[(j, "x") if j % 7 else shared[j % 50] for j in range(20000)] for _ in range(3)]
    outer: list[Any] = [(i,) for i in range(17000)] + inner + [inner, shared]
    keyed = WideDict({i * 1000003: [i] for i in range(9000)})
    keyed["str"] = shared
    # a list, set or tuple subclass is read by its items after what it holds itself (its
    # __dict__); an lru_cache's traverse (three references an entry) is too long to read whole
    rows = WideList(([i], str(i)) for i in range(17000))
    rows.note = [shared, "row note"]  # type: ignore[attr-defined]
    tags = WideSet(f"tag-{i}" for i in range(17000))
    tags.note = {"k": [1, 2]}  # type: ignore[attr-defined]
    import functools

    cached = functools.lru_cache(maxsize=9000)(_cached_row)
    for i in range(8000):
        cached(i)
    return {
        "outer": outer,
        "tuple": tuple(outer[:17000]),
        "deque": collections.deque([[i] for i in range(18000)]),
        "subclass": rows,
        "set_subclass": tags,
        "tuple_subclass": WideTuple((f"t{i}", [i]) for i in range(17000)),
        "lru": cached,
        "keyed": keyed,
        "set": {frozenset((i, -i)) for i in range(17000)},
        "dict": {i: (i, shared) for i in range(17000)},
    }


class Plain:
    def __init__(self, i: int) -> None:
        self.i = i
        self.name = f"plain-{i}"


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self, i: int) -> None:
        self.a = i
        self.b = [i]


class WithWeak(Slotted):
    __slots__ = ("__weakref__",)


def sizes() -> Any:
    # The compiled walk learns each type's pre-header (what sys.getsizeof adds to __sizeof__:
    # the GC header, 3.11+'s managed-dict pre-header) from one object and reuses it: every
    # kind of object here must still get exactly sys.getsizeof's size. Instances whose dict
    # was materialised (3.12+: values inline until __dict__ is read) beside ones whose was not.
    plain = [Plain(i) for i in range(50)]
    for p in plain[::2]:
        p.__dict__["extra"] = p.i  # materialises the dict
    def f() -> None: ...
    return {
        "plain": plain, "slotted": [Slotted(i) for i in range(50)], "weak": [WithWeak(i) for i in range(20)],
        "ints": [10**i for i in range(0, 400, 7)], "floats": [i / 7 for i in range(50)],
        "texts": ["é" * i for i in range(30)] + ["\U0001f600" * i for i in range(30)],
        "containers": [bytearray(i) for i in range(30)] + [set(range(i)) for i in range(30)],
        "callables": [f, plain[0].__init__, len, [].append, staticmethod(f), property(f)],
        "ranges": [range(i) for i in range(10)] + [slice(i) for i in range(10)] + [memoryview(b"x" * 9)],
    }


def mock_objects() -> Any:
    from unittest import mock

    # A mock's __sizeof__ records the call and makes child mocks: run, it grows without end.
    return [mock.MagicMock(), mock.MagicMock(spec=dict), mock.NonCallableMagicMock()]


# -- Python code that does run mid-walk: a metaclass __hash__ (where a type lookup hashes the
# type), and a destructor run when the walk lets go of the last reference to an object -----
SHARED: dict[Any, Any] = {"rows": [[i] for i in range(500)]}
TRIGGERS: list[list[Any]] = []
IN_WALK = [0]  # destructors the compiled walk itself ran, inside a claim() call
TRIGGERS_MADE = [0]


class Meddles(type):
    action: Callable[[], None] = staticmethod(lambda: None)

    def __hash__(cls) -> int:
        Meddles.action()
        return id(cls) >> 4

    def __eq__(cls, other: object) -> bool:
        return cls is other


class Meddler(metaclass=Meddles):
    pass


class Trigger:
    """Runs the action when freed. Held in a list bigger than one call's slice, which is
    emptied between two calls (_between_calls): the entries of the slice the walk holds
    meanwhile (``pending``, its stack) then have their last reference in the walk, which
    frees them, and runs this, inside claim()."""

    def __del__(self) -> None:
        if sys._getframe(1).f_code.co_name == "_claim_compiled":
            IN_WALK[0] += 1
        Meddles.action()


def _between_calls(phase: str, done: int) -> None:
    # The census's progress callback: it runs between two claim() calls. Once the walk
    # holds entries of the list besides the list itself (a slice in ``pending``, or what a
    # slice pushed on its stack).
    for triggers in TRIGGERS:
        if any(sys.getrefcount(t) > 3 for t in triggers):  # the list, ``t``, the argument
            triggers.clear()


def _churn(stop: threading.Event) -> None:
    while not stop.is_set():
        rows = SHARED["rows"]
        rows.append([len(rows), "z" * 20])
        if len(rows) > 3000:
            del rows[:1500]
        SHARED[len(rows) % 97] = [1, 2, (3, "q")]
        SHARED.pop((len(rows) + 7) % 97, None)


SABOTAGES = [0]


def _sabotage() -> None:
    # Reaches into the running walk's frame and tears its bitmap down (a few times: without
    # marks the walk starts over): the compiled walk holds the regions it caches, so nothing
    # it points at goes away.
    frame = sys._getframe(2)
    if frame.f_code.co_name != "_claim_compiled":
        return
    SABOTAGES[0] += 1
    # A few times only: each teardown unmarks everything and the walk starts over.
    if SABOTAGES[0] % 3 != 1 or SABOTAGES[0] > 60:
        return
    regions = frame.f_locals.get("regions")
    if type(regions) is dict:
        for region in regions.values():
            with contextlib.suppress(BufferError):  # held by the compiled walk: cannot shrink
                region.clear()
        regions.clear()


def meddling(action: Callable[[], None]) -> Callable[[], Any]:
    def make() -> Any:
        Meddles.action = staticmethod(action)
        SABOTAGES[0] = 0
        triggers = [Trigger() for _ in range(6000)]  # > _walk.h's BIG_CONTAINER: read in slices
        TRIGGERS[:] = [triggers]
        TRIGGERS_MADE[0] += 1
        return [SHARED, [Meddler() for _ in range(30)], {"big": [[i, str(i)] for i in range(20000)]},
                SHARED["rows"], triggers]
    return make


def mutate_shared() -> None:
    SHARED["rows"][:100] = [[j, "m" * j] for j in range(50)]
    SHARED.update({("n", j): [j] for j in range(20)})


SWITCHES = [0]


def switch_threads() -> None:
    # Every 8th call: a thread started per call made this case 30 of the run's 37 s (and
    # several minutes under ASan); hundreds of switches mid-walk remain.
    SWITCHES[0] += 1
    if SWITCHES[0] % 8:
        return
    time.sleep(0.0002)
    helper = threading.Thread(target=lambda: [SHARED.setdefault(i, [i]) for i in range(50)])
    helper.start()
    helper.join()


def limits(claim: Any) -> None:
    """limit <= 0 still makes progress and never drops what pending holds."""
    for limit in (0, -1):
        w = census.Census(timeout=60).walk
        stack: list[Any] = [[list(range(10)), [1, 2]]]
        pending: list[Any] = []
        done = 0
        for _ in range(1000):
            if not stack and not pending:
                break
            done += claim(stack, pending, w.claimed.regions, w.types.index, w.types.slot,
                          w.types.counts, w.types.bytes, limit)[0]
        if stack or pending or done != 12:  # 2 lists, 10 ints (1 and 2 are in both)
            failures.append(f"limit={limit}: {done} objects, stack {stack}, pending {pending}")


def load_walk(path: str) -> Any:
    """Another build of _walk.abi3.so (an ASan one), loaded as ``_walk`` from ``path``."""
    loader = importlib.machinery.ExtensionFileLoader("_walk", path)
    spec = importlib.util.spec_from_file_location("_walk", path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    payload_sizes.configure_compiled(module)  # as the payload's own (sizes.py) at its import
    return module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--so", help="another build of _walk.abi3.so to load instead of the package's")
    parser.add_argument("--only", help="run only the cases whose name contains this")
    parser.add_argument("--stable", action="store_true",
                        help="the compiled walk on the stable ABI only (not the interpreter's private helpers)")
    parser.add_argument("--compiled-only", action="store_true",
                        help="the compiled walk alone, not compared (under AddressSanitizer, where the C walk's "
                             "memory is the point: the Python loop was 40%% of the run's CPU)")
    args = parser.parse_args(argv)
    ONLY[0] = args.only or ""
    COMPILED_ONLY[0] = args.compiled_only
    if args.so:
        census._walk = load_walk(args.so)
    if census._walk is None:
        print("the C walk is not built here", file=sys.stderr)
        return 2
    if args.stable:
        census._walk.use_private(False)
    print(f"Python {sys.version.split()[0]}, walk {census._walk.__file__} ({census._walk.mode})", file=sys.stderr)
    case("odd __sizeof__", odd_sizes)
    case("lying __class__", class_lies)
    case("subclasses", subclasses)
    case("shapes", shapes, per_calls=(2, 7, census._WORK_PER_CALL))
    case("sizes", sizes)
    case("wide containers", wide, per_calls=(2, 7, 1000, census._WORK_PER_CALL))
    case("mocks", mock_objects, compare=False, per_calls=(census._WORK_PER_CALL,))
    if SIZEOF_CALLS[0]:
        failures.append(f"a __sizeof__ written in Python ran {SIZEOF_CALLS[0]} times")
    limits(census._walk.claim)
    stop = threading.Event()
    churn = threading.Thread(target=_churn, args=(stop,), daemon=True)
    churn.start()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        for name, action in (("mutate", mutate_shared), ("threads", switch_threads),
                             ("sabotage", _sabotage)):
            case(f"metaclass __hash__: {name}", meddling(action), compare=False, per_calls=(7, 20000))
    finally:
        sys.setswitchinterval(interval)
        Meddles.action = staticmethod(lambda: None)
        stop.set()
        churn.join()
        TRIGGERS.clear()
    print(f"destructors run inside the compiled walk: {IN_WALK[0]}", file=sys.stderr)
    if IN_WALK[0] == 0 and TRIGGERS_MADE[0]:
        failures.append("no destructor ran inside the compiled walk: the mid-walk cases tested nothing")
    for failure in failures:
        print("FAIL", failure)
    print("ok" if not failures else f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
