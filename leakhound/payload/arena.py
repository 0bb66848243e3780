"""Allocator state of the target, read inside it: glibc malloc and CPython's pymalloc.

Read through the compiled extension where it loads (_libc.c), else through ctypes (imported
only then: importing it was ~0.3 MiB of the target's memory). Nothing is printed to the
target's stderr: both glibc's ``malloc_info`` and CPython's ``_PyObject_DebugMallocStats``
write into an in-memory ``open_memstream`` buffer that is freed afterwards.
"""

import os
import re
import sys

from .objects import module_file

try:  # mallinfo2, malloc_info and the pymalloc statistics in C (_libc.c)
    from . import _walk as _native

    _native.mallinfo2  # noqa: B018 - an extension built before they were there: ctypes
except Exception:
    _native = None  # type: ignore[assignment]

_MALLINFO2_FIELDS = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                     "fordblks", "keepcost")
_PAGE = 4096


_LIBC = []  # type: list


def process_libc():
    """The process's libc through ctypes (imported here, not at load: see the module's doc).
    One CDLL for the life of the process: every CDLL caches its function pointers, which
    point back at it, so a fresh one per call would leave a reference cycle (garbage the
    target's GC must collect) behind every inspection."""
    if not _LIBC:
        try:
            import ctypes  # noqa: PLC0415

            _LIBC.append(ctypes.CDLL(None))
        except (OSError, ImportError):
            _LIBC.append(None)
    return _LIBC[0]


def _capture(libc, write):
    """Run ``write(FILE*)`` against an open_memstream buffer and return what it wrote."""
    import ctypes  # noqa: PLC0415

    buf = ctypes.c_char_p()
    size = ctypes.c_size_t()
    libc.open_memstream.restype = ctypes.c_void_p
    libc.open_memstream.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_size_t)]
    stream = libc.open_memstream(ctypes.byref(buf), ctypes.byref(size))
    if not stream:
        return ""
    try:
        write(ctypes.c_void_p(stream))
    finally:
        libc.fclose.argtypes = [ctypes.c_void_p]
        libc.fclose(ctypes.c_void_p(stream))
    try:
        text = ctypes.string_at(buf, size.value).decode("utf-8", "replace")
    finally:
        libc.free.argtypes = [ctypes.c_void_p]
        libc.free(buf)
    return text


_MALLINFO2_TYPE = []  # type: list


def _structure():
    """ctypes' struct mallinfo2, made once per process: a class made at every call would
    be a reference cycle (a class and its dict) left for the target's GC each time."""
    if not _MALLINFO2_TYPE:
        import ctypes  # noqa: PLC0415

        class Mallinfo2(ctypes.Structure):
            _fields_ = [(name, ctypes.c_size_t) for name in _MALLINFO2_FIELDS]

        _MALLINFO2_TYPE.append(Mallinfo2)
    return _MALLINFO2_TYPE[0]


def mallinfo2():
    """glibc's mallinfo2() as {field: int}, or None where the libc has none."""
    if _native is not None:
        fields = _native.mallinfo2()
        return None if fields is None else dict(zip(_MALLINFO2_FIELDS, fields))  # noqa: B905 - 3.8+
    libc = process_libc()
    if libc is None or not hasattr(libc, "mallinfo2"):
        return None
    if libc.mallinfo2.restype is not _structure():
        libc.mallinfo2.restype = _structure()
    info = libc.mallinfo2()
    return {name: int(getattr(info, name)) for name in _MALLINFO2_FIELDS}


def _malloc_info_xml():
    """glibc's malloc_info XML, "" where there is none."""
    if _native is not None:
        return _native.malloc_info() or ""
    libc = process_libc()
    if libc is None or not hasattr(libc, "malloc_info"):
        return ""
    import ctypes  # noqa: PLC0415

    libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    return _capture(libc, lambda fp: libc.malloc_info(0, fp))


def _pymalloc_text():
    """_PyObject_DebugMallocStats's text; None where the interpreter has none, "" where it
    cannot be captured."""
    if _native is not None:
        return _native.pymalloc_stats()
    try:
        import ctypes  # noqa: PLC0415

        fn = ctypes.pythonapi._PyObject_DebugMallocStats
    except (AttributeError, ImportError):
        return None
    libc = process_libc()
    if libc is None:
        return ""
    fn.argtypes = [ctypes.c_void_p]
    fn.restype = ctypes.c_int
    return _capture(libc, fn)


_SIZE_RE = re.compile(r'<size from="(\d+)" to="(\d+)" total="(\d+)" count="(\d+)"/>')
_UNSORTED_RE = re.compile(r'<unsorted from="(\d+)" to="(\d+)" total="(\d+)" count="(\d+)"/>')
_TOP_RE = re.compile(r'<system type="current" size="(\d+)"/>')


def trimmable_from_malloc_info(xml):
    """Estimate what ``malloc_trim(0)`` can hand back to the kernel.

    glibc releases whole pages inside free chunks (all arenas, not only the top chunk). A free
    chunk of ``size`` bytes gives back about ``size - page`` bytes (its header and the partial
    pages at both ends stay), so chunks under two pages give nothing. Fast-bin sizes
    (``type="fast"`` entries have no ``<size>`` rows with from>=page) never qualify.

    The chunks freed since the arena's last sorting pass are in its unsorted bin, one row a
    heap (``<unsorted>``: its smallest and biggest chunk, their total and count), and
    ``malloc_trim`` releases their pages too: an idle worker that had just freed its
    requests' bodies (the simulated fleet) held 0.4-1.2 MB there, what the prediction fell
    short of what trimming returned (3-8%; 19% once, under CI's load). Its biggest chunk
    gives at least its size less a page; the row at least its total less a page a chunk.
    """
    trimmable = 0
    for match in _SIZE_RE.finditer(xml):
        low, _high, total, count = (int(g) for g in match.groups())
        if low < 2 * _PAGE or count == 0:
            continue
        trimmable += max(0, total - count * _PAGE)
    for match in _UNSORTED_RE.finditer(xml):
        _low, high, total, count = (int(g) for g in match.groups())
        if high < 2 * _PAGE or count == 0:
            continue
        trimmable += max(total - count * _PAGE, high - _PAGE)
    return trimmable


def glibc_stats():
    info = mallinfo2()
    if info is None:
        return None, "glibc mallinfo2 is not available in the target (not glibc >= 2.33?)"
    xml = _malloc_info_xml()
    trimmable = trimmable_from_malloc_info(xml) if xml else 0
    # The main arena's top chunk beyond the default 128 KiB pad is trimmable too, but the
    # malloc_info size rows already list the top chunk only in recent glibc; keepcost is it.
    top = max(0, info["keepcost"] - 128 * 1024)
    trimmable += top
    free = info["fordblks"]
    return {
        "malloc_in_use_bytes": info["uordblks"] + info["hblkhd"],
        "malloc_free_bytes": free,
        "malloc_mmapped_bytes": info["hblkhd"],
        "trimmable_bytes": min(trimmable, free),
    }, ""


_PYMALLOC_RE = {
    "available": re.compile(r"# bytes in available blocks\s*=\s*([\d,]+)"),
    "free_pools": re.compile(r"(\d+) free \d+-sized pools|# bytes in free pools\s*=\s*([\d,]+)"),
    "allocated": re.compile(r"# bytes in allocated blocks\s*=\s*([\d,]+)"),
    "arenas": re.compile(r"# arenas allocated current\s*=\s*([\d,]+)"),
    "pools_free": re.compile(r"(\d+) unused pools \* \d+ bytes\s*=\s*([\d,]+)"),
}


def _num(text):
    return int(text.replace(",", ""))


def pymalloc_stats():
    """Parse ``_PyObject_DebugMallocStats``: free bytes inside pymalloc arenas.

    Free blocks in partly used pools plus wholly unused pools: memory CPython holds for small
    objects that ``malloc_trim`` cannot return (arenas are mmap'd and freed only when empty).
    """
    text = _pymalloc_text()
    if text is None:
        return None, "this Python has no _PyObject_DebugMallocStats"
    if "pymalloc" not in text and "arenas" not in text:
        if _tracemalloc_tracing():
            # tracemalloc wraps the allocator, and CPython then prints no pymalloc statistics
            # (_PyMem_PymallocEnabled() is false); unwrapping it would stop the trace.
            return None, ("pymalloc statistics cannot be read while tracemalloc traces this "
                          "process (PYTHONTRACEMALLOC): pymalloc free is unknown, not 0")
        return None, "pymalloc is not in use (PYTHONMALLOC=malloc?)"
    allocated = _PYMALLOC_RE["allocated"].search(text)
    available = _PYMALLOC_RE["available"].search(text)
    arenas = _PYMALLOC_RE["arenas"].search(text)
    unused = _PYMALLOC_RE["pools_free"].search(text)
    free = (_num(available.group(1)) if available else 0) + (_num(unused.group(2)) if unused else 0)
    return {
        "pymalloc_in_use_bytes": _num(allocated.group(1)) if allocated else 0,
        "pymalloc_free_bytes": free,
        "pymalloc_arenas": _num(arenas.group(1)) if arenas else 0,
    }, ""


def _tracemalloc_functions():
    """(is_tracing, get_tracemalloc_memory) of the built-in _tracemalloc, imported as built in
    (PYTHONTRACEMALLOC starts tracing without importing it: it is in no sys.modules then),
    each read from the module's dict and checked a C function (no Python code of the target
    runs); None where they are not."""
    try:
        import _tracemalloc  # noqa: PLC0415 - built in
    except Exception:
        return None
    functions = getattr(_tracemalloc, "__dict__", None) if type(_tracemalloc) is type(sys) else None
    if type(functions) is not dict:
        return None
    found = functions.get("is_tracing"), functions.get("get_tracemalloc_memory")
    if any(type(function).__name__ != "builtin_function_or_method" for function in found):
        return None
    return found


def _tracemalloc_tracing():
    functions = _tracemalloc_functions()
    try:
        return functions is not None and bool(functions[0]())
    except Exception:
        return False


def tracemalloc_bytes():
    """What tracemalloc holds for its traces of every allocation (its own malloc'd tables, in
    glibc's "in use" and nowhere in the Python heap), 0 when it is not tracing."""
    functions = _tracemalloc_functions()
    try:
        return int(functions[1]()) if functions is not None and functions[0]() else 0
    except Exception:
        return 0


def sqlite_bytes():
    """SQLite's own count of what it holds (_walk.c sqlite_memory_used: every connection's page
    cache, schema and statements), where the sqlite3 module is loaded; 0 where it is not, or
    SQLite keeps no count."""
    module = sys.modules.get("_sqlite3")
    if module is None or type(module) is not type(sys) or _native is None or not hasattr(_native, "sqlite_memory_used"):
        return 0
    try:
        return max(0, _native.sqlite_memory_used(module_file(module)))
    except Exception:
        return 0


def arena_stats():
    """The ``arena`` section of a snapshot (see docs/snapshot-schema.md)."""
    out = {
        "malloc_in_use_bytes": 0,
        "malloc_free_bytes": 0,
        "trimmable_bytes": 0,
        "pymalloc_free_bytes": 0,
        "pymalloc_in_use_bytes": 0,
        "pymalloc_arenas": 0,
        "malloc_mmapped_bytes": 0,
        "available": True,
        "reason": "",
    }
    reasons = []
    if not sys.platform.startswith("linux"):
        out["available"] = False
        out["reason"] = "allocator statistics are read on Linux/glibc only"
        return out
    glibc, why = glibc_stats()
    if glibc is None:
        out["available"] = False
        reasons.append(why)
    else:
        out.update(glibc)
    pym, why = pymalloc_stats()
    if pym is None:
        reasons.append(why)
    else:
        out.update(pym)
    out["reason"] = "; ".join(reasons)
    out["tracemalloc_bytes"] = tracemalloc_bytes()
    out["sqlite_bytes"] = sqlite_bytes()
    return out


def in_use_bytes():
    """The live heap as the allocators see it: bytes glibc has handed out (``uordblks +
    hblkhd``) plus pymalloc's allocated blocks (its arenas are mmapped, not malloc'd: not
    counted twice); None where mallinfo2 is missing. No ``malloc_info``: it walks every free
    chunk of every arena, and this is read every few seconds while a fix is verified."""
    info = mallinfo2() if sys.platform.startswith("linux") else None
    if info is None:
        return None
    pym, _why = pymalloc_stats()
    return info["uordblks"] + info["hblkhd"] + (pym["pymalloc_in_use_bytes"] if pym else 0)


def rss_bytes():
    """This process's resident set, from /proc/self/statm."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
