"""The compiled walks (``_walk.abi3.so``, built from this package's ``_*.c``): the census's
(``_census_walk.c``, twin of census_walk.py) and the object graph's (``_graph_walk.c``, twin of
graph.py). Optional: where it does not load (CPython < 3.10, no compiler at install, a noexec
directory) the payload runs the Python loops, which compute the same numbers.

Addresses are ``id()`` values; 0 is the graph's super-root. The capsules are opaque: only this
module reads them.
"""

from array import array
from collections.abc import Callable
from typing import final

# "abi3+private": the interpreter's private helpers are in use (use_private); "abi3": the
# stable ABI only.
mode: str
# Code objects' members are read here: the walks leave code out of the natively sized types
# they hand this module (sizes.for_compiled_walk).
READS_CODE: int

@final
class _Session:
    """A census's caches kept between its claim() calls (a capsule)."""

@final
class _Pending:
    """What a claim() call was in the middle of: referents and wide containers (a capsule)."""

@final
class _Graph:
    """An object graph being built: its records, bitmaps and walk in progress (a capsule)."""

# -- the module's settings and helpers (_walk.c) ------------------------------------------

def use_private(on: object, /) -> bool:
    """Use the interpreter's private helpers where it exports them; whether all are in use."""

def sizeof_counts_referents(descriptors: tuple[object, ...], /) -> None:
    """The C __sizeof__ methods that count an object gc.get_referents also lists."""

def tracked_objects(
    get_objects: Callable[[], list[object]], counts: dict[int, int] = ..., kinds: dict[int, type] = ..., /,
) -> list[object]: ...
def count_references(objects: list[object], start: int, stop: int, keys: list[int], /) -> list[int]:
    """How many times objects[start:stop] reference each of ``keys`` (sorted addresses)."""

def held_once_referents(refs: list[object], start: int, stop: int, /) -> list[object]:
    """The referents of the tuples and frozensets in refs[start:stop] one referrer alone holds."""

def frame_locals(
    frame: object, frame_type: type, code: object, nlocals: int, f_frame_offset: int, code_offset: int,
    frame_obj_offset: int, localsplus_offset: int, /,
) -> list[object | None] | None:
    """The first ``nlocals`` fast locals of a frame (``f_frame_offset`` 0: of a 3.10 frame object
    itself); None when the layout does not match."""
def stringio_parts(
    obj: object, stringio_type: type, basicsize: int, layout: int, /,
) -> tuple[int, tuple[object | None, object | None]] | None:
    """An io.StringIO's buffer bytes (requested) and what holds its accumulated writes (3.10/3.11:
    its accumulator's two lists; 3.12/3.13: its writer's str); None when it does not look as
    expected."""

def zlib_state_blocks(obj: object, zlib_type: type, basicsize: int, kind: int, /) -> tuple[int, ...] | None:
    """The blocks of a zlib stream object's C state (1: Compress, 2: Decompress, 3:
    _ZlibDecompressor); None where it is ended or its layout is not the one read."""

def sqlite_memory_used(module_file: str | None, /) -> int: ...
def sqlite_connection_bytes(obj: object, connection_type: type, module_file: str | None, /) -> int | None: ...
def resident_bytes(address: int, length: int, /) -> tuple[int, int]: ...
def mapped_resident(mmap: object, length: int, basicsize: int, /) -> tuple[int, int]: ...
def atexit_callbacks(ncallbacks: object, /) -> list[object] | None:
    """The interpreter's atexit callbacks (as many as ``ncallbacks()``, atexit's C function), a
    flat list of func, args, kwargs each; None where they cannot be found."""

def evp_digest_bytes(obj: object, type: type, basicsize: int, has_lock: bool, ranges: bytes, hmac: bool = ...,
                     /) -> int | None: ...

def ssl_object_bytes(objects: list[object], context_type: type, socket_type: type | None, ranges: bytes,
                     ssl_file: str | None, small_max: int, max_chunks: int, max_bytes: int, seconds: float,
                     /) -> bytes | None:
    """What each context's SSL_CTX or socket's SSL reaches first in OpenSSL's heap (int64s), None if not done."""

def ssl_scan_peak() -> int:
    """The most the last ssl_object_bytes' (or struct_object_bytes') tables used at once, as far as written."""

def struct_object_bytes(objects: list[object], basicsizes: bytes, ranges: bytes, lib_file: str, small_max: int,
                        max_chunks: int, max_bytes: int, seconds: float, /) -> bytes | None:
    """What each object's own struct reaches first in the heap (int64s), None if not done."""

def held_object(obj: object, basicsize: int, offset: int, cls: type, /) -> object | None:
    """The object of exactly ``cls`` whose pointer ``obj``'s struct keeps at ``offset``, or None."""

def stream_state_bytes(obj: object, type: type, basicsize: int, kind: int, ranges: bytes, /) -> tuple[int, int] | None:
    """(bytes of its C state, size of the input it keeps) of a compression stream object (1:
    _lzma.LZMADecompressor, liblzma's count; 4: _lzma.LZMACompressor of the xz format, liblzma's
    count for its filter chain; 2: _bz2.BZ2Compressor; 3: _bz2.BZ2Decompressor,
    their blocks as glibc chunks inside ``ranges``); None where it is ended, its layout is not
    the one read, or nothing could be read."""
def upb_arena_bytes(arena: object, /) -> tuple[int, int] | None:
    """A protobuf upb arena object's blocks: (their bytes, their count); None where not found."""
def upb_held(obj: object, arena_type: type, weakmap_offset: int, /) -> tuple[object | None, int, int]:
    """A upb message's or container's arena object (None if not one of ``arena_type``), and the
    bytes and count of the blocks of a message's own arena of unset fields."""

# -- the census's walk (_census_walk.c) ----------------------------------------------------

def session() -> _Session:
    """Caches for claim() kept from one call to the next."""

def claim(
    stack: list[object], pending: list[_Pending], regions: dict[int, bytearray], type_index: dict[int, int],
    new_slot: Callable[[type], int], counts: array[int], sizes: array[int], limit: int,
    native: dict[int, int] | None = ..., found: list[object] | None = ..., session: _Session | None = ..., /,
) -> tuple[int, int]:
    """Claim what ``stack`` reaches and ``regions`` has not marked, for about ``limit`` units of
    work; returns (objects, bytes)."""

# -- the object graph's walk (_graph_walk.c) -----------------------------------------------

def graph_new(
    max_nodes: int, type_index: dict[int, int], type_id: Callable[[type], int],
    slot_cache: dict[int, tuple[tuple[int, object], ...]],
    slot_labels: Callable[[type], tuple[tuple[int, object], ...]], frame_labels: dict[int, int],
    frame_label: Callable[[type], int], frame_types: tuple[type, ...], native: dict[int, int],
    native_extra: Callable[[object], tuple[int, list[object]]], too_big: type[BaseException], /,
) -> _Graph:
    """A new object graph (the super-root's record first) and the helpers its walk calls."""

def graph_node(graph: _Graph, obj: object, size: int, type_id: int, /) -> int:
    """obj's node (its address), made with this size and type id if new; -1: leakhound's own."""

def graph_find(graph: _Graph, address: int, /) -> int | None:
    """The node at ``address``, or None; -1: leakhound's own object."""

def graph_own(graph: _Graph, address: int, /) -> None:
    """Never a node: leakhound's own object."""

def graph_fold_marks(graph: _Graph, until: int, /) -> None:
    """Mark folded containers only while fewer than ``until`` tracked objects were met (-1: always)."""

def graph_keep_types(graph: _Graph, types: tuple[type, ...], /) -> None:
    """Objects of exactly these classes (16 at most) are never folded: a node each."""

def graph_edge(graph: _Graph, src: int, dst: int, label: int, wall: bool = ..., /) -> None:
    """An edge between two nodes; ``wall``: dst is reached from the super-root only."""

def graph_walk(graph: _Graph, stack: list[object], limit: int, /) -> int:
    """Walk from the nodes on ``stack`` for about ``limit`` units of work; 0 when all is done."""

def graph_reserve(graph: _Graph, limit: int, /) -> bool:
    """Between two walks: room now for what ``limit`` units may add (moved without the GIL)."""

def graph_info(graph: _Graph, /) -> tuple[int, int, int, int, int, int, int, int]:
    """(nodes, edges, tracked, bytes held, bytes written out, bytes of frames left, objects folded)."""

def graph_tallies(graph: _Graph, /) -> tuple[bytes, bytes, int, int, int]:
    """(counts, bytes per type id as int64 arrays, objects, total bytes, native bytes)."""

def graph_reached(graph: _Graph, regions: dict[int, bytearray], /) -> int:
    """What the walk reached OR-ed into the census's bitmap; how many regions it has."""

def graph_frame(graph: _Graph, k: int, /) -> bytes | None:
    """Frame k of the blocks not written out; None past the end."""

def graph_spool(graph: _Graph, fd: int, /) -> None:
    """Full blocks go to the file descriptor ``fd`` at each graph_flush."""

def graph_flush(graph: _Graph, /) -> int:
    """Every full block to the spool, the GIL released; bytes written."""

def graph_write(graph: _Graph, fd: int, /) -> int:
    """Every block not written out yet to ``fd`` in one call, the GIL released; bytes written."""

def graph_close(graph: _Graph, /) -> None:
    """Drop the helpers, the bitmaps and the walk in progress (not the records)."""

def graph_add_bytes(graph: _Graph, address: int, type_id: int, size: int, /) -> bool:
    """``size`` more bytes of the node at ``address`` and of its type's tally; False: no node."""

def graph_settle(graph: _Graph, /) -> None:
    """The leaves still pending made nodes, with their edge. After the walk."""

def graph_unknown(graph: _Graph, objects: list[object], /) -> list[object]:
    """The objects that are no node."""

def graph_label(graph: _Graph, text: str | None, max_labels: int = ..., max_key_labels: int = ..., /) -> int | None:
    """The label of ``text`` (made if new), or -1 when they are all taken; the limits, set first."""
def graph_labels(graph: _Graph, start: int = ..., stop: int = ..., /) -> list[str]:
    """The labels' texts from ``start`` to ``stop`` (all by default), by label (after graph_close too)."""

# -- the allocation-site tracker (_sites.c) -------------------------------------------------

def sites_start(mean_bytes: float, seconds: float, max_samples: int, /) -> dict[str, float]:
    """Hook PYMEM_DOMAIN_MEM and _OBJ: one sample per ``mean_bytes`` allocated on average, its
    Python stack kept until the block is freed; the hook removes itself after ``seconds``.
    RuntimeError (nothing hooked) on an interpreter whose frames it cannot read."""

def sites_stop() -> dict[str, float]:
    """Put the saved allocators back (unless another hook wraps ours) and free the tables; the last state."""

def sites_state() -> dict[str, float]:
    """installed, tracking, expired, unhook_refused, live, sampled, allocated_bytes, dropped,
    dropped_stacks, stacks, table_bytes, seconds_left, mean_bytes, seconds."""

def sites_ignore_thread(flag: object, /) -> None:
    """The calling thread's allocations are (not) sampled; its frees are always seen."""

def sites_noting(flag: object, /) -> None:
    """While set, the graph's walk notes which node each surviving sample is part of."""

def sites_read() -> tuple[list[tuple[int, int, int, int]], list[list[tuple[str, int, str]]], dict[str, float]]:
    """(samples: (address, size, stack, node), stacks: (file, line, function) innermost first, state)."""

# -- libc and the interpreter, read without ctypes (_libc.c) ------------------------------

def mallinfo2() -> tuple[int, int, int, int, int, int, int, int, int, int] | None:
    """glibc's mallinfo2() fields in order; None where the libc has none."""

def malloc_info() -> str | None:
    """glibc's malloc_info(0, ...) XML, written into memory; None where the libc has none."""

def pymalloc_stats() -> str | None:
    """_PyObject_DebugMallocStats()'s text, written into memory; None where not exported."""

def unmap(address: int, size: int, /) -> bool:
    """munmap(address, size): a bootstrap page of the ptrace method (boot.py)."""

def word_at(address: int, /) -> int:
    """The machine word at ``address``."""

def known_types(ndarray: type | None, dtype: type | None, ordered_dict: type | None = ...,
                deque: type | None = ..., heap_class: type | None = ..., lru_wrapper: type | None = ...,
                /) -> None:
    """numpy's classes: an array of objects that owns its data is read a slice at a time; an
    OrderedDict's keys are its twice; a class statement's class, whose traverse a big list,
    tuple or set subclass read a slice at a time has; functools' C lru_cache wrapper (3.10-3.13),
    whose links' keys and results are read as their links' referents."""

def reads_elements(obj: object, /) -> bool:
    """Whether the walks read ``obj``'s elements themselves (an array of objects)."""

def dict_entry_of(d: dict[object, object], address: int, /) -> tuple[object, object] | None:
    """The entry of ``d`` whose value's id is ``address``, or None."""

def referent_with_id(obj: object, address: int, /) -> object | None:
    """The object whose id is ``address`` among ``obj``'s referents (its traverse), or None."""

def class_statement(tp: type, /) -> bool: ...
def dict_value_of(d: dict[object, object], name: str, /) -> object | None: ...
def dict_own_referents(d: dict[object, object], /) -> list[object]:
    """What ``d`` holds besides its entries (a subclass's own), its entries not listed."""

def typed_referents(obj: object, /) -> list[object] | None:
    """The referents the compiled walks read in place of gc.get_referents(obj) (an lru_cache's
    wrapper: its fields without its links'; a link: its key, result and type), or None."""

def lru_link_class() -> type | None:
    """The class of an lru_cache's links, once a wrapper was read (typed_referents)."""

def lru_cache_dict(obj: object, /) -> dict[object, object] | None:
    """The cache dict of an lru_cache's wrapper the walks read from its fields, or None."""
