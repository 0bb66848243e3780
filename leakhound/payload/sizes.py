"""Sizes in the target: the size of one object (:func:`object_size`, the census's and any heap
walk's per-object size), native buffers of well-known types (:func:`native_types`,
:func:`native_extra`) and deep sizes of plain data (:func:`deep_size`). Standard library only.

``object_size`` never runs a ``__sizeof__`` written in Python (see its docstring).

Native sizers: memory an object holds outside the Python heap, or references the garbage
collector does not show, for an allowlist of types (and their subclasses) only:

- ``numpy.ndarray``: its ``base`` (a view keeps the array or buffer it views alive; an owning
  array's ``__sizeof__`` already counts its data: of 1 MiB or more, less its pages not in RAM)
  and an object array's elements;
- ``torch`` tensors (``torch._C.TensorBase``): the bytes of their CPU storage (of 1 MiB or
  more: its pages in RAM), once per storage however many tensors view it, and what their
  autograd graph saved (its nodes: ``_autograd_root``, ``_autograd_next``) or a leaf's ``grad``;
- ``mmap.mmap``: the pages of its mapping in RAM (its length where they cannot be read);
- Pillow's ``ImagingCore`` (an ``Image``'s ``_im``/``im``): its pixel memory;
- pygame's ``Surface``: its SDL surface's pixels (pitch x height), none for one whose pixels
  are another's (a subsurface, ``pygame.image.frombuffer``: pygame's PREALLOC flag);
- cffi's owning cdata (``ffi.new()``'s): the array or the pointed-to item it was allocated with;
- protobuf's messages in upb (``google._upb._message``): the arena they and their repeated and
  map fields' containers hold (a referent), sized by its blocks (:func:`_upb_classes`);
- pandas: through its arrays (a DataFrame's blocks hold ndarrays and extension arrays);
- 3.11+ instances of plain classes: their attribute values array, which ``sys.getsizeof``
  leaves out (:func:`instance_values_bytes`; the walks add it as they size the object);
- code objects: what they hold (constants, names, line and exception tables, their names and
  file name), which ``gc.get_referents`` does not list (code objects are not gc-tracked):
  read through the code type's member descriptors, never a getter that builds or caches a
  new object (3.12+ cache ``co_varnames`` in the code object itself).

Each is read only through C: getsets and methods from the allowlisted C class's own dict,
called on the object (never looked up on the object's class, which a subclass could override
with Python code), slot wrappers, module dicts. No Python code of the target runs.
"""

import array
import bisect
import gc
import sys
import time
import types

from .objects import (
    BASETYPE,
    HEAPTYPE,
    INLINE_VALUES_DICTS,
    builtin_iter,
    class_dict,
    class_module,
    has_managed_dict,
    in_mro,
    instance_dict,
    managed_dict_address,
    module_file,
    short_type_name,
    struct_word,
    subclass_tree,
    type_flags,
)
from .roots import frame_locals

# A __sizeof__ above this (256 TiB, more than any address space) is not a size; it counts as
# 0, like one that raises (_walk.h: MAX_OBJECT_BYTES). Sums then stay far from int64 limits.
MAX_OBJECT_BYTES = 1 << 48

_METHOD_DESCRIPTOR = type(object.__sizeof__)
_CODE_TYPE = type((lambda: 0).__code__)
# The code type's member descriptors for the objects a code object holds (3.10: the bytecode
# and the names tuples are members too; 3.11+ keep those in one private tuple and byte
# string, reached only through getters that build new objects: not read).
# In _walk.c's order (init_code_members): the compiled graph walk numbers nodes as the
# Python loop does only if both meet the members in one order.
_CODE_MEMBERS = tuple([
    _CODE_TYPE.__dict__[name] for name in (
        "co_consts", "co_names", "co_filename", "co_name", "co_qualname", "co_linetable",
        "co_exceptiontable", "co_code", "co_varnames", "co_freevars", "co_cellvars")
    if type(_CODE_TYPE.__dict__.get(name)).__name__ == "member_descriptor"])

object_sizeof = object.__sizeof__
_MISSING = object()


def _sizeofs_counting_referents():
    """The C ``__sizeof__`` methods that count an object ``gc.get_referents`` also lists: a walk
    would count it twice, in the holder's size and as a node (or folded leaf) of its own.
    ``io.BytesIO``'s counts its buffer (a bytes it does not share), which 3.12+ also list as
    its referent (3.10 and 3.11 do not): 450 BytesIO of 88 KB on 3.12 were 79.3 MB retained
    for the 39.7 MB freeing them returns. Found by trying (a BytesIO with a buffer of its own:
    is the buffer a referent?), not by version."""
    found = []
    try:
        import _io  # noqa: PLC0415 - built in, loaded with the interpreter

        probe = _io.BytesIO()
        probe.write(b"\0" * 64)
        if any(type(ref) is bytes for ref in gc.get_referents(probe)):
            descr = class_dict(_io.BytesIO).get("__sizeof__")
            if type(descr) is _METHOD_DESCRIPTOR:
                found.append(descr)
    except Exception:
        return ()
    return tuple(found)


# Types whose __sizeof__ is one of these are sized by object.__sizeof__ (their basic size):
# the referent is counted once, on its own (the walks: census_walk.py, graph.py, their compiled twins).
SIZEOF_COUNTS_REFERENTS = _sizeofs_counting_referents()
_SIZEOF_COUNTS_REFERENTS_IDS = frozenset(id(descr) for descr in SIZEOF_COUNTS_REFERENTS)


def sizeof_is_builtin(tp):
    """Is ``tp``'s ``__sizeof__`` C code (a method_descriptor: built-in and extension types,
    and ``object.__sizeof__`` for classes that do not define one) that counts no referent
    (``SIZEOF_COUNTS_REFERENTS``)? Reads the MRO's dicts only."""
    for klass in type.__dict__["__mro__"].__get__(tp, type):
        descr = class_dict(klass).get("__sizeof__", _MISSING)
        if descr is not _MISSING:
            return type(descr) is _METHOD_DESCRIPTOR and id(descr) not in _SIZEOF_COUNTS_REFERENTS_IDS
    return False


def _heap_blocks():
    """How this process's allocators round a request, as ``heap_block`` reads it: (small_max,
    small_align, big_overhead, big_align, big_min), or None (sizes as requested).

    What freeing an object returns is the block it takes, not the bytes ``__sizeof__`` asks
    for: pymalloc hands out multiples of 16 up to 512 bytes (an int of 28 bytes takes 32, a
    float of 24 takes 32, a 84-byte str 96), glibc's malloc a chunk of the request plus its
    8-byte header rounded up to 16, at least 32. Read from the process, never assumed:
    pymalloc unless ``PYTHONMALLOC`` names another allocator, ``-X dev`` or a debug build add
    their hooks (guard bytes), or the build is free-threaded (mimalloc); glibc's chunks only
    where glibc is the libc and no allocator is preloaded (jemalloc, tcmalloc, mimalloc: their
    classes are not these). Another allocator leaves that side as requested. The environment
    is read from ``posix.environ`` (a plain dict made at start: ``os.environ`` is a Python
    mapping a program can replace)."""
    try:
        import posix  # noqa: PLC0415 - built in

        env = posix.environ
        env = env if type(env) is dict else {}
        malloc = env.get(b"PYTHONMALLOC", b"")
        malloc = malloc if type(malloc) is bytes else b"?"
        preload = env.get(b"LD_PRELOAD", b"")
        preload = preload if type(preload) is bytes else b"malloc"
        if sys.flags.dev_mode or hasattr(sys, "gettotalrefcount") or b"debug" in malloc:
            return None  # debug hooks: guard bytes around every block
        if "t" in getattr(sys, "abiflags", ""):
            return None  # free-threaded: objects are mimalloc's
        pymalloc = malloc in (b"", b"pymalloc")
        try:
            glibc = bool(posix.confstr("CS_GNU_LIBC_VERSION"))
        except (ValueError, OSError, AttributeError):
            glibc = False
        glibc = glibc and b"malloc" not in preload.lower() and malloc in (b"", b"pymalloc", b"malloc")
    except Exception:
        return None
    if not pymalloc and not glibc:
        return None
    # without pymalloc every request is malloc's
    return (512 if pymalloc else 0, 16) + ((8, 16, 32) if glibc else (0, 1, 0))


# The allocators' rounding in this process (_heap_blocks); None: sizes as requested.
HEAP_BLOCKS = _heap_blocks()
# What the sizes are, for the snapshot (heap.sizes): the blocks of "pymalloc+glibc", of
# "glibc" alone (PYTHONMALLOC=malloc), of "pymalloc" (another malloc), or "requested".
SIZE_MODEL = ("requested" if HEAP_BLOCKS is None
              else "+".join(name for name, on in (("pymalloc", HEAP_BLOCKS[0]), ("glibc", HEAP_BLOCKS[2])) if on))


def heap_block(size, blocks=HEAP_BLOCKS):
    """The block a request of ``size`` bytes takes (HEAP_BLOCKS; _walk.h's heap_block)."""
    if blocks is None or size <= 0:
        return size
    small_max, small_align, overhead, align, least = blocks
    if size <= small_max:
        return (size + small_align - 1) & ~(small_align - 1)
    size = (size + overhead + align - 1) & ~(align - 1)
    return size if size > least else least


# A list's header (with its GC pre-header): its items are a block of their own
LIST_HEAD = sys.getsizeof([])
# A bytearray's header: its buffer (``__sizeof__`` counts what it allocated) is a block apart
BYTEARRAY_HEAD = sys.getsizeof(bytearray())
# A deque's blocks: 64 items and two links each, allocated one by one; an empty deque holds one
_PTR = 8 if sys.maxsize > 2**32 else 4
DEQUE_BLOCK = 66 * _PTR
try:
    from _collections import deque as _deque  # type: ignore[import-not-found]  # noqa: PLC0415 - built in
except Exception:  # pragma: no cover - every CPython 3.8+ builds it in
    _deque = None
DEQUE_HEAD = sys.getsizeof(_deque()) - DEQUE_BLOCK if _deque is not None else 0


def _lock_types():
    """The classes of _thread's locks (``threading.Lock()``, the C ``RLock``) whose lock is a
    block apart: with POSIX semaphores (3.10-3.13), PyThread_allocate_lock's
    PyMem_RawMalloc(sizeof(sem_t)), 32 bytes on 64-bit glibc, which ``__sizeof__`` leaves out
    (a metrics library's 400,000 locks, one per counter, were 19 MB in no owner's bytes).
    3.14's locks are a PyMutex inside the object: none."""
    info = sys.thread_info
    if sys.version_info >= (3, 14) or _PTR != 8 or info.name != "pthread" or info.lock != "semaphore":
        return ()
    try:
        import _thread  # noqa: PLC0415 - built in
    except Exception:  # pragma: no cover
        return ()
    return tuple([cls for cls in (getattr(_thread, "LockType", None), getattr(_thread, "RLock", None))
                  if type(cls) is type])


LOCK_TYPES = _lock_types()
# the semaphore's block (measured: 120 bytes freed a lock in a list, 3.10-3.13: 64 its object,
# 8 the list's slot, 48 this): malloc's chunk for 32 bytes where HEAP_BLOCKS models glibc, else 32
LOCK_BLOCK = (0 if not LOCK_TYPES else heap_block(32, (0, 16) + HEAP_BLOCKS[2:])
              if HEAP_BLOCKS is not None and HEAP_BLOCKS[2] else 32)


def object_block(tp, size, blocks=HEAP_BLOCKS):
    """The blocks an object of type ``tp`` whose ``__sizeof__`` (with its pre-header) is
    ``size`` takes: one (heap_block), but for the objects whose parts ``__sizeof__`` adds up
    are allocations of their own: a list (its header and its items: a list of 90 items was
    2% under the heap's bytes as one), a bytearray (its header and its buffer) and a deque
    (its header and its blocks of DEQUE_BLOCK bytes: ~3% under as one); a lock of LOCK_TYPES
    is its object and its semaphore (LOCK_BLOCK)."""
    if tp in LOCK_TYPES:
        return heap_block(size, blocks) + LOCK_BLOCK
    if blocks is not None:
        if tp is list and size > LIST_HEAD:
            return heap_block(LIST_HEAD, blocks) + heap_block(size - LIST_HEAD, blocks)
        if tp is bytearray and size > BYTEARRAY_HEAD:
            return heap_block(BYTEARRAY_HEAD, blocks) + heap_block(size - BYTEARRAY_HEAD, blocks)
        if tp is _deque and size > DEQUE_HEAD:
            return heap_block(DEQUE_HEAD, blocks) + (size - DEQUE_HEAD) // DEQUE_BLOCK * heap_block(DEQUE_BLOCK, blocks)
    return heap_block(size, blocks)


def object_size(obj, default=0):
    """sys.getsizeof(obj, 0) when its type's ``__sizeof__`` is C code, else
    ``object.__sizeof__(obj)``: a ``__sizeof__`` written in Python is never run (a mock's
    creates new mocks for the walk to meet, without end: gigabytes in seconds). Anything it
    raises (not only TypeError) and any size no object can have count as 0: one odd object
    must not end the census. ``ClaimWalk.claim_tree``'s hot loop and _census_walk.c do the same."""
    try:
        builtin = sizeof_is_builtin(type(obj))
    except Exception:
        return 0
    return _size_as(obj, builtin, default)


def _size_as(obj, builtin, default=0):
    """``obj``'s size once it is known whether its type's ``__sizeof__`` is C code
    (``builtin``): object_size's and SizeCache's last step."""
    try:
        size = sys.getsizeof(obj, default) if builtin else object_sizeof(obj)
    except Exception:
        return 0
    return object_block(type(obj), size) if 0 <= size <= MAX_OBJECT_BYTES else 0


class SizeCache(object):
    """``object_size`` with each type's answer (is its ``__sizeof__`` C code?) kept for one
    walk. Looking it up reads the MRO's dicts through mappingproxies, gc-tracked objects
    allocated per call: tens of thousands of roots (classes, owners) made the target's
    collector run in the walk's thread, once a full collection of the busy real worker's
    2M-object heap, ~300 ms with the GIL held (py-spy: the graph's add_roots in
    sizeof_is_builtin). The cache holds the types it answers for (their ids cannot be
    reused meanwhile) and goes with the walk that made it."""

    def __init__(self):
        self.known = {}  # id(type) -> (type, is its __sizeof__ C code)

    def __call__(self, obj, default=0):
        tp = type(obj)
        known = self.known.get(id(tp))
        if known is None:
            try:
                builtin = sizeof_is_builtin(tp)
            except Exception:
                builtin = False
            known = self.known[id(tp)] = (tp, builtin)
        return _size_as(obj, known[1], default)


def configure_compiled(walk):
    """Hand the compiled walk (the module ``_walk``, or None) what it sizes as this
    module does: ``SIZEOF_COUNTS_REFERENTS`` and ``HEAP_BLOCKS``."""
    setter = getattr(walk, "sizeof_counts_referents", None)
    if setter is not None:
        setter(SIZEOF_COUNTS_REFERENTS)
    blocks = getattr(walk, "heap_blocks", None)
    if blocks is not None:
        blocks(None if HEAP_BLOCKS is None else HEAP_BLOCKS + (LIST_HEAD, BYTEARRAY_HEAD, DEQUE_HEAD, DEQUE_BLOCK),
               _deque, LOCK_TYPES, LOCK_BLOCK)


try:  # the compiled walk, where it loads (census.py, graph.py), sizes as object_size does
    from . import _walk as _compiled_walk
except Exception:
    _compiled_walk = None  # type: ignore[assignment]
configure_compiled(_compiled_walk)


def class_from(module_name, name):
    """``module.name`` read from the module's dict (no module __getattr__ runs), if a class."""
    module = sys.modules.get(module_name)
    d = instance_dict(module) if module is not None else None
    cls = d.get(name) if d is not None else None
    return cls if issubclass(type(cls), type) else None


def _imaging_core():
    """Pillow's ImagingCore (a C type named ``ImagingCore``, not exported by name): found in the
    subclass tree of ``object`` with its ``mode``/``size`` getsets, once ``PIL._imaging`` is
    loaded."""
    if "PIL._imaging" not in sys.modules:
        return None
    for cls in type.__subclasses__(object):
        if type.__dict__["__qualname__"].__get__(cls, type) != "ImagingCore":
            continue
        d = class_dict(cls)
        if type(d.get("mode")).__name__ == "getset_descriptor" and type(d.get("size")).__name__ == "getset_descriptor":
            return cls
    return None


# protobuf's upb message and container classes (google._upb._message), by name, each with the
# least basic size the fields read need (its header and the arena object after it)
_UPB_MODULE = "google._upb._message"
_UPB_CONTAINERS = ("RepeatedCompositeContainer", "RepeatedScalarContainer", "MessageMapContainer",
                   "ScalarMapContainer")
# Where a message (PyUpb_Message: header, arena, def, ptr, ext_dict, unset_subobj_map) keeps the
# map of its unset submessages' objects: its own arena is counted only where it is found there
# (_walk.c upb_held)
_UPB_WEAKMAP_OFFSET = 48


def _upb_classes():
    """[(kind, class)] of protobuf's upb types, once ``google._upb._message`` is loaded: its
    ``Arena`` (sized by its blocks, _walk.c upb_arena_bytes), ``Message`` (the base of every
    generated message class) and the repeated and map fields' containers (each holding an
    arena: their referent). Read from the module's dict; the map containers, which are not in
    it, among ``object``'s direct subclasses by name and module. (What is read of them is
    checked in C: a class of another layout counts nothing.)"""
    if _UPB_MODULE not in sys.modules or _compiled_walk is None or not hasattr(_compiled_walk, "upb_held"):
        return []
    found = {name: class_from(_UPB_MODULE, name) for name in ("Arena", "Message") + _UPB_CONTAINERS[:2]}
    for cls in type.__subclasses__(object):
        name = type.__dict__["__qualname__"].__get__(cls, type)
        if name in _UPB_CONTAINERS[2:] and found.get(name) is None \
                and class_module(cls) == _UPB_MODULE:
            found[name] = cls
    arena, message = found.get("Arena"), found.get("Message")
    header = object_sizeof(object())
    if arena is None or message is None or type_flags(arena) & BASETYPE or _basicsize(arena) < header + 8 \
            or _basicsize(message) < _UPB_WEAKMAP_OFFSET + 8:
        return []
    out = [("upb_arena", arena), ("upb_message", message)]
    for name in _UPB_CONTAINERS:
        container = found.get(name)
        if container is not None and not type_flags(container) & BASETYPE and _basicsize(container) >= header + 8:
            out.append(("upb_container", container))
    return out


def _basicsize(cls):
    return type.__dict__["__basicsize__"].__get__(cls, type)


def _ctypes_data():
    """ctypes' base of every C data class (``_ctypes._CData``, not exported by name): the
    second class of ``_ctypes.Array``'s MRO, once ``_ctypes`` is loaded."""
    array = class_from("_ctypes", "Array")
    if array is None:
        return None
    for cls in type.__dict__["__mro__"].__get__(array, type):
        if type.__dict__["__qualname__"].__get__(cls, type) == "_CData" and \
                type(class_dict(cls).get("_b_needsfree_")).__name__ == "member_descriptor":
            return cls
    return None


def _cffi_owning():
    """cffi's owning cdata class (``ffi.new()``'s, ``__CDataOwn``: its data allocated with the
    object, in one malloc block), not exported by name: among the direct subclasses of
    ``_cffi_backend._CDataBase``, once cffi's backend is loaded."""
    base = class_from("_cffi_backend", "_CDataBase")
    if base is None:
        return None
    for cls in type.__subclasses__(base):
        if type.__dict__["__qualname__"].__get__(cls, type) == "__CDataOwn" and not type_flags(cls) & BASETYPE:
            return cls
    return None


def _cffi_functions():
    """(typeof, sizeof): _cffi_backend's C functions, from its module's dict, each checked a
    C function; None where they are not."""
    functions = instance_dict(sys.modules["_cffi_backend"])
    found = functions.get("typeof"), functions.get("sizeof")
    if any(type(function).__name__ != "builtin_function_or_method" for function in found):
        return None
    return found


def _cffi_data_bytes(obj, functions):
    """The bytes an owning cdata was allocated with: an array's (``sizeof(obj)``), or the item a
    pointer points to (``ffi.new("struct big *")``: ``sizeof`` of its type's ``item``), read
    through _cffi_backend's C functions ``typeof`` and ``sizeof`` (``functions``:
    _cffi_functions()) and its ctype's getsets; 0 for another kind."""
    if functions is None:
        return 0
    typeof, sizeof = functions
    ctype = typeof(obj)
    kind = _call(type(ctype), "kind", ctype)
    if kind == "array":
        size = sizeof(obj)
    elif kind == "pointer":
        size = sizeof(_call(type(ctype), "item", ctype))
    else:
        return 0
    return size if type(size) is int and 0 <= size <= MAX_OBJECT_BYTES else 0


# A ctypes object's value is inline up to this many bytes (_ctypes.h: ``union value``); a
# bigger one it owns is a block of its own (``b_ptr``, ``b_size`` bytes).
_CTYPES_INLINE = 16


# io.StringIO's layout per version (64-bit builds): 1, an accumulator of lists (3.10, 3.11); 2, a
# _PyUnicodeWriter (3.12, 3.13); and the type's basic size, checked before any field is read.
_STRINGIO_LAYOUTS = {(3, 10): (1, 120), (3, 11): (1, 120), (3, 12): (2, 168), (3, 13): (2, 168)}


def _stringio():
    """``_io.StringIO`` where its layout is known and the compiled walk reads it (_walk.c:
    stringio_parts), else None."""
    known = _STRINGIO_LAYOUTS.get(sys.version_info[:2])
    cls = class_from("_io", "StringIO")
    if (known is None or cls is None or sys.maxsize < 2 ** 32 or _compiled_walk is None
            or not hasattr(_compiled_walk, "stringio_parts")
            or _basicsize(cls) != known[1]):
        return None
    return cls


# zlib's stream objects: kind -> (the class's name, zlib_state_blocks' kind, its basic size).
_ZLIB_KINDS = {"zlib_deflate": ("Compress", 1, 168), "zlib_inflate": ("Decompress", 2, 168),
               "zlib_decompressor": ("_ZlibDecompressor", 3, 184)}


def _zlib_classes():
    """[(kind, class)] of zlib's stream objects whose C state the compiled walk reads (_walk.c:
    zlib_state_blocks), once zlib is loaded. The classes are not exported by name (but
    _ZlibDecompressor): they are taken from the module's own C state, which gc.get_referents
    of the module lists (zlib's traverse; a module of another kind named zlib lists only its
    dict), and kept only with the basic size the layout has and no subclass possible."""
    module = sys.modules.get("zlib")
    if (module is None or type(module) is not type(sys) or sys.maxsize < 2 ** 32 or _compiled_walk is None
            or not hasattr(_compiled_walk, "zlib_state_blocks")):
        return []
    found = {}
    for ref in gc.get_referents(module):
        if (type(ref) is type and not type_flags(ref) & BASETYPE
                and class_module(ref) == "zlib"):
            found[short_type_name(ref)] = ref
    out = []
    for kind, (name, _code, basicsize) in _ZLIB_KINDS.items():
        cls = found.get(name)
        if cls is not None and _basicsize(cls) == basicsize:
            out.append((kind, cls))
    return out


# bz2's and lzma's stream objects whose C state the compiled walk reads (_walk.c:
# stream_state_bytes): kind -> (module, class, stream_state_bytes' kind, its basic size).
# bz2's are read as glibc chunks (HEAP_BLOCKS models glibc); lzma's are liblzma's counts (an
# LZMACompressor's: of the filter chain its xz stream encoder keeps; of the alone and raw
# formats, none).
_STREAM_KINDS = {"lzma_decompressor": ("_lzma", "LZMADecompressor", 1, 224),
                 "lzma_compressor": ("_lzma", "LZMACompressor", 4, 192),
                 "bz2_compressor": ("_bz2", "BZ2Compressor", 2, 112),
                 "bz2_decompressor": ("_bz2", "BZ2Decompressor", 3, 152)}
# liblzma adds a nominal 32 KiB (LZMA_MEMUSAGE_BASE) for its structures to every count: a
# decompressor that has read nothing takes ~250 bytes of them
_LZMA_MEMUSAGE_BASE = 1 << 15


def _stream_classes():
    """[(kind, class)] of the stream objects of _STREAM_KINDS loaded in this process, each with
    the basic size its layout has and no subclass possible."""
    if sys.maxsize < 2 ** 32 or _compiled_walk is None or not hasattr(_compiled_walk, "stream_state_bytes"):
        return []
    out = []
    for kind, (module, name, _code, basicsize) in _STREAM_KINDS.items():
        cls = class_from(module, name)
        if (cls is not None and not type_flags(cls) & BASETYPE
                and _basicsize(cls) == basicsize
                and (kind.startswith("lzma") or (HEAP_BLOCKS is not None and HEAP_BLOCKS[2]))):
            out.append((kind, cls))
    return out


def _hashlib_classes():
    """[(kind, class)] of hashlib's OpenSSL digest objects (_hashlib.HASH, its HASHXOF, HMAC) whose
    context the compiled walk reads (_walk.c: evp_digest_bytes), each kept only with the basic
    size the layout has; the extendable-output one first (a subclass of the other). Each is
    sized as the exact class it is, never a subclass of it (HASH can be one's base)."""
    if sys.maxsize < 2 ** 32 or _compiled_walk is None or not hasattr(_compiled_walk, "evp_digest_bytes"):
        return []
    if HEAP_BLOCKS is None or not HEAP_BLOCKS[2]:  # glibc's chunks, which the context is read as
        return []
    out = []
    for kind, name in (("hashlib_xof", "HASHXOF"), ("hashlib", "HASH"), ("hashlib_hmac", "HMAC")):
        cls = class_from("_hashlib", name)
        # a C type's methods (a class of Python's with two slots is 32 bytes too)
        if (cls is not None and _basicsize(cls) == _HASHLIB_BASICSIZE
                and type(class_dict(cls).get("digest")).__name__ == "method_descriptor"):
            out.append((kind, cls))
    return out


def _sqlite_connection():
    """_sqlite3's Connection, a C type (its methods method descriptors) whose ``sqlite3 *`` is
    its word after the header (3.10-3.13): _walk.c's sqlite_connection_bytes reads it, with
    the GIL held, and asks SQLite for what the connection holds."""
    if sys.maxsize < 2 ** 32 or _compiled_walk is None or not hasattr(_compiled_walk, "sqlite_connection_bytes"):
        return None
    cls = class_from("_sqlite3", "Connection")
    if cls is None or type(class_dict(cls).get("execute")).__name__ != "method_descriptor":
        return None
    return cls


def _ssl_context():
    """_ssl._SSLContext, whose SSL_CTX (the word after its header, 3.10-3.13) _walk.c's
    ssl_object_bytes reads, where the compiled walk has it (64-bit: glibc's chunks)."""
    if sys.maxsize < 2 ** 32 or _compiled_walk is None or not hasattr(_compiled_walk, "ssl_object_bytes"):
        return None
    if HEAP_BLOCKS is None or not HEAP_BLOCKS[2]:  # glibc's chunks, which OpenSSL's heap is read as
        return None
    cls = class_from("_ssl", "_SSLContext")
    # a C type's methods (a class of Python's with a slot there is no context)
    if (cls is None or _basicsize(cls) < 24
            or type(class_dict(cls).get("load_verify_locations")).__name__ != "method_descriptor"):
        return None
    return cls


def _ssl_socket():
    """_ssl._SSLSocket, a C type whose SSL (after its socket's weak reference) and context
    (after that) ssl_object_bytes reads, beside the contexts (where _ssl_context is one)."""
    cls = class_from("_ssl", "_SSLSocket")
    if (cls is None or _basicsize(cls) < 40
            or type(class_dict(cls).get("do_handshake")).__name__ != "method_descriptor"):
        return None
    return cls


# C types whose state is behind their struct's pointers in glibc's heap, which sys.getsizeof
# does not count: (kind, extension module, class), each sized after the walk, every one met
# at once (struct_object_bytes, from its struct's words; none of what its module's globals
# reach): pydantic-core's validators and serializers (Rust's boxes, vectors and hash tables:
# a 20-field model's pair ~5 KB), tiktoken's byte-pair encoders (its ranks' hash tables: ~7
# MB an encoding of 20,000 tokens, 48 bytes to sys.getsizeof), Hugging Face tokenizers'
# tokenizers (their model's vocabulary: ~3 MB for 20,000 words) and lxml's documents (the
# libxml2 tree its elements are proxies of: ~0.55 MB an HTML page of 400 rows; libxml2 is
# linked into lxml.etree, whose globals' chunks are none of theirs) and zstandard's
# compressors and decompressors (their windows and tables: ~3.8 MB at level 3, ~94 MB at 19)
# and SWIG's objects (a proxy's ``this``: faiss's indexes and their vectors; _swig_library)
# and grpc's channels (Cython's ``_ChannelState``, its C-core channel: ~9 KB a channel never
# closed, 96 bytes to sys.getsizeof).
_STRUCT_CLASSES = (
    ("pydantic_validator", "pydantic_core._pydantic_core", "SchemaValidator"),
    ("pydantic_serializer", "pydantic_core._pydantic_core", "SchemaSerializer"),
    ("tiktoken_bpe", "tiktoken._tiktoken", "CoreBPE"),
    ("hf_tokenizer", "tokenizers.tokenizers", "Tokenizer"),
    ("lxml_document", "lxml.etree", "_Document"),
    ("zstd_compressor", "zstandard.backend_c", "ZstdCompressor"),
    ("zstd_decompressor", "zstandard.backend_c", "ZstdDecompressor"),
    ("grpc_channel", "grpc._cython.cygrpc", "_ChannelState"),
    ("swig_object", "swig_runtime_data5", "SwigPyObject"),
    ("swig_object", "swig_runtime_data4", "SwigPyObject"),
    # (SWIG 4.1 and later make it with PyType_FromSpec under a name of no module: its dict has
    # no __module__, the class is of none: pybox2d's)
    ("swig_object", None, "SwigPyObject"),
    ("shapely_geometry", "shapely.lib", "Geometry"),
    ("cv2_capture", "cv2", "VideoCapture"),
    ("cv2_writer", "cv2", "VideoWriter"),
)
# _STRUCT_CLASSES' kinds whose objects are of Python subclasses of the C class (shapely's
# Polygon, Point, ...: each a subclass of shapely.lib.Geometry, whose struct holds its GEOS
# geometry's pointer); their struct is the C class's, the words after it a subclass's own.
STRUCT_SUBCLASSED = ("shapely_geometry",)
# C types that keep one of _STRUCT_CLASSES' objects in a field their traversal does not show
# (none: zstandard's types have no GC support), so the walk never meets that object: (kind,
# extension module, class, its basicsize, the field's offset, the kind of what it holds). The
# object held is sized with the others (unless the walk met it), its bytes the holder's. A
# zstd stream (compressobj(), stream_writer(), ...) keeps its compressor after its header:
# python-zstandard 0.25's c-ext/python-zstandard.h.
_STRUCT_HOLDERS = (
    ("zstd_compressobj", "zstandard.backend_c", "ZstdCompressionObj", 56, 16, "zstd_compressor"),
    ("zstd_compress_writer", "zstandard.backend_c", "ZstdCompressionWriter", 0, 16, "zstd_compressor"),
    ("zstd_compress_reader", "zstandard.backend_c", "ZstdCompressionReader", 0, 16, "zstd_compressor"),
    ("zstd_decompressobj", "zstandard.backend_c", "ZstdDecompressionObj", 0, 16, "zstd_decompressor"),
    ("zstd_decompress_reader", "zstandard.backend_c", "ZstdDecompressionReader", 0, 16, "zstd_decompressor"),
    ("zstd_decompress_writer", "zstandard.backend_c", "ZstdDecompressionWriter", 0, 16, "zstd_decompressor"),
)
# pybind11's objects (onnxruntime's sessions, google-re2's compiled expressions, ...): every
# class of a pybind11 extension derives from its ``pybind11_object`` (module
# ``pybind11_builtins``, metaclass ``pybind11_type``; one per pybind11 ABI loaded), whose
# instance has been these 56 bytes since pybind11 2.2: after its header, the C++ object's
# pointer and its holder (a unique_ptr: that pointer again; a shared_ptr: its control block too),
# the weak references, then flags whose first bit says the instance owns the object. One that
# does not (a reference into another object, returned by ``reference_internal``) reaches
# nothing of its own: its words are not read. An object is scanned with the library of the
# first pybind11 class of its MRO (_pybind11_file).
_PYBIND11_KIND = "pybind11_object"
_PYBIND11_BASICSIZE = 56
_PYBIND11_FLAGS_OFFSET = 48
# torch's pybind11 objects (scripted modules, graphs) reach the storage its tensors count
# (the tensor kind, by their data pointers): not scanned.
_PYBIND11_SKIPPED = ("torch",)
_STRUCT_KINDS = frozenset([kind for kind, _module, _name in _STRUCT_CLASSES]
                          + [holder[0] for holder in _STRUCT_HOLDERS] + [_PYBIND11_KIND])


def struct_classes():
    """[(kind, class, its extension module's file)] of _STRUCT_CLASSES loaded here, and
    pybind11's bases (no file: each object's is its class's), where the compiled walk reads
    glibc's chunks (64-bit)."""
    if sys.maxsize < 2 ** 32 or _compiled_walk is None or not hasattr(_compiled_walk, "struct_object_bytes"):
        return []
    if HEAP_BLOCKS is None or not HEAP_BLOCKS[2]:
        return []
    out = []  # type: list
    for kind, module_name, name in list(_STRUCT_CLASSES) + [holder[:3] for holder in _STRUCT_HOLDERS]:
        if module_name is None:
            cls = _unexported_class(None, name) if _swig_library() is not None else None
        else:
            cls = class_from(module_name, name) or _unexported_class(module_name, name)
        if kind == "swig_object":
            path = _swig_library() if cls is not None else None
        elif module_name is not None:
            path = module_file(sys.modules.get(module_name))
            if cls is not None and type(path) is str and path.endswith("__init__.py"):
                path = _package_library(module_name, path)  # (its classes copied into the package: OpenCV's)
        else:
            path = None
        if cls is not None and type(path) is str and path.endswith(".so"):  # (PyO3's are heap types)
            out.append((kind, cls, path))
    # (each object's library: _pybind11_file)
    out.extend([(_PYBIND11_KIND, cls, None) for cls in _pybind11_bases()])
    return out


def _class_named(cls, module_name, qualname):
    """Whether class ``cls`` is ``module_name.qualname`` by its own dict (a heap type's module
    is whatever its dict holds: a str compared only)."""
    return (class_module(cls) == module_name
            and type.__dict__["__qualname__"].__get__(cls, type) == qualname)


def _is_pybind11_class(cls):
    """Whether ``cls`` is a class pybind11 made (its metaclass pybind11's)."""
    return _class_named(type(cls), "pybind11_builtins", "pybind11_type")


def _pybind11_bases():
    """Each ``pybind11_builtins.pybind11_object`` loaded (one per pybind11 ABI) whose instance
    has the layout _PYBIND11_BASICSIZE says. (object's subclasses are thousands in a big
    program: looked at only where pybind11's metaclass, one of type's few subclasses, is.)"""
    if not any(_class_named(meta, "pybind11_builtins", "pybind11_type") for meta in type.__subclasses__(type)):
        return []
    return [cls for cls in type.__subclasses__(object)
            if _class_named(cls, "pybind11_builtins", "pybind11_object") and _is_pybind11_class(cls)
            and _basicsize(cls) == _PYBIND11_BASICSIZE]


def _pybind11_file(tp, cache):
    """The extension module file of the first pybind11 class in ``tp``'s MRO (a Python
    subclass's is its base's): the library whose globals are no object's; None where that is
    no loaded .so or one of _PYBIND11_SKIPPED's. ``cache``: id(type) -> file."""
    key = id(tp)
    if key in cache:
        return cache[key]
    found = None
    for cls in type.__dict__["__mro__"].__get__(tp, type):
        name = class_module(cls)
        if name is None or name == "pybind11_builtins" or not _is_pybind11_class(cls):
            continue
        while name and name not in sys.modules:  # (a submodule pybind11 made: its parent's file)
            name = name.rpartition(".")[0]
        path = module_file(sys.modules.get(name)) if name else None
        if type(path) is str and path.endswith(".so") and name.partition(".")[0] not in _PYBIND11_SKIPPED:
            found = path
        break
    cache[key] = found
    return found


# A SwigPyObject: its header, the C++ object's pointer, its type's, then ``int own``: 0 for a
# proxy that does not own its object (a pointer another object returned: faiss's
# ``index.quantizer``, whose index owns it).
_SWIG_OWN_OFFSET = 32


def _is_pybind11_enum(tp, cache):
    """Whether ``tp`` is a ``py::enum_`` of pybind11's (its class dict has pybind11's
    ``__entries``): its C++ object is an integer, reaching nothing. ``cache``: id(type) ->
    answer."""
    key = id(tp)
    if key not in cache:
        found = False
        for cls in type.__dict__["__mro__"].__get__(tp, type):
            if _is_pybind11_class(cls) and "__entries" in type.__dict__["__dict__"].__get__(cls, type):
                found = True
                break
        cache[key] = found
    return cache[key]


def _struct_basicsize(obj, kind, enums):
    """The bytes of ``obj``'s struct whose words a struct scan reads: its type's basicsize;
    none where a pybind11 instance or a SWIG proxy does not own its C++ object (what it points
    at is its owner's: 10 IVF indexes kept with a list of their quantizers elsewhere gave that
    list 0.28 of what freeing the indexes returns, the indexes 0.72), nor for a pybind11 enum's
    value (an int in a chunk of 32 bytes whose stale words reached a MuJoCo MjData's 0.9 MB
    arena at a lower depth than the MjData did: `mujoco._enums.mjtSensor.mjSENS_FRAMEPOS`
    third on the first screen). ``enums``: _is_pybind11_enum's cache."""
    if kind == _PYBIND11_KIND:
        flags = struct_word(obj, _PYBIND11_FLAGS_OFFSET)
        if flags is None or not flags & 1 or _is_pybind11_enum(type(obj), enums):
            return 0
        return _PYBIND11_BASICSIZE
    size = _basicsize(type(obj))
    if kind in STRUCT_SUBCLASSED:
        # the C class's struct, the first static class of its MRO (a subclass's own words
        # after it, its dict's and weak references' pointers, are Python objects')
        for klass in type.__dict__["__mro__"].__get__(type(obj), type):
            if not type_flags(klass) & HEAPTYPE:
                return _basicsize(klass)
        return 0
    if kind == "swig_object":
        own = struct_word(obj, _SWIG_OWN_OFFSET) if size >= _SWIG_OWN_OFFSET + 8 else None
        return size if own is not None and own & 0xFFFFFFFF else 0
    return size


def _swig_library():
    """The file of the one SWIG extension module loaded (SWIG's proxies: a ``SwigPyObject``
    whose pointer is the wrapped C++ object, faiss's indexes among them), known by its
    ``*_swigregister`` functions; None where there is none or more than one (whose globals a
    wrapped object's words reach would then not be known)."""
    found = None
    for module in list(sys.modules.values()):
        path = module_file(module)
        d = instance_dict(module) if type(path) is str and path.endswith(".so") else None
        if d is None or path == found:
            continue
        if any(type(key) is str and key.endswith("_swigregister") for key in list(d)):
            if found is not None:
                return None
            found = path
    return found


def _package_library(name, init):
    """The extension module file of package ``name`` (``init``: its ``__init__.py``) that the
    package loaded under its own name and keeps in no entry of sys.modules (OpenCV's
    ``cv2/cv2.abi3.so``, whose classes ``cv2/__init__.py`` copies): the one mapped file in the
    package's directory named ``name.*.so``; None where there is not exactly one."""
    directory = init[:-len("__init__.py")].encode("utf-8", "surrogateescape")
    prefix = directory + name.encode() + b"."
    found = {path for _start, _end, _perms, path in _mappings()
             if path is not None and path.startswith(prefix) and path.endswith(b".so")
             and b"/" not in path[len(directory):]}
    return found.pop().decode("utf-8", "surrogateescape") if len(found) == 1 else None


def _unexported_class(module_name, name):
    """The C class ``module_name.name`` its module does not export (zstandard's stream types),
    found among ``object``'s subclasses by its name and module, once the module is loaded
    (``module_name`` None: a heap type whose dict names no module)."""
    if module_name is not None and module_name not in sys.modules:
        return None
    for cls in type.__subclasses__(object):
        if _class_named(cls, module_name, name):
            return cls
    return None


def _held_by_holders(bases, objects, owners):
    """{id(holder): (holder, the object of _STRUCT_CLASSES it keeps in a C field: _STRUCT_HOLDERS)} for
    the holders among ``objects`` whose object the walk did not meet itself, each object
    once (the first holder's); appended to ``objects`` and given its holder's owner in
    ``owners``."""
    met = set(map(id, objects))
    held = {}
    for obj in list(objects):
        for kind, _module, _name, basicsize, offset, target in _STRUCT_HOLDERS:
            cls, target_cls = bases.get(kind), bases.get(target)
            if type(obj) is not cls or target_cls is None:
                continue
            size = _basicsize(cls)
            one = _compiled_walk.held_object(obj, size, offset, target_cls) if basicsize in (0, size) else None
            if one is not None and id(one) not in met:
                met.add(id(one))
                held[id(obj)] = (obj, one)
                objects.append(one)
                owners[id(one)] = owners.get(id(obj), 0)
            break
    return held


_HASHLIB_BASICSIZE = 32
_HASHLIB_KINDS = ("hashlib", "hashlib_xof", "hashlib_hmac")


def _heap_ranges():
    """This process's heap, as stream_state_bytes reads it: (start, end, main) uint64 triples,
    sorted, of the main arena's mapping ([heap]) and the anonymous writable ones (glibc's other
    arenas, its mmapped chunks), from /proc/self/maps."""
    ranges = sorted((low, high, path == b"[heap]") for low, high, perms, path in _mappings()
                    if perms.startswith(b"rw") and path in (None, b"[heap]"))
    return array.array("Q", [value for triple in ranges for value in triple]).tobytes()


# A deque's blocks are CPython's private struct, read as 3.8-3.13 lay it out (the compiled
# walks: deque_at); where they are, the graph's walks take an exact deque for a collection.
DEQUE_BLOCKS_READ = sys.version_info[:2] <= (3, 13)


def lru_cache_wrapper():
    """functools' C lru_cache wrapper where the walks read its fields (3.10-3.13, whose struct
    is 152 bytes: not a debug or free-threaded build's), else None (read by its traverse)."""
    cls = class_from("functools", "_lru_cache_wrapper")
    if cls is None or not (3, 10) <= sys.version_info[:2] <= (3, 13) or _basicsize(cls) != 152:
        return None
    return cls


def _native_bases(autograd_nodes=False):
    """(kind, allowlisted C class) for each one loaded in this process; ``autograd_nodes``:
    with torch's autograd node classes (hundreds, each a kind's class of its own)."""
    out = _zlib_classes() + _stream_classes() + _upb_classes() + _hashlib_classes()
    if autograd_nodes:
        out.extend(("autograd_node", cls) for cls in _autograd_node_classes())
    for kind, cls in (
        ("ndarray", class_from("numpy", "ndarray")),
        ("tensor", class_from("torch._C", "TensorBase") or class_from("torch._C", "_TensorBase")),
        ("mmap", class_from("mmap", "mmap")),
        ("imaging", _imaging_core()),
        ("pygame_surface", class_from("pygame.surface", "Surface")),
        ("ctypes", _ctypes_data()),
        ("cffi", _cffi_owning()),
        ("arrow_tabular", class_from("pyarrow.lib", "_Tabular")),
        ("arrow_chunked", class_from("pyarrow.lib", "ChunkedArray")),
        ("arrow_array", class_from("pyarrow.lib", "Array")),
        ("arrow_buffer", class_from("pyarrow.lib", "Buffer")),
        ("stringio", _stringio()),
        ("sqlite_connection", _sqlite_connection()),
        ("code", _CODE_TYPE),
        ("greenlet", class_from("greenlet._greenlet", "greenlet") or class_from("greenlet", "greenlet")),
    ):
        if cls is not None:
            out.append((kind, cls))
    return out


def hidden_referents(obj):
    """What ``obj`` holds that gc.get_referents(obj) does not list (an ndarray view's base, as
    the walks read it: native_extra) when it is of exactly one of the allowlisted C classes;
    [] for any other object (sampling follows a step through it by its type)."""
    tp = type(obj)
    for kind, cls in _native_bases():
        if tp is cls:
            return native_extra(obj, {id(tp): kind}, {kind: cls}, set())[1]
    return []


def native_types(tick=None, after_walk=False):
    """({id(type): kind}, {kind: the allowlisted C class}) for every class sized natively:
    the allowlist's C classes and their subclasses (from the subclass tree). Empty when none
    of numpy, torch, mmap, Pillow, ctypes, cffi, pyarrow, zlib, bz2, lzma, io or protobuf's
    upb is loaded. (Flat dicts of ints, strs and classes: nothing in them is a gc-tracked
    object of the census's own.) ``after_walk``: with the kinds sized once the walk is over
    (OpenSSL's contexts and connections: scanned_object_sizes), whose objects native_extra lists
    meanwhile."""
    out = {}  # type: dict
    bases = {}  # type: dict
    found = _native_bases(autograd_nodes=True)
    ssl_context = _ssl_context() if after_walk else None
    structs = struct_classes() if after_walk else []
    scanned = [(kind, cls) for kind, cls, _path in structs]
    if ssl_context is not None:
        scanned.append(("ssl_context", ssl_context))
        ssl_socket = _ssl_socket()
        if ssl_socket is not None:
            scanned.append(("ssl_socket", ssl_socket))
    if scanned:
        found.extend(scanned)
        # The objects the walk met that are sized after it (OpenSSL's contexts and
        # connections, _STRUCT_CLASSES': id -> object), the owner each was met for (the
        # census's: id -> its owner slot), the owner walked now, and when to let go of those
        # only this table holds (_prune_scanned)
        bases["scanned_objects"] = {}
        bases["struct_files"] = {kind: path for kind, _cls, path in structs if kind != _PYBIND11_KIND}
        bases["pybind11_bases"] = tuple([cls for kind, cls, _path in structs if kind == _PYBIND11_KIND])
        bases["scanned_owners"] = {}
        bases["scanned_owner"] = [0]
        bases["scanned_prune_at"] = [0]
        bases["ssl"] = [0]  # native bytes of OpenSSL's contexts and connections (ssl_native_bytes)
    for kind, base in found:
        bases[kind] = base
        if kind in _READ_THROUGH_ONLY:
            continue
        for cls in subclass_tree(base):
            out.setdefault(id(cls), kind)  # a class under two allowlisted bases: the first's
    if _compiled_walk is not None:
        # the walks read an array of objects' elements themselves (_walk.reads_elements)
        dtype = class_from("numpy", "dtype") if "ndarray" in bases else None
        deque = class_from("_collections", "deque") if DEQUE_BLOCKS_READ else None
        # (SizeCache: a class statement's class, whose traverse a list subclass's shares)
        _compiled_walk.known_types(bases["ndarray"] if dtype is not None else None, dtype,
                                   class_from("collections", "OrderedDict"), deque, SizeCache, lru_cache_wrapper())
        deque = None
        dtype = None
    if "ndarray" in bases:
        bases["ndarray_owners"] = tuple([cls for cls in (
            class_from("numba.core.runtime._nrt_python", "_MemInfo"),
            class_from("polars._plr", "PySeries"), class_from("polars.polars", "PySeries")) if cls is not None])
    if "arrow_array" in bases or "tensor" in bases:
        bases["files"] = _file_backed_ranges()
    if "cffi" in bases:
        bases["cffi_functions"] = _cffi_functions()
    if "tensor" in bases:
        bases["autograd"] = [_AUTOGRAD_WALK_NODES]  # autograd nodes the walk may still read (_autograd_next)
    if "mmap" in bases or "tensor" in bases:
        bases["mapped"] = [0]  # native bytes on a file's or shared memory's pages (_tally_mapped)
    if "sqlite_connection" in bases:
        bases["sqlite"] = [0]  # native bytes SQLite counts for its connections (sqlite_native_bytes)
        bases["sqlite_file"] = module_file(sys.modules.get("_sqlite3"))
    if any(kind in bases for kind in tuple(_STREAM_KINDS) + _HASHLIB_KINDS):
        bases["heap_ranges"] = _heap_ranges()
    if sys.version_info >= (3, 11):
        bases["instance"] = object
        for n, cls in enumerate(_plain_instance_classes(tick)):
            if tick is not None and n & _TICK_MASK == _TICK_MASK:
                tick()
            out.setdefault(id(cls), "instance")
    return out, bases


# The tables of classes below are tens of thousands of entries in a big program (the real
# verifiers worker: 40k): walked in one go after the walk of the classes, they were one
# stretch of 34-49 ms of CPU without a yield (the busy real worker's longest). With ``tick``
# (the census's or the graph's duty cycle), it is looked at every 4,096 entries.
_TICK_MASK = 4095


# How the walks (census_walk.py, graph.py and their compiled twins) treat a native type: its buffers and hidden
# references handed back to Python, or a 3.11/3.12 (separate) or 3.13 (inline) instance's
# attribute values added to its size on the spot.
NATIVE_BUFFERS = 1
NATIVE_VALUES = 3 if sys.version_info >= (3, 13) else 2


def native_codes(native, tick=None):
    """{id(type): NATIVE_BUFFERS or NATIVE_VALUES} for ``native`` (from native_types())."""
    out = {}
    for n, (tid, kind) in enumerate(native.items()):
        if tick is not None and n & _TICK_MASK == _TICK_MASK:
            tick()
        out[tid] = NATIVE_VALUES if kind == "instance" else NATIVE_BUFFERS
    return out


def for_compiled_walk(codes, walk, tick=None):
    """``codes`` (from native_codes()) as a compiled walk module ``walk`` takes them: without
    code objects when it reads their members itself (_walk.c: ``READS_CODE``), which spares a
    call back into Python per code object (tens of thousands in a big program)."""
    if walk is None or not getattr(walk, "READS_CODE", 0) or id(_CODE_TYPE) not in codes:
        return codes
    out = {}
    code_type = id(_CODE_TYPE)
    for n, (tid, code) in enumerate(codes.items()):
        if tick is not None and n & _TICK_MASK == _TICK_MASK:
            tick()
        if tid != code_type:
            out[tid] = code
    return out



def _plain_instance_classes(tick=None):
    """Classes whose instances keep their attributes as 3.11+ values (no ``__dict__`` object
    until one is asked for), which ``sys.getsizeof`` leaves out: managed-dict classes built
    on ``object`` alone (every class in the MRO but object a Python class, no slots, no
    items). A subclass of dict, list, an exception... is left alone: its referents are not
    only its attributes."""
    object_size = _basicsize(object)
    out = []
    # tick: the census's or the graph's duty cycle (tens of thousands of classes are ~25 ms
    # to list and as long again to look at)
    for n, cls in enumerate(subclass_tree(object, tick)):
        if tick is not None and n & 255 == 255:
            tick()
        flags = type_flags(cls)
        if not has_managed_dict(cls) or not flags & HEAPTYPE:
            continue
        if type.__dict__["__itemsize__"].__get__(cls, type) != 0:
            continue
        if _basicsize(cls) > object_size + 8:  # 3.11: a weakref slot
            continue
        mro = type.__dict__["__mro__"].__get__(cls, type)
        # A class with a __sizeof__ written in Python counts object.__sizeof__ alone (its
        # basic size, docs/inspect.md), as before.
        if all(k is object or type_flags(k) & HEAPTYPE for k in mro) and sizeof_is_builtin(cls):
            out.append(cls)
    return out


def instance_values_bytes(obj):
    """The bytes of a 3.11+ instance's attribute values array (3.11/3.12: a separate
    allocation, until a ``__dict__`` is made from it; 3.13: inline, after the object).

    Its capacity is the class's shared keys' entries plus what is left to add, which Python
    does not expose: estimated as the attributes present plus 1 (what tracemalloc shows
    CPython 3.11-3.13 allocate for classes of 1-13 attributes, first instance or not; the
    estimate was plus 2 until an allocator-rounded truth showed the 8 bytes too many), checked
    against tracemalloc in tests/unit/test_census_sizes.py."""
    refs = gc.get_referents(obj)
    values = [r for r in refs if not issubclass(type(r), type)]
    if sys.version_info < (3, 13) and len(values) == 1 and type(values[0]) is dict:
        return 0  # the dict was made: its own size counts the values
    if INLINE_VALUES_DICTS and managed_dict_address(obj, type(obj)):
        return 0  # 3.13: likewise (the dict is not among the referents there)
    size = len(values) + 1
    # As a block of its own (3.13: inline after the object, whose size is a multiple of the
    # alignment: the sum rounds as the two do while it stays a pymalloc block, up to 512 bytes;
    # past that it is one malloc chunk, 8-16 bytes less than the two)
    if sys.version_info >= (3, 13):
        return heap_block(((size + 7) & ~7) + 8 + 8 * size)  # prefix, PyDictValues header, values
    return heap_block(((size + 2 + 7) & ~7) + 8 * size)  # prefix (with its two bytes), values


# Bytes per pixel of Pillow's storage (libImaging/Storage.c: ImagingNewPrologueSubtype):
# 8-bit modes 1 byte, 16-bit 2, the rest 4 (RGB is stored as RGBX).
_PIXEL_BYTES = {"1": 1, "L": 1, "P": 1, "I;16": 2, "I;16L": 2, "I;16B": 2, "I;16N": 2,
                "BGR;15": 2, "BGR;16": 2, "BGR;24": 3}
# An object array's elements are listed only up to this many: the list of them is a
# temporary allocation in the target (8 bytes each, 32 MB at most) and one C call.
_MAX_OBJECT_ELEMENTS = 4000000
_NPY_OBJECT = 17  # dtype.num of object arrays


def _overrides_torch_function(tp):
    """Does a tensor class define ``__torch_function__`` in Python below torch.Tensor? Then
    TensorBase's C methods hand the call to it (Python code of the target): not sized. The
    default (torch.Tensor's own, or _disabled_torch_function_impl as nn.Parameter sets it)
    runs no such code for untyped_storage()."""
    torch_c = sys.modules.get("torch._C")
    d = instance_dict(torch_c) if torch_c is not None else None
    disabled = d.get("_disabled_torch_function_impl") if d is not None else None
    for klass in type.__dict__["__mro__"].__get__(tp, type):
        if type.__dict__["__qualname__"].__get__(klass, type) == "Tensor" and \
                class_module(klass) == "torch":
            return False
        impl = class_dict(klass).get("__torch_function__")
        if impl is not None:
            inner = getattr(impl, "__func__", impl) if type(impl) is classmethod else impl
            if inner is not disabled:
                return True
    return False


# A suspended greenlet's frames read at most (a recursion's are thousands)
_MAX_GREENLET_FRAMES = 256


def _greenlet_variables(cls, obj):
    """What the variables of a suspended greenlet's frames hold (gevent's workers keep a
    request's data there while they wait): greenlet's traversal visits no frame, and a frame
    of a greenlet's (as of a thread's, 3.11+) keeps its variables where its own traversal does
    not look, so 50 MiB of 50 pool greenlets' were in no owner (gc.get_referents of the
    greenlet and of its frame: []). They are the greenlet's own, as a thread's are its
    frame's: its owner is whoever holds it. Read as a running thread's (roots.frame_locals),
    from ``gr_frame`` (None: running, dead, not started) down its ``f_back``s (the greenlet's
    own frames: its first has none)."""
    refs = []
    frame = _call(cls, "gr_frame", obj)
    for _depth in range(_MAX_GREENLET_FRAMES):
        if type(frame) is not types.FrameType:
            break
        for _name, value in frame_locals(frame, _compiled_walk) or ():
            refs.append(value)
        frame = frame.f_back  # (an exact frame: its own getset, as roots.thread_frames reads it)
    return refs


def _call(cls, name, obj):
    """``cls.__dict__[name]`` (a C getset or method of the allowlisted class, or a method
    Cython compiled in pyarrow's) applied to obj."""
    descr = class_dict(cls)[name]
    kind = type(descr).__name__
    if kind in ("getset_descriptor", "member_descriptor"):
        return descr.__get__(obj, cls)
    if kind in ("method_descriptor", "wrapper_descriptor") or (
            kind == "cython_function_or_method" and _module_of(cls).startswith("pyarrow.")):
        return descr(obj)
    raise TypeError("%s.%s is not a C descriptor" % (cls.__name__, name))


# The autograd graph behind a tensor: its nodes are nodes of the walks (native kind
# "autograd_node": _autograd_next), each read once (~6 us). Reading a node makes the Python
# objects of its next nodes and of the tensors it saved, which torch keeps as long as the
# graph lives (what the leak keeps): 300 kept losses of a 3-layer MLP, 122 KB; a 16-block
# model's chain of 18,000 nodes, 1.5 MB (once: the next walks find them made). At most
# _AUTOGRAD_WALK_NODES nodes are read a walk; past it, what the rest saved is held from C.
_AUTOGRAD_WALK_NODES = 20000


def _autograd_node_classes():
    """torch's autograd node classes: the C++ nodes' (every class of ``torch._C._functions``,
    AddmmBackward0 and its ~650 kin, AccumulateGrad) and custom Functions' (the subclass tree
    of ``torch._C._FunctionBase``); none where torch is not loaded."""
    torch_c = sys.modules.get("torch._C")
    if torch_c is None:
        return []
    functions = instance_dict(torch_c).get("_functions")
    found = [cls for cls in (instance_dict(functions) or {}).values() if issubclass(type(cls), type)] \
        if type(functions) is type(sys) else []
    base = class_from("torch._C", "_FunctionBase")
    return found + ([base] if base is not None else [])


def autograd_step(obj, label):
    """What a tensor's autograd edge named ``label`` leads to now, as the walks read it
    (_autograd_root): "agrad_fn" its ``grad_fn`` node (a non-leaf's), "agrad" its ``grad`` (a
    leaf's); None for any other object or label. A watch's sample follows an owner's path
    through it (``TOTAL.grad_fn``: a summed loss's graph)."""
    if label not in ("agrad_fn", "agrad"):
        return None
    cls = class_from("torch._C", "TensorBase") or class_from("torch._C", "_TensorBase")
    if cls is None or not any(klass is cls for klass in type.__dict__["__mro__"].__get__(type(obj), type)):
        return None
    held = _autograd_root(cls, obj, {"autograd": [1]}, set())[1]  # (one node's object at most)
    if type(held) is not HiddenNamed:
        return None
    for k in range(len(held)):
        if held.labels[k] == label:
            return held[k]
    return None


def autograd_next_nodes(node, memo):
    """The nodes an autograd node's ``next_functions`` lead to (its C getter), or None where
    ``node`` is of none of torch's autograd node classes. ``memo``: a dict kept for one
    request (the classes, each class's getter)."""
    classes = memo.get("classes")
    if classes is None:
        classes = memo["classes"] = {id(cls) for cls in _autograd_node_classes()}
    tp = type(node)
    if id(tp) not in classes:
        return None
    getter = memo.get(id(tp))
    if getter is None:
        getter = memo[id(tp)] = next((descr for name, descr in _node_getters(tp) if name == "next_functions"), False)
    if getter is False:
        return None
    try:
        return _next_nodes(getter.__get__(node, tp))
    except Exception:  # noqa: BLE001 - a node freed by backward()
        return None


def _next_nodes(value):
    """The nodes of an autograd node's ``next_functions``: (node or None, input index) pairs."""
    return [pair[0] for pair in (value if type(value) is tuple else ())
            if type(pair) is tuple and len(pair) == 2 and pair[0] is not None]


def _host_tensor(cls, tensor):
    """Whether ``tensor`` is a CPU tensor whose class defines no ``__torch_function__`` of its
    own (a GPU tensor's memory is no host memory)."""
    return not _overrides_torch_function(type(tensor)) and _call(cls, "is_cpu", tensor)


def _storage_bytes(cls, tensor, bases, seen_buffers):
    """A CPU tensor's storage's bytes (its pages in RAM, of 1 MiB or more), once per storage
    (``seen_buffers``: data addresses); 0 for one met already. untyped_storage(), nbytes(),
    data_ptr() are C methods (TensorBase and StorageBase); untyped_storage() returns the
    storage's one Python object."""
    storage = _call(cls, "untyped_storage", tensor)
    storage_base = None
    for klass in type.__dict__["__mro__"].__get__(type(storage), type):
        if type.__dict__["__qualname__"].__get__(klass, type) == "StorageBase":
            storage_base = klass
    if storage_base is None:
        return 0
    address = _call(storage_base, "data_ptr", storage)
    if not address or address in seen_buffers:
        return 0
    seen_buffers.add(address)
    nbytes = _call(storage_base, "nbytes", storage)
    if not 0 <= nbytes <= MAX_OBJECT_BYTES:
        return 0
    size, shared = _in_ram(address, nbytes, bases.get("files"))
    _tally_mapped(bases, min(shared, size))
    return size


class HiddenNamed(list):
    """A native object's hidden references whose edges have names (``labels``, by position:
    "agrad_fn" is shown ``.grad_fn``), where native_extra returns its list."""

    __slots__ = ("labels",)

    def __init__(self, held, label):
        list.__init__(self, held)
        self.labels = [label] * len(held)  # type: list


def _autograd_root(cls, obj, bases, seen_buffers):
    """What a tensor's autograd graph keeps alive that no referent shows, the first step: its
    ``grad_fn`` (the node whose saved tensors, C++ SavedVariables, the walks then read:
    _autograd_next), or a leaf's ``grad``. Those tensors' Python objects are held by C++
    alone (torch keeps a tensor's object alive while C++ holds the tensor): the walks listed
    them "held from C", and a loss kept in a list keeps its forward pass's activations
    (PyTorch's first memory FAQ). -> (bytes, [objects held]) (see _kept)."""
    held = []  # type: list
    budget = bases.get("autograd")
    try:
        if _call(cls, "is_leaf", obj):
            # (a non-leaf's ``grad`` warns: Python code runs)
            extra = _kept(cls, _call(cls, "grad", obj), _call(cls, "grad", obj), bases, seen_buffers, held)
            return extra, HiddenNamed(held, "agrad")
        if budget is None or budget[0] <= 0:
            return 0, held  # (no budget: no node is read, none made: ``grad_fn`` makes its node's object)
        node = _call(cls, "grad_fn", obj)
        if node is not None:
            held.append(node)
    except Exception:  # noqa: BLE001 - an unexpected tensor: nothing followed
        return 0, []
    return 0, HiddenNamed(held, "agrad_fn")


def _autograd_next(node, bases, seen_buffers):
    """An autograd node's hidden referents: the nodes its ``next_functions`` lead to, the
    tensors it saved and AccumulateGrad's ``variable``. Read through C getters only: the
    node's class's getset descriptors (a Python property of a custom Function's class is
    never called), ``_raw_saved_*`` (a SavedTensor) and its pybind11 ``data``: the saved
    tensor, or what a saved-tensors pack hook made of it, without running the unpack hook
    (activation checkpointing's unpack recomputes the forward pass). -> (bytes, [objects
    held]): a getter that makes a new object at each call (a saved output is a new tensor
    over the output's storage each time) hands no object to the walks (gone once walked,
    its address could be another object's, read as the old node's), its storage's bytes
    counted here instead, once (``seen_buffers``); (0, []) with no budget left (nothing
    read, no node's object made) or where torch has no such API."""
    held = []  # type: list
    budget = bases.get("autograd")
    cls = bases.get("tensor")
    if budget is None or budget[0] <= 0 or cls is None:
        return 0, held
    budget[0] -= 1  # (the walks read a node once: its next nodes' objects made, then read)
    saved = bases.get("autograd_saved")  # (SavedTensor, its data getter): looked up once a walk
    if saved is None:
        saved_class = class_from("torch._C._autograd", "SavedTensor")
        getter = _saved_data_getter(saved_class) if saved_class is not None else None
        saved = bases["autograd_saved"] = (saved_class, getter)
    saved_class, saved_data = saved
    if saved_data is None:
        return 0, held
    getters_of = bases.setdefault("autograd_getters", {})  # id(node class) -> its getters
    node_type = type(node)
    extra = 0
    try:
        getters = getters_of.get(id(node_type))
        if getters is None:
            getters = getters_of[id(node_type)] = _node_getters(node_type)
        for name, descr in getters:
            if name == "next_functions":
                held.extend(_next_nodes(descr.__get__(node, node_type)))
                continue
            value = descr.__get__(node, node_type)
            if name == "variable":
                extra += _kept(cls, value, descr.__get__(node, node_type), bases, seen_buffers, held)
                continue
            for saved in value if type(value) in (list, tuple) else (value,):
                if type(saved) is saved_class:
                    extra += _kept(cls, saved_data(saved), saved_data(saved), bases, seen_buffers, held)
    except Exception:  # noqa: BLE001 - a node freed by backward(), an unexpected one
        return extra, held
    return extra, held


def _kept(cls, first, again, bases, seen_buffers, held):
    """``first``, what a getter returned, appended to ``held`` if a second call returned it
    (``again``) too; a new host tensor each time is its storage's bytes instead: -> those
    bytes (0 for an object held)."""
    if first is None:
        return 0
    if again is first:
        held.append(first)
        return 0
    if not any(klass is cls for klass in type.__dict__["__mro__"].__get__(type(first), type)):
        return 0
    return _storage_bytes(cls, first, bases, seen_buffers) if _host_tensor(cls, first) else 0


def _node_getters(node_type):
    """An autograd node class's C getters to read: ``next_functions``, every ``_raw_saved_*``
    and AccumulateGrad's ``variable``, each the first of its name along the MRO, getset
    descriptors only."""
    found, getters = set(), []
    for klass in type.__dict__["__mro__"].__get__(node_type, type):
        for name, descr in class_dict(klass).items():
            if type(name) is not str or name in found:
                continue
            if name in ("next_functions", "variable") or name.startswith("_raw_saved_"):
                found.add(name)
                if type(descr).__name__ == "getset_descriptor":
                    getters.append((name, descr))
    return getters


def _saved_data_getter(saved_class):
    """The C getter of a SavedTensor's ``data`` (pybind11's property): applied to one, the
    saved tensor, or the object a pack hook made of it (its unpack hook is not run); None
    where the binding has no such property."""
    data = class_dict(saved_class).get("data")
    if type(data) is not property:
        return None
    getter = property.__dict__["fget"].__get__(data, property)
    return getter if type(getter).__name__ == "builtin_function_or_method" else None


def _module_of(cls):
    return class_module(cls) or ""


# Allowlisted classes the sizers read others through, never sized themselves (an Arrow
# buffer a program holds is memory of its array's, its bytes object's or its file's).
_READ_THROUGH_ONLY = ("arrow_buffer",)
# /proc/self/maps read at most (tens of thousands of mappings are ~2 MB)
_MAPS_LIMIT = 16 << 20
_MAPS_PIECE = 64 << 10


def _mappings():
    """(start, end, permissions, path or None) of each of this process's mappings, from
    /proc/self/maps (the kernel's text, read once and bounded); none where it cannot be read."""
    # In pieces: read(_MAPS_LIMIT) would allocate the whole limit first (16 MiB of the
    # target's, in tracemalloc's count too), whatever the text's length.
    pieces, got = [], 0
    try:
        with open("/proc/self/maps", "rb", buffering=0) as fh:
            while got < _MAPS_LIMIT:
                piece = fh.read(min(_MAPS_PIECE, _MAPS_LIMIT - got))
                if not piece:
                    break
                pieces.append(piece)
                got += len(piece)
    except OSError:
        return
    text = b"".join(pieces)
    del pieces
    for line in text.split(b"\n"):
        fields = line.split(None, 5)
        if len(fields) < 5:
            continue
        low, _sep, high = fields[0].partition(b"-")
        try:
            start, end = int(low, 16), int(high, 16)
        except ValueError:
            continue
        yield start, end, fields[1], fields[5] if len(fields) == 6 else None


def _file_backed_ranges():
    """(starts, ends) of this process's mappings of files, sorted, from /proc/self/maps (the
    kernel's text): an Arrow table read from a file it memory-maps (a ``datasets`` cache) has
    its buffers there, the page cache's, not Arrow's pool's, however big the file."""
    starts = []  # type: list
    ends = []  # type: list
    for start, end, _perms, path in _mappings():
        if path is not None and path.startswith(b"/"):
            starts.append(start)
            ends.append(end)
    return starts, ends


def _in_ranges(address, ranges):
    starts, ends = ranges
    k = bisect.bisect_right(starts, address) - 1
    return k >= 0 and address < ends[k]


# Buffers an Arrow object is read through at most (a table of thousands of chunks a column):
# past it, it counts what it has read.
_ARROW_MAX_BUFFERS = 100000


def _arrow_bytes(kind, obj, bases, seen_buffers):
    """The bytes of an Arrow table's, record batch's, chunked array's or array's buffers that
    no object sized before shares (by address: a slice or a table built from another's
    columns shares their buffers), through pyarrow's own getsets and compiled methods on its
    base classes (``_Tabular.columns``, ``ChunkedArray.chunks``, ``Array.buffers``,
    ``Buffer.address``/``size``). Its memory is the Arrow memory pool's (mimalloc or jemalloc),
    outside the Python heap; ``__sizeof__`` (Cython) is not one the walk runs. A buffer in a
    memory-mapped file is the file's (``_file_backed_ranges``): not counted."""
    array, buffer = bases.get("arrow_array"), bases.get("arrow_buffer")
    files = bases.get("files") or ([], [])  # type: tuple
    if array is None or buffer is None:
        return 0
    columns = [obj]
    if kind == "arrow_tabular":
        columns = list(_call(bases[kind], "columns", obj))
    arrays = []
    for column in columns:
        if kind != "arrow_array" and not isinstance_of(column, array):
            arrays.extend(_call(bases["arrow_chunked"], "chunks", column))
        else:
            arrays.append(column)
    del columns
    total = seen = 0
    for one in arrays:
        for buf in _call(array, "buffers", one):
            if buf is None:
                continue
            seen += 1
            if seen > _ARROW_MAX_BUFFERS:
                return total
            address = _call(buffer, "address", buf)
            if address in seen_buffers or _in_ranges(address, files):
                continue
            seen_buffers.add(address)
            size = _call(buffer, "size", buf)
            if 0 < size <= MAX_OBJECT_BYTES:
                total += size
    return total


def _mapped_bytes(obj, length, bases):
    """An mmap's bytes: the pages of its mapping in RAM (what unmapping it takes off the RSS;
    _walk.c mapped_resident), its length where they cannot be read. Those that are a file's
    or shared memory's pages (a file's map, or an anonymous shared one: ``/dev/zero
    (deleted)``) are in the ledger's "mapped files" too: tallied (_tally_mapped)."""
    resident, shared = -1, 0
    if _compiled_walk is not None and hasattr(_compiled_walk, "mapped_resident"):
        basicsize = _basicsize(type(obj))
        resident, shared = _compiled_walk.mapped_resident(obj, length, basicsize)
    _tally_mapped(bases, shared)
    return length if resident < 0 else resident


def _tally_mapped(bases, shared):
    """Native bytes on a file's or shared memory's pages (pagemap's bit 61: in a mapping with a
    path, which the ledger's "mapped files" counts as well), tallied in ``bases["mapped"]``: an
    mmap's pages, a torch storage loaded with ``torch.load(mmap=True)``."""
    tally = bases.get("mapped")
    if tally is not None and shared > 0:
        tally[0] += shared


# A buffer this big or bigger counts its pages in RAM (_in_ram): malloc maps it apart, and
# its pages come into RAM only as they are written
RESIDENT_MIN = 1 << 20


def _in_ram(address, nbytes, files=None):
    """(the bytes of the buffer at ``address`` in RAM, those of them on a file's or shared
    memory's pages) (_walk.c resident_bytes), for one of RESIDENT_MIN bytes or more, or in a
    mapping of a file (``files``: _file_backed_ranges(); a torch checkpoint's small tensors,
    which the ledger's "mapped files" counts too); (``nbytes``, 0) where they cannot be read,
    and for a smaller one elsewhere. A replay buffer made with ``np.zeros`` (calloc) or
    ``np.empty`` and filled as it goes takes its capacity of address space and only what was
    written of RAM: sized by its capacity, it was owner #1 at 1.3 GiB in a 127 MiB process."""
    if (nbytes < RESIDENT_MIN and not (files and _in_ranges(address, files))) \
            or _compiled_walk is None or not hasattr(_compiled_walk, "resident_bytes"):
        return nbytes, 0
    resident, shared = _compiled_walk.resident_bytes(address, nbytes)
    return (nbytes, 0) if resident < 0 else (min(resident, nbytes), shared)


def _untouched_data(ndarray, obj):
    """Of an ndarray that owns its data (counted whole by its __sizeof__), minus the bytes of
    that data not in RAM (_in_ram): 0 or negative. Read through ndarray's own getsets
    (``flags.owndata``, ``nbytes``, ``__array_interface__``'s data pointer)."""
    nbytes = _call(ndarray, "nbytes", obj)
    if type(nbytes) is not int or not RESIDENT_MIN <= nbytes <= MAX_OBJECT_BYTES:
        return 0
    flags = _call(ndarray, "flags", obj)
    owndata = class_dict(type(flags)).get("owndata")
    if type(owndata).__name__ != "getset_descriptor" or owndata.__get__(flags, type(flags)) is not True:
        return 0
    address = _data_address(ndarray, obj)
    return _in_ram(address, nbytes)[0] - nbytes if address else 0


def _data_address(ndarray, obj):
    """The address of an ndarray's data (``__array_interface__``'s pointer, a getset of
    ndarray's own), or 0 where it cannot be read."""
    interface = _call(ndarray, "__array_interface__", obj)
    data = interface.get("data") if type(interface) is dict else None
    if type(data) is not tuple or not data or type(data[0]) is not int:
        return 0
    return data[0]


def _frees_the_data(base, bases):
    """Whether an ndarray's ``base`` is the object a library made to free the array's data with
    (no buffer sized anywhere else): numba's NRT meminfo (what an ``@njit`` function returns),
    polars' series (a zero-copy ``to_numpy()``), a capsule (pybind11's owner of the data
    onnxruntime's outputs have; not DLPack's, whose data is another framework's tensor's).
    Such an array was 112 bytes, its data in no owner (10 MiB each)."""
    tp = type(base)
    if any(tp is cls for cls in bases.get("ndarray_owners", ())):  # (by identity: no metaclass's __eq__)
        return True
    if type.__dict__["__qualname__"].__get__(tp, type) != "PyCapsule" or type_flags(tp) & HEAPTYPE:
        return False
    said = class_dict(tp)["__repr__"](base)  # the C slot: '<capsule object "NAME" at 0x...>'
    return type(said) is str and '"dltensor"' not in said and '"used_dltensor"' not in said


def _foreign_data(ndarray, obj, bases, seen_buffers):
    """The bytes of an ndarray's data that its base frees (_frees_the_data): its ``nbytes``
    those in RAM, once a buffer (arrays of one base share it)."""
    nbytes = _call(ndarray, "nbytes", obj)
    if type(nbytes) is not int or not 0 < nbytes <= MAX_OBJECT_BYTES:
        return 0
    address = _data_address(ndarray, obj)
    if not address or address in seen_buffers:
        return 0
    seen_buffers.add(address)
    size, shared = _in_ram(address, nbytes, bases.get("files"))
    _tally_mapped(bases, min(shared, size))
    return size


def mapped_native_bytes(bases):
    """Of a walk's native bytes (``bases``: its native_types()'s), those on a file's or shared
    memory's pages (_tally_mapped)."""
    tally = (bases or {}).get("mapped")
    return tally[0] if tally is not None else 0


def ssl_native_bytes(bases):
    """Of a walk's native bytes (``bases``: its native_types()'s), those of OpenSSL's contexts
    and connections (scanned_object_sizes): 0 where none was sized (none met, or no scan)."""
    tally = (bases or {}).get("ssl")
    return tally[0] if tally is not None else 0


# OpenSSL's scan: at most this many chunks (1,000 contexts are ~11M: 8.6 s), this long
_SSL_MAX_CHUNKS = 32 << 20
_SSL_MAX_SECONDS = 20.0
# What sizing after the walk may hold in the target at most (the contexts' scan: ~0.5 MiB of
# its own, and ~4 MB a million chunks seen: 130 contexts' took 5 MB), within what is left of
# the request's memory budget
AFTER_WALK_BYTES = 64 << 20


# Below this many contexts listed, those the target let go of are looked for at each one
# listed; past it, each time the table doubles
_PRUNE_EVERY_FROM = 64


def _prune_scanned(bases):
    """Let go of the contexts listed that only the table holds now (the target dropped them
    since the walk met them: a worker making a client per request would otherwise keep them
    all, ~850 KB each, until the walk is over); they are freed here, as the target would have."""
    met, owners = bases["scanned_objects"], bases["scanned_owners"]
    dead = [key for key in list(met) if sys.getrefcount(met[key]) <= 2]  # (the table's and the call's)
    for key in dead:
        del met[key]
        owners.pop(key, None)
    bases["scanned_prune_at"][0] = len(met) if len(met) < _PRUNE_EVERY_FROM else 2 * len(met)


def after_walk_budget(memory_left, walk_left=None):
    """The bytes sizing after the walk may hold in the target: AFTER_WALK_BYTES, within
    ``memory_left()`` (what the request's budget leaves) and ``walk_left`` (what the walk's
    own budget leaves), each None where there is none."""
    left = memory_left() if memory_left is not None else None
    return min([AFTER_WALK_BYTES] + [limit for limit in (left, walk_left) if limit is not None])


def scanned_object_sizes(bases, deadline, max_bytes):
    """[(object, the owner it was met for, bytes)] of the objects sized after the walk that a
    walk met and the target still holds (native_extra listed them in ``bases``): OpenSSL's
    contexts and connections, each what its SSL_CTX or SSL reaches first in OpenSSL's heap
    (_ssl_scan.c ssl_object_bytes: all at once, breadth first, none of what OpenSSL's
    globals reach; their tally goes to ssl_native_bytes), and _STRUCT_CLASSES' objects, each
    what its struct reaches first (struct_object_bytes: none of what its module's globals
    reach). Empty where none was met or a scan could not finish (half the time left before
    ``deadline``, a time.monotonic(): the walk's result is still to be made; ``max_bytes`` of
    its tables: they are then what sys.getsizeof says). The table is empty after;
    ``bases["scan_bytes"]`` is what a scan's tables used at their most (absent: none ran)."""
    met = bases.get("scanned_objects")
    if not met or _compiled_walk is None:
        return []
    _prune_scanned(bases)
    objects = list(met.values())
    owner_of = bases["scanned_owners"]
    met.clear()
    bases["scanned_prune_at"][0] = 0
    owners = {id(obj): owner_of.get(id(obj), 0) for obj in objects}
    owner_of.clear()
    held = _held_by_holders(bases, objects, owners)
    ssl_classes = [c for c in (bases.get("ssl_context"), bases.get("ssl_socket")) if c is not None]
    contexts, by_file = [], {}  # type: list, dict
    pybind11_files = {}  # type: dict
    pybind11_bases = bases.get("pybind11_bases", ())
    for obj in objects:
        if ssl_classes and any(isinstance_of(obj, c) for c in ssl_classes):
            contexts.append(obj)
            continue
        if pybind11_bases and any(isinstance_of(obj, base) for base in pybind11_bases):
            kind = _PYBIND11_KIND
            path = _pybind11_file(type(obj), pybind11_files)
            if path is not None:
                by_file.setdefault(path, []).append((obj, kind))
            continue
        for kind, path in bases.get("struct_files", {}).items():
            cls = bases.get(kind)
            if type(obj) is cls or (kind in STRUCT_SUBCLASSED and cls is not None and isinstance_of(obj, cls)):
                by_file.setdefault(path, []).append((obj, kind))
                break
    del objects
    out = []
    peaks = []  # (the scans run one after the other: their tables are never held at once)
    if contexts:
        sized, peak = _ssl_sizes(bases, contexts, deadline, max_bytes)
        bases["ssl"][0] += sum(size for _obj, size in sized)
        out.extend(sized)
        peaks.append(peak)
    for path, group in by_file.items():
        sized, peak = _struct_sizes(group, path, deadline, max_bytes)
        out.extend(sized)
        peaks.append(peak)
    peaks = [peak for peak in peaks if peak is not None]
    if peaks:
        # (its tables' most at once, leakhound's own memory in the target: said with the walk's)
        bases["scan_bytes"] = max(peaks)
    if held:  # what a holder keeps is its holder's (one entry an object: the sizes summed)
        holder_of = {id(one): holder for holder, one in held.values()}
        summed = {}  # type: dict
        for obj, size in out:
            obj = holder_of.get(id(obj), obj)
            summed[id(obj)] = (obj, summed.get(id(obj), (obj, 0))[1] + size)
        out = list(summed.values())
    return [(obj, owners.get(id(obj), 0), size) for obj, size in out]


def _scan_seconds(deadline):
    """A scan's time: half what is left before ``deadline``, _SSL_MAX_SECONDS at most."""
    return min((deadline - time.monotonic()) / 2, _SSL_MAX_SECONDS)


def _scan_peak():
    return _compiled_walk.ssl_scan_peak() if hasattr(_compiled_walk, "ssl_scan_peak") else 0


def _sized(objects, got):
    """[(object, bytes)] of a scan's answer (int64s, one an object; None: none)."""
    if got is None:
        return []
    sizes = array.array("q")
    sizes.frombytes(got)
    return [(obj, size) for obj, size in zip(objects, sizes) if 0 < size <= MAX_OBJECT_BYTES]  # noqa: B905 - 3.8+


def _ssl_sizes(bases, contexts, deadline, max_bytes):
    """([(context or connection, bytes)], the scan's peak or None: it did not run)."""
    seconds = _scan_seconds(deadline)
    if seconds <= 0 or max_bytes <= 0:
        return [], None
    # (OpenSSL's globals, whose chunks are no context's: libssl's and libcrypto's data, or
    # _ssl's own where it has OpenSSL linked in)
    ssl_file = module_file(sys.modules.get("_ssl"))
    try:
        # (the heap's ranges now: it may have grown since the walk began)
        got = _compiled_walk.ssl_object_bytes(contexts, bases["ssl_context"], bases.get("ssl_socket"), _heap_ranges(),
                                              ssl_file if type(ssl_file) is str else None,
                                              HEAP_BLOCKS[0] if HEAP_BLOCKS is not None else 0, _SSL_MAX_CHUNKS,
                                              max_bytes, seconds)
    except (ValueError, UnicodeError):  # a file name with a NUL or a lone surrogate
        return [], None
    return _sized(contexts, got), _scan_peak()


def _struct_sizes(group, path, deadline, max_bytes):
    """([(object, bytes)], the scan's peak or None) of _STRUCT_CLASSES' objects (and
    pybind11's) of the extension module at ``path`` (its globals' chunks are no object's);
    ``group``: [(object, its kind)]."""
    seconds = _scan_seconds(deadline)
    if seconds <= 0 or max_bytes <= 0:
        return [], None
    objects = [obj for obj, _kind in group]
    enums = {}  # type: dict
    basicsizes = array.array("q", [_struct_basicsize(obj, kind, enums) for obj, kind in group])
    try:
        got = _compiled_walk.struct_object_bytes(objects, basicsizes.tobytes(), _heap_ranges(), path,
                                                 HEAP_BLOCKS[0] if HEAP_BLOCKS is not None else 0, _SSL_MAX_CHUNKS,
                                                 max_bytes, seconds)
    except (ValueError, UnicodeError):
        return [], None
    return _sized(objects, got), _scan_peak()


def sqlite_native_bytes(bases):
    """Of a walk's native bytes (``bases``: its native_types()'s), those SQLite counts for its
    connections (in sqlite3_memory_used, the ledger's SQLite row, too)."""
    tally = (bases or {}).get("sqlite")
    return tally[0] if tally is not None else 0


def isinstance_of(obj, cls):
    """Whether ``cls`` is in the MRO of obj's type (never the object's own ``__class__``; each
    class compared by identity: objects.in_mro)."""
    return in_mro(type(obj), (cls,))


def native_extra(obj, native, bases, seen_buffers, elements_read=False):
    """(bytes outside ``object_size(obj)`` (negative: of it, the bytes not in RAM, an ndarray's
    data never written), [objects obj holds that gc.get_referents(obj) does
    not list]) for an object whose type is in ``native`` (``native, bases = native_types()``);
    ``seen_buffers`` (a set of buffer addresses) makes a buffer shared by several objects
    count once. (0, []) when the object cannot be read (closed, freed, an unexpected layout).
    ``elements_read``: the caller reads the elements of this array of objects itself, a slice
    at a time (the compiled graph walk: _graph_walk.c object_array_items); not listed here."""
    kind = native.get(id(type(obj)))
    cls = bases.get(kind) if kind is not None else None
    if cls is None:
        return 0, []
    try:
        if kind == "ndarray":
            # ndarray.__sizeof__ counts the data of an array that owns it; a view's data
            # belongs to its base (an array, bytes, an mmap...), which only the view may hold.
            refs = []
            base = _call(cls, "base", obj)
            if base is not None:
                refs.append(base)
            dtype = _call(cls, "dtype", obj)
            dtype_class = class_from("numpy", "dtype")
            if (not elements_read and base is None and type(obj) is cls and dtype_class is not None
                    and _call(dtype_class, "num", dtype) == _NPY_OBJECT
                    and _call(cls, "size", obj) <= _MAX_OBJECT_ELEMENTS):
                # An object array's elements (numpy arrays have no tp_traverse): ravel (a
                # view, or a copy holding the same references) and tolist, both C methods.
                # Exact ndarrays only: ravel() on a subclass runs its __array_finalize__. Not
                # a view's: its elements are its base's references (one each, in the base's
                # data), listed with the base; listed through the view too, one held by the
                # base alone looked held once by each, and was counted twice by the graph.
                flat = _call(cls, "tolist", _call(cls, "ravel", obj))
                if type(flat) is list:
                    refs.extend(flat)
                else:
                    refs.append(flat)
            if base is None:
                return _untouched_data(cls, obj), refs
            if _frees_the_data(base, bases):
                return _foreign_data(cls, obj, bases, seen_buffers), refs
            return 0, refs
        if kind == "greenlet":
            return 0, _greenlet_variables(cls, obj)
        if kind == "tensor":
            if not _host_tensor(cls, obj):
                return 0, []
            size = _storage_bytes(cls, obj, bases, seen_buffers)
            extra, held = _autograd_root(cls, obj, bases, seen_buffers)
            return size + extra, held  # (named: HiddenNamed)
        if kind == "autograd_node":
            return _autograd_next(obj, bases, seen_buffers)
        if kind == "instance":
            return instance_values_bytes(obj), []
        if kind == "code":
            held = [member.__get__(obj, cls) for member in _CODE_MEMBERS]
            return 0, [value for value in held if value is not None]
        if kind == "mmap":
            length = _call(cls, "__len__", obj)  # the slot wrapper: mmap's C length
            if not 0 <= length <= MAX_OBJECT_BYTES:
                return 0, []
            return _mapped_bytes(obj, length, bases), []
        if kind == "ctypes":
            # A buffer the object owns (``_b_needsfree_``; one made over another object's
            # memory, ``from_buffer``, does not), its size read by _ctypes.sizeof (a C
            # function: an instance's ``b_size``): ``create_string_buffer(20480)`` is 20 KB
            # that sys.getsizeof's 136 bytes leave out.
            ctypes_module = sys.modules.get("_ctypes")
            size_of = instance_dict(ctypes_module).get("sizeof") if ctypes_module is not None else None
            if size_of is None or type(size_of).__name__ != "builtin_function_or_method" \
                    or not _call(cls, "_b_needsfree_", obj):
                return 0, []
            size = size_of(obj)
            return (heap_block(size) if _CTYPES_INLINE < size <= MAX_OBJECT_BYTES else 0), []
        if kind == "cffi":
            # one malloc block of the object and its data: sys.getsizeof's 40 bytes (a 1 MB
            # ``ffi.new("char[]", 10**6)`` too) and the data
            data = _cffi_data_bytes(obj, bases.get("cffi_functions"))
            if data <= 0:
                return 0, []
            basic = object_sizeof(obj)
            return max(0, _blocks_bytes(basic + data, 1) - heap_block(basic)), []
        if kind in ("arrow_tabular", "arrow_chunked", "arrow_array"):
            return _arrow_bytes(kind, obj, bases, seen_buffers), []
        if kind == "stringio":
            # Its characters (a UCS4 buffer, in either state) and, while it accumulates
            # writes, the lists (3.10/3.11) or the str (3.12+) holding them: none of them is
            # in sys.getsizeof or gc.get_referents (200 log captures of 80 KB were 16 MB
            # held from C, or in nothing at all).
            layout, basicsize = _STRINGIO_LAYOUTS[sys.version_info[:2]]
            parts = _compiled_walk.stringio_parts(obj, cls, basicsize, layout)
            if parts is None:
                return 0, []
            size, accumulated = parts
            return ((heap_block(size) if 0 < size <= MAX_OBJECT_BYTES else 0),
                    [o for o in accumulated if o is not None])
        if kind in _ZLIB_KINDS:
            # zlib's state, window, hash chains and pending output, outside the object: a
            # compressobj() is ~262 KB (a websocket connection's per-message deflate), which
            # sys.getsizeof's 168 bytes leave out; a decompressobj 7 KB, 39 KB once it has
            # a window. Ended streams (flushed) hold none.
            _name, code, basicsize = _ZLIB_KINDS[kind]
            blocks = _compiled_walk.zlib_state_blocks(obj, cls, basicsize, code)
            total = sum(heap_block(block) for block in blocks or () if block > 0)
            return (total if total <= MAX_OBJECT_BYTES else 0), []
        if kind in _STREAM_KINDS:
            # bz2's blocks (a BZ2Compressor(9) 7.5 MB, a decompressor 3.7 MB once it has
            # read a block), an LZMADecompressor's (8.4 MB for the default preset's streams)
            # and an LZMACompressor's (97.6 MB at the default preset), which sys.getsizeof's
            # 112-224 bytes leave out, and the input a decompressor keeps
            code, basicsize = _STREAM_KINDS[kind][2:]
            got = _compiled_walk.stream_state_bytes(obj, cls, basicsize, code, bases.get("heap_ranges", b""))
            if got is None:
                return 0, []
            state, kept = got
            if kind == "lzma_decompressor":
                state = max(0, state - _LZMA_MEMUSAGE_BASE)
            total = state + (heap_block(kept) if kept > 0 else 0)
            return (total if total <= MAX_OBJECT_BYTES else 0), []
        if kind == "sqlite_connection":
            # SQLite's own count of the connection's page cache, schemas and statements
            # (sqlite3_db_status), which sys.getsizeof's ~220 bytes leave out: 100 connections
            # of 500 rows were 16 MB freed in no owner. Skipped (0) while another thread uses
            # it; what is counted here leaves the ledger's SQLite row (sqlite_native_bytes).
            counted = _compiled_walk.sqlite_connection_bytes(obj, cls, bases.get("sqlite_file"))
            if counted is None or not 0 < counted <= MAX_OBJECT_BYTES:
                return 0, []
            bases["sqlite"][0] += counted
            return counted, []
        if kind in ("ssl_context", "ssl_socket") or kind in _STRUCT_KINDS:
            # OpenSSL's context (its certificate store: ~850 KB for create_default_context(),
            # 144 bytes by sys.getsizeof) and connection (~18 KB idle: its SSL, session, peer
            # certificates) are sized once the walk is over, every one at once
            # (scanned_object_sizes): listed here
            met = bases["scanned_objects"]
            if id(obj) not in met:
                met[id(obj)] = obj
                bases["scanned_owners"][id(obj)] = bases["scanned_owner"][0]
                if len(met) > bases["scanned_prune_at"][0]:
                    _prune_scanned(bases)
            return 0, []
        if kind in _HASHLIB_KINDS:
            # OpenSSL's digest context and the provider's state it owns (a sha256's ~210
            # bytes: 20,000 hashers were 5 MB freed and 0.8 MB by sys.getsizeof; an HMAC's
            # three, ~670), and the lock one made before 3.13 once it hashed a big buffer
            if type(obj) is not cls:
                return 0, []
            digest = _compiled_walk.evp_digest_bytes(obj, cls, _HASHLIB_BASICSIZE, sys.version_info < (3, 13),
                                                      bases.get("heap_ranges", b""), kind == "hashlib_hmac")
            return (digest if digest is not None and digest <= MAX_OBJECT_BYTES else 0), []
        if kind in ("upb_message", "upb_container"):
            # the arena object it holds (several objects of one message tree hold one), and a
            # message's arena of unset fields, which only it holds
            arena, own_bytes, own_blocks = _compiled_walk.upb_held(
                obj, bases["upb_arena"], _UPB_WEAKMAP_OFFSET if kind == "upb_message" else 0)
            return _blocks_bytes(own_bytes, own_blocks), ([arena] if arena is not None else [])
        if kind == "upb_arena":
            got = _compiled_walk.upb_arena_bytes(obj)
            return (_blocks_bytes(*got) if got is not None else 0), []
        if kind == "pygame_surface":
            # its SDL surface's pixels (SDL_SIMDAlloc: pitch x height, aligned in a chunk a
            # little bigger) and the surface struct; none for one whose pixels are another's
            # (a subsurface's, pygame.image.frombuffer's: pygame's PREALLOC flag)
            flags = _call(cls, "get_flags", obj)
            if type(flags) is not int or flags & _PYGAME_PREALLOC:
                return 0, []
            pitch, height = _call(cls, "get_pitch", obj), _call(cls, "get_height", obj)
            if type(pitch) is not int or type(height) is not int or pitch < 0 or height < 0:
                return 0, []
            total = _blocks_bytes(pitch * height + _SDL_SIMD_PADDING, 1) + _blocks_bytes(_SDL_SURFACE_BYTES, 1)
            return (total if 0 <= total <= MAX_OBJECT_BYTES else 0), []
        if kind == "imaging":
            width, height = _call(cls, "size", obj)
            mode = _call(cls, "mode", obj)
            per_pixel = _PIXEL_BYTES.get(mode, 4) if type(mode) is str else 4
            # the pixel rows and the table of row pointers (libImaging/Storage.c)
            total = width * height * per_pixel + height * 8
            return (total if 0 <= total <= MAX_OBJECT_BYTES else 0), []
    except Exception:
        return 0, []
    return 0, []


# pygame's surface flag for pixels the surface does not own (SDL_PREALLOC as pygame reports it)
_PYGAME_PREALLOC = 0x01000000
# SDL_SIMDAlloc's request beyond the pixels (its alignment, 64 at most, and the pointer it
# keeps before them) and SDL2's SDL_Surface struct (96 bytes on 64-bit)
_SDL_SIMD_PADDING = 64 + 8
_SDL_SURFACE_BYTES = 96

# HEAP_BLOCKS without pymalloc's small blocks: how malloc alone rounds a request
_MALLOC_BLOCKS = None if HEAP_BLOCKS is None else (0, 1) + tuple(HEAP_BLOCKS[2:])


def _blocks_bytes(total, count):
    """``count`` blocks of ``total`` bytes requested from malloc (not pymalloc: a C library's),
    as malloc's blocks (their mean size's block each)."""
    if count <= 0 or not 0 < total <= MAX_OBJECT_BYTES:
        return 0
    return heap_block(total // count, _MALLOC_BLOCKS) * count


def deep_size(root, seen=None, limit=5000000, tick=None):
    """The size (object_size: no ``__sizeof__`` written in Python runs) of everything ``root``
    reaches through containers, each object once.

    ``seen`` (ids) may be shared by the caller so that objects shared between measured parts
    count once. Dict keys are followed too (gc.get_referents skips str keys). Only built-in
    container methods run; ``limit`` bounds the walk. ``tick``, when given, is called every
    1024 objects (the probes' duty cycle and cancel check: probes._Clock.tick); it may raise
    to stop the walk. (The probes size through the compiled walk where they can and come
    here only for data it would walk differently: probes._CompiledSizer.)
    """
    seen = set() if seen is None else seen
    total = 0
    stack = [root]
    size_of = SizeCache()  # no __sizeof__ written in Python runs
    seen_add = seen.add
    pop = stack.pop
    extend = stack.extend
    dict_keys = dict.keys
    dict_values = dict.values
    steps = 0
    while stack and steps < limit:
        obj = pop()
        oid = id(obj)
        if oid in seen:
            continue
        seen_add(oid)
        total += size_of(obj, 0)
        steps += 1
        if tick is not None and not steps & 0x3FF:
            tick()
        tp = type(obj)
        if tp is list or tp is tuple:  # the common cases first
            extend(obj)
        elif tp is dict or issubclass(tp, dict):  # (issubclass of its type: isinstance reads __class__)
            extend(dict_keys(obj))
            extend(dict_values(obj))
        else:
            entries = builtin_iter(obj)  # a subclass's own __iter__ never runs
            if entries is not None:
                extend(entries)
            entries = None
    return total
