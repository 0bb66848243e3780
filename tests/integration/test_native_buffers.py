"""Native buffers (issue 11): numpy, Pillow, torch, mmap, ctypes, StringIO, pyarrow and pandas memory, by owner.

Each shape of ``fixtures/native_buffers.py`` holds 10-40 MB in one global; the target computes
the truth with its own libraries (``nbytes``, the distinct storages' ``nbytes()``, ``len(mmap)``,
``memory_usage(deep=True)``, resident memory grown for Pillow). Before the native sizers the
owners held a few KB of it (the wrappers). numpy, pandas and Pillow run in a venv per target
version (3.11-3.13) built by tests/native_target.py (skipped with the reason when pip cannot install
them); torch only on 3.11 (the CPU wheel on this machine's disk).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from leakhound.analysis.detectors import analyse
from leakhound.analysis.ledger import ledger
from leakhound.attach.process import status_bytes
from leakhound.core.capture import capture
from leakhound.core.request import RequestOptions
from leakhound.model import Snapshot
from leakhound.model.names import Owners
from tests.native_target import (
    arrow_python,
    box2d_python,
    cffi_python,
    faiss_python,
    greenlet_python,
    grpc_python,
    lxml_python,
    mujoco_python,
    native_python,
    numba_python,
    numpy1_python,
    opencv_python,
    protobuf_python,
    pydantic_python,
    pygame_python,
    re2_python,
    sentencepiece_python,
    shapely_python,
    tokenizer_python,
    zstd_python,
)
from tests.pythons import installed_pythons
from tests.utils import ROOT, spawn_target, within
from tests.verifiers_target import ensure_verifiers_venv

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]

# shape -> the owner's path
OWNERS = {
    "numpy_views": "__main__.VIEWS",
    "numpy_shared_base": "__main__.BATCHES",
    "numpy_object": "__main__.ROWS",
    "numpy_object_grid": "__main__.COLUMNS",
    "pillow": "__main__.IMAGES",
    "torch": "__main__.TENSORS",
    "pandas": "__main__.FRAME._mgr",
    "mmap": "__main__.MAP",
    "ctypes": "__main__.BUFFERS",
    "stringio": "__main__.LOGS",
    "zlib": "__main__.STREAMS",
    "compression": "__main__.ARCHIVES",
    "locks": "__main__.LOCKS",
    "hashes": "__main__.HASHERS",
    "arrow": "__main__.TABLES",
    "pandas_arrow": "__main__.FRAME._mgr",
    "sqlite_memory": "__main__.MEMDBS",
}
# (the standard library's types on every installed version, below)
STANDARD = ("mmap", "ctypes", "stringio", "zlib", "compression", "locks", "hashes", "arrow", "pandas_arrow",
            "sqlite_memory")
CASES = [(shape, version) for version in ("3.11", "3.12", "3.13") for shape in OWNERS if shape not in STANDARD
         if shape != "torch" or version == "3.11"]
MMAP_VERSIONS = sorted(v for v in installed_pythons() if v in ("3.10", "3.11", "3.12", "3.13"))


def _check(tmp_path: Path, shape: str, python: str, owner_model: str = "census", path: str = "") -> Snapshot:
    with spawn_target("native_buffers", tmp_path, python=python, env={"SHAPE": shape}, timeout=120) as child:
        snap = capture(child.pid, request=RequestOptions(timeout=120), max_pause_ms=None, top=10,
                       owners=Owners(owner_model)).snapshot
        truth = child.report()["truth"]
    assert snap.heap.owner_model == ("dominator" if owner_model == "dominator" else "first-reacher")
    top = snap.owners[0]
    assert top.path == (path or OWNERS[shape]), [(o.path, o.retained_bytes) for o in snap.owners[:5]]
    assert within(top.retained_bytes, truth["bytes"]), (top.retained_bytes, truth)
    if shape in ("torch", "mmap", "pillow"):
        # the ledger's own row, no longer in "other"
        rows = {row.name: row.bytes for row in ledger(snap)}
        assert within(rows["native buffers"], truth["bytes"]), (rows, truth)
        assert rows["mapped files"] > 0 and rows["thread stacks"] > 0, rows
    return snap


@pytest.mark.parametrize(("shape", "version"), CASES)
def test_native_buffers_belong_to_their_owner(tmp_path: Path, shape: str, version: str) -> None:
    _check(tmp_path, shape, native_python(version, torch=shape == "torch"))


@pytest.mark.parametrize("shape", ["numpy_views", "numpy_shared_base", "numpy_object", "numpy_object_grid", "pillow",
                                   "torch", "mmap"])
def test_native_buffers_belong_to_their_dominator_owner(tmp_path: Path, shape: str) -> None:
    # The object graph sizes nodes as the census does: without it a numpy view's base (held
    # by the view alone, not listed by gc) and a tensor's storage were in no owner's bytes.
    # numpy_shared_base: the dict's views fold into it, their base dominated by it; the owner
    # was the base, named ``__main__.BATCHES[]`` as if one entry freed it.
    python = installed_pythons()["3.11"] if shape == "mmap" else native_python("3.11", torch=shape == "torch")
    _check(tmp_path, shape, python, owner_model="dominator")


@pytest.mark.parametrize(("shape", "path"), [("pandas", "__main__.FRAME._mgr.<tuple>"),
                                           ("pandas_concat", "__main__.HISTORY._mgr.<tuple>")])
def test_a_data_frame_s_blocks_are_one_owner(tmp_path: Path, shape: str, path: str) -> None:
    """A DataFrame grown by ``pd.concat`` has a float block (82% of it) and a str block: the
    dominator search went down into the float block and listed the str block apart, two
    owners (10.3 and 2.3 MiB) and the frame none. Its blocks' tuple is one owner of both."""
    _check(tmp_path, shape, native_python("3.11"), owner_model="dominator", path=path)


@pytest.mark.parametrize(("shape", "owner"), [("torch_losses", "__main__.LOSSES"),
                                            ("torch_total", "__main__.TOTAL.grad_fn"),
                                            ("torch_hooked", "__main__.LOSSES"),
                                            ("torch_deep", "__main__.LOSSES"),
                                            ("torch_deep_total", "__main__.TOTAL.grad_fn")])
def test_what_a_kept_loss_s_autograd_graph_saved_is_the_loss_s_owner_s(tmp_path: Path, shape: str, owner: str) -> None:
    """Losses kept as tensors (not ``.item()``) keep their autograd graphs and the activations
    the graphs saved: only C++ holds those tensors (SavedVariables), so 240 of them were one
    owner ``<held from C: torch.Tensor>`` and the list of losses was none. The graphs' nodes
    are nodes of the walk, from each loss's ``grad_fn`` through ``next_functions``: the list
    (``torch_losses``), the summed tensor's ``grad_fn`` (``torch_total``: the chain of its
    graphs). A deeper model's graphs (``torch_deep``: 80 steps of ~230 nodes, one chain of
    ~18,000 when summed) were followed 2,048 nodes a tensor, the rest held from C (90 of 134
    MiB). Saved under ``saved_tensors_hooks`` (activation checkpointing's), the unpack hook
    never runs: what the pack hook kept is read as it is. (What is not counted: the C++
    nodes' own memory, ~5% of the deep graphs'.)"""
    with spawn_target("native_buffers", tmp_path, python=native_python("3.11", torch=True),
                      env={"SHAPE": shape}, timeout=120) as child:
        snap = capture(child.pid, request=RequestOptions(timeout=120), max_pause_ms=None, top=10).snapshot
        truth = child.report()["truth"]
    assert snap.heap.owner_model == "dominator"
    top = snap.owners[0]
    assert top.path == owner, [(o.path, o.retained_bytes) for o in snap.owners[:5]]
    assert within(top.retained_bytes, truth["bytes"]), (top.retained_bytes, truth)
    assert truth.get("unpacked", 0) == 0, truth


# numpy 2 on 3.10, 3.12, 3.13 (3.11's is above), numpy 1 on 3.11: the array's and the
# dtype's structs are read by the walk (the fields it reads have the same offsets in both)
@pytest.mark.parametrize("version", ["3.10", "3.11-numpy1", "3.12", "3.13"])
def test_big_object_arrays_are_read_a_slice_at_a_time(tmp_path: Path, version: str) -> None:
    """A pandas object column of millions of objects was listed whole (ravel().tolist(), one C
    call) by the payload's helper, then every element pushed at once: one step of 285-703 ms
    and two lists of a reference per element in the target at 3M rows. The compiled walk now
    reads an exact, contiguous array of objects from its data a slice at a time, as a big
    list; its owner is as before: the arrays, each element once (a strided view's elements
    are its base's, listed as before)."""
    python = numpy1_python("3.11") if version == "3.11-numpy1" else native_python(version)
    _check(tmp_path, "numpy_object_grid", python, owner_model="dominator")
    done = subprocess.run([python, "-c", SLICED, str(ROOT)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    listed, strs = json.loads(done.stdout)
    assert listed <= 1 and strs >= 100000  # the helper lists a base at most; the walk reads the elements


SLICED = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
from leakhound.payload import graph
listed = []
real = graph.native_extra
def spy(*args):
    extra, hidden = real(*args)
    listed.append(len(hidden))
    return extra, hidden
graph.native_extra = spy
ROWS = np.array(["row-%d" % i for i in range(100000)], dtype=object)
out = graph.build(timeout=60, progress=None, is_stdlib=None, exclude=(), max_nodes=5_000_000, max_pause_ms=None,
                  cancelled=None, compiled=True)
census = out["_census"]
strs = sum(n for name, n in zip(census["names"], census["counts"]) if name == "str")
print(json.dumps([max(listed), strs]))
"""


@pytest.mark.parametrize("version", MMAP_VERSIONS)
def test_an_anonymous_mmap_is_its_length(tmp_path: Path, version: str) -> None:
    _check(tmp_path, "mmap", installed_pythons()[version])


def _look(tmp_path: Path, shape: str, python: str, owner_model: str = "") -> tuple[Snapshot, dict[str, Any]]:
    """The analysed snapshot of a fixture shape's target, and its truth (read after)."""
    env = {"SHAPE": shape, "SQLITE_DIR": str(tmp_path)}
    with spawn_target("native_buffers", tmp_path, python=python, env=env, timeout=180) as child:
        owners = {"owners": Owners(owner_model)} if owner_model else {}
        snap = capture(child.pid, request=RequestOptions(timeout=120), max_pause_ms=None, top=10, **owners).snapshot
        truth = child.report()["truth"]
    return analyse(snap), truth


@pytest.mark.parametrize("version", MMAP_VERSIONS)
@pytest.mark.parametrize("owner_model", ["census", "dominator"])
def test_a_mapped_file_is_its_pages_in_ram(tmp_path: Path, version: str, owner_model: str) -> None:
    """A 256 MiB memory-mapped file read in one page of 64 holds the pages it has in RAM, not
    its length (which made it owner #1 over a 40 MB cache that is): the map is what the kernel's
    smaps says of its mapping, and the ledger counts those pages once (native buffers, not
    mapped files too)."""
    snap, truth = _look(tmp_path, "mmap_file", installed_pythons()[version], owner_model)
    owners = {o.path: o.retained_bytes for o in snap.owners}
    assert snap.owners[0].path == "__main__.CACHE", owners
    assert within(snap.owners[0].retained_bytes, truth["bytes"]), (owners, truth)
    assert truth["map_bytes"] and within(owners["__main__.MAP"], truth["map_bytes"]), (owners, truth)
    assert within(snap.heap.native_mapped_bytes, truth["map_bytes"]), (snap.heap.native_mapped_bytes, truth)
    rows = {row.name: row.bytes for row in ledger(snap)}
    assert rows["mapped files"] <= snap.process.file_mapped_bytes - 0.9 * truth["map_bytes"], (rows, truth)


@pytest.mark.parametrize("version", ["3.11", "3.12", "3.13"])
@pytest.mark.parametrize("owner_model", ["census", "dominator"])
def test_a_preallocated_array_is_what_was_written_of_it(tmp_path: Path, version: str, owner_model: str) -> None:
    """An RL replay buffer made with np.zeros for 1.4 GB and filled 35 MB so far, and an np.empty
    of 800 MB never written, take that much address space and what was written of RAM: sized
    by their capacity they were owners #1 and #2 (1.3 GiB, 763 MiB) over the 60 MB cache
    that was the leak, and "live Python objects" 1720% of RSS. The truth of RAM is the
    kernel's: the target's RSS grown by making and filling them."""
    snap, truth = _look(tmp_path, "numpy_prealloc", native_python(version), owner_model)
    owners = {o.path: o.retained_bytes for o in snap.owners}
    assert snap.owners[0].path == "__main__.CACHE" and within(owners["__main__.CACHE"], truth["bytes"]), owners
    arrays = owners.get("__main__.REPLAY", 0) + owners.get("__main__.EMPTY", 0)
    assert within(arrays, truth["replay_bytes"]), (owners, truth)
    assert snap.heap.bytes < snap.process.rss_bytes, (snap.heap.bytes, snap.process.rss_bytes)


def test_a_checkpoint_loaded_with_mmap_is_its_pages_in_ram_counted_once(tmp_path: Path) -> None:
    """A torch checkpoint loaded with ``torch.load(mmap=True)`` keeps its storages in the
    file's mapping: they count the pages of it in RAM (the kernel's smaps ``Rss`` of the
    mapping) and the ledger's "mapped files" leaves them out (they are native buffers), the
    small ones (under the 1 MiB from which a buffer's pages are read) too: they were counted
    in both."""
    snap, truth = _look(tmp_path, "torch_mmap", native_python("3.11", torch=True), "dominator")
    owners = {o.path: o.retained_bytes for o in snap.owners}
    assert snap.owners[0].path == "__main__.CACHE" and within(owners["__main__.CACHE"], truth["bytes"]), owners
    assert truth["map_bytes"] and within(owners["__main__.MODEL"], truth["map_bytes"]), (owners, truth)
    assert within(snap.heap.native_mapped_bytes, truth["map_bytes"]), (snap.heap.native_mapped_bytes, truth)
    rows = {row.name: row.bytes for row in ledger(snap)}
    assert rows["mapped files"] <= snap.process.file_mapped_bytes - 0.9 * truth["map_bytes"], (rows, truth)


@pytest.mark.parametrize("version", MMAP_VERSIONS)
def test_tracemalloc_tracing_the_worker_is_its_own_ledger_row_and_a_finding(tmp_path: Path, version: str) -> None:
    """A worker tracemalloc traces carries its tables (a trace per live allocation): ~70 MiB
    for 300,000 dicts, which were "other" with no word on why. Read in the target, they are
    the ledger's ``tracemalloc`` row and a ``tracemalloc_on`` warning; the truth is the
    target's own ``get_tracemalloc_memory()`` (read after: the payload's allocations were
    traced too)."""
    snap, truth = _look(tmp_path, "tracemalloc", installed_pythons()[version])
    assert within(snap.arena.tracemalloc_bytes, truth["bytes"]), (snap.arena.tracemalloc_bytes, truth)
    rows = {row.name: row.bytes for row in ledger(snap)}
    assert rows["tracemalloc"] == snap.arena.tracemalloc_bytes, rows
    (finding,) = [f for f in snap.findings if f.kind == "tracemalloc_on"]
    assert finding.severity == "warning" and finding.bytes == snap.arena.tracemalloc_bytes
    assert "tracemalloc.stop()" in finding.summary


@pytest.mark.parametrize("version", MMAP_VERSIONS)
@pytest.mark.parametrize("owner_model", ["census", "dominator"])
def test_a_sqlite_connection_is_what_sqlite_counts_for_it(tmp_path: Path, version: str, owner_model: str) -> None:
    """100 sqlite3 connections hold ~70 MB of SQLite's page caches that no Python size counts
    (they were "other", then the ledger's "SQLite" row and a finding, in no owner): each
    connection now holds what SQLite counts for it (sqlite3_db_status: its page cache, schemas
    and statements), so their list is owner #1 with what freeing it returns (measured by the
    target in a forked child), and the ledger's "SQLite" row keeps only the rest of SQLite's
    own count (sqlite3_memory_used), no byte twice."""
    snap, truth = _look(tmp_path, "sqlite", installed_pythons()[version], owner_model)
    assert within(snap.arena.sqlite_bytes, truth["bytes"]), (snap.arena.sqlite_bytes, truth)
    top = snap.owners[0]
    assert top.path == "__main__.CONNS", [(o.path, o.retained_bytes) for o in snap.owners[:5]]
    assert within(top.retained_bytes, truth["bytes"], 0.1), (top.retained_bytes, truth)
    assert 0.9 * snap.arena.sqlite_bytes <= snap.heap.native_sqlite_bytes <= snap.arena.sqlite_bytes, snap.heap
    rows = {row.name: row.bytes for row in ledger(snap)}
    assert rows.get("SQLite", 0) == snap.arena.sqlite_bytes - snap.heap.native_sqlite_bytes, rows
    assert not [f for f in snap.findings if f.kind == "native_state" and f.bytes], snap.findings


@pytest.mark.parametrize("version", MMAP_VERSIONS)
@pytest.mark.parametrize("owner_model", ["census", "dominator"])
def test_an_in_memory_sqlite_database_is_its_connections(tmp_path: Path, version: str, owner_model: str) -> None:
    """40 ``:memory:`` databases kept per tenant (~25 MB of SQLite's page caches) were in no
    owner: an in-memory database's name cannot say whether its cache is shared. SQLite's own
    structs say it (a btree that is not sharable: what SQLite itself checks before taking a
    shared cache's mutex), read once their layout is checked against its API: the list is
    owner #1 with what freeing it returns, and the two connections of one shared in-memory
    cache beside it are still not read."""
    snap = _check(tmp_path, "sqlite_memory", installed_pythons()[version], owner_model=owner_model)
    owners = {o.path: o.retained_bytes for o in snap.owners}
    assert owners.get("__main__.SHARED", 0) < 50_000, owners
    # (each connection's own count, under the list: none of the shared cache's)
    assert 0.9 * snap.owners[0].retained_bytes <= snap.heap.native_sqlite_bytes <= snap.arena.sqlite_bytes, snap.heap


@pytest.mark.parametrize("version", MMAP_VERSIONS)
def test_a_sqlite_connection_in_use_or_sharing_a_cache_is_not_read(tmp_path: Path, version: str) -> None:
    """SQLite's counts take the connection's mutex, and a shared cache's btree mutexes (other
    connections' too): a connection another thread is querying (the GIL released, its mutex
    held for minutes) is not waited for, and connections of a shared cache (of a file or in
    memory) are not read; the others are."""
    with spawn_target("native_buffers", tmp_path, python=installed_pythons()[version],
                      env={"SHAPE": "sqlite", "SQLITE_GUARDS": "1", "SQLITE_DIR": str(tmp_path)}, timeout=180) as child:
        started = time.monotonic()
        snap = capture(child.pid, request=RequestOptions(timeout=120), max_pause_ms=None, top=20).snapshot
        took = time.monotonic() - started
        truth = child.report()["truth"]
    assert "busy_started" in truth and took < 60, took
    owners = {o.path: o.retained_bytes for o in snap.owners}
    assert within(owners["__main__.CONNS"], truth["bytes"], 0.1), (owners, truth)
    # ~0.7 MB each of SQLite's, none counted: their objects' own few hundred bytes each
    assert owners.get("__main__.BUSY", 0) < 50_000 and owners.get("__main__.SHARED", 0) < 50_000, owners


@pytest.mark.parametrize("version", MMAP_VERSIONS)
@pytest.mark.parametrize("owner_model", ["census", "dominator"])
def test_pydantic_cores_validators_hold_their_rust_heap(tmp_path: Path, version: str, owner_model: str) -> None:
    """600 ``TypeAdapter``s kept (a 20-field TypedDict's list): 15 MB freed, of which the
    validators' and serializers' state in Rust's heap (fields, their validators, a
    serializer's hash table of fields) ~2.5 MB that sys.getsizeof calls ~100 bytes an object;
    sized after the walk from each one's struct (_ssl_scan.c struct_object_bytes)."""
    _check(tmp_path, "pydantic", pydantic_python(version), owner_model=owner_model, path="__main__.ADAPTERS")


@pytest.mark.parametrize("version", MMAP_VERSIONS)
@pytest.mark.parametrize("owner_model", ["census", "dominator"])
def test_lxml_documents_hold_their_libxml2_trees(tmp_path: Path, version: str, owner_model: str) -> None:
    """60 HTML pages parsed with lxml.html and kept (a scraper's cache): ~33 MB freed, all of it
    libxml2's tree in glibc's heap, behind each element's document (``lxml.etree._Document``,
    tens of bytes to sys.getsizeof): the list was in no owner listed (owner #1 was the
    payload's own modules); sized from the document's struct as pydantic-core's are."""
    _check(tmp_path, "lxml", lxml_python(version), owner_model=owner_model, path="__main__.DOCS")


@pytest.mark.parametrize("version", MMAP_VERSIONS)
@pytest.mark.parametrize("owner_model", ["census", "dominator"])
def test_zstd_streams_hold_their_compressors_windows(tmp_path: Path, version: str, owner_model: str) -> None:
    """20 zstandard streams and compressors kept (a server's per-connection compression):
    ~75 MB freed, the compressors' windows and tables libzstd's; a stream (56 bytes to
    sys.getsizeof) keeps its compressor in a C field no traversal shows. The list was in no
    owner listed (1.9 GB of level-19 streams too); sized from the compressors' structs, a
    stream's through that field (sizes._STRUCT_HOLDERS)."""
    _check(tmp_path, "zstd", zstd_python(version), owner_model=owner_model, path="__main__.STREAMS")


@pytest.mark.parametrize("version", MMAP_VERSIONS)
@pytest.mark.parametrize("owner_model", ["census", "dominator"])
def test_faiss_indexes_hold_their_vectors(tmp_path: Path, version: str, owner_model: str) -> None:
    """20 faiss flat indexes kept (a retrieval worker's index per tenant): 41 MB freed, the
    vectors in C++'s heap behind SWIG's proxies (a SwigPyObject of 64 bytes): the list was in
    no owner listed; sized from the SwigPyObject's struct, none of what the one SWIG
    module's globals reach (sizes._swig_library)."""
    _check(tmp_path, "faiss", faiss_python(version), owner_model=owner_model, path="__main__.INDEXES")


@pytest.mark.parametrize("version", MMAP_VERSIONS)
@pytest.mark.parametrize("owner_model", ["census", "dominator"])
def test_re2_expressions_hold_their_programs(tmp_path: Path, version: str, owner_model: str) -> None:
    """40 google-re2 expressions of 2,000 alternatives kept (a log router's filters): ~70 MB
    freed, their programs and DFAs in C++'s heap behind pybind11's instances of 56 bytes, in no
    owner listed before; sized from the instance's struct (sizes._pybind11_file: none of what
    re2's own globals reach). The DFA's states point into their own blocks: a header read
    before such a pointer took 23 MB of chunks no allocation had (1.34 of the truth) until a
    chunk inside one taken was none (_ssl_scan.c: covered)."""
    _check(tmp_path, "re2", re2_python(version), owner_model=owner_model, path="__main__.PATTERNS")


@pytest.mark.parametrize("version", MMAP_VERSIONS)
@pytest.mark.parametrize("owner_model", ["census", "dominator"])
def test_sentencepiece_processors_hold_their_models(tmp_path: Path, version: str, owner_model: str) -> None:
    """20 sentencepiece processors of a 4,000-piece model kept (a tokenizer loaded per request):
    their models in C++'s heap behind SWIG's proxies, a protobuf message whose repeated fields
    and strings are pointers tagged in their low bits: 0.13 of what freeing them returns before
    (only the words that were plain pointers followed), within 10% now (_ssl_scan.c: scan_word)."""
    _check(tmp_path, "sentencepiece", sentencepiece_python(version), owner_model=owner_model,
           path="__main__.PROCESSORS")


@pytest.mark.parametrize("version", MMAP_VERSIONS)
@pytest.mark.parametrize("owner_model", ["census", "dominator"])
def test_grpc_channels_never_closed_hold_their_core_state(tmp_path: Path, version: str, owner_model: str) -> None:
    """1,000 grpc channels made per request and never closed: ~8.8 MB of grpc's C core, behind
    Cython's ``_ChannelState`` (96 bytes to sys.getsizeof): 0.36 of what freeing them returns
    before (their Python parts), within 10% now (sizes._STRUCT_CLASSES)."""
    _check(tmp_path, "grpc", grpc_python(version), owner_model=owner_model, path="__main__.CHANNELS")


@pytest.mark.parametrize("version", MMAP_VERSIONS)
@pytest.mark.parametrize("owner_model", ["census", "dominator"])
def test_buffers_never_written_are_no_ones_rss(tmp_path: Path, version: str, owner_model: str) -> None:
    """40 MuJoCo MjData kept (an RL env worker's replay of episodes): each has a 15 MB arena
    MuJoCo writes a little of. They were 634 MB in a process of 97 MB RSS ("native buffers
    642% of RSS"); a big chunk counts its pages in RAM now (_ssl_scan.c: chunk_counted), and
    is read on those only: within 10% of the RSS that clearing them returns."""
    snap = _check(tmp_path, "mujoco", mujoco_python(version), owner_model=owner_model, path="__main__.DATAS")
    rows = {row.name: row.bytes for row in ledger(snap)}
    assert rows["native buffers"] < snap.process.rss_bytes, rows


@pytest.mark.parametrize("version", MMAP_VERSIONS)
@pytest.mark.parametrize("owner_model", ["census", "dominator"])
def test_shapely_geometries_hold_their_geos_geometries(tmp_path: Path, version: str, owner_model: str) -> None:
    """2,000 shapely 2 polygons kept (a geo service's cache): each a Python subclass of
    ``shapely.lib.Geometry`` (40 bytes) whose GEOS geometry is behind a pointer; the list was
    144 KB of 5.4 MB. A Geometry is sized by a struct scan now (its C class's struct, the
    subclasses kept as nodes): within 10% of what clearing the list frees."""
    _check(tmp_path, "shapely", shapely_python(version), owner_model=owner_model, path="__main__.SHAPES")


@pytest.mark.parametrize("version", ["3.11", "3.12"])
@pytest.mark.parametrize("owner_model", ["census", "dominator"])
def test_an_arrays_data_its_base_frees_is_the_arrays(tmp_path: Path, version: str, owner_model: str) -> None:
    """20 ndarrays an @njit function returned: each one's base is numba's NRT meminfo, which
    frees the data with it; the array was 112 bytes and its 4 MiB in no owner. An array whose
    base is such an owner (numba's meminfo, polars' series, a capsule but DLPack's) counts
    its data now (sizes._frees_the_data)."""
    _check(tmp_path, "numba_arrays", numba_python(version), owner_model=owner_model, path="__main__.ARRAYS")


@pytest.mark.parametrize("version", MMAP_VERSIONS)
@pytest.mark.parametrize("owner_model", ["census", "dominator"])
def test_a_suspended_greenlets_variables_are_its_own(tmp_path: Path, version: str, owner_model: str) -> None:
    """50 greenlets switched out mid-request (a gevent worker's pool), 1 MiB and 2,000 rows in
    each one's frames' variables: greenlet's traversal shows no frame and a greenlet's frame
    (3.11+) does not show its variables, so the pool's 50 MiB were in no owner (owner #1 was
    the payload's own module). They are the greenlet's now (sizes.native_extra), read as a
    running thread's frames are: the pool holds them."""
    _check(tmp_path, "greenlets", greenlet_python(version), owner_model=owner_model, path="__main__.POOL")


@pytest.mark.parametrize("version", MMAP_VERSIONS)
@pytest.mark.parametrize("owner_model", ["census", "dominator"])
def test_box2d_worlds_behind_swig_4_proxies_hold_their_bodies(tmp_path: Path, version: str, owner_model: str) -> None:
    """40 pybox2d worlds kept (a physics env worker's replay cache). SWIG 4.1 makes its
    ``SwigPyObject`` class with no module: the payload failed on it (``AttributeError:
    __module__``, type's own getter) and no inspection of such a worker finished; then the
    proxies were not known as SWIG's and the list was in no owner listed. Each world is what its
    struct reaches now: the heap's bytes clearing it frees less the worlds' pages never written
    (each has a 100 KiB stack allocator inside), within 5%. Clearing the list returns 7.9 MB of
    RSS once malloc has trimmed and making 40 more costs 9.9 MB (Box2D's small blocks: pages
    shared with what stays): the owner is between, within 15% of the first."""
    with spawn_target("native_buffers", tmp_path, python=box2d_python(version), env={"SHAPE": "box2d"},
                      timeout=120) as child:
        snap = capture(child.pid, request=RequestOptions(timeout=120), max_pause_ms=None, top=10,
                       owners=Owners(owner_model)).snapshot
        truth = child.report()["truth"]
    top = snap.owners[0]
    assert top.path == "__main__.WORLDS", [(o.path, o.retained_bytes) for o in snap.owners[:5]]
    assert within(top.retained_bytes, truth["written_bytes"], 0.05), (top.retained_bytes, truth)
    assert within(top.retained_bytes, truth["bytes"], 0.15), (top.retained_bytes, truth)


@pytest.mark.parametrize("version", MMAP_VERSIONS)
@pytest.mark.parametrize("owner_model", ["census", "dominator"])
def test_pygame_surfaces_hold_their_pixels(tmp_path: Path, version: str, owner_model: str) -> None:
    """50 pygame Surfaces kept (a game env's frames, 1.2 MB of SDL's pixels each, 56 bytes to
    sys.getsizeof): the list was in no owner listed; each surface its pitch x height now
    (sizes.native_extra, pygame's own C methods), a subsurface none (its parent's pixels)."""
    snap = _check(tmp_path, "pygame", pygame_python(version), owner_model=owner_model, path="__main__.FRAMES")
    views = [o for o in snap.owners if o.path == "__main__.VIEWS"]
    assert not views or views[0].retained_bytes < 1 << 20, [(o.path, o.retained_bytes) for o in views]


@pytest.mark.parametrize("version", MMAP_VERSIONS)
@pytest.mark.parametrize("owner_model", ["census", "dominator"])
def test_opencv_captures_hold_their_decoders(tmp_path: Path, version: str, owner_model: str) -> None:
    """30 OpenCV VideoCaptures never released (a vision env's video per episode): ~1.7 MB of
    FFmpeg's each behind a cv::Ptr (32 bytes to sys.getsizeof); the list was in no owner
    listed. Sized by a struct scan from the capture, none of what OpenCV's extension module's
    globals reach (its file found among the mappings: sizes._package_library)."""
    _check(tmp_path, "opencv", opencv_python(version), owner_model=owner_model, path="__main__.CAPTURES")


PYBIND11_ENUM = r"""
import sys
sys.path.insert(0, sys.argv[1])
import mujoco
from leakhound.payload import sizes
model = mujoco.MjModel.from_xml_string(
    "<mujoco><worldbody><body><freejoint/><geom size='.1'/></body></worldbody></mujoco>")
data = mujoco.MjData(model)
enums = {}
print(sizes._struct_basicsize(mujoco.mjtSensor.mjSENS_FRAMEPOS, sizes._PYBIND11_KIND, enums),
      sizes._struct_basicsize(data, sizes._PYBIND11_KIND, enums))
"""


@pytest.mark.parametrize("version", ["3.11", "3.13"])
def test_a_pybind11_enums_value_reaches_nothing(version: str) -> None:
    # (an enum's value is an int in a 32-byte chunk; its stale words once reached a MjData's
    # arena at a lower depth than the MjData did, and an enum was owner #3 with 0.9 MB)
    python = mujoco_python(version)
    done = subprocess.run([python, "-c", PYBIND11_ENUM, str(ROOT)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "56"], done.stdout


@pytest.mark.parametrize("version", MMAP_VERSIONS)
@pytest.mark.parametrize("owner_model", ["census", "dominator"])
def test_a_swig_proxy_that_owns_nothing_takes_nothing(tmp_path: Path, version: str, owner_model: str) -> None:
    """10 faiss IVF indexes owning their quantizers, and a list of the quantizers' proxies kept
    elsewhere (SWIG's, ``own`` 0): that list took the quantizers (0.28 of what freeing the
    indexes returns), the indexes 0.72; a proxy that does not own its object reaches nothing
    now (sizes._struct_basicsize), the indexes within 10%."""
    snap = _check(tmp_path, "faiss_ivf", faiss_python(version), owner_model=owner_model, path="__main__.INDEXES")
    quantizers = [o for o in snap.owners if o.path == "__main__.QUANTIZERS"]
    assert not quantizers or quantizers[0].retained_bytes < 1 << 20, [(o.path, o.retained_bytes) for o in quantizers]


@pytest.mark.parametrize("version", ["3.11", "3.12"])
def test_adapters_of_openais_real_models_are_what_freeing_them_returns(tmp_path: Path, version: str) -> None:
    """A ``TypeAdapter(list[M])`` kept for each of openai's ~700 models (the verifiers worker's
    venv): ~70 MB freed. Stale words in their Rust heap once reached a 7.5 MB "chunk" in
    pymalloc's arenas, a 6.6 MB one 16 bytes short of a real chunk and an 11.2 MB one in a hash
    table's buckets, one run in three or four: owner #1 at 1.05-1.06 of the truth, or a
    validator of 14 MB listed second (_walk.c: glibc_heap_used, glibc_arena_next_ok)."""
    if version not in installed_pythons():
        pytest.skip(f"no CPython {version} here")
    python = str(ensure_verifiers_venv(python=installed_pythons()[version]) / "bin" / "python")
    with spawn_target("native_buffers", tmp_path, python=python, env={"SHAPE": "openai_adapters"},
                      timeout=300) as child:
        snap = capture(child.pid, request=RequestOptions(timeout=120), max_pause_ms=None, top=10).snapshot
        truth = child.report()["truth"]
    assert truth["adapters"] > 500, truth
    top, rest = snap.owners[0], snap.owners[1:]
    assert top.path == "__main__.ADAPTERS", [(o.path, o.retained_bytes) for o in snap.owners[:5]]
    assert 0.92 <= top.retained_bytes / truth["bytes"] <= 1.03, (top.retained_bytes, truth)
    assert all(o.retained_bytes < 2 << 20 for o in rest), [(o.path, o.retained_bytes) for o in rest[:5]]


@pytest.mark.parametrize("version", MMAP_VERSIONS)
@pytest.mark.parametrize("owner_model", ["census", "dominator"])
@pytest.mark.parametrize("shape", ["tiktoken", "hf_tokenizers"])
def test_a_tokenizers_vocabulary_is_its_own(tmp_path: Path, version: str, owner_model: str, shape: str) -> None:
    """8 encoders (tiktoken's, ~7 MB each: its ranks' hash tables of 20,000 tokens, the biggest
    mmapped by glibc) or tokenizers (Hugging Face's, ~3.4 MB each) kept were 0.29 of what
    freeing them returns, or in no owner listed (the tokenizers: another owner was first);
    their Rust heap is sized from their structs as pydantic-core's is."""
    _check(tmp_path, shape, tokenizer_python(version), owner_model=owner_model, path="__main__.ENCODERS")


@pytest.mark.parametrize("version", MMAP_VERSIONS)
@pytest.mark.parametrize("owner_model", ["census", "dominator"])
def test_a_ctypes_buffer_is_its_size(tmp_path: Path, version: str, owner_model: str) -> None:
    """``sys.getsizeof(create_string_buffer(200000))`` is 136: the buffer the object owns is
    its ``b_size`` (a view made ``from_buffer`` owns none)."""
    _check(tmp_path, "ctypes", installed_pythons()[version], owner_model=owner_model)


@pytest.mark.parametrize("version", MMAP_VERSIONS)
@pytest.mark.parametrize("owner_model", ["census", "dominator"])
def test_a_stringio_is_its_characters(tmp_path: Path, version: str, owner_model: str) -> None:
    """An ``io.StringIO``'s characters are in none of its ``__sizeof__`` and referents: 3.10/3.11
    keep what it accumulates in two lists only it references (they were ``<held from C:
    list>``), 3.12+ in a str only it references (in no owner at all), and one read back in a
    buffer of its own (nowhere, on every version)."""
    _check(tmp_path, "stringio", installed_pythons()[version], owner_model=owner_model)


@pytest.mark.parametrize("version", MMAP_VERSIONS)
@pytest.mark.parametrize("owner_model", ["census", "dominator"])
def test_a_zlib_stream_is_its_state(tmp_path: Path, version: str, owner_model: str) -> None:
    """A ``zlib.compressobj()`` is 168 bytes to ``sys.getsizeof`` and ~262 KB of zlib's state,
    window, hash chains and pending output (a websocket connection's per-message deflate;
    a ``gzip.GzipFile`` writer's); a ``decompressobj`` 7 KB, 39 KB once it has a window; a
    3.12+ ``_ZlibDecompressor`` the input it keeps too. 100 connections' and writers' streams
    were 99% in no owner's bytes."""
    _check(tmp_path, "zlib", installed_pythons()[version], owner_model=owner_model)


@pytest.mark.parametrize("version", MMAP_VERSIONS)
@pytest.mark.parametrize("owner_model", ["census", "dominator"])
def test_a_bz2_or_lzma_stream_is_its_state(tmp_path: Path, version: str, owner_model: str) -> None:
    """A ``bz2.BZ2Compressor(9)`` is 112 bytes to ``sys.getsizeof`` and 7.5 MB of bzip2's
    blocks; a ``BZ2Decompressor`` 3.7 MB once it has read a block; an ``LZMADecompressor`` of
    the default preset's streams 8.4 MB. 100 compressors were 752 MB in no owner's bytes (the
    first owner a 0.5 MB dict)."""
    _check(tmp_path, "compression", installed_pythons()[version], owner_model=owner_model)


@pytest.mark.parametrize("version", MMAP_VERSIONS)
@pytest.mark.parametrize("owner_model", ["census", "dominator"])
def test_a_lock_is_its_object_and_its_semaphore(tmp_path: Path, version: str, owner_model: str) -> None:
    """``threading.Lock()`` and the C ``RLock`` are 56 and 64 bytes to ``sys.getsizeof`` and a
    POSIX semaphore more, allocated apart (PyThread_allocate_lock): 120 bytes freed a lock in a
    list, not 72. A metrics library's 400,000 locks (one per counter and bucket) were 17 MB in
    no owner's bytes."""
    _check(tmp_path, "locks", installed_pythons()[version], owner_model=owner_model)


@pytest.mark.parametrize("version", MMAP_VERSIONS)
@pytest.mark.parametrize("owner_model", ["census", "dominator"])
def test_a_hashlib_hasher_is_its_openssl_context(tmp_path: Path, version: str, owner_model: str) -> None:
    """A ``hashlib.sha256()`` is 32 bytes to ``sys.getsizeof`` and ~210 more of OpenSSL's: the
    digest context and the provider's state it owns (a sha3's 432 bytes), and the lock one fed
    a big buffer made before 3.13; an ``hmac.new()``'s OpenSSL HMAC three such contexts (~670
    bytes). 20,000 hashers kept were 5 MB freed and 0.8 MB in their owner; now, with 4,000
    HMACs, what freeing them returns (the target's heap, in a forked child)."""
    _check(tmp_path, "hashes", installed_pythons()[version], owner_model=owner_model)


WALKS_AGREE = r"""
import gc, mmap, sys
sys.path.insert(0, sys.argv[1])
from leakhound.payload import census, roots
from leakhound.payload.objects import type_name
import numpy as np
from PIL import Image
try:
    import torch
except ImportError:
    torch = None
base = np.arange(100000.0)
heap = {
    "views": [base[:10], base[5:20], np.ones(1000)[::3]],
    "objects": np.array(["a" * 50, "b" * 60, ("t", 1)] * 700, dtype=object),
    "nested": np.array([[np.zeros(7), "x" * 30], [None, 3.5]], dtype=object),
    "image": Image.new("RGB", (64, 48)),
    "map": mmap.mmap(-1, 65536),
}
if torch is not None:
    t = torch.ones(300, 300)
    heap["tensors"] = [t, t[:3], t.view(-1), torch.zeros(10)]
del base
out = []
for compiled in (True, False):
    for per_call in (census._WORK_PER_CALL, 7):
        census._WORK_PER_CALL = per_call
        walk = census.Census(timeout=60, compiled=compiled).walk
        # classes and modules are walls (as in a census): the walk stays inside ``heap``
        for cls, _name, _kind, _tier in roots.classes(named=False):
            for wall in [cls, *(r for r in gc.get_referents(cls) if type(r) is dict or type(r) is tuple)]:
                walk.claimed.add(id(wall))
        for module, _name, _kind, _tier in roots.modules(lambda name: False):
            walk.claimed.add(id(module))
            walk.claimed.add(id(module.__dict__))
        walk.claim_tree(walk.owner_slot("root", heap), heap)
        types = walk.types
        out.append((walk.total_objects, walk.total_bytes, sorted(
            (type_name(tp), types.counts[i], types.bytes[i]) for i, tp in enumerate(types.keys))))
assert census._walk is not None
diff = [sorted(set(o[2]) ^ set(out[0][2])) for o in out]
assert all(o[:2] == out[0][:2] for o in out) and not any(diff), ([o[:2] for o in out], diff)
print(out[0][1])
"""


@pytest.mark.parametrize("version", ["3.11", "3.12", "3.13"])
def test_the_compiled_walk_and_the_python_loop_agree_on_native_objects(version: str) -> None:
    python = native_python(version, torch=version == "3.11")
    done = subprocess.run([python, "-c", WALKS_AGREE, str(ROOT)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[-1]) > 800 * 1000  # the numpy base, the tensor storage


NO_TARGET_CODE = r"""
import sys
sys.path.insert(0, sys.argv[1])
import torch
import numpy as np
from leakhound.payload import sizes
calls = []
class Logged(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        calls.append(func)
        return super().__torch_function__(func, types, args, kwargs or {})
class Finalized(np.ndarray):
    def __array_finalize__(self, obj):
        calls.append("finalize")
logged = torch.ones(3000).as_subclass(Logged)
finalized = np.array(["a", 1], dtype=object).view(Finalized)
kinds, bases = sizes.native_types()
calls.clear()
print(sizes.native_extra(logged, kinds, bases, set()), sizes.native_extra(finalized, kinds, bases, set()))
print(len(calls))
"""


def test_native_sizers_run_no_python_code_of_the_target() -> None:
    # A tensor subclass's __torch_function__ ran when its is_cpu getset was read; ravel() on an
    # ndarray subclass would run its __array_finalize__: such objects are not sized natively.
    python = native_python("3.11", torch=True)
    done = subprocess.run([python, "-c", NO_TARGET_CODE, str(ROOT)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[-2] == "0", done.stdout


@pytest.mark.parametrize("version", ["3.11", "3.13"])
@pytest.mark.parametrize("shape", ["arrow", "pandas_arrow"])
@pytest.mark.parametrize("owner_model", ["census", "dominator"])
def test_arrow_buffers_belong_to_their_owner(tmp_path: Path, shape: str, version: str, owner_model: str) -> None:
    """pyarrow's tables and arrays (and pandas 3's strs, kept in Arrow arrays where pyarrow is
    installed) hold their memory in Arrow's pool, outside the Python heap; their ``__sizeof__``
    is Cython the walk does not run: 100 tables were an owner of 40 KB for 47 MB. A slice
    sharing the first table's buffers counts none of them again."""
    # (the dominator owner is the blocks' tuple the manager holds, as its only other part is small)
    path = "__main__.FRAME._mgr.<tuple>" if shape == "pandas_arrow" and owner_model == "dominator" else ""
    _check(tmp_path, shape, arrow_python(version), owner_model=owner_model, path=path)


@pytest.mark.parametrize("version", MMAP_VERSIONS)
def test_an_ssl_context_is_what_openssl_holds_for_it(tmp_path: Path, version: str) -> None:
    """An ``ssl.SSLContext`` is 144 bytes to ``sys.getsizeof``; OpenSSL's context behind it (the
    system's certificates: ~850 KB) was in the ledger's "other" and in no owner (100 of them:
    83 MiB). Each context now holds what its SSL_CTX reaches first in OpenSSL's heap, every
    context scanned at once (two groups made apart, other allocations between: each group's
    owner is what freeing it returns, in a forked child); the type table says their bytes, no
    finding calls them unmeasured, and ``--why`` names who holds them. (Where none could be
    scanned, the finding names them: tests/unit/test_detectors.py.)

    What leakhound says its tables held at their peak (the walk's and the scan's) is what the
    kernel saw: the target's peak RSS, reset just before (``clear_refs``), grew by at least
    that, and by no more than that, the payload's loading and 3 MiB (measured on 3.11: 8.1 MiB
    said, 9.8 MiB grown, 1.3 MiB of it the loading)."""
    with spawn_target("native_buffers", tmp_path, python=installed_pythons()[version],
                      env={"SHAPE": "ssl_contexts"}, timeout=120) as child:
        Path(f"/proc/{child.pid}/clear_refs").write_text("5")  # its VmHWM back to its RSS
        rss = status_bytes(child.pid)["VmRSS"]
        capture_ = capture(child.pid, request=RequestOptions(timeout=120), max_pause_ms=None, top=10,
                           why="ssl.SSLContext")
        grown = status_bytes(child.pid)["VmHWM"] - rss
        truth = child.report()["truth"]
    snap = capture_.snapshot
    said, loading = snap.heap.payload_peak_bytes, snap.cost.payload_load_bytes if snap.cost else 0
    assert 4 << 20 < said <= grown <= said + loading + (3 << 20), (said, loading, grown)
    owners = {o.path: o.retained_bytes for o in snap.owners}
    assert snap.heap.owner_model == "dominator" and snap.owners[0].path == "__main__.CLIENTS", owners
    assert within(owners["__main__.CLIENTS"], truth["bytes"], 0.05), (owners, truth)
    # (the pool's, made after the clients': 0.966-1.011 measured, a few of its chunks the
    # clients' nearer)
    assert within(owners["__main__.POOL"], truth["pool_bytes"], 0.08), (owners, truth)
    assert within(owners["__main__.CACHE"], truth["cache_bytes"]), (owners, truth)
    contexts = truth["bytes"] + truth["pool_bytes"]
    row = {t.type: t for t in snap.types}["ssl.SSLContext"]
    assert row.count == 60 and within(row.bytes, contexts, 0.05), (row, truth)
    assert within(snap.heap.native_ssl_bytes, contexts, 0.05), (snap.heap, truth)
    assert not [f for f in snap.findings if f.kind == "native_state"], snap.findings
    other = sum(row.bytes for row in ledger(snap) if row.name == "other")  # (no row: none left)
    assert other < 0.1 * contexts, (other, truth)
    # (the biggest few contexts, of either holder)
    assert capture_.why and all(o.path == "__main__.CLIENTS[].ctx" or o.path.startswith("__main__.POOL['upstream-")
                                for o in capture_.why), capture_.why


@pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl command to make the server's certificate")
@pytest.mark.parametrize("version", MMAP_VERSIONS)
def test_a_tls_connection_is_what_openssl_holds_for_it(tmp_path: Path, version: str) -> None:
    """An ``ssl.SSLSocket``'s OpenSSL connection (its SSL, session and the peer's certificates:
    ~18 KB idle) is outside every Python size; 100 client connections kept open and the
    server's side of each are now each their owner's, what freeing them returns (the target's
    heap, in a forked child), scanned with the contexts."""
    snap, truth = _look(tmp_path, "ssl_sockets", installed_pythons()[version])
    owners = {o.path: o.retained_bytes for o in snap.owners}
    assert within(owners["__main__.CONNS"], truth["bytes"]), (owners, truth)
    assert within(owners["__main__.SERVED"], truth["served_bytes"]), (owners, truth)
    assert within(owners["__main__.CACHE"], truth["cache_bytes"]), (owners, truth)
    assert not [f for f in snap.findings if f.kind == "native_state"], snap.findings


@pytest.mark.parametrize("version", ["3.10", "3.13"])
def test_the_first_reachers_census_sizes_ssl_contexts_too(tmp_path: Path, version: str) -> None:
    """The census (``--owners census``, and where the graph cannot run) sizes the contexts as
    the graph does, once its walk is over, each for the owner that reached it first."""
    with spawn_target("native_buffers", tmp_path, python=installed_pythons()[version],
                      env={"SHAPE": "ssl_contexts"}, timeout=120) as child:
        snap = capture(child.pid, request=RequestOptions(timeout=120), max_pause_ms=None,
                       owners=Owners("census")).snapshot
        truth = child.report()["truth"]
    owners = {o.path: o.retained_bytes for o in snap.owners}
    assert snap.heap.owner_model == "first-reacher" and snap.owners[0].path == "__main__.CLIENTS", owners
    assert within(owners["__main__.CLIENTS"], truth["bytes"], 0.05), (owners, truth)
    assert within(owners["__main__.POOL"], truth["pool_bytes"], 0.08), (owners, truth)
    assert within(snap.heap.native_ssl_bytes, truth["bytes"] + truth["pool_bytes"], 0.05), (snap.heap, truth)
    assert not [f for f in snap.findings if f.kind == "native_state"], snap.findings


# (Python, protobuf release: the newest, and older ones whose arenas are laid out otherwise)
PROTOBUFS = [("3.10", ""), ("3.11", ""), ("3.12", ""), ("3.13", ""), ("3.11", "4.21.12"), ("3.12", "5.29.5"),
             ("3.13", "6.31.1")]


@pytest.mark.parametrize(("version", "release"), PROTOBUFS)
def test_protobuf_messages_hold_their_arenas(tmp_path: Path, version: str, release: str) -> None:
    """2,000 Struct replies kept (20 strs of 300 bytes each, in upb arenas: 64 bytes by
    sys.getsizeof) and 200 repeated fields kept without their message were 172 KiB, owner #5
    behind a 5 MB list of dicts; now their arenas' blocks, found in each protobuf's layout (4.21:
    its allocator first, sizes of 32 bits; 5.x: the arena after its first block; 6+: inside it;
    6.3x: the block in use with a hint in its size's place), are what freeing them returns (the
    target's heap, in a forked child)."""
    python = protobuf_python(version, f"protobuf=={release}" if release else "protobuf")
    snap, truth = _look(tmp_path, "protobuf", python, "census" if (version, release) == ("3.12", "") else "")
    owners = {o.path: o.retained_bytes for o in snap.owners}
    assert snap.owners[0].path == "__main__.MESSAGES", owners
    assert within(snap.owners[0].retained_bytes, truth["bytes"], 0.05), (owners, truth)
    assert within(owners["__main__.CACHE"], truth["cache_bytes"]), (owners, truth)


@pytest.mark.parametrize("version", ["3.10", "3.11", "3.12", "3.13"])
def test_cffi_buffers_are_what_they_were_allocated_with(tmp_path: Path, version: str) -> None:
    """``ffi.new()`` allocates the object and its data in one block, and sys.getsizeof says 40
    bytes of it (a 100 KB buffer too): 200 such buffers, 100 structs of 20 KB and 1,000 small
    arrays were an owner of ~60 KB behind a 5 MB list of dicts. Now each is its array's or
    pointed-to item's size (cffi's own typeof/sizeof); views made from_buffer own nothing.
    The truth is what freeing them returns (the target's heap, in a forked child)."""
    snap, truth = _look(tmp_path, "cffi", cffi_python(version), "census" if version == "3.12" else "")
    owners = {o.path: o.retained_bytes for o in snap.owners}
    assert snap.owners[0].path == "__main__.BUFFERS", owners
    assert within(snap.owners[0].retained_bytes, truth["bytes"], 0.05), (owners, truth)
    assert within(owners["__main__.CACHE"], truth["cache_bytes"]), (owners, truth)
