"""The object graph's compiled walk against its Python loop: ``python -m tests.graph_hostile``.

Builds the whole graph (graph.build, from the real roots of this process) with the C walk
(``_graph_walk.c``) at several per-call budgets (1 and 7 units, so every container is split
and resumed across calls, and the default) and with the pure-Python loop, over a heap that
holds tests/walk_hostile.py's hostile structures (``__sizeof__`` that raises, lies or
mutates, ``__class__`` properties, dict subclasses whose methods raise, str/bytes subclasses,
shared leaves, cycles, deep nesting, non-str keys) plus what only the graph reads: slotted
classes (their labels), big dicts, lists and sets read in slices, generators and coroutines
(their locals labelled by type), a metaclass whose ``__hash__`` must not run, dict subclasses,
and what only the roots read (a thread's frame variables, pending tasks' context variables,
finished tasks in a set, BytesIO buffers, StringIO characters: _walk.c stringio_parts under ASan),
and big strs and bytes (nodes of their own where an instance or a namespace holds them).
The graphs must be identical: the same nodes (by address: size, type, entries), the same
edges with the same labels, the same roots. Then a churn case: a thread mutates big shared
containers while the C walk reads them (no comparison: it must not crash; run under
AddressSanitizer by tests/unit/test_graph_walk.py). Prints ``ok``; exits 1 on a difference.

``--so`` loads another build of the extension (an ASan build); ``--quick`` runs one budget;
``--torch`` (torch installed) adds tensors and their autograd graphs (``build_torch``).
"""

from __future__ import annotations

import argparse
import bz2
import collections
import contextvars
import gc
import io
import json
import lzma
import os
import ssl
import sys
import threading
import time
import zlib
from typing import Any

from leakhound.payload import graph
from leakhound.payload import sizes as payload_sizes
from leakhound.payload.graph_wire import binary_pieces, json_pieces
from tests import walk_hostile as wh

HASHED = [0]


class Meta(type):
    def __hash__(cls) -> int:
        HASHED[0] += 1
        return 1


class WithMeta(metaclass=Meta):
    def __init__(self, i: int) -> None:
        self.i = [i]


class WithBuffer:
    pass


class Slotted:
    __slots__ = ("x", "y", "unset", "__weakref__")

    def __init__(self, i: int) -> None:
        self.x = [i, f"x{i}"]
        self.y = {f"k{i}": ("v" * 3, i * 1000003)}


class SubDict(dict):  # type: ignore[type-arg]
    pass


def _gen(n: int) -> Any:
    local = [n, "local"]
    yield local


async def _coro(n: int) -> Any:
    held = {"n": [n]}
    return held


HEAP: dict[str, Any] = {}
REQUEST_LOG: contextvars.ContextVar[Any] = contextvars.ContextVar("request_log")
ROOTS_DONE = threading.Event()
BYTESIO: list[Any] = []
STRINGIO: list[Any] = []
ZLIB: list[Any] = []
ARCHIVES: list[Any] = []
CONTEXTS: list[Any] = []


def _thread_with_variables(ready: threading.Event) -> None:
    """A running frame (its variables are edges of the frame's root), a cell among them."""
    pending = [[i + 100000, f"pending{i}"] for i in range(500)]  # no small ints: see compare
    blob = bytes(5000)

    def closure() -> Any:
        return pending, blob

    ready.set()
    ROOTS_DONE.wait()


async def _waiting(fut: Any) -> Any:
    held = [[100001], "held"]
    await fut
    return held


async def _finished(n: int) -> Any:
    return [[n + 100000], f"result{n}"]


def build_roots() -> None:
    """What only graph_roots.add_roots reads: a thread's running frame, pending tasks with a
    context variable, finished tasks kept in a set (not roots), BytesIO buffers (3.12+ list
    the buffer among its referents)."""
    import asyncio  # noqa: PLC0415 - here: see main (3.10)

    ready = threading.Event()
    threading.Thread(target=_thread_with_variables, args=(ready,), name="roots-worker", daemon=True).start()
    ready.wait()
    loop = asyncio.new_event_loop()
    done: set[Any] = set()

    async def setup() -> None:
        REQUEST_LOG.set([[i + 100000] for i in range(200)])
        for n in range(20):
            done.add(asyncio.ensure_future(_finished(n)))
        HEAP["waiting"] = asyncio.ensure_future(_waiting(loop.create_future()))
        await asyncio.sleep(0)
        await asyncio.gather(*done)

    loop.run_until_complete(setup())
    HEAP["finished_tasks"] = done
    HEAP["loop"] = loop
    # (also a global: two holders keep the list a node, the BytesIO folded into it)
    BYTESIO.extend(io.BytesIO(b"%d" % i + bytes(3000)) for i in range(20))
    HEAP["bytesio"] = BYTESIO
    for buf in BYTESIO[:10]:
        buf.write(b"more")  # a buffer of its own, not the bytes it was made from
    # StringIO: made with a value (a UCS4 buffer), and written to (what accumulates: 3.10/3.11
    # an accumulator's lists, 3.12+ a writer's str), none in its __sizeof__ or referents
    STRINGIO.extend(io.StringIO("x" * 3000) for _ in range(10))
    for i in range(10):
        stream = io.StringIO()
        stream.write("y" * 3000 + str(i))
        STRINGIO.append(stream)
    HEAP["stringio"] = STRINGIO
    # zlib streams: a compressor (~262 KB of zlib's state outside it), a decompressor with a
    # window, one ended (flushed: no state left to read)
    deflate, inflate, ended = zlib.compressobj(), zlib.decompressobj(), zlib.compressobj()
    deflate.compress(b"z" * 5000)
    inflate.decompress(zlib.compress(b"w" * 5000))
    ended.flush()
    ZLIB.extend((deflate, inflate, ended))
    HEAP["zlib"] = ZLIB
    # bz2 and lzma streams: a level-1 compressor (its state and 3 blocks), a decompressor
    # that has read a block, an lzma decompressor midway (liblzma's count), one flushed (bz2
    # frees its blocks only with the object: a flushed compressor keeps them)
    writer, reader, ended_bz2 = bz2.BZ2Compressor(1), bz2.BZ2Decompressor(), bz2.BZ2Compressor()
    xz, xz_writer = lzma.LZMADecompressor(), lzma.LZMACompressor(preset=0)
    xz_writer.compress(b"x" * 5000)
    writer.compress(b"b" * 5000)
    reader.decompress(bz2.compress(bytes(range(256)) * 2000)[:20000], max_length=10)
    xz.decompress(lzma.compress(bytes(range(256)) * 2000)[:20000], max_length=10)
    ended_bz2.flush()
    ARCHIVES.extend((writer, reader, xz, ended_bz2, xz_writer))
    HEAP["archives"] = ARCHIVES
    # locks: each its object and its semaphore, sized alike by both walks (sizes.LOCK_TYPES)
    HEAP["locks"] = [threading.Lock() for _ in range(20)] + [threading.RLock() for _ in range(20)]
    # SSL contexts held once by a list: never folded into it (graph.kept_types), a node each
    CONTEXTS.extend(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT) for _ in range(3))
    HEAP["contexts"] = CONTEXTS


class _Value:
    def __init__(self, i: int) -> None:
        self._value = i + 0.5
        self._exemplar_rare = None  # a name few objects reference: met once per instance's dict


class _Child:
    def __init__(self, i: int) -> None:
        self._values = [_Value(i * 16 + k) for k in range(16)]
        self._created = i + 0.25


# A metric's children, held by its table alone (folded into it): on 3.10 each instance's dict
# is split, its keys the class's (one reference for all the dicts), yet the walk meets them in
# every dict; a key met more often than its references was counted again each few meetings.
METRIC = {1000 + i: _Child(i) for i in range(300)}


def split_keys_problems(graph_: Any) -> list[str]:
    """The table's node is what its objects take, each counted once (sizes.object_size over
    what gc.get_referents reaches from it), not more."""
    from leakhound.payload import sizes

    nodes, _edges, _roots = graph_
    seen, stack, exact = {id(METRIC)}, [METRIC], sizes.object_size(METRIC)
    while stack:
        for ref in gc.get_referents(stack.pop()):
            if isinstance(ref, type) or ref is None or id(ref) in seen:
                continue
            seen.add(id(ref))
            stack.append(ref)
            exact += sizes.object_size(ref)
            if sys.version_info >= (3, 11) and type(ref) in (_Value, _Child):
                exact += sizes.instance_values_bytes(ref)  # (3.11+: its values, no dict)
    held = nodes.get(id(METRIC))
    if held is None or not 0.98 * exact <= held[0] <= 1.005 * exact:
        return [f"split keys: the metric's table is {held} for {exact} bytes"]
    return []


class Rows(list):
    """A big list subclass (read a slice at a time after what it holds itself)."""


class SlottedRows(list):
    __slots__ = ("last", "first")


class RowTuple(tuple):
    pass


class Tags(set):
    pass


class ManyFields(list):
    """Its own referents (its slots) too many to find its items after them: read whole."""

    __slots__ = tuple(f"s{k}" for k in range(300))


def _lru_row(i: int) -> tuple[str, int]:
    return (f"lru-{i}", i + 1_000_000)


def build_heap() -> None:
    HEAP["odd"] = wh.odd_sizes()
    HEAP["lies"] = wh.class_lies()
    HEAP["subclasses"] = wh.subclasses()
    HEAP["shapes"] = wh.shapes()
    HEAP["slotted"] = [Slotted(i) for i in range(300)]
    HEAP["meta"] = [WithMeta(i) for i in range(50)]
    HEAP["big_dict"] = {f"key{i}": [i, f"s{i}"] for i in range(9000)}
    HEAP["big_dict_shared"] = {f"a{i}": HEAP["slotted"][i % 7] for i in range(5000)}
    HEAP["dict_shared"] = {f"b{i}": HEAP["slotted"][i % 7] for i in range(2000)}
    HEAP["big_sub"] = collections.defaultdict(list, {f"c{i}": [i] for i in range(3000)})
    HEAP["big_list"] = [[i] for i in range(10000)] + ["shared-" * 3] * 100
    HEAP["big_set"] = frozenset(f"m{i}" for i in range(6000))
    rows = Rows([i] for i in range(6000))
    rows.note = ["a", "b"]
    HEAP["big_rows"] = rows
    slotted_rows = SlottedRows([i, i] for i in range(5000))
    # (a slot holding one of its items too is named by that slot wherever the walk meets the
    # item while the names are kept: the two walks keep them differently; unit-tested apart)
    slotted_rows.last = [-1]
    slotted_rows.first = ("first",)
    HEAP["slotted_rows"] = slotted_rows
    HEAP["row_tuple"] = RowTuple((f"t{i}", [i]) for i in range(5000))
    tags = Tags(f"tag{i}" for i in range(6000))
    tags.note = {"x": [1]}
    HEAP["tags"] = tags
    many = ManyFields([i] for i in range(5000))
    for k in range(300):
        setattr(many, f"s{k}", [k])
    HEAP["many_fields"] = many
    import functools

    lru = functools.lru_cache(maxsize=8000)(_lru_row)
    for i in range(7000):  # three references an entry: past what a traverse is read whole
        lru(i)
    HEAP["lru"] = lru
    HEAP["sub"] = SubDict(a=[1, 2], b="b" * 100, c=SubDict(d=(3,)))
    gens = [_gen(i) for i in range(5)]
    for g in gens:
        next(g)
    HEAP["gens"] = gens
    coros = [_coro(i) for i in range(3)]
    HEAP["coros"] = coros
    # big strs and bytes: an instance's and a namespace's are nodes of their own, a
    # collection's and a C object's (a BytesIO's buffer, a referent on 3.12+) are folded
    holder = WithBuffer()
    holder.pending = bytes(300 << 10) + b"p"
    HEAP["buffer_holder"] = holder
    HEAP["big_text"] = "t" * (300 << 10) + "!"
    HEAP["big_bytesio"] = io.BytesIO(bytes(300 << 10) + b"b")
    HEAP["big_in_list"] = [bytes(300 << 10) + b"l"]


def build_torch() -> None:
    """Losses kept as tensors (their autograd graphs: nodes of the walks, through ``grad_fn``
    and ``next_functions``, the tensors they saved), one summing them, and a model's
    parameters after a backward pass (a leaf's ``grad``)."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.LayerNorm(128),
                                torch.nn.Linear(128, 1))
    HEAP["torch_model"] = model
    HEAP["torch_losses"] = [model(torch.randn(16, 64)).pow(2).mean() for _ in range(20)]
    total = model(torch.randn(16, 64)).sum()
    for _ in range(10):
        total = total + model(torch.randn(16, 64)).sum()
    HEAP["torch_total"] = total
    trained = torch.nn.Linear(32, 8)
    trained(torch.randn(4, 32)).sum().backward()
    HEAP["torch_trained"] = trained
    HEAP["torch_weight"] = trained.weight  # (held twice: a node, not folded into its module)


def torch_problems(graph_: Any) -> list[str]:
    """The autograd graphs walked: the losses' ``grad_fn`` edges, their nodes and the tensors
    they saved, a trained parameter's ``grad``."""
    nodes, edges, _roots = graph_
    labels = collections.Counter(label for _src, _dst, label in edges)
    kinds = collections.Counter(name for _size, name, _n in nodes.values())
    backward = sum(n for name, n in kinds.items() if name.endswith("Backward0"))
    problems = []
    if labels["agrad_fn"] < 21 or labels["agrad"] < 1:
        problems.append(f"torch: {labels['agrad_fn']} grad_fn and {labels['agrad']} grad edges")
    if backward < 20 * 6 or kinds["AccumulateGrad"] < 4:
        problems.append(f"torch: {backward} backward nodes, {kinds['AccumulateGrad']} AccumulateGrad")
    return problems


RESULTS: list[Any] = []


def walk(compiled: bool, per_call: int | None) -> tuple[str, bytes]:
    # (None: the default, the module's own constant; a small int is shared, never a node)
    graph.CompiledGraph.work_per_call = per_call
    # The type attribute cache holds a reference to each name it caches (3.10-3.12), and which
    # entries a lookup evicts depends on the names' addresses: a module global's name can be
    # held twice (a node) in one walk and once (folded) in the next. Each walk starts empty.
    sys._clear_type_cache()
    out = graph.build(timeout=300, progress=None, is_stdlib=None, exclude=(RESULTS,), max_nodes=10_000_000,
                      max_pause_ms=None, cancelled=None, compiled=compiled)
    if out.get("walker") != ("compiled" if compiled else "python"):
        raise SystemExit(f"asked for compiled={compiled}, walked with {out.get('walker')}")
    return "".join(json_pieces({"graph": out})), b"".join(binary_pieces({"graph": out}))


def canonical(text: str, raw: bytes) -> tuple[dict[int, Any], collections.Counter[Any], list[Any]]:
    """The graph as leakhound reads it (node ids given to addresses), by address."""
    from leakhound.analysis.dominators import decode_graph

    g = decode_graph({**json.loads(text)["graph"], "binary": raw})
    ids, names, labels = list(g.ids), g.type_names, g.labels
    # a group of the payload's (atexit's callbacks, weakref.finalize's live finalizers, which
    # importing torch makes: a new list each walk) by its name, not its id
    for r in range(len(g.roots)):
        if g.is_held_group(r) or (g.roots[r][2] == "held" and g.roots[r][1] == "weakref.finalize._registry"):
            ids[g.roots[r][0]] = -1 - r
    nodes = {ids[i]: (g.sizes[i], names[g.types[i]], g.lengths[i]) for i in range(g.nodes)}
    edges: collections.Counter[Any] = collections.Counter()
    for k in range(g.edges):
        lab = g.lab[k]
        # (as a set: the compiled walk makes an edge from a collection once where several of
        # its folded entries name the same object, the Python loop one per entry)
        edges[(ids[g.src[k]], ids[g.dst[k]], labels[lab] if lab >= 0 else "")] = 1
    roots = sorted((ids[node], label, kind, tier) for node, label, kind, tier in g.roots)
    return nodes, edges, roots


LEAVES = ("int", "str", "bytes", "float", "complex")


def _leaf_bytes_by_owners(nodes: dict[int, Any], edges: collections.Counter[Any]
                          ) -> tuple[collections.Counter[frozenset[int]], dict[int, frozenset[int]]]:
    """The bytes of the leaves' nodes met from more than one node, per set of those nodes, and
    each such leaf's set."""
    sources: dict[int, set[int]] = collections.defaultdict(set)
    for src, dst, _label in edges:
        if nodes.get(dst, (0, ""))[1] in LEAVES:
            sources[dst].add(src)
    owners = {x: frozenset(s) for x, s in sources.items() if len(s) > 1}
    total: collections.Counter[frozenset[int]] = collections.Counter()
    for x, key in owners.items():
        total[key] += nodes[x][0]
    return total, owners


def compare(name: str, a: Any, b: Any) -> list[str]:
    """Identical graphs, but for a few leaves near the refcount thresholds (a leaf held once is
    folded into its container, one held more than 64 times is shared by everyone): the
    walkers' own frames hold a few small ints and names while they run (3.10 and 3.11's
    small ints are not immortal), so such a leaf can be a node for one and folded or left out
    for the other. Each such leaf may only move its own bytes and edges."""
    (an, ae, ar), (bn, be, br) = a, b
    problems = []
    if ar != br:
        problems.append(f"{name}: roots differ ({len(ar)} vs {len(br)})")
    odd = set(an) ^ set(bn)
    bad = [x for x in odd if (an.get(x) or bn.get(x))[1] not in LEAVES]
    if bad or len(odd) > 5:
        problems.append(f"{name}: nodes in one graph only: {[(x, an.get(x), bn.get(x)) for x in list(odd)[:5]]}")
    extra = ae - be, be - ae
    for which, side in zip(("the Python loop's", "the compiled walk's"), extra, strict=True):
        for src, dst, _label in side:
            if dst not in odd and (an[dst][1] not in LEAVES or sum(side.values()) > 200):
                problems.append(f"{name}: edge {src} -> {dst} {_label!r} ({an.get(dst)}) in {which} graph only")
    moved: collections.Counter[int] = collections.Counter()
    for side, sign, nodes in ((extra[0], 1, an), (extra[1], -1, bn)):
        for (src, dst, _label), n in side.items():
            # the leaf is a node on this side, its bytes folded into src on the other
            moved[src] += sign * n * nodes[dst][0]
    # A leaf met from several nodes (a str two modules hold) is a node per group of leaves met
    # from the same ones, and the groups are forgotten every LEAF_GROUPS_MAX (_graph_walk.c): a
    # walk that made one group more or fewer before (a leaf near a refcount threshold) forgets
    # them at another moment, and the group's bytes are split between other leaves' nodes, all
    # under the same owners: compared as the bytes of the leaves' nodes per set of owners.
    by_owners = _leaf_bytes_by_owners(an, ae), _leaf_bytes_by_owners(bn, be)
    for x in set(an) & set(bn):
        if an[x] != bn[x]:
            diff = bn[x][0] - an[x][0]
            if an[x][1:] == bn[x][1:] and an[x][1] in LEAVES and by_owners[0][1].get(x) == by_owners[1][1].get(x) \
                    and by_owners[0][0][by_owners[0][1][x]] == by_owners[1][0][by_owners[1][1][x]]:
                continue
            # (3.10's code objects count their zombie frame, made when the code first runs:
            # a walker's own code can grow between two walks)
            if an[x][1:] != bn[x][1:] or diff not in (moved[x], 0) and not (odd and abs(diff) <= 256) and not (
                    an[x][1] == "code" and sys.version_info < (3, 11)):
                problems.append(f"{name}: node {x} differs: {an[x]} vs {bn[x]}")
    return problems[:10]


def roots_problems(graph_: Any) -> list[str]:
    """What build_roots made, as the graph must show it: the thread's variables named (3.11+;
    3.10's frames list their locals as referents), the pending task's context variable, the
    finished tasks not roots (reached through the set), each BytesIO buffer once."""
    nodes, edges, roots = graph_
    labels = {label for (_src, _dst, label) in edges}
    want = {"crequest_log"} | ({"apending", "ablob"} if sys.version_info >= (3, 11) else set())
    problems = [f"roots: no edge labelled {label!r}" for label in sorted(want - labels)]
    tasks = [r for r in roots if r[2] == "task"]
    if len(tasks) != 1 or not tasks[0][1].endswith("/_waiting"):
        problems.append(f"roots: the pending task only, not {tasks}")
    if not any(r[1] == "thread:roots-worker/_thread_with_variables" for r in roots):
        problems.append("roots: the thread's frame is no root")
    # The 20 BytesIO are folded into their list (it alone holds them): each ~3,000-byte buffer
    # counted once there, in its BytesIO's __sizeof__ (3.10, 3.11) or as its only referent
    # (3.12+), not both (~6,000 bytes a BytesIO)
    held = nodes.get(id(BYTESIO))
    if held is None or not 20 * 3000 < held[0] < 20 * (3000 + 1000):
        problems.append(f"roots: the BytesIO list's size {held}")
    # each StringIO's characters: 10 buffers of 3,001 UCS4 characters, 10 strs of 3,000 or more
    held = nodes.get(id(STRINGIO))
    if held is None or not 10 * 12000 + 10 * 3000 < held[0] < 10 * 13000 + 10 * 8000:
        problems.append(f"roots: the StringIO list's size {held}")
    # the zlib streams' state: 5,936 + 4 x 65,536 deflating, 7,144 inflating (a stream inflated
    # to its end in one call never needed a window), none ended
    held = [nodes.get(id(ZLIB))] + [nodes.get(id(stream)) for stream in ZLIB]
    total = sum(node[0] for node in held if node is not None)
    if not 262144 + 5936 + 7144 < total < 262144 + 5936 + 7144 + 4000:
        problems.append(f"roots: the zlib streams' sizes {held}")
    missing = [c for c in CONTEXTS if id(c) not in nodes]
    if missing:
        problems.append(f"roots: {len(missing)} SSL contexts folded into their list, not nodes")
    # bz2's: 2 x 400,136 + 262,148 + ~55,800 writing at level 1 (7.5 MB at level 9, flushed
    # or not), ~64,000 + 3.6 MB reading a block of bz2.compress's (level 9); lzma's: its
    # dictionary (8 MiB) and coders, and liblzma's count for a preset 0 encoder
    held = [nodes.get(id(ARCHIVES))] + [nodes.get(id(stream)) for stream in ARCHIVES]
    total = sum(node[0] for node in held if node is not None)
    least = 1118000 + 7518000 + 3664000 + 8388608 + 2855431  # (+ the preset 0 xz encoder's count)
    if "asan" in os.environ.get("LD_PRELOAD", ""):
        # (no glibc chunks under AddressSanitizer's allocator: bz2's blocks and the encoder's
        # coder read as none)
        least = 8388608
    if not least < total < least + 200000:
        problems.append(f"roots: the bz2/lzma streams' sizes {held}")
    return problems


def churn() -> None:
    """A thread mutates big shared containers while the C walk reads them in slices."""
    shared = [[i] for i in range(20000)]
    table = {i: [i] for i in range(20000)}
    HEAP["churn"] = [shared, table]
    stop = threading.Event()

    def mutate() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            shared[n % len(shared)] = [n]
            if n % 3 == 0:
                table.pop(n % 20000, None)
            else:
                table[n % 20000] = [n]
            if n % 5000 == 0:
                del shared[:100]
                shared.extend([i] for i in range(100))
            if n % 200 == 0:
                time.sleep(0)

    thread = threading.Thread(target=mutate, daemon=True)
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # the GIL changes hands between most calls
    thread.start()
    try:
        for per_call in (7, 500):
            walk(True, per_call)
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(old)
        del HEAP["churn"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--so", help="another build of _walk.abi3.so to load instead of the package's")
    parser.add_argument("--quick", action="store_true", help="one per-call budget (the default)")
    parser.add_argument("--torch", action="store_true", help="with tensors and their autograd graphs (torch installed)")
    args = parser.parse_args(argv)
    if args.so:
        graph._walk_module = wh.load_walk(args.so)
        # (the classes the payload's walks know, given to it as the payload gives its own module
        # at each walk: sizes.native_types calls known_types on the module it imported)
        imported = payload_sizes._compiled_walk
        payload_sizes._compiled_walk = graph._walk_module
        try:
            payload_sizes.native_types()
        finally:
            payload_sizes._compiled_walk = imported
    if graph._walk_module is None:
        print("the C walk is not built here", file=sys.stderr)
        return 2
    print(f"Python {sys.version.split()[0]}, {graph._walk_module.__file__}", file=sys.stderr)
    build_heap()
    if args.torch:
        build_torch()
    if sys.version_info >= (3, 11):
        # (3.10: with asyncio imported, more of its small ints, which are not immortal there,
        # sit near the walks' reference thresholds than compare() lets differ)
        build_roots()
    # The objects held from C are not looked for: gc.get_objects() would list this run's own
    # transient objects, different for each walker.
    graph.held_from_c = lambda graph, stack: None
    default = None
    budgets = (default,) if args.quick else (1, 7, default)
    problems: list[str] = []
    # A first walk of each kind: what the first walk imports and caches is there for all.
    walk(False, default)
    walk(True, default)
    # Every compared walk from the same generator: a code object is folded into the tuple of
    # constants holding it when nothing else does, and a running generator holds its own.
    RESULTS.extend(walk(compiled, per_call) for compiled, per_call in ((False, default),
                                                                       *((True, b) for b in budgets)))
    python = canonical(*RESULTS[0])
    problems += split_keys_problems(python)
    if sys.version_info >= (3, 11):
        problems += roots_problems(python)
    if args.torch:
        problems += torch_problems(python)
    for per_call, result in zip(budgets, RESULTS[1:], strict=True):
        problems += compare(f"per call {per_call or graph._WORK_PER_CALL}", python, canonical(*result))
    if wh.SIZEOF_CALLS[0]:
        problems.append(f"a __sizeof__ written in Python ran {wh.SIZEOF_CALLS[0]} times")
    if HASHED[0]:
        problems.append(f"a metaclass __hash__ ran {HASHED[0]} times")
    churn()
    for coro in HEAP["coros"]:
        coro.close()
    ROOTS_DONE.set()
    if "loop" in HEAP:
        HEAP["waiting"].cancel()
        HEAP["loop"].run_until_complete(HEAP["waiting"].get_loop().shutdown_asyncgens())
        HEAP["loop"].close()
    for problem in problems:
        print(problem)
    if problems:
        return 1
    print(f"{len(python[0])} nodes, {sum(python[1].values())} edges", file=sys.stderr)
    print("ok")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
