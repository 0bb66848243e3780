"""The dominator pass (C and pure Python) against a brute-force definition, the owners it
finds on small graphs, and the .heapsnapshot writer read back by a strict reader."""

from __future__ import annotations

import array
import collections
import io
import json
import random

import pytest

from leakhound.analysis import dominators as dom
from leakhound.payload import graph as graph_payload
from leakhound.render import heapsnapshot


def make_graph(n: int, edges: list[tuple[int, int]], sizes: list[int] | None = None,
               roots: list[tuple[int, str, str, int]] | None = None,
               labels: list[str] | None = None, lab: list[int] | None = None,
               type_names: list[str] | None = None, types: list[int] | None = None) -> dom.ObjectGraph:
    return dom.ObjectGraph(
        nodes=n,
        sizes=array.array("q", sizes or [0] + [10] * (n - 1)),
        types=array.array("i", types or [0] * n),
        ids=array.array("q", range(n)),
        lengths=array.array("i", [0] * n),
        src=array.array("i", [s for s, _ in edges]),
        dst=array.array("i", [d for _, d in edges]),
        lab=array.array("i", lab or [-1] * len(edges)),
        type_names=type_names or ["object"],
        labels=labels or [],
        roots=roots or [(d, f"root{d}", "module", 1) for s, d in edges if s == 0],
    )


def brute_force(n: int, edges: list[tuple[int, int]], sizes: list[int]) -> tuple[list[int], list[int]]:
    """Retained size by definition: what becomes unreachable from 0 when the node is removed."""
    succ: dict[int, list[int]] = {}
    for s, d in edges:
        succ.setdefault(s, []).append(d)

    def reach(blocked: int) -> set[int]:
        seen = {0} if blocked != 0 else set()
        stack = list(seen)
        while stack:
            for w in succ.get(stack.pop(), []):
                if w not in seen and w != blocked:
                    seen.add(w)
                    stack.append(w)
        return seen

    everything = reach(-1)
    retained = [0] * n
    dominated_by: dict[int, set[int]] = {}
    for v in range(n):
        if v not in everything:
            continue
        gone = everything - reach(v) if v else everything
        dominated_by[v] = gone
        retained[v] = sum(sizes[x] for x in gone)
    idom = [-1] * n
    for v in everything:
        if v == 0:
            continue
        # the immediate dominator: the strict dominator dominated by all the others
        strict = [d for d, gone in dominated_by.items() if v in gone and d != v]
        idom[v] = max(strict, key=lambda d: len([x for x in strict if d in dominated_by[x]]))
    return idom, retained


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("compiled", [True, False])
def test_dominators_match_the_definition(seed: int, compiled: bool) -> None:
    if compiled and dom._dominators is None:
        pytest.skip("the C dominator pass is not built here")
    rng = random.Random(seed)
    n = rng.randint(2, 40)
    edges = [(0, rng.randrange(1, n)) for _ in range(rng.randint(1, 4))]
    edges += [(rng.randrange(1, n), rng.randrange(1, n)) for _ in range(rng.randint(0, 3 * n))]
    sizes = [0] + [rng.randint(1, 1000) for _ in range(n - 1)]
    tree = dom.dominators(make_graph(n, edges, sizes), compiled=compiled)
    idom, retained = brute_force(n, edges, sizes)
    assert list(tree.retained) == retained
    assert list(tree.idom) == idom


def test_deep_chain_does_not_recurse() -> None:
    """Object graphs have chains millions deep (linked lists): no recursion anywhere."""
    n = 200_001
    edges = [(0, 1)] + [(i, i + 1) for i in range(1, n - 1)] + [(i + 1, i) for i in range(1, n - 1, 7)]
    graph = make_graph(n, edges)
    for compiled in ([True, False] if dom._dominators is not None else [False]):
        tree = dom.dominators(graph, compiled=compiled)
        assert tree.retained[1] == 10 * (n - 1)
        assert tree.idom[n - 1] == n - 2


def callbacks_graph() -> dom.ObjectGraph:
    """issue 10's program: __main__ dict -> CALLBACKS -> [method] -> APP; -> APP -> rows -> 1000 strs."""
    types = ["<root>", "module", "dict", "list", "method", "__main__.App", "str"]
    # 1 module __main__, 2 its dict, 3 CALLBACKS, 4 bound method, 5 APP, 6 APP's dict, 7 rows, 8.. rows' strings
    edges = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (2, 5), (5, 6), (6, 7)]
    n = 8 + 1000
    edges += [(7, i) for i in range(8, n)]
    labels = ["d", "kCALLBACKS", "kAPP", "krows", "a__self__"]
    lab = [-1, 0, 1, -1, 4, 2, 0, 3] + [-1] * 1000
    type_of = [0, 1, 2, 3, 4, 5, 2, 3] + [6] * 1000
    sizes = [0, 72, 1000, 88, 64, 56, 104, 8056] + [100] * 1000
    return make_graph(n, edges, sizes, roots=[(1, "__main__", "module", 0)], labels=labels, lab=lab,
                      type_names=types, types=type_of)


def test_owner_is_the_accumulation_point_not_the_first_reacher() -> None:
    graph = callbacks_graph()
    found = dom.find_owners(graph, top=5)
    first = found.owners[0]
    assert first.path == "__main__.APP.rows"
    assert first.retained_bytes == 8056 + 100 * 1000
    assert all(o.path != "__main__.CALLBACKS" or o.retained_bytes < 1000 for o in found.owners)


def test_a_dominant_owner_does_not_hide_the_rest() -> None:
    # 1 module __main__, 2 its dict, 3 LEAK (85% of the heap), 4 CACHE (8%), 5 module logging,
    # 6 its dict, 7 HANDLERS (5%) and a small leaf of each; 8.. LEAK's items
    types = ["<root>", "module", "dict", "list"]
    edges = [(0, 1), (1, 2), (2, 3), (2, 4), (0, 5), (5, 6), (6, 7)]
    n = 8 + 850
    edges += [(3, i) for i in range(8, n)]
    labels = ["d", "kLEAK", "kCACHE", "kHANDLERS"]
    lab = [-1, 0, 1, 2, -1, 0, 3] + [-1] * 850
    type_of = [0, 1, 2, 3, 3, 1, 2, 3] + [0] * 850
    sizes = [0, 72, 1000, 8000, 80_000, 72, 1000, 50_000] + [1000] * 850
    graph = make_graph(n, edges, sizes, roots=[(1, "__main__", "module", 0), (5, "logging", "module", 0)],
                       labels=labels, lab=lab, type_names=types, types=type_of)
    found = dom.find_owners(graph, top=5)
    assert [(o.path, o.retained_bytes) for o in found.owners[:3]] == [
        ("__main__.LEAK", 8000 + 850_000), ("__main__.CACHE", 80_000), ("logging.HANDLERS", 50_000)]


@pytest.mark.parametrize("container", [True, False])
def test_a_dict_subclass_is_a_collection_not_a_namespace(container: bool) -> None:
    """``class Registry(dict)`` holding 200 MB of entries (folded into its own size) and a 4 MB
    attribute: the payload says its type is a dict subclass (``container_types``), and the
    registry is the owner, not its attribute dict under the registry's name (its entries were
    in no owner)."""
    # 1 module __main__, 2 its dict, 3 WIDE (a Registry, its entries folded in), 4 its __dict__, 5 a bytes
    types = ["<root>", "module", "dict", "__main__.Registry", "bytes"]
    edges = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]
    graph = make_graph(6, edges, [0, 72, 1000, 200_000_000, 104, 4_000_000], roots=[(1, "__main__", "module", 0)],
                       labels=["d", "kWIDE", "anote"], lab=[-1, 0, 1, 0, 2], type_names=types,
                       types=[0, 1, 2, 3, 2, 4])
    if container:
        graph.container_types = frozenset({3})
    owners = [(o.path, o.retained_bytes) for o in dom.find_owners(graph, top=5).owners]
    if container:
        assert owners[0] == ("__main__.WIDE", 200_000_000 + 104 + 4_000_000)
    else:
        # an instance whose own bytes are big (what it alone held, folded into it: a bounded
        # lru_cache's results) is an owner of those, its big parts owners of their own
        assert owners[:2] == [("__main__.WIDE", 200_000_000), ("__main__.WIDE.note", 4_000_000)]


@pytest.mark.parametrize("named", [False, True])
def test_a_c_containers_alike_entries_are_its_not_parts_of_a_namespace(named: bool) -> None:
    """A C object holding 6 alike items through its traverse (3.13's ``queue.SimpleQueue``
    keeps its items in a ring buffer of its own: no list between) is their owner, as a
    collection is: the items were 6 owners of their own, the queue none. Where its edges
    carry names (an instance's attributes) it is a namespace still: each part an owner."""
    # 1 module __main__, 2 its dict, 3 QUEUE (a SimpleQueue), 4..9 items, 10..15 a bytes each
    types = ["<root>", "module", "dict", "_queue.SimpleQueue", "__main__.Job", "bytes"]
    items = list(range(4, 10))
    edges = [(0, 1), (1, 2), (2, 3)] + [(3, k) for k in items] + [(k, k + 6) for k in items]
    labels = ["d", "kQUEUE"] + [f"apart{k}" for k in items] + ["abody"]
    lab = [-1, 0, 1] + [2 + j if named else -1 for j in range(6)] + [len(labels) - 1] * 6
    sizes = [0, 72, 1000, 96] + [56] * 6 + [1_000_000] * 6
    graph = make_graph(16, edges, sizes, roots=[(1, "__main__", "module", 0)], labels=labels, lab=lab,
                       type_names=types, types=[0, 1, 2, 3] + [4] * 6 + [5] * 6)
    owners = [(o.path, o.retained_bytes) for o in dom.find_owners(graph, top=8).owners]
    if named:
        assert sorted(owners) == [(f"__main__.QUEUE.part{k}.body", 1_000_000) for k in items], owners
    else:
        assert owners == [("__main__.QUEUE", 96 + 6 * 1_000_056)], owners


@pytest.mark.parametrize("named", [False, True])
def test_an_object_holding_most_in_small_unnamed_referents_is_their_owner(named: bool) -> None:
    """A tensor summing 300 losses holds each step's saved activations through its autograd
    graph (referents no name labels, each under the listing threshold) and one of them over
    it: it was split as a namespace into that one, and the rest (110 MB) was in no owner.
    It is an owner of its small referents now, the big one an owner of its own. An instance
    whose small parts are attributes (named) is still a namespace of named parts."""
    # 1 module __main__, 2 its dict, 3 TOTAL, 4 a big referent, 5..604 small referents
    types = ["<root>", "module", "dict", "torch.Tensor"]
    small = list(range(5, 605))
    edges = [(0, 1), (1, 2), (2, 3), (3, 4)] + [(3, k) for k in small]
    labels = ["d", "kTOTAL", "abig"] + [f"apart{k}" for k in small]
    lab = [-1, 0, 1, 2 if named else -1] + [3 + j if named else -1 for j in range(len(small))]
    sizes = [0, 72, 1000, 96, 1_000_000] + [50_000] * len(small)
    graph = make_graph(605, edges, sizes, roots=[(1, "__main__", "module", 0)], labels=labels, lab=lab,
                       type_names=types, types=[0, 1, 2] + [3] * 602)
    owners = [(o.path, o.retained_bytes) for o in dom.find_owners(graph, top=4).owners]
    if named:
        assert owners == [("__main__.TOTAL.big", 1_000_000)], owners
    else:
        assert owners == [("__main__.TOTAL", 96 + 600 * 50_000), ("__main__.TOTAL.<Tensor>", 1_000_000)], owners


@pytest.mark.parametrize(("second", "expected"), [
    (2_300_000, [("__main__.HISTORY._mgr.<tuple>", 56 + 10_300_000 + 2_300_000)]),
    (1_000, [("__main__.HISTORY._mgr.<tuple>[].<ndarray>", 10_300_000 - 56)])])
def test_a_collection_holding_much_besides_its_biggest_entry_is_their_owner(second: int,
                                                                            expected: list[tuple[str, int]]) -> None:
    """A DataFrame grown by ``pd.concat``: its block manager's tuple of blocks, a float block
    of 82% of the frame and a str block of 18%. The search went down into the float block
    (past the 80% share) and listed the str block apart: two owners, the frame none. A
    collection whose other entries hold as much as an owner is listed at is their owner; one
    whose other entries are small is still a way to its biggest."""
    # 1 module, 2 its dict, 3 HISTORY (a DataFrame), 4 _mgr, 5 the blocks tuple, 6/7 blocks, 8/9 arrays
    types = ["<root>", "module", "dict", "pandas.DataFrame", "BlockManager", "tuple", "NumpyBlock", "numpy.ndarray"]
    edges = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (5, 7), (6, 8), (7, 9)]
    labels = ["d", "kHISTORY", "a_mgr"]
    lab = [-1, 0, 1, 2, -1, -1, -1, -1, -1]
    sizes = [0, 72, 1000, 56, 56, 56, 56, 56, 10_300_000 - 56, second - 56]
    graph = make_graph(10, edges, sizes, roots=[(1, "__main__", "module", 0)], labels=labels, lab=lab,
                       type_names=types, types=[0, 1, 2, 3, 4, 5, 6, 6, 7, 7])
    owners = [(o.path, o.retained_bytes) for o in dom.find_owners(graph, top=4).owners]
    assert owners == expected, owners


def test_the_payload_says_which_types_are_collections() -> None:
    class Registry(dict):  # type: ignore[type-arg]
        pass

    class Meta(type):
        def __eq__(cls, other: object) -> bool:
            raise AssertionError("a metaclass's __eq__ ran")

        __hash__ = type.__hash__

    class Odd(metaclass=Meta):
        pass

    assert graph_payload._container_subclass(Registry)
    assert graph_payload._container_subclass(collections.OrderedDict)
    assert graph_payload._container_subclass(collections.Counter)
    assert not any(graph_payload._container_subclass(tp) for tp in (dict, list, collections.deque, Odd, int))


def _chain_graph(links: int, kind: str, tail: int) -> dom.ObjectGraph:
    """__main__.HEAD -> link -> link ... (``links`` of type ``kind``, each with a 100-byte str,
    ``.next`` the next); the last link holds a dict CACHE of ``tail`` 1000-byte strs."""
    types = ["<root>", "module", "dict", kind, "str"]
    # 1 module __main__, 2 its dict, 3.. the links, then each link's str, then the cache and its strs
    edges = [(0, 1), (1, 2), (2, 3)]
    lab = [-1, 0, 1]
    first, strs = 3, 3 + links
    for k in range(links):
        if k + 1 < links:
            edges.append((first + k, first + k + 1))
            lab.append(2)
        edges.append((first + k, strs + k))
        lab.append(3)
    cache = strs + links
    edges.append((first + links - 1, cache))
    lab.append(4)
    edges += [(cache, cache + 1 + i) for i in range(tail)]
    lab += [-1] * tail
    n = cache + 1 + tail
    type_of = [0, 1, 2] + [3] * links + [4] * links + [2] + [4] * tail
    sizes = [0, 72, 1000] + [56] * links + [100] * links + [4000] + [1000] * tail
    return make_graph(n, edges, sizes, roots=[(1, "__main__", "module", 0)],
                      labels=["d", "kHEAD", "anext", "apayload", "acache"], lab=lab, type_names=types, types=type_of)


@pytest.mark.usefixtures("both_passes")
@pytest.mark.parametrize("kind", ["__main__.Node", "tuple"])
def test_a_linked_list_is_owned_by_its_head(kind: str) -> None:
    """Each link retains most of what the one before it does (all the rest of the list): the
    descent to the child holding most went down 5,000 links to where what was left fell
    under the threshold, and the list was in no owner listed. Its head holds it."""
    found = dom.find_owners(_chain_graph(5000, kind, 0), top=5)
    first = found.owners[0]
    assert (first.path, first.type, first.items) == ("__main__.HEAD", kind, 5000)
    assert first.retained_bytes == 5000 * (56 + 100) + 4000  # (and the last link's empty cache)


@pytest.mark.usefixtures("both_passes")
def test_a_chain_of_hooks_through_their_closures_is_owned_by_its_head() -> None:
    """``sys.excepthook`` wrapped by each plugin reload: each hook a function whose closure (a
    tuple of cells) holds the hook it replaced and its state. The descent went down the chain
    function by function (a link reaches the next through its closure's tuple and cell, not
    an attribute dict) and the hooks were in no owner listed. Its head holds them."""
    links = 2000
    types = ["<root>", "module", "dict", "function", "tuple", "cell", "bytes"]
    # 1 module sys, 2 its dict; per link k: function, closure tuple, cell (next), cell (state), state
    edges, lab, type_of, sizes = [(0, 1), (1, 2)], [-1, 0], [0, 1, 2], [0, 72, 1000]
    first = 3
    for k in range(links):
        f = first + 5 * k
        edges += [(f, f + 1), (f + 1, f + 2), (f + 1, f + 3), (f + 3, f + 4)]
        lab += [-1, -1, -1, -1]
        if k + 1 < links:
            edges.append((f + 2, f + 5))
            lab.append(-1)
        type_of += [3, 4, 5, 5, 6]
        sizes += [144, 56, 40, 40, 1000]
    edges.append((2, first))
    lab.append(1)
    graph = make_graph(first + 5 * links, edges, sizes, roots=[(1, "sys", "module", 0)],
                       labels=["d", "kexcepthook"], lab=lab, type_names=types, types=type_of)
    found = dom.find_owners(graph, top=5)
    first_owner = found.owners[0]
    assert (first_owner.path, first_owner.type, first_owner.items) == ("sys.excepthook", "function", links)
    assert first_owner.retained_bytes == links * (144 + 56 + 40 + 40 + 1000)
    assert first_owner.chain and first_owner.chain_end == 0  # (a chain it holds to its end)
    # A thread made meanwhile keeps the hook of its making (threading's _invoke_excepthook):
    # the head owns the hooks wrapped since, and watch's samples count its links up to that one.
    kept = first + 5 * 1500
    shared = make_graph(first + 5 * links + 1, [*edges, (0, first + 5 * links), (first + 5 * links, kept)],
                        [*sizes, 64], roots=[(1, "sys", "module", 0), (first + 5 * links, "threading", "module", 0)],
                        labels=["d", "kexcepthook"], lab=[*lab, -1, -1], type_names=types, types=[*type_of, 1])
    head = next(o for o in dom.find_owners(shared, top=5).owners if o.path == "sys.excepthook")
    assert (head.items, head.chain, head.chain_end) == (1500, True, kept)
    assert head.retained_bytes == 1500 * (144 + 56 + 40 + 40 + 1000)


def test_a_chain_that_only_leads_to_a_big_table_is_descended() -> None:
    """Wrappers of wrappers (middleware holding the next app) whose last one holds a big cache:
    the links hold little, the chain is a way to the owner, not the owner."""
    found = dom.find_owners(_chain_graph(3, "__main__.Layer", 2000), top=5)
    first = found.owners[0]
    assert first.path == "__main__.HEAD.next.next.cache"
    assert first.retained_bytes == 4000 + 2000 * 1000


def _two_indexes(modules: int, odd_one: bool = False) -> dom.ObjectGraph:
    """1000 sessions (each 100 bytes and a 1000-byte str of its own) in two dicts, ``BY_ID``
    and ``BY_NAME``: globals of __main__ (``modules`` 1), or of two modules (2: ``a.BY_ID``,
    ``b.BY_NAME``). Beside them ``SMALL``, a global of the first module holding 2000 bytes.
    ``odd_one``: one session more, in both dicts and a global of the second module, ``MAIN``
    (the main thread in ``threading._active`` and ``threading._main_thread``)."""
    types = ["<root>", "module", "dict", "__main__.Session", "str"]
    # 1 module, 2 its dict; 3 and 4 the second module and its dict (or unused); 5 BY_ID,
    # 6 BY_NAME, 7 SMALL; 8.. the sessions, then their strs
    second = 3 if modules == 2 else 1
    edges = [(0, 1), (1, 2), (2, 5), (2, 7)]
    lab = [-1, 0, 1, 3]
    if modules == 2:
        edges += [(0, 3), (3, 4), (4, 6)]
        lab += [-1, 0, 2]
    else:
        edges.append((2, 6))
        lab.append(2)
    first = 8
    for k in range(1000):
        edges += [(5, first + k), (6, first + k), (first + k, first + 1000 + k)]
        lab += [-1, -1, -1]
    n = first + 2000
    type_of = [0, 1, 2, 1, 2, 2, 2, 4] + [3] * 1000 + [4] * 1000
    sizes = [0, 72, 1000, 72, 1000, 36_000, 36_000, 2000] + [100] * 1000 + [1000] * 1000
    if odd_one:
        edges += [(5, n), (6, n), (second + 1, n)]
        lab += [-1, -1, 4]
        type_of.append(3)
        sizes.append(100)
        n += 1
    roots = [(1, "__main__" if modules == 1 else "a", "module", 0)]
    if modules == 2:
        roots.append((second, "b", "module", 0))
    return make_graph(n, edges, sizes, roots=roots, labels=["d", "kBY_ID", "kBY_NAME", "kSMALL", "kMAIN"], lab=lab,
                      type_names=types, types=type_of)


@pytest.mark.usefixtures("both_passes")
@pytest.mark.parametrize(("modules", "named"), [
    (1, "<shared by __main__.BY_ID, __main__.BY_NAME>"), (2, "<shared by a.BY_ID, b.BY_NAME>")])
def test_what_two_registries_both_hold_is_an_owner_named_by_both(modules: int, named: str) -> None:
    """Each session is held by both indexes: neither dominates it, only the module both are
    globals of (or, in two modules, the super-root), which is split into its parts. The
    sessions were in no owner; they are one, whose bytes are what freeing both returns."""
    graph = _two_indexes(modules)
    found = dom.find_owners(graph, top=5)
    first = found.owners[0]
    assert (first.path, first.type, first.items) == (named, "__main__.Session", 1000)
    assert first.retained_bytes == 1000 * (100 + 1000) and first.retained_objects == 2000
    # each index is an owner of its own bytes besides: nothing counted twice
    by_id = named[len("<shared by "):].split(", ")[0]
    assert [(o.path, o.retained_bytes) for o in found.owners if o.path == by_id] == [(by_id, 36_000)]
    assert sum(o.retained_bytes for o in found.owners) <= sum(graph.sizes)
    why = dom.find_owners(graph, top=5, why="<shared by").why
    assert [o.path for o in why] == [named]


@pytest.mark.usefixtures("both_passes")
def test_a_shared_owner_is_named_by_where_each_part_holds_most_of_it() -> None:
    """One session more in both indexes is also ``b.MAIN`` (the main thread, in
    ``threading._active`` and ``threading._main_thread`` beside 400 timers a list holds): the
    part's anchor, the common dominator of every referrer under it, was ``b`` itself; it is
    the index holding nearly all of the group (``_majority_anchors``)."""
    found = dom.find_owners(_two_indexes(2, odd_one=True), top=5)
    first = found.owners[0]
    assert (first.path, first.items) == ("<shared by a.BY_ID, b.BY_NAME>", 1001)


def test_what_groups_held_from_c_hold_together_is_held_from_c() -> None:
    """Objects only two groups held from C (a dict type's and a function type's) reach: named
    as held from C by both types, not ``<shared by <held from C: dict>, ...>``."""
    types = ["<root>", "dict", "function", "bytes"]
    # 1, 2 the groups (no bytes of their own); 3 a dict, 4 a function; 5.. what both hold
    edges = [(0, 1), (0, 2), (1, 3), (2, 4)]
    first = 5
    for k in range(200):
        edges += [(3, first + k), (4, first + k)]
    n = first + 200
    graph = make_graph(n, edges, [0, 0, 0, 100, 100] + [1000] * 200,
                       roots=[(1, "<held from C: dict>", "held", 5), (2, "<held from C: function>", "held", 5)],
                       type_names=types, types=[0, 1, 2, 1, 2] + [3] * 200)
    first_owner = dom.find_owners(graph, top=5).owners[0]
    assert (first_owner.path, first_owner.retained_bytes) == ("<held from C: dict, function>", 200 * 1000)
    # a list of its 200 items under a group held from C: no ids a sample can walk (its root
    # was a list of the payload's), so nothing counts it between censuses (it was "not found
    # again" in every sample of a watch of a numpy worker)
    types[1] = "list"
    graph = make_graph(n, edges, [0, 0, 0, 100, 100] + [1000] * 200,
                       roots=[(1, "<held from C: list>", "held", 5), (2, "<held from C: function>", "held", 5)],
                       type_names=types, types=[0, 1, 2, 1, 2] + [3] * 200)
    graph.lengths[3] = 200
    first_owner = dom.find_owners(graph, top=5).owners[0]
    assert (first_owner.path, first_owner.count_ids) == ("<held from C: function, list>", ())


@pytest.mark.usefixtures("both_passes")
def test_what_a_shared_object_and_a_registry_hold_together_joins_its_group() -> None:
    """Each session's str (its name) is held by the session and by BY_NAME (its key): a part of
    the module shared by a session that is itself shared stands for that session's parts (the
    names are held by BY_ID and BY_NAME too, as far as freeing goes); and a pair of sessions
    holding each other (a cycle) does not run on forever."""
    graph = _two_indexes(1)
    edges = list(zip(graph.src, graph.dst, strict=True))
    lab = list(graph.lab)
    for k in range(1000):
        edges.append((6, 1008 + k))  # BY_NAME -> the session's str (a key)
        lab.append(-1)
    edges += [(8, 9), (9, 8)]  # sessions 0 and 1 hold each other
    lab += [-1, -1]
    graph = make_graph(graph.nodes, edges, list(graph.sizes), roots=graph.roots, labels=graph.labels, lab=lab,
                       type_names=graph.type_names, types=list(graph.types))
    first = dom.find_owners(graph, top=5).owners[0]
    assert first.path == "<shared by __main__.BY_ID, __main__.BY_NAME>"
    # the names are no items beside the sessions; the type is that of the objects holding most
    # of the bytes (the names, here)
    assert (first.retained_bytes, first.items, first.type) == (1000 * (100 + 1000), 1000, "str")


@pytest.mark.usefixtures("both_passes")
def test_a_few_big_objects_two_roots_share_are_each_looked_into() -> None:
    """Five workers two tasks both hold, each with a registry of its own (the simulated verifiers
    worker's env workers, each with its runtime's trajectories): one worker holds a fifth of
    what they hold together, so they are looked at one by one and the registries are the
    owners, not the group of workers."""
    types = ["<root>", "task", "m.Worker", "dict", "bytes"]
    # 1, 2 the tasks; 3..7 the workers; 8..12 their registries; then 100 entries a registry
    edges = [(0, 1), (0, 2)]
    lab = [-1, -1]
    for w in range(5):
        edges += [(1, 3 + w), (2, 3 + w), (3 + w, 8 + w)]
        lab += [0, 0, 1]
    first = 13
    for w in range(5):
        for _e in range(100 + 10 * w):
            edges.append((8 + w, first))
            lab.append(-1)
            first += 1
    n = first
    type_of = [0, 1, 1] + [2] * 5 + [3] * 5 + [4] * (n - 13)
    sizes = [0, 100, 100] + [100] * 5 + [4000] * 5 + [1000] * (n - 13)
    graph = make_graph(n, edges, sizes, roots=[(1, "task:Task-1/run", "task", 1), (2, "task:Task-3/stats", "task", 1)],
                       labels=["aworker", "atrajectories"], lab=lab, type_names=types, types=type_of)
    found = dom.find_owners(graph, top=8)
    assert [o.type for o in found.owners[:5]] == ["dict"] * 5, [o.path for o in found.owners]
    assert found.owners[0].retained_bytes == 4000 + 140 * 1000
    assert not any(o.path.startswith("<shared") for o in found.owners[:5])


@pytest.mark.usefixtures("both_passes")
def test_what_a_shared_object_holds_with_a_list_of_its_own_is_an_owner_of_many_items() -> None:
    """A metric (a global of __main__, and in the registry of a metrics module) keeps its 2,000
    children in its table, and the program lists them too (``HC``): the children are held by
    the metric, which is held together, and by __main__. Counted as parts of the metric (a
    session's name is of its session) they were no items, the group one item as big as the
    metric alone, and dropped: 85 MB in no owner. They outnumber the rest: they are the items."""
    types = ["<root>", "module", "dict", "Histogram", "list", "HistogramChild", "lock"]
    # 1 __main__, 2 its dict; 3 the registry's module, 4 its dict; 5 the metric, 6 its table;
    # 7 HC; 8.. the children, then a lock each
    edges = [(0, 1), (1, 2), (0, 3), (3, 4), (2, 5), (4, 5), (5, 6), (2, 7)]
    lab = [-1, 0, -1, 0, 1, 2, 3, 4]
    first, n_children = 8, 2000
    for k in range(n_children):
        edges += [(6, first + k), (7, first + k), (first + k, first + n_children + k)]
        lab += [-1, -1, -1]
    n = first + 2 * n_children
    type_of = [0, 1, 2, 1, 2, 3, 2, 4] + [5] * n_children + [6] * n_children
    sizes = [0, 72, 1000, 72, 1000, 500, 80_000, 16_000] + [4000] * n_children + [120] * n_children
    graph = make_graph(n, edges, sizes, roots=[(1, "__main__", "module", 0), (3, "metrics", "module", 0)],
                       labels=["d", "kLAT", "kREGISTRY", "a_metrics", "kHC"], lab=lab, type_names=types,
                       types=type_of)
    first_owner = dom.find_owners(graph, top=5).owners[0]
    assert first_owner.path.startswith("<shared by "), first_owner.path
    assert (first_owner.items, first_owner.type) == (n_children, "HistogramChild")
    assert first_owner.retained_bytes == n_children * 4120 + 500 + 80_000  # (the metric and its table too)


def _tasks(sizes_of_tasks: list[int], coroutine: str = "wait_for_reply") -> dom.ObjectGraph:
    """A module (1, 50 KB) and tasks 2.. running ``coroutine`` (then one running ``main``), each
    holding a body of its size."""
    k = len(sizes_of_tasks)
    edges = [(0, 1)] + [(0, 2 + t) for t in range(k + 1)] + [(2 + t, 3 + k + t) for t in range(k + 1)]
    sizes = [0, 50_000] + [100] * (k + 1) + [*sizes_of_tasks, 1000]
    roots = [(1, "app", "module", 1)] + [(2 + t, f"task:Task-{7 + t}/{coroutine}", "task", 1) for t in range(k)]
    roots.append((2 + k, "task:Task-1/main", "task", 1))
    types = [0, 1] + [2] * (k + 1) + [3] * (k + 1)
    return make_graph(len(sizes), edges, sizes, roots=roots, type_names=["<root>", "dict", "_asyncio.Task", "bytes"],
                      types=types)


@pytest.mark.usefixtures("both_passes")
def test_tasks_running_one_coroutine_are_one_owner() -> None:
    """2,000 tasks stuck awaiting a reply, each under the owners' threshold: together the first
    owner, named by what they run, their bytes the sum (their subtrees are apart)."""
    found = dom.find_owners(dom_graph := _tasks([20_000] * 2000), top=5)
    first = found.owners[0]
    assert (first.path, first.type, first.items) == ("task:Task-*/wait_for_reply", "_asyncio.Task", 2000)
    assert first.retained_bytes == 2000 * 20_100 and first.retained_objects == 4000
    assert dom_graph.nodes > 4000
    # each task over the threshold, none holding a tenth of them all: still one owner
    owners = dom.find_owners(_tasks([90_000] * 40), top=50).owners
    first = owners[0]
    assert (first.path, first.items, first.retained_bytes) == ("task:Task-*/wait_for_reply", 40, 40 * 90_100)
    assert [o.path for o in owners[1:] if "wait_for_reply" in o.path] == []  # none of them again


@pytest.mark.usefixtures("both_passes")
def test_a_task_holding_most_of_its_kind_is_looked_into_alone() -> None:
    """The task whose registry is the leak among a few running the same coroutine: named in its
    own right (its path into it), not as the group; the small ones grouped; a lone task is no
    group."""
    owners = dom.find_owners(_tasks([5_000_000, 3_000, 3_000, 3_000, 3_000]), top=5).owners
    assert owners[0].path == "task:Task-7/wait_for_reply.<bytes>", [o.path for o in owners]
    group = next(o for o in owners if o.path == "task:Task-*/wait_for_reply")
    assert (group.items, group.retained_bytes) == (4, 4 * 3_100)
    paths = [o.path for o in dom.find_owners(_tasks([5_000_000]), top=5).owners]
    assert not any("*" in p for p in paths), paths


@pytest.mark.usefixtures("both_passes")
def test_the_frames_of_threads_named_alike_are_one_owner() -> None:
    """A thread per connection, each with two frames (``serve``, holding the buffers, and the
    ``wait`` it is blocked in): one owner named by the function whose frames hold the most, its
    items the threads; a thread whose frame holds most of the heap is looked into alone."""
    k = 200
    edges, sizes, roots = [(0, 1)], [0, 50_000], [(1, "app", "module", 1)]
    for t in range(k):
        serve, wait, body = len(sizes), len(sizes) + 1, len(sizes) + 2
        edges += [(0, serve), (0, wait), (serve, body)]
        sizes += [500, 300, 200_000]
        roots += [(serve, f"thread:Thread-{t + 2} (serve)/serve", "thread", 2),
                  (wait, f"thread:Thread-{t + 2} (serve)/wait", "thread", 2)]
    graph = make_graph(len(sizes), edges, sizes, roots=roots)
    owners = dom.find_owners(graph, top=10).owners
    assert (owners[0].path, owners[0].items, owners[0].retained_bytes) == (
        "thread:Thread-* (serve)/serve", k, k * 200_800)
    assert not any(o.path.startswith("thread:") for o in owners[1:]), [o.path for o in owners]


@pytest.mark.usefixtures("both_passes")
def test_modules_named_alike_but_for_numbers_are_one_owner() -> None:
    """500 plugins each a module of its own in sys.modules (``plugin_17``): ``plugin_*``; two
    modules with a number in their names, each a name of its own, are no group."""
    k = 500
    edges = [(0, 1), (0, 2), (0, 3)] + [(0, 4 + m) for m in range(k)] + [(4 + m, 4 + k + m) for m in range(k)]
    sizes = [0, 30_000, 30_000, 30_000] + [1000] * k + [80_000] * k
    roots = [(1, "app", "module", 1), (2, "http2.client", "module", 1), (3, "base64", "module", 1)]
    roots += [(4 + m, f"plugin_{m}", "module", 1) for m in range(k)]
    graph = make_graph(len(sizes), edges, sizes, roots=roots, type_names=["<root>", "module", "bytes"],
                       types=[0, 1, 1, 1] + [1] * k + [2] * k)
    owners = dom.find_owners(graph, top=10).owners
    assert (owners[0].path, owners[0].type, owners[0].items, owners[0].retained_bytes) == (
        "plugin_*", "module", k, k * 81_000)
    assert not any(o.path.startswith("plugin_") and o.path != "plugin_*" for o in owners)


def test_why_lists_distinct_retainer_paths() -> None:
    graph = callbacks_graph()
    found = dom.find_owners(graph, top=5, why="App")
    (app,) = found.why
    assert app.path == "__main__.APP"
    assert set(app.retainers) == {"__main__.APP", "__main__.CALLBACKS[].__self__"}


def test_names_from_the_target_replace_the_graphs_labels() -> None:
    graph = callbacks_graph()
    plan = dom.plan_owners(graph, top=1, retainers=1)
    paths = plan.name_paths
    assert paths[0] == [1, 2, 5, 6, 7]  # the target's ids along the path, its root first
    found = dom.name_owners(plan, [["d", "kAPP", "d", "arows_renamed"][: len(p) - 1] for p in paths])
    assert found.named and found.owners[0].path == "__main__.APP.rows_renamed"
    # without the target's labels (it did not answer): the graph's own, the same owners
    unnamed = dom.name_owners(plan, None)
    assert not unnamed.named and [o.node for o in unnamed.owners] == [o.node for o in found.owners]
    assert dom.find_owners(graph, top=1, retainers=1).owners[0].path == unnamed.owners[0].path


def test_why_finds_an_owner_by_the_name_the_target_gave_it() -> None:
    """A global of a big program whose module's keys the walk could not label (past its label
    budget: torch's modules) is ``__main__[]...`` until the target names it: ``--why`` matched
    the graph's own paths only, and ``--why TOTAL`` said "no owner path or type of that name"
    of the first owner listed. It is matched again by the names the target gave."""
    graph = callbacks_graph()
    plan = dom.plan_owners(graph, top=1, retainers=1, why="rows_renamed")
    assert plan.asked == plan.nodes  # (no path of the graph's own has that name)
    found = dom.name_owners(plan, [["d", "kAPP", "d", "arows_renamed"][: len(p) - 1] for p in plan.name_paths])
    assert [o.path for o in found.why] == ["__main__.APP.rows_renamed"]


def read_heapsnapshot(text: str) -> dict[str, object]:
    """A strict reader of the V8 format: every field where the meta says, edges grouped by
    node, indices in range; returns node names, sizes and adjacency."""
    doc = json.loads(text)
    meta = doc["snapshot"]["meta"]
    nf, ef = meta["node_fields"], meta["edge_fields"]
    assert nf[:5] == ["type", "name", "id", "self_size", "edge_count"]
    assert ef == ["type", "name_or_index", "to_node"]
    nodes, edges, strings = doc["nodes"], doc["edges"], doc["strings"]
    assert len(nodes) == doc["snapshot"]["node_count"] * len(nf)
    assert len(edges) == doc["snapshot"]["edge_count"] * len(ef)
    edge_types = meta["edge_types"][0]
    n = len(nodes) // len(nf)
    succ: list[list[int]] = []
    k = 0
    ids = set()
    for i in range(n):
        row = nodes[i * len(nf):(i + 1) * len(nf)]
        assert 0 <= row[0] < len(meta["node_types"][0]) and 0 <= row[1] < len(strings)
        ids.add(row[2])
        out = []
        for _ in range(row[4]):
            etype, name, to = edges[k * 3:(k + 1) * 3]
            assert edge_types[etype] in ("property", "element")
            if edge_types[etype] == "property":
                assert 0 <= name < len(strings)
            assert to % len(nf) == 0 and 0 <= to < len(nodes)
            out.append(to // len(nf))
            k += 1
        succ.append(out)
    assert k * 3 == len(edges) and len(ids) == n
    return {"n": n, "succ": succ, "sizes": [nodes[i * len(nf) + 3] for i in range(n)],
            "names": [strings[nodes[i * len(nf) + 1]] for i in range(n)]}


def test_heapsnapshot_reads_back_with_the_same_retained_sizes() -> None:
    graph = callbacks_graph()
    buf = io.StringIO()
    heapsnapshot.write_to(buf, graph)
    read = read_heapsnapshot(buf.getvalue())
    assert read["names"][7] == "list" and read["sizes"] == list(graph.sizes)
    edges = [(s, d) for s, out in enumerate(read["succ"]) for d in out]  # type: ignore[arg-type]
    _idom, retained = brute_force(read["n"], edges, read["sizes"])  # type: ignore[arg-type]
    assert retained == list(dom.dominators(graph).retained)


@pytest.mark.parametrize("seed", range(20))
def test_compiled_paths_and_tree_match_python(seed: int) -> None:
    if dom._dominators is None:
        pytest.skip("the C passes are not built here")
    rng = random.Random(seed)
    n = rng.randint(3, 60)
    edges = [(0, r) for r in rng.sample(range(1, n), min(3, n - 1))]
    edges += [(rng.randrange(1, n), rng.randrange(1, n)) for _ in range(3 * n)]
    types = [rng.randrange(3) for _ in range(n)]
    graph = make_graph(n, edges, type_names=["object", "method", "dict"], types=types,
                       labels=["aparent", "kx"], lab=[rng.choice([-1, 0, 1]) for _ in edges],
                       roots=[(d, f"r{i}", "task" if i else "module", 1) for i, (_, d) in enumerate(edges[:3])])

    def cost(paths: dom.Paths, v: int) -> tuple[int, int, int]:
        path = dom.path_edges(graph, paths, v)
        back = sum(1 for e in path if graph.type_of(graph.src[e]) == "method" or graph.lab[e] == 0)
        unnamed = sum(1 for e in path if graph.lab[e] < 0)
        return back, len(path), unnamed

    compiled, python = dom.preferred_paths(graph), dom._preferred_paths_python(graph)
    assert list(compiled.root_of) == list(python.root_of)
    assert [cost(compiled, v) for v in range(n)] == [cost(python, v) for v in range(n)]


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("unnamed_first", [True, False])
def test_of_two_paths_as_long_the_named_one_names_the_owner(compiled: bool, unnamed_first: bool) -> None:
    # A worker's task frame holds its Runtime by ``self.env.harness.runtime`` and by a rollout
    # in flight: coroutine, coroutine, a set, its entry (steps without a name). The attribute
    # path names it, whichever edge the walk wrote first, though it passes through two
    # materialized instance dicts (a step each, as in 3.10: "d").
    if compiled and dom._dominators is None:
        pytest.skip("the C passes are not built here")
    labels = ["aself", "kenv", "kharness", "aruntime", "tcoroutine", "d"]
    # 1 frame; named: 2 self, 3 its dict, 4 env, 5 its dict, 6 harness; unnamed: 7 coroutine,
    # 8 coroutine, 9 set, 10 a task; 11 runtime
    named = [(1, 2, 0), (2, 3, 5), (3, 4, 1), (4, 5, 5), (5, 6, 2), (6, 11, 3)]
    unnamed = [(1, 7, 4), (7, 8, 4), (8, 9, -1), (9, 10, -1), (10, 11, -1)]
    triples = [(0, 1, -1)] + (unnamed + named if unnamed_first else named + unnamed)
    graph = make_graph(12, [(s, d) for s, d, _ in triples], labels=labels, lab=[k for _, _, k in triples],
                       type_names=["object", "frame", "coroutine", "set", "Runtime", "dict"],
                       types=[0, 1, 0, 5, 0, 5, 0, 2, 2, 3, 0, 4], roots=[(1, "task:Task-1/run", "task", 1)])
    paths = dom.preferred_paths(graph) if compiled else dom._preferred_paths_python(graph)
    assert dom.render_path(graph, paths, 11) == "task:Task-1/run.self.env.harness.runtime"


def test_graph_json_pieces_are_the_same_document() -> None:
    from leakhound.analysis.dominators.graph import _ARRAY_KEYS
    from leakhound.payload.graph import json_pieces

    graph = {"format": "leakhound.graph/1", "nodes": 2, **{k: ["QUJD", "REVG"] for k in _ARRAY_KEYS}}
    for doc in ({"ok": True, "graph": graph}, {"graph": graph}, {"result": {"ok": True, "graph": graph}},
                {"result": {"graph": {"skipped": "over"}}}):
        assert json.loads("".join(json_pieces(doc))) == doc


def test_graph_over_its_budget_is_skipped_not_cut() -> None:
    """A graph bigger than max_nodes is not sent half-walked: the caller keeps the census."""
    from leakhound.payload import graph

    out = graph.build(timeout=30, progress=None, is_stdlib=None, exclude=(), max_nodes=100, max_pause_ms=None,
                      cancelled=None)
    assert set(out) == {"format", "skipped", "skipped_code", "max_nodes"} and "over the graph budget" in out["skipped"]
    assert (out["skipped_code"], out["max_nodes"]) == ("graph_over_nodes", 100)


def test_schema_1_is_read_as_first_reacher_and_diffs_against_2() -> None:
    from dataclasses import replace

    from leakhound.analysis.diff import diff_snapshots
    from leakhound.model import SchemaError, snapshot_from_json, snapshot_to_json
    from tests.factories import make_snapshot

    new = make_snapshot()
    new = replace(new, heap=replace(new.heap, owner_model="dominator", graph_nodes=10),
                  owners=tuple(replace(o, retainers=(o.path, "elsewhere")) for o in new.owners))
    doc = json.loads(snapshot_to_json(new))
    assert doc["schema"] == "leakhound.snapshot/2"
    assert snapshot_from_json(json.dumps(doc)) == new
    old_doc = json.loads(json.dumps(doc))
    old_doc["schema"] = "leakhound.snapshot/1"
    for key in ("owner_model", "owner_model_note", "graph_nodes", "graph_edges", "graph_seconds",
                "dominator_seconds"):
        del old_doc["heap"][key]
    for owner in old_doc["owners"]:
        del owner["retainers"]
    old = snapshot_from_json(json.dumps(old_doc))
    assert old.heap.owner_model == "first-reacher" and all(o.retainers == () for o in old.owners)
    assert diff_snapshots(old, new) is not None
    old_doc["heap"]["owner_model"] = "dominator"  # a /1 document never had it
    with pytest.raises(SchemaError, match="not in leakhound.snapshot/1"):
        snapshot_from_json(json.dumps(old_doc))


@pytest.fixture(params=[True, False])
def both_passes(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled passes (where they are built), then their pure-Python twin."""
    if not request.param:
        monkeypatch.setattr(dom.passes, "_dominators", None)
    elif dom._dominators is None:
        pytest.skip("the C passes are not built here")


def _registry_and_a_second_holder(sizes: list[int], roots: list[tuple[int, str, str, int]]) -> dom.ObjectGraph:
    """1 -> 2, a registry -> 4..13, its entries; 3 -> 14, a list of the same entries, and
    3 -> 15, what only 3 holds (``roots``: what 1 and 3 are)."""
    entries = list(range(4, 14))
    edges = [(0, 1), (0, 3), (1, 2), *((2, e) for e in entries), (3, 14), *((14, e) for e in entries), (3, 15)]
    return make_graph(16, edges, sizes, roots=roots)


@pytest.mark.usefixtures("both_passes")
def test_a_frame_iterating_over_a_registry_does_not_take_its_entries() -> None:
    # 1 module dict; 3 a thread's frame, whose local (14) is a list of the registry's entries
    graph = _registry_and_a_second_holder([0, 100, 200, 50, *([1000] * 10), 80, 500],
                                          [(1, "app", "module", 1), (3, "thread:Main/f", "thread", 2)])
    assert dom.dominators(graph).retained[2] == 200  # the frame's list shares every entry
    soft = dom.soften(graph)
    tree = dom.dominators(soft)
    assert tree.retained[2] == 200 + 10 * 1000
    assert tree.retained[3] == 50 + 80 + 500
    assert soft.info["soft_edges_dropped"] == 10


@pytest.mark.usefixtures("both_passes")
def test_an_object_held_from_c_does_not_take_a_registrys_entries() -> None:
    # 1 Task-1; 3 a list held from C (made after its referrer was walked), whose 14 is a node
    # at the address of a dead copy of the registry, with the copy's edges
    graph = _registry_and_a_second_holder([0, 100, 200, 56, *([1000] * 10), 640, 500],
                                          [(1, "task:Task-1/run", "task", 1), (3, "<held from C: list>", "held", 5)])
    assert dom.dominators(graph).retained[2] == 200  # every entry shared with the held list
    soft = dom.soften(graph)
    tree = dom.dominators(soft)
    assert tree.retained[2] == 200 + 10 * 1000
    assert tree.retained[3] == 56 + 640 + 500
    assert soft.info["soft_edges_dropped"] == 10
    found = dom.find_owners(soft, top=3)
    assert found.owners[0].retained_bytes == 200 + 10 * 1000
    assert not any(o.path.startswith("<held from C") and o.retained_bytes > 56 + 640 + 500 for o in found.owners)


@pytest.mark.usefixtures("both_passes")
def test_a_context_variable_is_named_by_its_task_not_by_a_waiters_callback() -> None:
    # 1 Task-1 (first in rank) -> 2 its coroutine -> 3 a cell -> 4 a Queue -> 5 its _getters
    # deque -> 6 the waiter future -> 7 its callbacks -> 8 (callback, context) -> 9 the
    # consumer's Context -> 10 hamt -> 11 the variable's list -> 12.. its entries; 13 the
    # consumer task (second in rank) -> 9 (its context) and -> 11 (the variable, by name)
    types = ["<root>", "_asyncio.Task", "coroutine", "cell", "asyncio.queues.Queue", "collections.deque",
             "_asyncio.Future", "list", "tuple", "_contextvars.Context", "hamt", "str"]
    n = 14 + 500
    edges = [(0, 1), (0, 13), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 7), (7, 8), (8, 9), (9, 10), (10, 11),
             (13, 9), (13, 11), *((11, i) for i in range(14, n))]
    labels = ["a_getters", "crequest_log"]
    lab = [-1] * 5 + [0] + [-1] * 7 + [1] + [-1] * 500
    type_of = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 7, 0, 1] + [11] * 500
    sizes = [0, 100, 200, 40, 56, 600, 80, 64, 56, 64, 72, 4056, 0, 100] + [100] * 500
    roots = [(1, "task:Task-1/main", "task", 1), (13, "task:consumer/consume", "task", 1)]
    graph = make_graph(n, edges, sizes, roots=roots, labels=labels, lab=lab, type_names=types, types=type_of)
    found = dom.find_owners(graph, top=3)
    assert found.owners[0].path == "task:consumer/consume.<contextvar request_log>"
    assert found.owners[0].retained_bytes == 4056 + 100 * 500
    # a frame variable that is a closure's cell is named by the variable, the cell passed
    plan = dom.plan_owners(graph, top=1, why="asyncio.queues.Queue")
    asked = dom.name_owners(plan, [["", "aqueue", ""][: len(p) - 1] for p in plan.name_paths])
    assert asked.why[0].path == "task:Task-1/main.queue"


@pytest.mark.usefixtures("both_passes")
def test_a_frame_reached_from_a_running_generator_is_still_soft() -> None:
    # 1 module dict -> 2 registry -> 5..14 entries; 3 a thread's frame (measure) whose variable
    # holds the registry itself (-> 2) and -> 15, its own; 4 a generator held from C (a root of
    # its own) -> 16 its running frame (a thread's frame too) -> 3 (f_back)
    entries = list(range(5, 15))
    edges = [(0, 1), (0, 3), (0, 4), (0, 16), (1, 2), *((2, e) for e in entries), (3, 2), (3, 15), (4, 16), (16, 3)]
    sizes = [0, 100, 200, 50, 60, *([1000] * 10), 500, 70]
    roots = [(1, "app", "module", 1), (3, "thread:Main/measure", "thread", 2),
             (4, "<held from C: generator>", "held", 5), (16, "thread:Main/<genexpr>", "thread", 2)]
    graph = make_graph(17, edges, sizes, roots=roots)
    tree = dom.dominators(dom.soften(graph))
    assert tree.retained[1] == 100 + 200 + 10 * 1000  # the module keeps its registry
    assert tree.retained[3] == 50 + 500


@pytest.mark.parametrize("folded", [False, True])
def test_what_a_collections_entries_hold_together_is_the_collections(folded: bool) -> None:
    """A dict of 6 numpy views of one 40 MB array: the array's dominator is the dict, which
    does not hold it once as an entry would (through 6 views; folded into the dict, the views
    leave it two edges of its own, _graph_walk.c ``seen_n``). The owner is the dict: the array,
    named ``__main__.CACHE[]``, was listed as if one entry freed it. A dict holding one big
    array as one entry still names the entry."""
    # 1 module __main__, 2 its dict, 3 CACHE, 4..9 views (not folded), 10 the base array
    types = ["<root>", "module", "dict", "numpy.ndarray"]
    if folded:
        edges = [(0, 1), (1, 2), (2, 3), (3, 10), (3, 10)]
    else:
        edges = [(0, 1), (1, 2), (2, 3)] + [(3, k) for k in range(4, 10)] + [(k, 10) for k in range(4, 10)]
    lab = [-1, 0, 1] + [-1] * (len(edges) - 3)
    sizes = [0, 72, 1000, 5000] + [112] * 6 + [40_000_000]
    graph = make_graph(11, edges, sizes, roots=[(1, "__main__", "module", 0)], labels=["d", "kCACHE"], lab=lab,
                       type_names=types, types=[0, 1, 2, 2] + [3] * 7)
    owners = [(o.path, o.retained_bytes) for o in dom.find_owners(graph, top=4).owners]
    views = 0 if folded else 6 * 112
    assert owners == [("__main__.CACHE", 5000 + views + 40_000_000)], owners
    one = make_graph(5, [(0, 1), (1, 2), (2, 3), (3, 4)], [0, 72, 1000, 5000, 40_000_000],
                     roots=[(1, "__main__", "module", 0)], labels=["d", "kCACHE"], lab=[-1, 0, 1, -1],
                     type_names=types, types=[0, 1, 2, 2, 3])
    assert [o.path for o in dom.find_owners(one, top=4).owners] == ["__main__.CACHE[]"]


def _document_held_twice(elements: int) -> dom.ObjectGraph:
    """A DOM document a global list (``__main__.DOCS``) and a running task's locals both hold:
    its elements each linked to their siblings (minidom's ``previousSibling`` and
    ``nextSibling``) and listed by their parent's list of children, the task's local the last
    one. Beside them, ``STATIC``: a big table of the module's."""
    types = ["<root>", "module", "dict", "list", "Document", "NodeList", "Element", "str", "task"]
    # 1 module, 2 its dict, 3 DOCS, 4 the document, 5 the task, 6 its children, 7 STATIC;
    # 8.. the elements, then their texts
    first = 8
    edges = [(0, 1), (1, 2), (2, 3), (3, 4), (0, 5), (5, 4), (4, 6), (2, 7), (5, first + elements - 1)]
    lab = [-1, 0, 1, -1, -1, 3, -1, 2, 4]
    for k in range(elements):
        e = first + k
        edges += [(6, e), (e, first + elements + k), (e, 4)]
        lab += [-1, -1, -1]
        if k:
            edges += [(e, e - 1), (e - 1, e)]
            lab += [-1, -1]
    sizes = [0, 72, 1000, 88, 64, 200, 96, 150_000] + [400] * elements + [600] * elements
    type_of = [0, 1, 2, 3, 4, 8, 5, 7] + [6] * elements + [7] * elements
    return make_graph(first + 2 * elements, edges, sizes,
                      roots=[(1, "__main__", "module", 0), (5, "task:Task-1/main", "task", 0)],
                      labels=["d", "kDOCS", "kSTATIC", "adoc", "ae"], lab=lab, type_names=types, types=type_of)


@pytest.mark.usefixtures("both_passes")
@pytest.mark.parametrize("elements", [100, 400])
def test_a_chain_two_roots_reach_into_is_one_owner(elements: int) -> None:
    """Each element is held by its parent's list and by its siblings, and the task's local
    reaches the last: every element's dominator is the super-root, and past the few levels a
    shared part is resolved (SHARED_RESOLVE_DEPTH) each was a group of its own, each under
    the threshold: 10 MB of a document in no owner. The chain is one owner now, held by both."""
    graph = _document_held_twice(elements)
    owners = [(o.path, o.retained_bytes) for o in dom.find_owners(graph, top=5).owners]
    held = 64 + 96 + elements * (400 + 600)
    assert ("<shared by __main__.DOCS, task:Task-1/main>", held) in owners, owners


@pytest.mark.usefixtures("both_passes")
def test_a_chain_whose_head_has_too_many_referrers_is_still_one_owner() -> None:
    """5,000 elements each naming the document its owner: the document has more referrers than
    the shared pass looks at (SHARED_MAX_REFERRERS) with as many parts held together, and is left
    out of the chain, one of its parts (named by its path); the elements are still one owner."""
    elements = 5000
    graph = _document_held_twice(elements)
    owners = {o.path: o.retained_bytes for o in dom.find_owners(graph, top=5).owners}
    shared = {path: size for path, size in owners.items() if path.startswith("<shared by ")}
    assert list(shared.values()) == [elements * (400 + 600)], owners
