"""The object graph's compiled walk (``_graph_walk.c`` in ``_walk.abi3.so``) against its Python
loop, on every CPython here, and under AddressSanitizer; and the graph's binary wire."""

from __future__ import annotations

import collections
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from leakhound.analysis import dominators
from leakhound.payload import graph
from leakhound.payload.graph_wire import BINARY_FILE, binary_pieces, json_pieces
from tests.native_target import native_python
from tests.pythons import installed_pythons
from tests.unit.test_walk_versions import _asan_runtime, build_asan_walk
from tests.utils import block_size

ROOT = Path(__file__).resolve().parents[2]
PYTHONS = installed_pythons()
WALK_SO = Path(graph.__file__).with_name("_walk.abi3.so")
THIS = f"{sys.version_info[0]}.{sys.version_info[1]}"


def _hostile(python: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([python, "-m", "tests.graph_hostile", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env={**os.environ, **(env or {})})


@pytest.mark.integration  # a subprocess per interpreter, ~3 s each
@pytest.mark.skipif(not WALK_SO.exists(), reason="the C walk was not built here")
@pytest.mark.parametrize("version", list(PYTHONS))
def test_the_compiled_graph_walk_matches_the_python_loop(version: str) -> None:
    run = _hostile(PYTHONS[version])
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert f"Python {version}." in run.stderr and "_walk.abi3.so" in run.stderr
    assert run.stdout.strip().endswith("ok")


@pytest.mark.integration  # ~25 s: torch's import, its graphs
@pytest.mark.skipif(not WALK_SO.exists(), reason="the C walk was not built here")
def test_the_compiled_graph_walk_matches_the_python_loop_on_autograd_graphs() -> None:
    """Kept losses' autograd graphs are nodes of both walks (each node's next nodes and saved
    tensors its hidden referents, a tensor's ``grad_fn`` and a leaf's ``grad`` named edges):
    the same graph from both."""
    run = _hostile(native_python("3.11", torch=True), "--torch", "--quick")
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert run.stdout.strip().endswith("ok")


@pytest.mark.integration
@pytest.mark.skipif(_asan_runtime() is None, reason="no gcc with libasan here")
def test_the_graph_walk_under_address_sanitizer(tmp_path: Path) -> None:
    """This interpreter only (one build; test_walk_versions runs the census's helpers under
    ASan on every version): ~8 s."""
    ext = build_asan_walk(tmp_path / "_walk.abi3.so")
    env = {"LD_PRELOAD": str(_asan_runtime()), "ASAN_OPTIONS": "detect_leaks=0", "PYTHONMALLOC": "malloc"}
    run = _hostile(PYTHONS[THIS], "--so", str(ext), env=env)
    assert "AddressSanitizer" not in run.stderr, run.stderr[-4000:]
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]


KEEP = {"graph_walk_test": [[i, f"x{i}"] for i in range(3000)]}
# Half of KEEP's lists held twice: nodes; the other half held by KEEP's list alone: folded into it.
KEEP_TWICE = KEEP["graph_walk_test"][:1500]


@pytest.mark.parametrize("compiled", [True, False])
def test_the_arrays_travel_raw_and_read_back(compiled: bool, tmp_path: Path) -> None:
    """Over the socket: the JSON line says how many bytes follow; on the debugger's path the
    bytes are in graph.bin beside the JSON. No array is in the JSON, as numbers or base64."""
    if compiled and graph._walk_module is None:
        pytest.skip("the C walk was not built here")
    out = graph.build(timeout=60, progress=None, is_stdlib=None, exclude=(), max_nodes=5_000_000, max_pause_ms=1,
                      cancelled=None, compiled=compiled)
    assert out["walker"] == ("compiled" if compiled else "python")
    answer = {"result": {"ok": True, "graph": out}}
    line = json.loads("".join(json_pieces(answer)))
    meta = line["result"]["graph"]
    raw = b"".join(binary_pieces(answer))
    assert meta["binary_bytes"] == len(raw) and not set(meta) & {"sizes", "edge_src", "_binary"}
    # graph.bin: the C walk writes its blocks in one call, the GIL released (graph_write); the
    # same bytes as the pieces the socket sends
    assert (out["_binary"].write_fd is not None) == compiled
    written = json.loads("".join(json_pieces({"graph": out}, binary_dir=str(tmp_path))))["graph"]
    assert written["binary_file"] == BINARY_FILE and (tmp_path / BINARY_FILE).read_bytes() == raw
    g = dominators.decode_graph({**meta, "binary": raw})
    assert g.nodes == meta["nodes"] > 3000 and g.edges == meta["edges"]
    assert len(g.sizes) == len(g.ids) == g.nodes and len(g.src) == len(g.lab) == g.edges
    # the lists held twice are nodes, each with its folded str; the others are folded into
    # the list that alone holds them, their strs with them
    held = {id(x) for x in KEEP_TWICE}
    assert sum(1 for i in range(g.nodes) if g.ids[i] in held and g.lengths[i] == 2) == 1500
    alone = KEEP["graph_walk_test"][1500:]
    assert not {id(x) for x in alone} & set(g.ids)
    # (KEEP, a dict of one entry, keeps its big list a node: what the owners' search names)
    ids = list(g.ids)
    assert g.sizes[ids.index(id(KEEP))] == block_size(KEEP)
    big = ids.index(id(KEEP["graph_walk_test"]))
    assert g.lengths[big] == 3000
    assert g.sizes[big] == block_size(KEEP["graph_walk_test"]) + sum(
        block_size(x) + block_size(x[1]) + (block_size(x[0]) if x[0] > 256 else 0) for x in alone)
    with pytest.raises(dominators.GraphError):
        dominators.decode_graph({**meta, "binary": raw[:-8]})


def _this_process(compiled: bool) -> dominators.ObjectGraph:
    """This process's graph, walked by the C walk (``compiled``) or the Python loop."""
    if compiled and graph._walk_module is None:
        pytest.skip("the C walk was not built here")
    out = graph.build(timeout=60, progress=None, is_stdlib=None, exclude=(), max_nodes=5_000_000, max_pause_ms=1,
                      cancelled=None, compiled=compiled)
    return dominators.decode_graph({**out, "binary": b"".join(binary_pieces({"result": {"graph": out}}))})


# A dict of a few named parts, one of them a small dict of shards (each a dict of 20 records).
KEEP_NESTED = {"users": {shard: {f"u{shard}.{i}": [i] for i in range(20)} for shard in range(3)}, "name": "w"}


@pytest.mark.parametrize("compiled", [True, False])
def test_a_small_collection_folds_none_of_its_entries(compiled: bool) -> None:
    """``KEEP_NESTED['users']`` (3 entries) and its shards are nodes: folded into the dict of
    two named parts, the leak's owner was that dict, 1 item (``watch``: 0 items/min). A
    shard has more than 16 entries: its records are folded into it."""
    g = _this_process(compiled)
    ids = list(g.ids)
    users = KEEP_NESTED["users"]
    assert isinstance(users, dict)
    assert g.lengths[ids.index(id(users))] == 3
    for shard in users.values():
        k = ids.index(id(shard))
        assert g.lengths[k] == 20 and g.sizes[k] > 20 * 56  # its records' lists folded in
        assert not {id(v) for v in shard.values()} & set(ids)


KEEP_ORDERED = collections.OrderedDict((f"o{i}", [i, i]) for i in range(40))
KEEP_DEFAULT = collections.defaultdict(list, {f"d{i}": [i] for i in range(30)})


class CallList(list):  # (unittest.mock's _CallList: a list subclass with attributes of its own)
    def __len__(self) -> int:
        raise AssertionError("a subclass's __len__ ran in the walk")


KEEP_CALLS = CallList([i, f"c{i}"] for i in range(25))
KEEP_CALLS.note = ["x"] * 5  # type: ignore[attr-defined]
KEEP_PAIRS = collections.deque([i, i] for i in range(35))


@pytest.mark.parametrize("compiled", [True, False])
def test_a_collection_subclass_has_as_many_entries_as_it_has_items(compiled: bool) -> None:
    """An OrderedDict's owner row said 2x its length: its keys and values were counted as its
    children when the walk gave dict subclasses no entry count."""
    g = _this_process(compiled)
    ids = list(g.ids)
    assert g.lengths[ids.index(id(KEEP_ORDERED))] == 40
    assert g.lengths[ids.index(id(KEEP_DEFAULT))] == 30
    # a list subclass its length (it said 0: the watch could not count mock's call lists), a
    # deque its length (3.12+'s traverse visits its type too: one more)
    assert g.lengths[ids.index(id(KEEP_CALLS))] == 25
    assert g.lengths[ids.index(id(KEEP_PAIRS))] == 35


class Connection:
    def __init__(self) -> None:
        self.peer = "10.0.0.7"
        self.pending = bytes(300 << 10) + b"p"  # (a new object: no constant of the module's)
        self.small = bytes(100 << 10) + b"s"


KEEP_CONNECTION = Connection()
KEEP_BIG_GLOBAL = "g" * (400 << 10) + "!"
KEEP_BYTESIO = io.BytesIO(bytes(300 << 10))  # (its buffer a referent on 3.12+: a C field)
KEEP_BIG_ROWS = [bytes(300 << 10) + bytes([i]) for i in range(3)] + [[i] for i in range(20)]


@pytest.mark.parametrize("compiled", [True, False])
def test_a_big_str_or_bytes_of_an_instance_or_namespace_is_a_node_of_its_own(compiled: bool) -> None:
    """A buffer an instance grows (``self.pending += chunk``) was folded into the instance (its
    owner the connection, or ``__main__`` for a global): a str or bytes of 256 KiB or more that
    an instance or a namespace alone holds is a node, with its edge from its holder (named
    ``.pending``); a smaller one stays its holder's, a collection's big entries its own, and a
    C object's (an io.BytesIO's buffer: owner ``EXTRA['log'].<bytes>`` on 3.12+ otherwise)."""
    g = _this_process(compiled)
    ids = list(g.ids)
    for big in (KEEP_CONNECTION.pending, KEEP_BIG_GLOBAL):
        k = ids.index(id(big))
        assert g.sizes[k] >= 300 << 10 and g.type_of(k) in ("bytes", "str")
        assert any(g.dst[e] == k for e in range(len(g.dst)))  # an edge to it
    assert id(KEEP_CONNECTION.small) not in ids
    assert not {id(v) for v in KEEP_BIG_ROWS[:3]} & set(ids)
    # a C object's big buffer is its own: the owner is the BytesIO, not its ``.<bytes>``
    k = ids.index(id(KEEP_BYTESIO))
    assert g.sizes[k] >= 300 << 10 and not any(g.type_of(g.dst[e]) == "bytes" for e in range(len(g.dst))
                                               if g.src[e] == k)
    assert g.sizes[ids.index(id(KEEP_BIG_ROWS))] > 3 * (300 << 10)


@pytest.mark.parametrize("compiled", [True, False])
def test_a_walk_over_its_memory_budget_is_skipped_not_cut(compiled: bool) -> None:
    if compiled and graph._walk_module is None:
        pytest.skip("the C walk was not built here")
    out = graph.build(timeout=60, progress=None, is_stdlib=None, exclude=(), max_nodes=5_000_000, max_pause_ms=1,
                      cancelled=None, compiled=compiled, max_bytes=1 << 20)
    assert set(out) == {"format", "skipped", "skipped_code", "max_nodes"}
    assert "over its memory budget of 1 MiB" in out["skipped"] and out["skipped_code"] == "graph_over_memory_budget"


@pytest.mark.parametrize("compiled", [True, False])
def test_a_process_with_many_kept_classes_is_walked(compiled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker with ssl, sqlite3, lxml, zstandard (eight classes), grpc, pydantic-core and two
    pybind11 ABIs loaded had 18 classes to keep as nodes: the C walk refused more than 16 and
    every inspection failed ("graph_keep_types: too many types"). 80 such classes, some twice:
    each kept once, up to the walk's limit, and the walk goes on."""
    if compiled and graph._walk_module is None:
        pytest.skip("the C walk was not built here")
    classes = [type(f"Kept{i}", (), {}) for i in range(80)]
    monkeypatch.setattr(graph, "struct_classes", lambda: [("k", cls, "/x.so") for cls in classes + classes[:5]])
    kept = graph.kept_types()
    assert len(kept) == graph._MAX_KEPT_TYPES and len({id(cls) for cls in kept}) == len(kept)
    out = graph.build(timeout=60, progress=None, is_stdlib=None, exclude=(), max_nodes=5_000_000, max_pause_ms=1,
                      cancelled=None, compiled=compiled)
    assert "skipped" not in out and out["nodes"] > 1000


SPOOLED: dict[str, list[list[object]]] = {}


def test_the_records_leave_the_target_as_the_walk_goes(tmp_path: Path) -> None:
    """With a spool (the debugger path's graph.bin), the C walk writes its full blocks of
    records out each time it yields and frees them: what it holds in the target at the end is
    a few blocks and its bitmaps, not the graph; the file, completed when the result is
    written, reads back as the whole graph."""
    if graph._walk_module is None:
        pytest.skip("the C walk was not built here")
    SPOOLED["rows"] = [[i, f"row{i}"] for i in range(200_000)]  # ~200k nodes: blocks of 64Ki fill
    SPOOLED["again"] = list(SPOOLED["rows"])  # each row held twice: a node, not folded
    try:
        kept = graph.build(timeout=120, progress=None, is_stdlib=None, exclude=(), max_nodes=5_000_000,
                           max_pause_ms=1, cancelled=None)
        out = graph.build(timeout=120, progress=None, is_stdlib=None, exclude=(), max_nodes=5_000_000,
                          max_pause_ms=1, cancelled=None, spool_dir=str(tmp_path))
        spool = tmp_path / BINARY_FILE
        during = spool.stat().st_size
        # what it holds is its bitmaps, maps and a few blocks: most of what it wrote is gone
        assert during > 0 and kept["payload_peak_bytes"] - out["payload_peak_bytes"] > 0.6 * during
        meta = json.loads("".join(json_pieces({"graph": out}, binary_dir=str(tmp_path))))["graph"]
        raw = spool.read_bytes()
        assert meta["binary_file"] == BINARY_FILE and meta["binary_bytes"] == len(raw) > during
        assert meta["node_keys"] == "address"
        g = dominators.decode_graph({**meta, "binary": raw})
        assert g.nodes == meta["nodes"] > 200_000 and g.edges == meta["edges"]
        assert g.info["edges_without_node"] == 0
        rows = [i for i in range(g.nodes) if g.type_of(i) == "list" and g.lengths[i] == 2]
        assert len(rows) >= 200_000
        # each node once, node 0 the super-root, every root a node
        assert len(set(g.ids)) == g.nodes and g.ids[0] == 0 and all(0 < r[0] < g.nodes for r in g.roots)
    finally:
        SPOOLED.clear()


@pytest.mark.skipif(graph._walk_module is None, reason="the C walk was not built here")
def test_the_records_between_two_yields_leave_once_past_a_quarter_mib(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """With the default pause budget the walk yields every ~25 ms, and wrote its records out
    only then: a registry's folded sessions made ~1.3 MiB of them in one stretch, the biggest
    part of what the walk held in the target. Past FLUSH_HELD_BYTES they leave at once."""
    SPOOLED["rows"] = {f"s{i}": [i, f"row{i}", (i, i)] for i in range(300_000)}  # each folded into it
    most = [0]
    check = graph.CompiledGraph.check

    def watched(self: Any) -> None:
        most[0] = max(most[0], graph._walk_module.graph_info(self.store)[5])
        check(self)

    monkeypatch.setattr(graph.CompiledGraph, "check", watched)
    monkeypatch.setattr(graph.CompiledGraph, "work_per_call", 2000)  # a call's records: well under 256 KiB
    try:
        out = graph.build(timeout=120, progress=None, is_stdlib=None, exclude=(), max_nodes=5_000_000,
                          max_pause_ms=50, cancelled=None, spool_dir=str(tmp_path))
        assert out["nodes"] > 0 and (tmp_path / BINARY_FILE).stat().st_size > 4 * graph.CompiledGraph.FLUSH_HELD_BYTES
        # at most the threshold and what one call added to it
        assert most[0] < graph.CompiledGraph.FLUSH_HELD_BYTES + (128 << 10), most[0]
    finally:
        SPOOLED.clear()


def test_a_graph_not_sent_leaves_no_spool_behind(tmp_path: Path) -> None:
    if graph._walk_module is None:
        pytest.skip("the C walk was not built here")
    out = graph.build(timeout=60, progress=None, is_stdlib=None, exclude=(), max_nodes=100, max_pause_ms=1,
                      cancelled=None, spool_dir=str(tmp_path))
    assert "skipped" in out and not list(tmp_path.iterdir())


def _frames_of(columns: dict[str, Any], rng: Any) -> bytes:
    """The columns as the walk spools them: frames of a column each, interleaved."""
    import struct

    from leakhound.analysis.dominators import graph as wire

    codes = {key: code for code, (key, _) in enumerate(wire.FRAME_COLUMNS)}
    raw, at = bytearray(), dict.fromkeys(columns, 0)
    while any(at[k] < len(v) for k, v in columns.items()):
        for key, column in columns.items():
            part = column[at[key]:at[key] + rng.randint(0, 700)]
            at[key] += len(part)
            raw += struct.pack("=II", codes[key], len(part)) + part.tobytes()
    return bytes(raw)


def _read_in_pieces(raw: bytes, roots: list[int], compiled: Any, rng: Any) -> tuple[Any, ...]:
    from leakhound.analysis.dominators import graph as wire

    saved, wire._compiled = wire._compiled, compiled
    try:
        records = wire.Records()
        at = 0
        while at < len(raw):  # cut anywhere, in a frame's header or its items too
            step = rng.randint(1, 3000)
            records.feed(raw[at:at + step])
            at += step
        arrays, n, root_ids, dropped = records.finish(roots, by_address=True)
    finally:
        wire._compiled = saved
    return n, root_ids, dropped, {k: list(v) for k, v in arrays.items() if not k.endswith("_address")}


def test_addresses_resolve_the_same_in_c_and_python() -> None:
    """leakhound gives the compiled walk's addresses their node ids: a node's first record its
    id, its last its size; an edge to an address without a record is left out."""
    import array
    import random

    from leakhound.analysis.dominators import graph as wire

    columns = {"ids": array.array("q", [0, 0x1000, 0x2000, 0x1000]), "sizes": array.array("q", [0, 8, 16, 24]),
               "types": array.array("i", [0, 1, 2, 1]), "lengths": array.array("i", [0, 0, 0, 3]),
               "edge_src_address": array.array("q", [0, 0x1000, 0x1000]),
               "edge_dst_address": array.array("q", [0x1000, 0x2000, 0x3000]),
               "edge_label": array.array("i", [-1, 4, 5])}
    raw = _frames_of(columns, random.Random(1))
    results = [_read_in_pieces(raw, [0x2000, 0x4000], compiled, random.Random(2))
               for compiled in (wire._compiled, None)]
    assert results[0] == results[1]
    n, roots, dropped, got = results[0]
    assert (n, roots, dropped) == (3, [2, -1], 1)
    assert got["ids"] == [0, 0x1000, 0x2000] and got["sizes"] == [0, 24, 16] and got["lengths"] == [0, 3, 0]
    assert (got["edge_src"], got["edge_dst"], got["edge_label"]) == ([0, 1], [1, 2], [-1, 4])


@pytest.mark.parametrize(("seed", "nodes"), [(3, 5000), (4, 5000), (5, 70000)])  # the last: past 65536
def test_records_read_as_they_come_give_what_one_reading_gives(seed: int, nodes: int) -> None:
    """graph.bin read while the walk writes it, in pieces cut anywhere: the compiled reader
    (node records taken in as they come, edges looked up when both ends have a record, the
    rest again as the nodes grow, past 65536 of them, and at the end) gives the ids, sizes and
    edges, in order, that the Python twin gives reading the whole file at once, records
    repeated and edges to nowhere included."""
    import array
    import random

    from leakhound.analysis.dominators import graph as wire

    if wire._compiled is None:
        pytest.skip("the compiled reader was not built here")
    rng = random.Random(seed)
    addresses = [0] + [0x10000 + 16 * i for i in range(nodes)]
    records = [(a, rng.randint(16, 500), rng.randint(0, 9), rng.randint(0, 5))
               for a in addresses + rng.sample(addresses, nodes // 10)]
    nowhere = 0x10000 + 16 * (nodes + 7)
    ends = addresses + [nowhere]
    edges = [(rng.choice(ends), rng.choice(ends), rng.randint(-1, 50)) for _ in range(4 * nodes)]
    columns = {"ids": array.array("q", [r[0] for r in records]), "sizes": array.array("q", [r[1] for r in records]),
               "types": array.array("i", [r[2] for r in records]), "lengths": array.array("i", [r[3] for r in records]),
               "edge_src_address": array.array("q", [e[0] for e in edges]),
               "edge_dst_address": array.array("q", [e[1] for e in edges]),
               "edge_label": array.array("i", [e[2] for e in edges])}
    raw = _frames_of(columns, rng)
    roots = [0x10000, nowhere, 0x10010]
    compiled = _read_in_pieces(raw, roots, wire._compiled, rng)
    assert compiled == _read_in_pieces(raw, roots, None, rng)
    n, root_ids, dropped, got = compiled
    assert n == len(addresses) and root_ids == [1, -1, 2]
    assert dropped == sum(1 for a, b, _ in edges if nowhere in (a, b)) > 0
    with pytest.raises(wire.GraphError):  # cut short
        cut = wire.Records()
        cut.feed(raw[:-3])
        cut.finish(roots, by_address=True)


def test_a_spooled_graph_dropped_unsent_closes_its_file(tmp_path: Path) -> None:
    """A request that stops between the walk and its answer (cancelled, a probe failing)
    drops the graph: its spool's descriptor is closed, none is left open in the target."""
    if graph._walk_module is None:
        pytest.skip("the C walk was not built here")
    before = set(os.listdir("/proc/self/fd"))
    out = graph.build(timeout=60, progress=None, is_stdlib=None, exclude=(), max_nodes=5_000_000, max_pause_ms=1,
                      cancelled=None, spool_dir=str(tmp_path))
    assert out["_binary"].spool is not None and set(os.listdir("/proc/self/fd")) != before
    out = None
    assert set(os.listdir("/proc/self/fd")) == before


_TALLIES = r"""
import collections, json, sys
from leakhound.payload import graph
from leakhound.payload.sizes import object_block

def block_size(obj):
    return object_block(type(obj), sys.getsizeof(obj))

def walk():
    out = graph.build(timeout=60, progress=None, is_stdlib=lambda n: False, exclude=(), max_nodes=5_000_000,
                      max_pause_ms=None, cancelled=None)
    t = out.pop("_census")
    by = collections.Counter()
    for i, n in enumerate(t["counts"]):
        by[t["names"][i]] += n
    sizes = collections.Counter()
    for i, n in enumerate(t["bytes"]):
        sizes[t["names"][i]] += n
    return by, sizes, t

class Probe:
    pass

class Pair(tuple):
    pass

walk()  # the payload's caches made by a first walk are there for both walks below
before, before_bytes, _ = walk()
_ = None
SHARED = complex(1.5, 2)  # referenced 2000 times: no node, counted once
SOME = complex(2.5, 3)  # 2..64 references: a node of its own, counted once
PROBES = []
for i in range(1000):
    p = Probe()
    p.value = float(i) + 0.5  # held once: folded into its instance, counted
    p.shared = SHARED
    p.pair = Pair((SHARED, SOME if i < 10 else None))
    PROBES.append(p)
p = i = None
after, after_bytes, t = walk()
print(json.dumps({"probe": [after["__main__.Probe"] - before["__main__.Probe"],
                            after_bytes["__main__.Probe"] - before_bytes["__main__.Probe"]],
                  "float": after["float"] - before["float"],
                  "float_bytes": after_bytes["float"] - before_bytes["float"],
                  "pair": after["__main__.Pair"] - before["__main__.Pair"],
                  "complex": after["complex"] - before["complex"],
                  "probe_size": block_size(Probe()), "float_size": block_size(0.5),
                  "tuple_size": block_size((1, 2)),
                  "objects": t["objects"], "sum": sum(t["counts"]), "total": t["total_bytes"],
                  "sum_bytes": sum(t["bytes"])}))
"""


@pytest.mark.skipif(graph._walk_module is None, reason="the C walk was not built here")
def test_the_walk_counts_each_object_once_by_type() -> None:
    """What the compiled walk counts on the way (runner._counted_in_graph): two walks of one
    process, a known set of objects made between them; each counted once, at its own size:
    a leaf held once (folded into its container's record), a leaf shared by thousands (no
    node), a leaf held ten times (a node), the instances and their pairs."""
    run = subprocess.run([sys.executable, "-c", _TALLIES], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    assert got["probe"][0] == 1000
    assert got["probe"][1] >= 1000 * got["probe_size"]  # and their values (3.11+: not a dict)
    assert got["float"] == 1000 and got["float_bytes"] == 1000 * got["float_size"]
    assert got["pair"] == 1000
    assert got["complex"] == 2  # SHARED and SOME, once each
    assert got["objects"] == got["sum"] and got["total"] == got["sum_bytes"]


_CANCELLED = r"""
import json, sys, types
from leakhound.payload import graph

real = graph._walk_module
calls = [0]
during = []
planted = types.ModuleType("planted_roots")
for i in range(5000):
    setattr(planted, "c%d" % i, [[i]])
sys.modules["planted_roots"] = planted
values = [planted.__dict__] + [getattr(planted, "c%d" % i) for i in range(5000)]
before = [sys.getrefcount(v) for v in values]


class Counting:
    def __getattr__(self, name):
        return getattr(real, name)

    def graph_walk(self, *args):
        calls[0] += 1
        done = real.graph_walk(*args)
        if calls[0] == 3:
            during.extend(sys.getrefcount(v) for v in values)
        return done


graph._walk_module = Counting()
graph.CompiledGraph.work_per_call = 50
try:
    graph.build(timeout=60, progress=None, is_stdlib=None, exclude=(values,), max_nodes=10_000_000,
                max_pause_ms=None, cancelled=lambda: calls[0] >= 3, compiled=True)
except graph.GraphCancelled:
    pass
else:
    raise SystemExit("the walk was not cancelled")
after = [sys.getrefcount(v) for v in values]
print(json.dumps({"calls": calls[0], "held_during": sum(d > b for d, b in zip(during, before)),
                  "held_after": sum(a != b for a, b in zip(after, before))}))
"""


@pytest.mark.skipif(graph._walk_module is None, reason="the C walk was not built here")
def test_a_walk_cancelled_midway_lets_go_of_what_it_had_still_to_walk() -> None:
    # The containers still to walk live on the graph's own stack (strong references in C);
    # a walk stopped between two calls drops them (graph_close), as the list once did.
    run = subprocess.run([sys.executable, "-c", _CANCELLED], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout)
    assert got["calls"] == 3
    assert got["held_during"] > 0  # the planted module's dict, or its lists, on the stack then
    assert got["held_after"] == 0


_REACHED = r"""
import gc, json
from leakhound.payload import graph

def bit(regions, obj=None, address=None):
    address = id(obj) if address is None else address
    region = regions.get(address >> 20)
    return bool(region is not None and region[(address & 0xFFFFF) >> 7] & (1 << ((address >> 4) & 7)))

gc.disable()
KEPT = [[i] for i in range(100)]
SHARED = "shared-name"
HOLDERS = [(SHARED,) for _ in range(100)]  # a leaf referenced over 64 times: no node, counted
cycle = [None]
cycle[0] = cycle  # garbage: no root reaches it, nothing outside holds it
garbage_address = id(cycle)
del cycle
regions = {}
out = graph.build(timeout=120, progress=None, is_stdlib=None, exclude=(regions,), max_nodes=10_000_000,
                  max_pause_ms=None, cancelled=None, compiled=True, reached=regions)
print(json.dumps({"examined": bool(out["unreached"].get("examined")), "regions": len(regions),
                  "kept": all(bit(regions, x) for x in KEPT), "shared": bit(regions, SHARED),
                  "garbage": bit(regions, address=garbage_address)}))
"""


@pytest.mark.skipif(graph._walk_module is None, reason="the C walk was not built here")
def test_what_the_walk_reached_is_handed_over_as_the_census_bitmap() -> None:
    # runner._snapshot_graph_first: the census after the graph splits only what it did not
    # reach. The nodes and the shared leaves it counted are marked; what nothing reaches is not.
    run = subprocess.run([sys.executable, "-c", _REACHED], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout)
    assert got["examined"] and got["regions"] > 0
    assert got["kept"] and got["shared"]
    assert not got["garbage"]


# verifiers' trajectory steps: a response's prompt token ids and the step's own list of the same
# ints (pydantic's model_dump and verifiers' serializable copy the list, not its ints), ~55k a
# list on the real worker at 2 GB; both lists folded into the registry that alone holds them.
STEPS: dict[str, list[dict[str, Any]]] = {}


# The compiled walk where it was built, and the Python loop.
WALKS = pytest.mark.parametrize("compiled", [
    pytest.param(True, marks=pytest.mark.skipif(graph._walk_module is None, reason="the C walk was not built here")),
    False,
])


def _walked_steps(compiled: bool, exclude: tuple[object, ...]) -> tuple[dominators.ObjectGraph, int]:
    """STEPS walked into an object graph, read as the CLI reads it, and the bytes STEPS alone
    holds (``_deep``); STEPS is emptied after. ``exclude``: what the walk leaves out."""
    try:
        out = graph.build(timeout=120, progress=None, is_stdlib=None, exclude=exclude, max_nodes=5_000_000,
                          max_pause_ms=None, cancelled=None, compiled=compiled)
        answer = {"result": {"ok": True, "graph": out}}
        meta = json.loads("".join(json_pieces(answer)))["result"]["graph"]
        return dominators.decode_graph({**meta, "binary": b"".join(binary_pieces(answer))}), _deep(STEPS)
    finally:
        STEPS.clear()


def _deep(root: object) -> int:
    seen: set[int] = set()
    stack, total = [root], 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        total += block_size(obj)
        if isinstance(obj, dict):
            stack.extend(obj.values())  # (the keys are interned constants, shared)
        elif isinstance(obj, list):
            stack.extend(obj)
    return total


def _list_length(compiled: bool) -> int:
    """Ints a list of the leaf tests holds: the Python loop has no step that depends on how
    long a list is (only on how many leaves wait at once, _PENDING_LEAVES), so a short one
    proves the same there, in a twentieth of the time."""
    return 60_000 if compiled else 3_000


@WALKS
def test_leaves_two_lists_of_one_owner_share_are_folded_however_long_the_lists(compiled: bool) -> None:
    """Each int is held by two lists, both folded into a trajectory's list of steps (17 of
    them: more than a small collection, which folds none of its entries): every reference is
    met from that node, so each is folded into it (no node), however many a list holds; STEPS
    retains what it alone holds."""
    steps = []
    for r in range(6):
        ids = [1_000_000 + r * 100_000 + k for k in range(_list_length(compiled))]
        steps.append({"response": {"prompt_ids": ids}, "tokens": {"prompt_ids": list(ids)}})
    steps += [{"response": {"prompt_ids": []}, "tokens": {"prompt_ids": []}} for _ in range(11)]
    STEPS["steps"] = steps
    leaf_ids = {id(x) for step in steps for x in step["tokens"]["prompt_ids"]}
    del steps, ids
    g, truth = _walked_steps(compiled, (leaf_ids,))
    assert len(leaf_ids & set(g.ids)) == 0
    tree = dominators.dominators(g)
    node = list(g.ids).index(id(STEPS))
    assert tree.retained[node] == truth


@WALKS
def test_leaves_whose_other_holder_is_never_met_are_their_first_nodes(
        compiled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A running rollout's steps: each int is also held by what the walk never meets (here a
    list it leaves out; in the worker, what is held from C). They wait for it until the walk
    ends, then are folded into the node they were met from; past the most that can wait
    (300,000 here), each is given to that node at once, and counted once however often met."""
    leaves = 300_000  # past _graph_walk.c's PENDING_LEAVES_MAX (1 << 18)
    if not compiled:  # the Python loop's bound is a module constant: a smaller one, past it
        monkeypatch.setattr(graph, "_PENDING_LEAVES", 1 << 12)
        leaves = 5_000
    ids = [5_000_000 + k for k in range(leaves)]
    hidden = list(ids)
    STEPS["steps"] = [{"prompt_ids": ids}, {"prompt_ids": ids}]  # one list, met twice
    leaf_ids = {id(x) for x in ids}
    del ids
    g, truth = _walked_steps(compiled, (leaf_ids, hidden))
    assert len(leaf_ids & set(g.ids)) == 0
    tree = dominators.dominators(g)
    node = list(g.ids).index(id(STEPS))
    assert tree.retained[node] == truth


class _SlottedRows(list):
    __slots__ = ("last", "first", "extra")


def _lru_row(i: int) -> tuple[str, int]:
    return (f"row-{i}", i + 3_000_000)


@WALKS
def test_a_big_list_subclass_holds_its_items_and_its_own_fields(compiled: bool) -> None:
    """A list subclass past the slices' threshold is read a slice at a time from its items,
    after what its traverse visits before them (its slots): found where its last items begin,
    however its slots repeat them (the slot ``last`` holds the item its traverse visits first)."""
    rows = _SlottedRows([k + 7_000_000, k + 8_000_000] for k in range(20_000))
    rows.last, rows.first = rows[-1], rows[0]
    rows.extra = [2_000_000 + k for k in range(1_000)]  # only the slot holds it
    extra = rows.extra
    STEPS["rows"] = [rows]  # type: ignore[list-item]
    truth = block_size(extra) + sum(block_size(x) for x in extra)
    del rows
    g, deep = _walked_steps(compiled, ())
    tree = dominators.dominators(g)
    node = list(g.ids).index(id(STEPS))
    assert tree.retained[node] == deep + truth
    del extra


@WALKS
def test_an_lru_cache_too_long_to_traverse_at_once_holds_what_it_caches(compiled: bool) -> None:
    """A bounded lru_cache's traverse visits three references an entry (its links' results,
    keys and type), past what is read whole. The compiled walk reads the wrapper's fields and
    each link's (_walk_objects.c typed_traverse), the entries from its cache a slice at a
    time, and folds the links (held by the cache and the wrapper's list) into it: no node an
    entry (a link, its key and result each were one). It still retains its cache, its links,
    keys and results."""
    import functools
    import gc

    cached = functools.lru_cache(maxsize=10_000)(_lru_row)
    for k in range(8_000):
        cached(k + 5_000_000)
    cache = [r for r in gc.get_referents(cached) if type(r) is dict and len(r) == 8_000][0]
    truth = block_size(cached) + block_size(cached.__dict__) + block_size(cache) + sum(
        block_size(key) + block_size(link) + block_size(row) + block_size(row[0]) + block_size(row[1])
        for key, link in cache.items() for row in [cached(key)])
    rows = {id(cached(k + 5_000_000)) for k in range(0, 8_000, 100)}
    links = {id(link) for link in cache.values()}
    STEPS["lru"] = [cached]  # type: ignore[list-item]
    holders = block_size(STEPS) + block_size(STEPS["lru"])
    del cache, cached
    g, _deep_bytes = _walked_steps(compiled, ())
    tree = dominators.dominators(g)
    node = list(g.ids).index(id(STEPS))
    # (its __dict__'s values: the wrapped function and the names update_wrapper copied, all
    # shared with the module but the function itself and its cache_parameters lambda)
    assert 0 <= tree.retained[node] - holders - truth < 4096, (tree.retained[node] - holders, truth)
    if compiled:
        assert not (rows | links) & set(g.ids)  # (its results and links: no nodes)


@pytest.mark.skipif(graph._walk_module is None, reason="the C walk was not built here")
def test_the_pending_leaves_grow_between_steps_without_the_gil(monkeypatch: pytest.MonkeyPatch) -> None:
    """The table of leaves waiting for their other holders doubles between two steps, its
    leaves moved with the GIL released (graph_reserve): grown inside a step, moving 128k
    leaves was one 36 ms hold of the real worker's GIL. The walk finds the same."""
    module = graph._walk_module
    real = module.graph_reserve
    released: list[int] = []

    def reserve(store: Any, limit: int) -> bool:
        done = real(store, limit)
        released.append(int(done))
        return done

    monkeypatch.setattr(module, "graph_reserve", reserve)
    ids = [7_000_000 + k for k in range(200_000)]  # under PENDING_LEAVES_MAX: all wait
    hidden = list(ids)
    STEPS["steps"] = [{"prompt_ids": ids}, {"prompt_ids": ids}]
    leaf_ids = {id(x) for x in ids}
    del ids
    g, truth = _walked_steps(True, (leaf_ids, hidden))
    assert sum(released) >= 3  # rooms of 16k leaves and more (to 262,144 for 200k): grown between steps
    assert len(leaf_ids & set(g.ids)) == 0
    node = list(g.ids).index(id(STEPS))
    assert dominators.dominators(g).retained[node] == truth


@WALKS
def test_leaves_two_nodes_share_are_one_node_for_the_pair(compiled: bool) -> None:
    """A running step's token ids: the same ints in two lists that are nodes (each held twice
    here; in the worker, the response model's list and the stored step's). Every int is
    dominated by what dominates both lists: one node for them all, with an edge from each list;
    the bytes what STEPS alone holds."""
    ids = [7_000_000 + k for k in range(_list_length(compiled))]
    copy = list(ids)
    STEPS["steps"] = [{"response": ids, "again": ids, "tokens": copy, "also": copy}]
    leaf_ids = {id(x) for x in ids}
    del ids, copy
    g, truth = _walked_steps(compiled, (leaf_ids,))
    (group,) = leaf_ids & set(g.ids)
    node = list(g.ids).index(group)
    assert g.sizes[node] == _list_length(compiled) * block_size(7_000_000)
    assert sorted(g.type_of(g.src[e]) for e in range(g.edges) if g.dst[e] == node) == ["list", "list"]
    tree = dominators.dominators(g)
    assert tree.retained[list(g.ids).index(id(STEPS))] == truth


@WALKS
def test_more_leaf_groups_than_are_kept_give_the_same_owner(compiled: bool) -> None:
    """Past LEAF_GROUPS_MAX (6,144) groups the table is cleared: 8,000 pairs of lists, each
    pair's ints (a y held by both, an x held by both and by a list the walk leaves out, that
    waits until the walk is over) one group of the pair. The y's make 8,000 groups as the walk
    goes; the x's, settled at the end, find the groups still kept (none, if what the walk met
    after the pairs took the table) and make the others again: one more node each, the same
    dominator, so STEPS retains what it alone holds."""
    pairs = 8_000
    xs = [9_000_000 + 2 * k for k in range(pairs)]
    ys = [9_000_001 + 2 * k for k in range(pairs)]
    steps = []
    for x, y in zip(xs, ys, strict=True):
        a, b = [x, y], [x, y]
        steps.append({"a": a, "again": a, "b": b, "also": b})
    STEPS["steps"] = steps
    hidden = list(xs)
    leaf_ids = {id(v) for v in xs} | {id(v) for v in ys}
    del steps, xs, ys, a, b
    g, truth = _walked_steps(compiled, (leaf_ids, hidden))
    made = len(leaf_ids & set(g.ids))
    assert pairs < made <= 2 * pairs  # the y's groups, and the x's groups forgotten made again
    tree = dominators.dominators(g)
    assert tree.retained[list(g.ids).index(id(STEPS))] == truth


_FOLD_MARKS = r"""
import json, sys
from leakhound.analysis import dominators
from leakhound.payload import census, graph
from leakhound.payload.graph_wire import binary_pieces, json_pieces

class Session:
    def __init__(self, i, shared):
        self.name = "session-%06d" % i
        self.meta = {"user": self.name, "hits": shared[i % 50]}
        self.events = [shared[i % 47], [float(i)], (i * 1000003, "e%d" % i)]

SHARED = [100000 + k for k in range(50)]
REGISTRY = {}
for i in range(20000):
    REGISTRY["k%d" % i] = Session(i, SHARED)
i = None

def walk(marks_from):
    real = graph.listing_over_budget_at
    graph.listing_over_budget_at = lambda max_pause_ms: marks_from
    try:
        out = graph.build(timeout=120, progress=None, is_stdlib=None, exclude=(), max_nodes=5_000_000,
                          max_pause_ms=50.0, cancelled=None)
    finally:
        graph.listing_over_budget_at = real
    census_ = out.pop("_census")
    answer = {"result": {"ok": True, "graph": out}}
    meta = json.loads("".join(json_pieces(answer)))["result"]["graph"]
    g = dominators.decode_graph({**meta, "binary": b"".join(binary_pieces(answer))})
    tree = dominators.dominators(g)
    node = list(g.ids).index(id(REGISTRY))
    # (a str, bytes, int or float is a node by its reference count as it is met: a str shared
    # by ~64 holders, such as an interned phase name the payload's clock keeps as the phase
    # its longest hold followed, is a node in one walk and a shared leaf in the other)
    leaves = {k for k, name in enumerate(g.type_names) if name in ("str", "bytes", "int", "float")}
    containers = sum(1 for t in g.types if t not in leaves)
    return {"nodes": containers, "retained": tree.retained[node], "objects": census_["objects"],
            "bytes": census_["total_bytes"], "unreached": out["unreached"], "held": out["payload_peak_bytes"]}

# held_from_c skips its listing in both walks: ~1 s a tracked object, over any budget
census._measured["ns_per_object"] = 1e9
threshold = graph.listing_over_budget_at(50.0)
walk(-1)  # the payload's caches made by a first walk are there for both walks below
print(json.dumps({"marked": walk(-1), "unmarked": walk(threshold), "threshold": threshold}))
"""


@pytest.mark.skipif(graph._walk_module is None, reason="the C walk was not built here")
def test_a_walk_past_the_listing_budget_does_not_mark_what_it_folds_and_finds_the_same() -> None:
    """Once the tracked objects met put listing them over the pause budget (held_from_c
    skips it), the C walk stops marking the containers it folds (their bits were 0.8% of
    the heap); the graph, the owner's retained bytes and the walk's tallies are the same as
    a walk that marks them all, and the listing did not run."""
    run = subprocess.run([sys.executable, "-c", _FOLD_MARKS], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    assert got["threshold"] == 2  # marks stop at once: 50 ms over 1 s an object
    marked, unmarked = got["marked"], got["unmarked"]
    for key in ("nodes", "retained", "objects", "bytes"):
        assert unmarked[key] == marked[key], (key, marked, unmarked)
    assert marked["retained"] > 20000 * 400  # the registry owns its sessions
    assert unmarked["held"] < marked["held"], (marked["held"], unmarked["held"])  # fewer bitmap regions
    assert not unmarked["unreached"]["examined"] and not marked["unreached"]["examined"]


# A registry walked in a fresh interpreter: the target's RSS as the walk ends (its tables all
# still held) and once the graph is closed and its result dropped.
_TABLES_BACK = r"""
import gc, json, threading
from leakhound.payload import graph

class Session:
    def __init__(self, name, meta, events):
        self.name, self.meta, self.events = name, meta, events

SHARED = [100000 + k for k in range(1000)]
REGISTRY = {}
for i in range(300000):  # ~1.5M objects: the walk's tables are no longer the heap's top
    name = "session-%09d" % i
    REGISTRY[name] = Session(name, {"user": name, "hits": SHARED[i % 1000]}, [SHARED[i % 997], SHARED[i % 991]])
gc.collect()

def rss():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096

seen = {}
settle = graph.CompiledGraph._settle
def at_settle(self):
    seen["held"] = graph._walk_module.graph_info(self.store)[3]
    seen["at_end"] = rss()
    return settle(self)
graph.CompiledGraph._settle = at_settle

def run():
    out = graph.build(timeout=60, progress=None, is_stdlib=lambda n: False, exclude=(), max_nodes=10**8,
                      max_pause_ms=50.0, cancelled=None)
    seen["nodes"] = out["nodes"]
    out.clear()

walker = threading.Thread(target=run)  # the payload's own thread, as in a target
walker.start()
walker.join()
gc.collect()
seen["after"] = rss()
print(json.dumps(seen))
"""


@pytest.mark.integration  # a subprocess, ~4 s
@pytest.mark.skipif(graph._walk_module is None, reason="the C walk was not built here")
def test_the_walks_tables_go_back_to_the_kernel_when_it_is_done() -> None:
    """A table of 64 KiB or more (the pending leaves a registry's slices leave, the leaf
    groups) is a mapping of its own: freed or outgrown, its pages leave the target's RSS at
    once. From malloc the doubled tables' old copies and the tables themselves stayed in the
    heap: RSS after the walk was 0.25 MiB over RSS at its end (two runs); now it is 0.21 MiB
    under it (0.87 before the key labels were cached only once met again and the groups grew
    at three quarters full, 0.47 before the pending leaves were packed in 32 bytes: smaller
    tables). Typically 200-236 KiB under; once 92 KiB in CI (a full .ci/run, the machine
    busy): the bound is half that of the typical, still far from the 0.25 MiB over of malloc's
    tables."""
    run = subprocess.run([sys.executable, "-c", _TABLES_BACK], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    assert got["nodes"] > 1000 and got["held"] > 1 << 20, got
    assert got["at_end"] - got["after"] >= 64 << 10, got


@pytest.mark.skipif(graph._walk_module is None, reason="the C walk was not built here")
def test_a_regions_marks_are_exact_as_a_set_as_it_grows_and_as_a_bitmap() -> None:
    """A MiB of addresses keeps its marks in a small set of its 16-byte granules until it holds
    more than half of NB_SET_MAX, then in a bitmap. Marked here through graph_own (any
    address): what is marked is found, what is not is not, before and after each growth and
    the switch, and the region's last granule (the set's empty value) is never found by
    mistake (it was: the ASan walk's hostile heap had a list there, and left it out)."""
    walk = graph._walk_module
    g = graph.CompiledGraph(timeout=60, progress=None, is_stdlib=lambda n: False, exclude=(), max_nodes=10**6,
                            max_pause_ms=None, cancelled=None)
    try:
        base = 0x7F0000000000
        last = base + (1 << 20) - 16
        rng = __import__("random").Random(7)
        granules = rng.sample(range((1 << 16) - 1), 3000)
        marked: set[int] = set()
        held = [walk.graph_info(g.store)[3]]
        for count in (1, 15, 16, 17, 100, 1024, 1025, 3000):
            for granule in granules[len(marked):count]:
                walk.graph_own(g.store, base + granule * 16)
                marked.add(granule)
            assert walk.graph_find(g.store, last) is None, count
            found = {x for x in range(0, 1 << 16, 7) if walk.graph_find(g.store, base + x * 16) == -1}
            wrong = sorted(found ^ {x for x in marked if x % 7 == 0})
            assert not wrong, (count, wrong[:5])
            held.append(walk.graph_info(g.store)[3])
        # a few hundred marks cost a few KiB, not the bitmap's 8 KiB (two sets: marked, own)
        assert held[4] - held[0] < 2 * 1024, held
        walk.graph_own(g.store, last)
        assert walk.graph_find(g.store, last) == -1
        assert all(walk.graph_find(g.store, base + x * 16) == -1 for x in marked)
    finally:
        walk.graph_close(g.store)


class _OnlyHeldByName:
    pass


# A module's dict as the walk meets them: the keys whose values no edge can lead to.
NAMES_WITHOUT_EDGES = {"lh_label_class": _OnlyHeldByName, "lh_label_module": json, "lh_label_none": None,
                       "lh_label_true": True, "lh_label_small_int": 7, "lh_label_list": [[1], [2]],
                       "lh_label_file-\udcff": [[3]]}  # a name decoded with surrogateescape


@pytest.mark.skipif(graph._walk_module is None, reason="the C walk was not built here")
def test_a_dict_key_gets_a_label_only_where_an_edge_can_carry_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A module that is no node, None, a bool and a small int are never the end of an edge
    (roots of their own, shared leaves): their keys get no label in the target (a module's
    dict is mostly those: ~2,300 of ~9,800 labels of a plain asyncio process, each a string,
    an int and an index entry in the target). A class is (a soft root, held by what holds it:
    its module's dict here), and its key labels the edge. The walk is of the whole test process:
    what earlier tests left in it (attach/elf.py's tables of symbols by name) can take all
    of graph.py's 15,000 key labels before these keys are met, so the limits are lifted."""
    monkeypatch.setattr(graph, "_MAX_LABELS", 10**6)
    monkeypatch.setattr(graph, "_MAX_KEY_LABELS", 10**6)
    out = graph.build(timeout=60, progress=None, is_stdlib=lambda n: False, exclude=(), max_nodes=10**7,
                      max_pause_ms=None, cancelled=None)
    labels = set(out["labels"])
    assert {"klh_label_list", "klh_label_file-\udcff", "klh_label_class"} <= labels
    assert not {"klh_label_module", "klh_label_none", "klh_label_true",
                "klh_label_small_int"} & labels, sorted(x for x in labels if "lh_label" in x)
    # The labels are read from the walk's table a slice at a time (graph_wire.LabelTexts), to
    # the same JSON as the whole list's, surrogates and all.
    texts = list(out["labels"])
    assert len(texts) == len(out["labels"]) > 1000 and out["labels"][-1] == texts[-1]
    assert out["labels"][5:9] == texts[5:9] and out["labels"] == texts
    doc = {"graph": {k: v for k, v in out.items() if not k.startswith("_")}}
    assert json.loads("".join(json_pieces(doc)))["graph"]["labels"] == texts


@pytest.mark.skipif(graph._walk_module is None, reason="the C walk was not built here")
def test_the_compiled_walks_labels_are_one_table_of_texts_in_the_walk() -> None:
    """Each label a text once (found again by its text, whatever str object says it), UTF-8
    round trip, the limits of graph.py (all labels, key labels), and the result's labels
    after graph_close: the table's bytes, not a str, an int
    and a dict entry each (~130 bytes a label in the target before)."""
    walk = graph._walk_module
    g = graph.CompiledGraph(timeout=60, progress=None, is_stdlib=lambda n: False, exclude=(), max_nodes=10**6,
                            max_pause_ms=None, cancelled=None)
    try:
        held = walk.graph_info(g.store)[3]
        texts = [f"kkey_{i:05d}" for i in range(10_000)] + ["aname", "t<Session>", "kclé ✓", "d",
                                                              "kfile-\udcff"]  # (a lone surrogate: surrogateescape)
        ids = [g.label(t) for t in texts]
        assert ids == list(range(len(texts)))
        assert [g.label("".join(list(t))) for t in texts] == ids  # another str of the same text
        assert g.label("fkclé ✓") == g.label("fkcl" + "é ✓") == len(texts)  # a fold label's text, once
        assert walk.graph_labels(g.store)[ids[-3]] == "kclé ✓"
        assert (walk.graph_info(g.store)[3] - held) / len(texts) < 40
        walk.graph_label(g.store, None, len(texts) + 3, 10_003)
        assert g.label("knew") == len(texts) + 1 and g.label("kanother") == -1  # the key labels' limit
        assert g.label("aslot") == len(texts) + 2 and g.label("aone_more") == -1  # every label's
        assert g.label("kkey_00007") == 7  # what is there is still found
        walk.graph_close(g.store)
        labels = g._label_texts()
        assert labels[:len(texts)] == texts and labels[len(texts):] == ["fkclé ✓", "knew", "aslot"]
    finally:
        walk.graph_close(g.store)



# A fresh interpreter (pytest's own modules would take every key label): what the walk holds
# at its end with 6,000 keys met once, then met again in a second list of dicts.
_KEYS_AGAIN = r"""
import json
from leakhound.payload import graph

KEYED = {}
held = []
settle = graph.CompiledGraph._settle
def at_settle(self):
    held.append(graph._walk_module.graph_info(self.store)[3])
    settle(self)
graph.CompiledGraph._settle = at_settle

def walk():
    graph.build(timeout=60, progress=None, is_stdlib=lambda n: False, exclude=(), max_nodes=10**7,
                max_pause_ms=None, cancelled=None)

keys = ["lh_once_%05d" % i for i in range(6000)]
# small dicts (a big one's keys label nothing: they are a registry's ids)
KEYED["one"] = [{keys[i]: [i], keys[i + 1]: [i]} for i in range(0, 6000, 2)]
walk()
KEYED["two"] = [{keys[i]: [i], keys[i + 1]: [i]} for i in range(0, 6000, 2)]  # the same key objects
walk()
print(json.dumps(held))
"""


@pytest.mark.integration  # a subprocess, ~1 s
@pytest.mark.skipif(graph._walk_module is None, reason="the C walk was not built here")
def test_a_dict_keys_label_is_cached_only_once_the_key_is_met_again() -> None:
    """The walk caches a str key's label by its address so that a key met in dict after dict
    (an attribute name) costs no text again; a key met once (a module's globals: ~7,000 in a
    plain process) is not cached: 20 bytes a slot or more in the target for nothing."""
    run = subprocess.run([sys.executable, "-c", _KEYS_AGAIN], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    once, twice = json.loads(run.stdout)
    assert twice - once >= 100 << 10, (once, twice)


POOL_CHILD = r"""
import sys
from leakhound.payload import graph
from leakhound.payload.graph_wire import binary_pieces

def slabs():
    # the pool's slabs: anonymous read-write mappings of 256 KiB (the kernel may merge
    # neighbours: their lengths, summed, in slabs)
    total = 0
    with open("/proc/self/maps") as fh:
        for line in fh:
            fields = line.split()
            if len(fields) == 5 and fields[1].startswith("rw"):
                low, high = (int(x, 16) for x in fields[0].split("-"))
                if (high - low) % (256 << 10) == 0:
                    total += high - low
    return total

KEEP = [[i, i] for i in range(40000)]
TWICE = list(KEEP)
before = slabs()
out = graph.build(timeout=60, progress=None, is_stdlib=None, exclude=(), max_nodes=5_000_000, max_pause_ms=1,
                  cancelled=None, compiled=True)
during = slabs()
raw = b"".join(binary_pieces({"result": {"graph": out}}))
del out
after = slabs()
print(before, during, after, len(raw))
"""


@pytest.mark.skipif(graph._walk_module is None, reason="the C walk was not built here")
def test_the_walks_tables_go_back_to_the_kernel_with_the_graph() -> None:
    """The columns' blocks (4-8 KiB) and small maps came from malloc, in the payload thread's
    own glibc arena, and what they had touched stayed in the target's RSS after the
    inspection (1.0 of 3.9 MiB on a 1M-object heap). They are the walk's pool's now: slabs
    mapped for it, unmapped with the last table. The child runs on malloc alone
    (PYTHONMALLOC=malloc): pymalloc's arenas are mappings of 1 MiB, which the count of
    256 KiB mappings would take for slabs (one arena more or less after the walk, by chance)."""
    env = {**os.environ, "PYTHONMALLOC": "malloc"}
    run = subprocess.run([sys.executable, "-c", POOL_CHILD], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    before, during, after, raw = (int(x) for x in run.stdout.split())
    assert raw > 40000 * 8
    assert during > before  # the blocks of 40,000 nodes' records: in the pool's slabs
    assert after <= before


@WALKS
def test_a_deques_items_it_alone_holds_are_folded_into_it(compiled: bool) -> None:
    """A replay buffer (an exact deque) holds its transitions alone: they are part of it, no
    nodes (1.5M transitions were 1.54M nodes), and it retains them."""
    import collections

    buffer = collections.deque((f"transition-{k}", k + 9_000_000) for k in range(5_000))
    rows = {id(t) for t in list(buffer)[::50]}
    truth = block_size(buffer) + sum(block_size(t) + block_size(t[0]) + block_size(t[1]) for t in buffer)
    # (held twice: a node of its own, not folded into its holder with all it holds)
    STEPS["buffer"] = [buffer, buffer]  # type: ignore[list-item]
    holders = block_size(STEPS) + block_size(STEPS["buffer"])
    del buffer
    g, _deep_bytes = _walked_steps(compiled, ())
    tree = dominators.dominators(g)
    node = list(g.ids).index(id(STEPS))
    assert tree.retained[node] - holders == truth, (tree.retained[node] - holders, truth)
    assert not rows & set(g.ids)
