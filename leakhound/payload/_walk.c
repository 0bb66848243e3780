/*
 * The census's inner walk in C: an optional accelerator for census.Census._claim_tree.
 *
 * It does what the pure-Python loop in census.py does, step for step, on the same data
 * structures, and computes the same numbers (the Python loop stays as the fallback and as
 * the reference the tests compare this against):
 *
 *   - pop a container from ``stack`` (a list holding strong references);
 *   - its referents are what gc.get_referents() returns (the type's tp_traverse), plus the
 *     keys of a dict (dict_traverse skips str keys; their bytes belong to the dict's owner),
 *     held in a plain buffer, not a list: the walk allocates no GC-tracked object per
 *     container, so it never triggers a young collection in the target;
 *   - a referent is skipped if its bit is already set in ``regions`` (the census's address
 *     bitmap: {address >> 20: bytearray(8192)}, one bit per 16-byte granule);
 *   - a leaf (str, bytes, int, float, bool, complex, None: no referents) held only by this
 *     container cannot be met again, so it is counted without being marked;
 *   - every other referent is marked; its size (census._getsizeof: sys.getsizeof when the
 *     type's __sizeof__ is C code, else object.__sizeof__; 0 when that fails or returns more
 *     than any object can be) is added to the totals and to its type's slot in
 *     ``counts``/``sizes`` (array('q'), slot from ``type_index``, a new slot from calling
 *     ``new_slot(type)``); a non-leaf is pushed on ``stack``.
 *
 * Two differences, for the target's sake. A big exact list, tuple, dict or set (more than
 * BIG_CONTAINER entries) is not read whole, as gc.get_referents() would (one step as long
 * as the container, and a reference to each of its entries held at once), but a slice at a
 * time, in place (read_slice). And a container wider than a slice (SLICE entries: a big one
 * read in place, or another whose tp_traverse listed that many) is walked a slice at a time
 * (Frame): what a slice pushed on ``stack`` is walked before the next slice is read, so the
 * stack grows with the nesting of wide containers, not with their width (a 2.3M-item list
 * of objects was 18 MB of stack in the target). The entries of a container read in parts
 * are always marked, so one the target moves between slices is not counted twice; the
 * counts are the Python loop's, whose order differs.
 *
 * It stops after about ``limit`` units of work (one per container popped and per referent
 * seen) and returns, so the caller's Python loop runs between calls and the interpreter can
 * hand the GIL to the target's main thread: no call holds the GIL for long. What it is in the
 * middle of (the referents not claimed yet, the wide containers' frames) goes back to the
 * caller in ``pending``, as one capsule that owns them (each call then costs its budget, not
 * a container's length). It never runs a
 * collection and runs no code written in Python but the census's own new_slot (types are
 * looked up by id, never hashed) and destructors of what it lets go. Such code can run other
 * threads and do anything, so nothing the walk holds across it can go stale: referents, the
 * types it caches and the bitmap regions it caches are strong references only this call
 * sees, a region's bytes are looked up again (and its size checked) at every use, and the
 * per-type tallies are added up in this call's own memory and written to ``counts`` and
 * ``sizes`` (bounds-checked) when it returns.
 *
 * One build for every CPython from 3.10 on: the stable ABI (abi3, Py_LIMITED_API 3.10;
 * hatch_build.py builds _walk.abi3.so with whichever Python installs leakhound). Three
 * helpers outside the stable ABI make it faster where the running interpreter exports them
 * with the signature they have had since 3.8 (_PySys_GetSizeOf, _PyType_Lookup,
 * _PySet_NextEntry: all of 3.10-3.13 do); they are looked up when the module loads, and
 * where one is missing the walk uses its stable-ABI equivalent (``mode`` says which).
 */
#define Py_LIMITED_API 0x030A0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <limits.h>
#include <string.h>

#define REGION_SHIFT 20
#define REGION_BYTES 8192
#define REGION_CACHE 64
#define TYPE_CACHE_BITS 8
#define TYPE_CACHE (1 << TYPE_CACHE_BITS)
#define TYPE_PROBES 8
/* A __sizeof__ larger than this (256 TiB, more than any machine's address space) is not a
 * size: it reads as 0, like a failing one (census.py: _MAX_OBJECT_BYTES). */
#define MAX_OBJECT_BYTES ((size_t)1 << 48)
#define PENDING_NAME "leakhound._walk.pending"

/* -- what the running interpreter offers ----------------------------------------------- */

typedef size_t (*getsizeof_fn)(PyObject *);
typedef PyObject *(*type_lookup_fn)(PyTypeObject *, PyObject *);
typedef int (*set_next_fn)(PyObject *, Py_ssize_t *, PyObject **, Py_hash_t *);

static getsizeof_fn found_getsizeof, use_getsizeof;
static type_lookup_fn found_type_lookup, use_type_lookup;
static set_next_fn found_set_next, use_set_next;

static PyObject *sizeof_name;        /* "__sizeof__" */
static PyObject *object_sizeof;      /* object.__sizeof__ */
static PyObject *sys_getsizeof;      /* the built-in sys.getsizeof */
static PyObject *mro_descr;          /* type.__dict__["__mro__"] */
static PyObject *dict_descr;         /* type.__dict__["__dict__"] */
static PyObject *array_type;         /* array.array */
static PyObject *code_type;          /* types.CodeType */
/* The names of the code type's member descriptors for what a code object holds (see
 * code_referents): code objects are not gc-tracked, gc.get_referents lists none of it. */
static PyObject *code_members;       /* tuple of str */
/* C __sizeof__ methods that count an object gc.get_referents also lists (sizes.py:
 * SIZEOF_COUNTS_REFERENTS, set by sizeof_counts_referents): their types are sized by
 * object.__sizeof__, the referent counted once, on its own. NULL: none. */
static PyObject *sizeof_counts_refs;  /* tuple of method descriptors */

/* -- one call's state ------------------------------------------------------------------ */

/* A container's referents (or, in ``dead``, types this call stopped caching), held
 * (INCREF'd) in a plain buffer: no list object is allocated per container, so the walk
 * itself never counts towards (and never triggers) a collection of the target's young
 * generation, which would traverse the caller's big lists. items[next:len] are still to be
 * claimed; all of items[0:len] are owned until the container is done. */
typedef struct {
    PyObject **items;
    Py_ssize_t len;
    Py_ssize_t cap;
    Py_ssize_t next;
    /* A big exact list, tuple, dict or set is read a slice at a time instead (see
     * read_slice): ``cursor`` holds it, ``pos`` is where the next slice starts. */
    PyObject *cursor;
    Py_ssize_t pos;
} Refs;

/* What this call knows about a type; ``tp`` is a strong reference. */
typedef struct {
    PyTypeObject *tp;
    unsigned long flags;
    traverseproc traverse;
    inquiry is_gc;
    Py_ssize_t slot;        /* -1: not looked up yet */
    int sizeof_builtin;     /* -1: not looked up yet */
    PyObject *sizeof_descr; /* its C __sizeof__ (a strong reference), when sizeof_builtin */
    PyCFunction sizeof_fn;  /* that __sizeof__'s C function, once learnt (call_sizeof) */
    int sizeof_fn_tried;
    /* What sys.getsizeof adds to __sizeof__ for this type (the GC header, 3.11+'s managed
     * dict pre-header): -1 not learnt yet, -2 not to be learnt (see size_of). */
    long long preheader;
    long native;            /* -1: not looked up yet; else its code in ``native``, 0 if none */
    /* The object graph's walk (_graph_walk.c): its slots' labels and descriptors (borrowed
     * from the graph's slot cache, which keeps it: NULL not looked up yet), and whether it
     * is frame-like (-1 not looked up yet). */
    PyObject *graph_slots;
    int frame_like;
} TypeInfo;

typedef struct {
    PyObject *regions;               /* dict: address >> 20 -> bytearray(8192) */
    uintptr_t region_keys[REGION_CACHE];
    PyObject *region_objs[REGION_CACHE];  /* strong references */
    PyObject *type_index;            /* dict: id(type) -> slot */
    PyObject *new_slot;              /* callable(type) -> slot, may grow the arrays */
    PyObject *counts_obj, *sizes_obj;
    PyObject *native;                /* dict: id(type) -> kind, sized natively (or NULL) */
    PyObject *found;                 /* list: the objects of those types this call claimed */
    TypeInfo types[TYPE_CACHE];
    unsigned type_evictions;         /* which entry of a full probe window goes next */
    Refs dead;                       /* types pushed out of ``types``, released at the end */
    long long *add_counts, *add_sizes;  /* per slot, this call's share; written at the end */
    Py_ssize_t add_len;
    Py_ssize_t *touched;             /* the slots this call added to (flush_tallies) */
    Py_ssize_t n_touched, touched_cap;
    /* A session's (see ``session``): the dicts its caches were filled for (strong
     * references); a call with others starts them anew. NULL in a one-call Walk. */
    PyObject *for_regions, *for_type_index, *for_native;
} Walk;

static int
refs_push(Refs *r, PyObject *op)
{
    if (r->len == r->cap) {
        if (r->cap > PY_SSIZE_T_MAX / 2 / (Py_ssize_t)sizeof(PyObject *)) {
            PyErr_NoMemory();
            return -1;
        }
        Py_ssize_t cap = r->cap ? r->cap * 2 : 256;
        PyObject **items = PyMem_Realloc(r->items, (size_t)cap * sizeof(PyObject *));
        if (items == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        r->items = items;
        r->cap = cap;
    }
    Py_INCREF(op);
    r->items[r->len++] = op;
    return 0;
}

static void
refs_clear(Refs *r)
{
    /* Releasing a reference can run a destructor; nothing below reads r meanwhile. */
    Py_ssize_t len = r->len;
    r->len = r->next = 0;
    for (Py_ssize_t i = 0; i < len; i++)
        Py_DECREF(r->items[i]);
}

static void
refs_free(Refs *r)
{
    refs_clear(r);
    PyMem_Free(r->items);
    r->items = NULL;
    r->cap = 0;
    Py_CLEAR(r->cursor);
}

/* Drops what one call holds (the types it pushed out of its cache); the error, if any,
 * is kept. A session's caches stay (``session``). */
static void
walk_release_call(Walk *w)
{
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    refs_free(&w->dead);
    PyErr_Restore(type, value, traceback);
}

/* Drops everything the call holds but the referents; the error, if any, is kept. */
static void
walk_release(Walk *w)
{
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    for (int h = 0; h < REGION_CACHE; h++)
        Py_CLEAR(w->region_objs[h]);
    for (int h = 0; h < TYPE_CACHE; h++) {
        Py_CLEAR(w->types[h].tp);
        Py_CLEAR(w->types[h].sizeof_descr);
    }
    refs_free(&w->dead);
    PyMem_Free(w->add_counts);
    PyMem_Free(w->add_sizes);
    PyMem_Free(w->touched);
    w->add_counts = w->add_sizes = NULL;
    w->touched = NULL;
    w->add_len = w->n_touched = w->touched_cap = 0;
    Py_CLEAR(w->for_regions);
    Py_CLEAR(w->for_type_index);
    Py_CLEAR(w->for_native);
    PyErr_Restore(type, value, traceback);
}

/* -- the bitmap ----------------------------------------------------------------------- */

/* regions[key] (a dict of bytearray(REGION_BYTES) bitmaps), made zeroed if missing: a
 * borrowed reference (the dict holds it), NULL on error (also when it is not a bytearray of
 * that size: code that ran may have replaced or resized it). */
static PyObject *
region_in_dict(PyObject *regions, uintptr_t key)
{
    PyObject *pykey = PyLong_FromSize_t((size_t)key);
    if (pykey == NULL)
        return NULL;
    PyObject *region = PyDict_GetItemWithError(regions, pykey);  /* borrowed */
    if (region == NULL && !PyErr_Occurred()) {
        region = PyByteArray_FromStringAndSize(NULL, REGION_BYTES);
        if (region != NULL) {
            memset(PyByteArray_AsString(region), 0, REGION_BYTES);
            int failed = PyDict_SetItem(regions, pykey, region);
            Py_DECREF(region);  /* the dict holds it */
            if (failed)
                region = NULL;
        }
    }
    Py_DECREF(pykey);
    if (region != NULL && (Py_TYPE(region) != &PyByteArray_Type || PyByteArray_Size(region) != REGION_BYTES)) {
        PyErr_SetString(PyExc_TypeError, "bitmap regions must be bytearray(8192)");
        return NULL;
    }
    return region;
}

/* The bitmap region for ``address``, creating it if needed; NULL on error. The region's
 * bytes are fetched at every use: code that ran since (a destructor, new_slot)
 * may have resized the bytearray (this call holds it, but cannot pin its size without a
 * buffer export, which the stable ABI of 3.10 lacks). */
static unsigned char *
region_for(Walk *w, uintptr_t address)
{
    uintptr_t key = address >> REGION_SHIFT;
    size_t h = (size_t)(key % REGION_CACHE);
    PyObject *region = w->region_objs[h];
    if (region != NULL && w->region_keys[h] == key && PyByteArray_Size(region) == REGION_BYTES)
        return (unsigned char *)PyByteArray_AsString(region);
    /* Not cached, or resized by code that ran meanwhile: what the dict holds now. */
    region = region_in_dict(w->regions, key);
    if (region == NULL)
        return NULL;
    /* A bytearray runs no code when released: replacing the cached one is safe here. */
    Py_INCREF(region);
    Py_XDECREF(w->region_objs[h]);
    w->region_objs[h] = region;
    w->region_keys[h] = key;
    return (unsigned char *)PyByteArray_AsString(region);
}

/* -- types ----------------------------------------------------------------------------- */

/* What this call knows of ``tp``: its entry in w->types, made (another type's evicted) if
 * needed; NULL on error. A type is looked for in the TYPE_PROBES entries from its home:
 * entries are only emptied all at once (walk_release), so the first empty one ends the
 * search. A direct-mapped table (an entry per home) was a trap: two busy types a multiple
 * of 4 KiB apart (3.10's dict and list in libpython) evicted each other at every object,
 * and each time the type was looked up again and its __sizeof__ bound again (3.10's census
 * ~30% slower than 3.11's; a class that the heap put at such a distance did the same). */
static TypeInfo *
type_info(Walk *w, PyTypeObject *tp)
{
    /* Fibonacci hashing: the product's high bits mix every bit of the address. */
    size_t home = (size_t)(((uint64_t)(uintptr_t)tp * 0x9E3779B97F4A7C15ULL) >> (64 - TYPE_CACHE_BITS));
    TypeInfo *info = NULL;
    for (size_t k = 0; k < TYPE_PROBES; k++) {
        TypeInfo *entry = &w->types[(home + k) & (TYPE_CACHE - 1)];
        if (entry->tp == tp)
            return entry;
        if (entry->tp == NULL) {
            info = entry;
            break;
        }
    }
    if (info == NULL)  /* a full window: its entries take turns */
        info = &w->types[(home + w->type_evictions++ % TYPE_PROBES) & (TYPE_CACHE - 1)];
    if (info->tp != NULL) {
        /* Released at the end of the call: a type's destructor can run code. */
        if (refs_push(&w->dead, (PyObject *)info->tp) < 0)
            return NULL;
        Py_CLEAR(info->tp);
        if (info->sizeof_descr != NULL) {  /* may be mid-call (size_of): kept to the end */
            if (refs_push(&w->dead, info->sizeof_descr) < 0)
                return NULL;
            Py_CLEAR(info->sizeof_descr);
        }
    }
    info->flags = PyType_GetFlags(tp);
    info->traverse = (traverseproc)PyType_GetSlot(tp, Py_tp_traverse);
    info->is_gc = (inquiry)PyType_GetSlot(tp, Py_tp_is_gc);
    if (PyErr_Occurred())
        return NULL;
    info->slot = -1;
    info->sizeof_builtin = -1;
    info->sizeof_descr = NULL;
    info->sizeof_fn = NULL;
    info->sizeof_fn_tried = 0;
    info->preheader = -1;
    info->native = -1;
    info->graph_slots = NULL;
    info->frame_like = -1;
    Py_INCREF(tp);
    info->tp = tp;
    return info;
}

/* The tally slot of ``tp`` (the caller checks it against the arrays); -1 on error. */
static Py_ssize_t
slot_for(Walk *w, TypeInfo *info)
{
    if (info->slot >= 0)
        return info->slot;
    PyObject *tp = (PyObject *)info->tp;
    Py_INCREF(tp);  /* the lookups below can run code that evicts this entry */
    /* Keyed by id(type), never the type itself: hashing a class runs its metaclass's
     * __hash__, which may be Python code (census._TypeTally). */
    PyObject *key = PyLong_FromVoidPtr((void *)tp);
    if (key == NULL) {
        Py_DECREF(tp);
        return -1;
    }
    PyObject *slot = PyDict_GetItemWithError(w->type_index, key);  /* borrowed */
    Py_DECREF(key);
    Py_ssize_t value;
    if (slot != NULL) {
        value = PyLong_AsSsize_t(slot);
    }
    else if (PyErr_Occurred()) {
        Py_DECREF(tp);
        return -1;
    }
    else {
        slot = PyObject_CallFunctionObjArgs(w->new_slot, tp, NULL);
        if (slot == NULL) {
            Py_DECREF(tp);
            return -1;
        }
        value = PyLong_AsSsize_t(slot);
        Py_DECREF(slot);
    }
    if (value == -1 && PyErr_Occurred()) {
        Py_DECREF(tp);
        return -1;
    }
    if (value < 0) {
        Py_DECREF(tp);
        PyErr_SetString(PyExc_IndexError, "type slot out of range");
        return -1;
    }
    if (info->tp == (PyTypeObject *)tp)
        info->slot = value;
    Py_DECREF(tp);
    return value;
}

/* Is tp's __sizeof__ C code (a method_descriptor: built-in and extension types, and
 * object.__sizeof__ for classes that do not define one) that counts no referent
 * (counts_referents)? As sizes._sizeof_is_builtin: the first class in the MRO whose dict
 * has __sizeof__ decides. Runs no code written in Python
 * (but a str key's comparison with a class dict's odd keys); 1 (and the method descriptor,
 * a new reference, in *found), 0, or -1 on error. */
static int
counts_referents(PyObject *descr)
{
    if (sizeof_counts_refs == NULL)
        return 0;
    for (Py_ssize_t i = 0; i < PyTuple_Size(sizeof_counts_refs); i++) {
        if (PyTuple_GetItem(sizeof_counts_refs, i) == descr)
            return 1;
    }
    return 0;
}

static int
lookup_sizeof_builtin(PyTypeObject *tp, PyObject **found)
{
    *found = NULL;
    if (use_type_lookup != NULL) {
        PyObject *descr = use_type_lookup(tp, sizeof_name);  /* borrowed */
        if (descr == NULL && PyErr_Occurred())
            return -1;
        if (descr == NULL || Py_TYPE(descr) != &PyMethodDescr_Type || counts_referents(descr))
            return 0;
        Py_INCREF(descr);
        *found = descr;
        return 1;
    }
    descrgetfunc get = (descrgetfunc)PyType_GetSlot(Py_TYPE(mro_descr), Py_tp_descr_get);
    descrgetfunc get_dict = (descrgetfunc)PyType_GetSlot(Py_TYPE(dict_descr), Py_tp_descr_get);
    if (get == NULL || get_dict == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_SystemError, "type's __mro__ or __dict__ cannot be read");
        return -1;
    }
    PyObject *mro = get(mro_descr, (PyObject *)tp, (PyObject *)&PyType_Type);
    if (mro == NULL)
        return -1;
    int result = 0;
    if (PyTuple_Check(mro)) {
        for (Py_ssize_t i = 0; i < PyTuple_Size(mro); i++) {
            PyObject *klass = PyTuple_GetItem(mro, i);  /* borrowed: the tuple holds it */
            if (klass == NULL || !PyType_Check(klass))
                continue;
            PyObject *proxy = get_dict(dict_descr, klass, (PyObject *)&PyType_Type);
            if (proxy == NULL) {
                result = -1;
                break;
            }
            PyObject *descr = PyObject_GetItem(proxy, sizeof_name);
            Py_DECREF(proxy);
            if (descr == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_KeyError)) {
                    result = -1;
                    break;
                }
                PyErr_Clear();
                continue;
            }
            result = Py_TYPE(descr) == &PyMethodDescr_Type && !counts_referents(descr);
            if (result)
                *found = descr;
            else
                Py_DECREF(descr);
            break;
        }
    }
    Py_DECREF(mro);
    return result;
}

/* callable(op) as a C long long: -1 with an error set when it fails. */
static long long
call_long(PyObject *callable, PyObject *op)
{
    PyObject *got = PyObject_CallFunctionObjArgs(callable, op, NULL);
    if (got == NULL)
        return -1;
    long long value = PyLong_AsLongLong(got);
    Py_DECREF(got);
    return value;
}

/* info->sizeof_descr(op) (the type's C __sizeof__, a method descriptor) as a C long long: -1
 * with an error set when it fails. Once the C function behind it is learnt (the descriptor
 * bound to the first object: a builtin method taking no arguments), it is called directly:
 * the generic call (argument packing, the descriptor's checks) was ~10% of a walk in perf.
 * ``op`` is an instance of info->tp (its own type), which the descriptor's check asks. */
static long long
call_sizeof(TypeInfo *info, PyObject *op)
{
    if (!info->sizeof_fn_tried) {
        info->sizeof_fn_tried = 1;
        descrgetfunc get = (descrgetfunc)PyType_GetSlot(Py_TYPE(info->sizeof_descr), Py_tp_descr_get);
        if (get == NULL && PyErr_Occurred())
            PyErr_Clear();
        PyObject *bound = get != NULL ? get(info->sizeof_descr, op, (PyObject *)info->tp) : NULL;
        if (bound == NULL) {
            if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_Exception))
                return -1;
            PyErr_Clear();
        }
        else {
            if (PyCFunction_Check(bound) && (PyCFunction_GetFlags(bound) & ~METH_COEXIST) == METH_NOARGS)
                info->sizeof_fn = PyCFunction_GetFunction(bound);
            Py_DECREF(bound);
        }
    }
    if (info->sizeof_fn == NULL)
        return call_long(info->sizeof_descr, op);
    PyObject *got = info->sizeof_fn(op, NULL);
    if (got == NULL)
        return -1;
    long long value = PyLong_AsLongLong(got);
    Py_DECREF(got);
    return value;
}

/* sys.getsizeof(op): -1 with an error set when it fails. */
static long long
getsizeof_full(PyObject *op)
{
    if (use_getsizeof != NULL) {
        size_t got = use_getsizeof(op);
        if (got == (size_t)-1 && PyErr_Occurred())
            return -1;
        return got > MAX_OBJECT_BYTES ? (long long)MAX_OBJECT_BYTES + 1 : (long long)got;
    }
    return call_long(sys_getsizeof, op);
}

/* census._getsizeof(op): sys.getsizeof(op, 0) when tp's __sizeof__ is C code, else
 * object.__sizeof__(op) (a __sizeof__ written in Python is never run: a mock's creates new
 * mocks for the walk to meet, without end); any Exception reads as 0 (not only TypeError),
 * and so does a size no object can have. An error that is not an Exception (SystemExit,
 * KeyboardInterrupt) is returned: -1.
 *
 * sys.getsizeof looks __sizeof__ up, binds it (a new method object, allocated and freed),
 * calls it and adds the type's pre-header. Once that pre-header is learnt for a type (from
 * one object: sys.getsizeof(op) minus its __sizeof__), the rest of the call's objects of
 * the type get the C __sizeof__ called unbound plus that number: the same result, without
 * the allocation (a fifth of the walk's time on 3.13). Not for a type whose objects decide
 * whether they are GC-tracked (tp_is_gc: type objects), where the pre-header varies. */
static int
size_of(PyObject *op, TypeInfo *info, long long *size)
{
    PyTypeObject *tp = info->tp;  /* held by the caller */
    int builtin = info->sizeof_builtin;
    long long bytes;
    if (builtin < 0) {
        PyObject *descr = NULL;
        builtin = lookup_sizeof_builtin(tp, &descr);
        if (builtin >= 0 && info->tp == tp) {
            info->sizeof_builtin = builtin;
            info->sizeof_descr = descr;  /* the entry holds it now */
            descr = NULL;
        }
        Py_XDECREF(descr);
        if (builtin < 0)
            return -1;
        if (info->tp != tp)
            info = NULL;  /* evicted meanwhile: this object is sized without the cache */
    }
    if (!builtin) {
        bytes = call_long(object_sizeof, op);
    }
    else if (info != NULL && info->preheader >= 0) {
        bytes = call_sizeof(info, op);
        if (bytes >= 0)
            bytes += info->preheader;
        else if (!PyErr_Occurred())
            bytes = 0;  /* sys.getsizeof raises ValueError for it: read as 0 */
    }
    else {
        bytes = getsizeof_full(op);
        if (bytes >= 0 && info != NULL && info->preheader == -1 && info->sizeof_descr != NULL
            && info->is_gc == NULL) {
            long long raw = call_sizeof(info, op);
            if (raw == -1 && PyErr_Occurred()) {
                if (!PyErr_ExceptionMatches(PyExc_Exception))
                    return -1;
                PyErr_Clear();
            }
            else if (info->tp == tp && raw >= 0 && bytes - raw >= 0 && bytes - raw <= 256) {
                info->preheader = bytes - raw;
            }
            if (info->tp == tp && info->preheader == -1)
                info->preheader = -2;  /* sys.getsizeof for every one */
        }
    }
    if (bytes == -1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            return -1;
        PyErr_Clear();
        bytes = 0;
    }
    *size = bytes < 0 || bytes > (long long)MAX_OBJECT_BYTES ? 0 : bytes;
    return 0;
}

/* -- the tallies ----------------------------------------------------------------------- */

/* Two arrays of counts and sizes by slot, ``*len`` long, grown (zeroed) to hold ``slot``;
 * ``first``: their length when empty. */
static int
grow_tallies(long long **counts, long long **sizes, Py_ssize_t *len, Py_ssize_t slot, Py_ssize_t first)
{
    if (slot < *len)
        return 0;
    Py_ssize_t want = *len ? *len : first;
    while (want <= slot) {
        if (want > PY_SSIZE_T_MAX / 2 / (Py_ssize_t)sizeof(long long)) {
            PyErr_NoMemory();
            return -1;
        }
        want *= 2;
    }
    long long *c = PyMem_Realloc(*counts, (size_t)want * sizeof(long long));
    if (c == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *counts = c;
    long long *z = PyMem_Realloc(*sizes, (size_t)want * sizeof(long long));
    if (z == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *sizes = z;
    memset(c + *len, 0, (size_t)(want - *len) * sizeof(long long));
    memset(z + *len, 0, (size_t)(want - *len) * sizeof(long long));
    *len = want;
    return 0;
}

/* Adds one object of ``size`` bytes to ``slot``'s share of this call. */
static int
tally(Walk *w, Py_ssize_t slot, long long size)
{
    if (grow_tallies(&w->add_counts, &w->add_sizes, &w->add_len, slot, 64) < 0)
        return -1;
    /* 0 <= size <= 2**48: only a sum can overflow; the Python loop's array('q') raises
     * OverflowError there too. */
    if (w->add_sizes[slot] > LLONG_MAX - size) {
        PyErr_SetString(PyExc_OverflowError, "census byte total out of range");
        return -1;
    }
    if (w->add_counts[slot] == 0) {
        if (w->n_touched == w->touched_cap) {
            Py_ssize_t cap = w->touched_cap ? w->touched_cap * 2 : 64;
            Py_ssize_t *grown = PyMem_Realloc(w->touched, (size_t)cap * sizeof(Py_ssize_t));
            if (grown == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            w->touched = grown;
            w->touched_cap = cap;
        }
        w->touched[w->n_touched++] = slot;
    }
    w->add_counts[slot] += 1;
    w->add_sizes[slot] += size;
    return 0;
}

/* array[slot] += add, as the Python loop does it (OverflowError past int64). */
static int
array_add(PyObject *array, Py_ssize_t slot, long long add)
{
    PyObject *old = PySequence_GetItem(array, slot);
    if (old == NULL)
        return -1;
    long long value = PyLong_AsLongLong(old);
    Py_DECREF(old);
    if (value == -1 && PyErr_Occurred())
        return -1;
    if ((add > 0 && value > LLONG_MAX - add) || (add < 0 && value < LLONG_MIN - add)) {
        PyErr_SetString(PyExc_OverflowError, "census total out of range");
        return -1;
    }
    PyObject *sum = PyLong_FromLongLong(value + add);
    if (sum == NULL)
        return -1;
    int failed = PySequence_SetItem(array, slot, sum);
    Py_DECREF(sum);
    return failed;
}

/* Writes this call's share into counts and sizes: the slots it touched only (a big
 * program has thousands of types; a call, one per owner, meets a few). */
static int
flush_tallies(Walk *w)
{
    while (w->n_touched > 0) {
        Py_ssize_t slot = w->touched[w->n_touched - 1];
        if (w->add_counts[slot] == 0) {
            w->n_touched--;
            continue;
        }
        if (slot >= PyObject_Length(w->counts_obj) || slot >= PyObject_Length(w->sizes_obj)) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_IndexError, "type slot out of range");
            return -1;
        }
        if (array_add(w->counts_obj, slot, w->add_counts[slot]) < 0
            || array_add(w->sizes_obj, slot, w->add_sizes[slot]) < 0)
            return -1;
        w->add_counts[slot] = w->add_sizes[slot] = 0;
        w->n_touched--;
    }
    return 0;
}

static int
check_array(PyObject *op)
{
    if (Py_TYPE(op) == (PyTypeObject *)array_type) {
        PyObject *code = PyObject_GetAttrString(op, "typecode");
        if (code == NULL)
            return -1;
        int q = PyUnicode_Check(code) && PyUnicode_CompareWithASCIIString(code, "q") == 0;
        Py_DECREF(code);
        if (q)
            return 0;
    }
    PyErr_SetString(PyExc_TypeError, "counts and sizes must be array('q')");
    return -1;
}

/* -- referents ------------------------------------------------------------------------- */

/* Containers with more entries than this are read in slices: reading one whole (its
 * tp_traverse, a reference to each referent) would be one step as long as the container
 * is big, and a buffer as big. */
#define BIG_CONTAINER 4096

static int
is_big(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    if (tp == &PyList_Type)
        return PyList_Size(op) > BIG_CONTAINER;
    if (tp == &PyTuple_Type)
        return PyTuple_Size(op) > BIG_CONTAINER;
    if (tp == &PyDict_Type)
        return PyDict_Size(op) > BIG_CONTAINER / 2;
    if (tp == &PySet_Type || tp == &PyFrozenSet_Type)
        return PySet_Size(op) > BIG_CONTAINER;
    return 0;
}

/* Without _PySet_NextEntry: a set's tp_traverse, skipping the entries before ``pos`` and
 * stopping after ``want`` (each slice then costs the entries before it too). */
typedef struct {
    Refs *r;
    Py_ssize_t skip;
    Py_ssize_t want;
    Py_ssize_t got;
} SetSlice;

static int
visit_set_slice(PyObject *op, void *arg)
{
    SetSlice *s = (SetSlice *)arg;
    if (op == NULL)
        return 0;
    if (s->skip > 0) {
        s->skip--;
        return 0;
    }
    if (s->got >= s->want)
        return 1;  /* stops the traversal */
    if (refs_push(s->r, op) < 0)
        return -1;
    s->got++;
    return 0;
}

/* The next slice of r->cursor's referents (at most about ``want``) into r: a list's or
 * tuple's items, a dict's keys and values, a set's keys (what tp_traverse visits, plus a
 * dict's str keys, as referents_of). 0 when the container is done, -1 on error.
 *
 * Bounds are read again at every step: code run while the previous slice was claimed may
 * have changed the container (PyDict_Next and _PySet_NextEntry check their position
 * against the table as it is now). Such a change can make a slice skip or repeat an entry;
 * entries read this way are always marked, so a repeat is not counted twice. */
static Py_ssize_t
read_slice(Refs *r, Py_ssize_t want)
{
    PyObject *c = r->cursor;
    PyTypeObject *tp = Py_TYPE(c);
    Py_ssize_t got = 0;
    if (tp == &PyList_Type || tp == &PyTuple_Type) {
        int list = tp == &PyList_Type;
        while (got < want) {
            if (r->pos >= (list ? PyList_Size(c) : PyTuple_Size(c)))
                break;
            PyObject *item = list ? PyList_GetItem(c, r->pos) : PyTuple_GetItem(c, r->pos);
            r->pos++;
            if (item == NULL) {
                PyErr_Clear();
                continue;
            }
            if (refs_push(r, item) < 0)
                return -1;
            got++;
        }
    }
    else if (tp == &PyDict_Type) {
        PyObject *key, *value;
        while (got < want && PyDict_Next(c, &r->pos, &key, &value)) {
            /* Borrowed from the dict: pushed (a strong reference) before anything runs. */
            if (refs_push(r, key) < 0 || refs_push(r, value) < 0)
                return -1;
            got += 2;
        }
    }
    else if (use_set_next != NULL) {
        PyObject *key;
        Py_hash_t hash;
        while (got < want && use_set_next(c, &r->pos, &key, &hash)) {
            if (refs_push(r, key) < 0)
                return -1;
            got++;
        }
    }
    else {
        traverseproc traverse = (traverseproc)PyType_GetSlot(tp, Py_tp_traverse);
        if (traverse == NULL)
            return PyErr_Occurred() ? -1 : 0;
        SetSlice s = {r, r->pos, want, 0};
        int stopped = traverse(c, visit_set_slice, &s);
        if (stopped < 0 || PyErr_Occurred())
            return -1;
        r->pos += s.got;
        got = s.got;
    }
    return got;
}

/* A wide container's place in the walk, on a stack of them: the walk claims a slice of its
 * entries (pushing the non-leaves on ``stack``), walks what that slice pushed, then comes back
 * for the next slice. ``stack`` then holds a slice's non-leaves per wide container being read,
 * not one reference per entry (a 2.3M-item list of objects: 18 MB of list in the target).
 * ``cursor`` is an exact big list, tuple, dict or set, read in place (read_slice); anything
 * else wide is read whole by its tp_traverse once, into ``held``, whose entries are handed out
 * a slice at a time (held.items[held.next:] are still owned). ``base``: the length of
 * ``stack`` when it was entered; what lies above is what its slices pushed. */
typedef struct {
    PyObject *cursor;
    Py_ssize_t pos;
    Refs held;
    Py_ssize_t base;
} Frame;

/* What a call leaves for the next (in ``pending``): the referents it had not finished and the
 * wide containers it is inside. */
typedef struct {
    Refs r;
    Frame *frames;
    Py_ssize_t depth, cap;
} Pending;

/* Entries per slice of a wide container (fewer when the call's budget is nearly spent): what
 * ``stack`` gains per frame, at most (128 KiB). Not much smaller: without _PySet_NextEntry a
 * set's slice traverses the entries before it too. */
#define SLICE 16384

static void
frame_release(Frame *f)
{
    /* Releasing a reference can run a destructor; f is emptied first. */
    PyObject *cursor = f->cursor;
    Refs held = f->held;
    memset(f, 0, sizeof(*f));
    for (Py_ssize_t i = held.next; i < held.len; i++)
        Py_DECREF(held.items[i]);
    PyMem_Free(held.items);
    Py_XDECREF(cursor);
}

static void
frames_free(Pending *p)
{
    while (p->depth > 0) {
        p->depth--;
        frame_release(&p->frames[p->depth]);
    }
    PyMem_Free(p->frames);
    p->frames = NULL;
    p->cap = 0;
}

static Frame *
frame_push(Pending *p, Py_ssize_t base)
{
    if (p->depth == p->cap) {
        if (p->cap > PY_SSIZE_T_MAX / 2 / (Py_ssize_t)sizeof(Frame)) {
            PyErr_NoMemory();
            return NULL;
        }
        Py_ssize_t cap = p->cap ? p->cap * 2 : 8;
        Frame *frames = PyMem_Realloc(p->frames, (size_t)cap * sizeof(Frame));
        if (frames == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        p->frames = frames;
        p->cap = cap;
    }
    Frame *f = &p->frames[p->depth++];
    memset(f, 0, sizeof(*f));
    f->base = base;
    return f;
}

/* The next slice of frame ``f`` (at most ``want`` entries) into r, which is empty: read from
 * its container, or handed over from what it holds. 0 when it is done, -1 on error. */
static Py_ssize_t
frame_slice(Frame *f, Refs *r, Py_ssize_t want)
{
    if (f->cursor != NULL) {
        r->cursor = f->cursor;  /* borrowed for the read: the frame holds it */
        r->pos = f->pos;
        Py_ssize_t got = read_slice(r, want);
        f->pos = r->pos;
        r->cursor = NULL;
        return got;
    }
    Refs *held = &f->held;
    Py_ssize_t got = held->len - held->next < want ? held->len - held->next : want;
    for (Py_ssize_t k = 0; k < got; k++) {
        if (refs_push(r, held->items[held->next]) < 0)
            return -1;
        /* r holds it now: the frame's reference is r's. */
        Py_DECREF(held->items[held->next]);
        held->next++;
    }
    return got;
}

/* The destructor of a pending capsule: the caller dropped the rest of the walk. */
static void
pending_free(PyObject *capsule)
{
    Pending *held = (Pending *)PyCapsule_GetPointer(capsule, PENDING_NAME);
    if (held == NULL)
        return;
    refs_free(&held->r);
    frames_free(held);
    PyMem_Free(held);
}

static int
visit_referent(PyObject *op, void *arg)
{
    if (op == NULL)  /* a careless tp_traverse; Py_VISIT never passes NULL */
        return 0;
    return refs_push((Refs *)arg, op);
}

/* What a code object holds (its constants, names, line and exception tables, names and file
 * name), read through the code type's member descriptors (sizes._CODE_MEMBERS, the same
 * rule): each read returns the object the field holds, never a new one. -1 on error. */
static int
code_referents(PyObject *code, Refs *r)
{
    for (Py_ssize_t k = 0; k < PyTuple_Size(code_members); k++) {
        PyObject *value = PyObject_GetAttr(code, PyTuple_GetItem(code_members, k));
        if (value == NULL) {
            PyErr_Clear();
            continue;
        }
        int failed = value != Py_None && refs_push(r, value) < 0;
        Py_DECREF(value);
        if (failed)
            return -1;
    }
    return 0;
}

/* gc.get_referents(obj), plus a dict's keys (a code object's members), into r. -1 on error. */
static int
referents_of(Walk *w, PyObject *obj, Refs *r)
{
    if ((PyObject *)Py_TYPE(obj) == code_type)
        return code_referents(obj, r);
    if (PyModule_Check(obj)) {
        /* A module's dict only, never its tp_traverse: an extension's m_traverse may visit
         * freed memory (3.12's _asyncio visits its FutureIter free list, CPython gh-122695),
         * and a reference to a freed object would free it twice (census._referents). */
        PyObject *dict = PyModule_GetDict(obj);  /* borrowed */
        return dict == NULL ? 0 : refs_push(r, dict);
    }
    TypeInfo *info = type_info(w, Py_TYPE(obj));
    if (info == NULL)
        return -1;
    /* gc.get_referents: objects the collector tracks (PyObject_IS_GC), by their type's
     * tp_traverse. Read before anything runs: info may be evicted below. */
    unsigned long flags = info->flags;
    traverseproc traverse = info->traverse;
    if ((flags & Py_TPFLAGS_HAVE_GC) && traverse != NULL
        && (info->is_gc == NULL || info->is_gc(obj))) {
        if (traverse(obj, visit_referent, r))
            return -1;
    }
    if (flags & Py_TPFLAGS_DICT_SUBCLASS) {
        /* dict.keys(obj): the built-in view, never a subclass's keys() */
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        while (PyDict_Next(obj, &pos, &key, &value)) {
            if (refs_push(r, key) < 0)
                return -1;
        }
    }
    return 0;
}

static inline int
is_leaf(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    return tp == &PyUnicode_Type || tp == &PyBytes_Type || tp == &PyLong_Type
        || tp == &PyFloat_Type || tp == &PyBool_Type || tp == &PyComplex_Type
        || op == Py_None;
}

/* How ``tp`` is sized natively: its code in w->native (census_walk.py: 1 buffers and hidden
 * references, handed back in ``found``; 2 or 3 a 3.11/3.12 or 3.13 instance's attribute
 * values), 0 if none, -1 on error. The lookup hashes an int, never the type: no code runs. */
static long
native_for(Walk *w, PyTypeObject *tp)
{
    TypeInfo *info = type_info(w, tp);
    if (info == NULL)
        return -1;
    if (info->native < 0) {
        PyObject *key = PyLong_FromVoidPtr((void *)tp);
        if (key == NULL)
            return -1;
        PyObject *value = PyDict_GetItemWithError(w->native, key);  /* borrowed */
        Py_DECREF(key);
        long code = 0;
        if (value != NULL) {
            code = PyLong_Check(value) ? PyLong_AsLong(value) : 0;
            if (code < 0 || code > 3)
                code = 0;
        }
        if (PyErr_Occurred())
            return -1;
        info = type_info(w, tp);  /* evicted meanwhile? looked up again */
        if (info == NULL)
            return -1;
        info->native = code;
    }
    return info->native;
}

typedef struct {
    Py_ssize_t n;
    PyObject *last;
} AttrCount;

static int
visit_attr(PyObject *op, void *arg)
{
    AttrCount *c = (AttrCount *)arg;
    if (op != NULL && !PyType_Check(op)) {
        c->n++;
        c->last = op;
    }
    return 0;
}

/* The bytes of a 3.11+ instance's attribute values (sizes.instance_values_bytes, the same
 * estimate): its referents but types, plus 2; none when its dict was made (3.11/3.12). */
static long long
instance_values_bytes(PyObject *obj, traverseproc traverse, long code)
{
    AttrCount c = {0, NULL};
    if (traverse == NULL || traverse(obj, visit_attr, &c) != 0)
        return 0;
    if (code == 2 && c.n == 1 && PyDict_CheckExact(c.last))
        return 0;
    long long size = (long long)c.n + 2;
    if (code == 3)
        return ((size + 7) & ~7LL) + 8 + 8 * size;
    return ((size + 2 + 7) & ~7LL) + 8 * size;
}

/* A referent held by the container and the referents buffer only. */
#define ONLY_ONE_REFERENCE 2

/* Claim r->items[r->next:] until the budget runs out; returns how many it went through
 * (r->next is then where it stopped), -1 on error. */
static Py_ssize_t
claim_referents(Walk *w, PyObject *stack, Refs *r, int resumed, Py_ssize_t budget,
                long long *objects, long long *nbytes)
{
    Py_ssize_t start = r->next;
    Py_ssize_t stop = r->len - start > budget ? start + budget : r->len;
    for (Py_ssize_t i = start; i < stop; i++) {
        PyObject *ref = r->items[i];  /* owned by r: alive whatever __sizeof__ does */
        int leaf = is_leaf(ref);
        /* A leaf held once by its container cannot be met again: it is counted without a
         * mark. Not in the rest of a split container: a leaf listed twice (a dict's non-str
         * key) may have had its first listing, and its mark, in the part already done. */
        if (!(leaf && !resumed && Py_REFCNT(ref) <= ONLY_ONE_REFERENCE)) {
            uintptr_t address = (uintptr_t)ref;
            unsigned char *region = region_for(w, address);
            if (region == NULL)
                return -1;
            size_t index = (size_t)((address & 0xFFFFF) >> 7);
            unsigned char bit = (unsigned char)(1u << ((address >> 4) & 7));
            if (region[index] & bit)
                continue;
            region[index] |= bit;
        }
        /* The type as it was before __sizeof__ ran (as the Python loop's ``tp``): an
         * extension's C __sizeof__ could assign ref.__class__ and free the old class. The
         * cache entry holds it; a local reference keeps it if the entry is evicted. */
        TypeInfo *info = type_info(w, Py_TYPE(ref));
        if (info == NULL)
            return -1;
        PyTypeObject *tp = info->tp;
        Py_INCREF(tp);
        long long size;
        Py_ssize_t slot = -1;
        long native = 0;
        if (size_of(ref, info, &size) == 0) {
            info = type_info(w, tp);
            slot = info == NULL ? -1 : slot_for(w, info);
            /* Objects of natively sized types go back to the caller too (``found``), which
             * adds their buffers and the references gc does not show (census_walk.py); an
             * instance's attribute values are added here. */
            if (slot >= 0 && !leaf && w->native != NULL && (native = native_for(w, tp)) < 0)
                slot = -1;
            if (native >= 2) {
                /* The type's traverse (subtype_traverse: it runs no Python code). */
                info = type_info(w, tp);
                if (info == NULL)
                    slot = -1;
                else
                    size += instance_values_bytes(ref, info->traverse, native);
                native = 0;
            }
        }
        Py_DECREF(tp);
        if (slot < 0 || tally(w, slot, size) < 0)
            return -1;
        if (*nbytes > LLONG_MAX - size) {
            PyErr_SetString(PyExc_OverflowError, "census byte total out of range");
            return -1;
        }
        *objects += 1;
        *nbytes += size;
        if (!leaf && PyList_Append(stack, ref) < 0)
            return -1;
        if (native == 1 && PyList_Append(w->found, ref) < 0)
            return -1;
    }
    r->next = stop;
    return stop - start;
}

PyDoc_STRVAR(claim_doc,
"claim(stack, pending, regions, type_index, new_slot, counts, sizes, limit[, native, found,\n"
"      session])\n"
"    -> (objects, bytes)\n\n"
"Walk from the containers on stack, claiming what is not yet marked in regions; stop\n"
"after about limit units of work (at least one). The rest of the walk stays on stack, and\n"
"what it was in the middle of (wide containers) in pending ([capsule], else empty). Claimed\n"
"objects whose type's id is a key of the dict native are appended to the list found.");

/* -- a session: one census's caches, kept between its calls ------------------------------ */

#define SESSION_NAME "leakhound._walk.session"

static void
session_free(PyObject *capsule)
{
    Walk *w = (Walk *)PyCapsule_GetPointer(capsule, SESSION_NAME);
    if (w == NULL) {
        PyErr_Clear();
        return;
    }
    walk_release(w);
    PyMem_Free(w);
}

PyDoc_STRVAR(session_doc,
"session() -> capsule\n\n"
"Caches for claim() kept from one call to the next (pass it as claim's last argument): the\n"
"types met (their tally slot, how they are sized) and the bitmap regions. The census calls\n"
"claim() once per owner, tens of thousands of times on a big program, each meeting a few\n"
"types: looked up anew at every call, they were most of the call's cost. The caches hold\n"
"the types and regions until the capsule is released (the census's end); a call with other\n"
"regions, type index or native dict starts them anew.");

static PyObject *
session(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    Walk *w = PyMem_Calloc(1, sizeof(Walk));
    if (w == NULL)
        return PyErr_NoMemory();
    PyObject *capsule = PyCapsule_New(w, SESSION_NAME, session_free);
    if (capsule == NULL)
        PyMem_Free(w);
    return capsule;
}

/* Points the session's walk at this call's arguments: caches filled for other dicts go. */
static void
session_bind(Walk *w, PyObject *regions, PyObject *type_index, PyObject *native)
{
    if (w->for_regions == regions && w->for_type_index == type_index && w->for_native == native)
        return;
    walk_release(w);  /* also drops the for_ references */
    Py_INCREF(regions);
    Py_INCREF(type_index);
    Py_XINCREF(native);
    w->for_regions = regions;
    w->for_type_index = type_index;
    w->for_native = native;
}

/* After an error: what this call added but did not write is dropped (a session's walk
 * would otherwise write it with the next call's). */
static void
tallies_discard(Walk *w)
{
    for (Py_ssize_t k = 0; k < w->n_touched; k++)
        w->add_counts[w->touched[k]] = w->add_sizes[w->touched[k]] = 0;
    w->n_touched = 0;
}

/* The end of a call: a one-call walk lets go of everything, a session's keeps its caches
 * and forgets this call's borrowed arguments. */
static void
claim_done(Walk *w, int in_session)
{
    if (!in_session) {
        walk_release(w);
        return;
    }
    walk_release_call(w);
    w->regions = w->type_index = w->new_slot = w->counts_obj = w->sizes_obj = NULL;
    w->native = w->found = NULL;
}

static PyObject *
claim(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *stack, *pending, *container = NULL, *native = Py_None, *found = Py_None;
    PyObject *regions, *type_index, *new_slot, *counts_obj, *sizes_obj, *capsule = Py_None;
    Py_ssize_t limit;
    Walk local;
    Walk *w = &local;
    Pending p;
    memset(&p, 0, sizeof(p));
    memset(&local, 0, sizeof(local));
    if (!PyArg_ParseTuple(args, "O!O!O!O!OOOn|OOO:claim", &PyList_Type, &stack, &PyList_Type,
                          &pending, &PyDict_Type, &regions, &PyDict_Type, &type_index,
                          &new_slot, &counts_obj, &sizes_obj, &limit, &native, &found, &capsule))
        return NULL;
    if (native != Py_None) {
        if (!PyDict_CheckExact(native) || !PyList_CheckExact(found)) {
            PyErr_SetString(PyExc_TypeError, "native must be a dict and found a list");
            return NULL;
        }
    }
    if (capsule != Py_None) {
        if (!PyCapsule_IsValid(capsule, SESSION_NAME)) {
            PyErr_SetString(PyExc_TypeError, "session must be what session() returned, or None");
            return NULL;
        }
        w = (Walk *)PyCapsule_GetPointer(capsule, SESSION_NAME);
        if (w == NULL)
            return NULL;
        if (w->regions != NULL) {  /* set only while a call runs */
            PyErr_SetString(PyExc_RuntimeError, "claim() session in use by another call");
            return NULL;
        }
        session_bind(w, regions, type_index, native != Py_None ? native : NULL);
    }
    w->regions = regions;
    w->type_index = type_index;
    w->new_slot = new_slot;
    w->counts_obj = counts_obj;
    w->sizes_obj = sizes_obj;
    w->native = native != Py_None ? native : NULL;
    w->found = native != Py_None ? found : NULL;
    if (limit < 1)
        limit = 1;  /* every call makes progress, and never drops what pending held */
    if (check_array(counts_obj) < 0 || check_array(sizes_obj) < 0)
        return NULL;
    long long objects = 0, nbytes = 0;
    Py_ssize_t work = 0;
    int resumed = 0;
    if (PyList_Size(pending) == 1
        && PyCapsule_IsValid(PyList_GetItem(pending, 0), PENDING_NAME)) {
        Pending *held = (Pending *)PyCapsule_GetPointer(PyList_GetItem(pending, 0), PENDING_NAME);
        if (held == NULL)
            goto error;
        /* Ours now; the capsule, emptied, frees nothing of it. */
        p = *held;
        memset(held, 0, sizeof(*held));
        if (PyList_SetSlice(pending, 0, 1, NULL) < 0)
            goto error;
        /* Its container may be gone by now: every referent left is marked. */
        resumed = 1;
    }
    else if (PyList_Size(pending) != 0) {
        PyErr_SetString(PyExc_TypeError, "pending must be what claim() left in it, or []");
        goto error;
    }
    Refs *r = &p.r;
    while (work < limit) {
        if (r->next < r->len) {
            Py_ssize_t done = claim_referents(w, stack, r, resumed, limit - work, &objects, &nbytes);
            if (done < 0)
                goto error;
            work += done;
            continue;
        }
        refs_clear(r);
        Py_CLEAR(container);
        Py_ssize_t n = PyList_Size(stack);
        if (n < 0)
            goto error;
        if (p.depth > 0 && n <= p.frames[p.depth - 1].base) {
            /* What the wide container's last slice pushed is walked: its next slice. */
            Frame *f = &p.frames[p.depth - 1];
            Py_ssize_t want = limit - work < SLICE ? limit - work : SLICE;
            Py_ssize_t got = frame_slice(f, r, want > 1 ? want : 1);
            if (got < 0)
                goto error;
            if (got == 0) {
                p.depth--;
                frame_release(&p.frames[p.depth]);
            }
            /* Entries of a container read in parts are always marked: one the target
             * moved between two slices, or listed twice, is not counted twice. */
            resumed = 1;
            continue;
        }
        if (n == 0)
            break;
        /* Held until its referents are claimed, as the Python loop's ``obj``: were the stack
         * its last holder, its leaves would otherwise look held once. */
        container = PyList_GetItem(stack, n - 1);
        if (container == NULL)
            goto error;
        Py_INCREF(container);
        if (PyList_SetSlice(stack, n - 1, n, NULL) < 0)
            goto error;
        work += 1;
        if (is_big(container)) {
            /* Read in slices, in place (read_slice). */
            Frame *f = frame_push(&p, n - 1);
            if (f == NULL)
                goto error;
            f->cursor = container;  /* the frame's reference now */
            container = NULL;
            continue;
        }
        if (referents_of(w, container, r) < 0)
            goto error;
        resumed = 0;
        if (r->len > SLICE) {
            /* Wide, and not a container read in place: its referents go to a frame, handed
             * out a slice at a time, so that ``stack`` does not take them all at once. */
            Frame *f = frame_push(&p, n - 1);
            if (f == NULL)
                goto error;
            f->held = *r;
            memset(r, 0, sizeof(*r));
        }
    }
    Py_CLEAR(container);
    if (r->next == r->len)
        refs_free(r);
    if (r->next < r->len || p.depth > 0) {
        /* Out of budget inside a container: the caller passes the rest back. */
        Pending *held = PyMem_Malloc(sizeof(Pending));
        if (held == NULL) {
            PyErr_NoMemory();
            goto error;
        }
        *held = p;
        PyObject *capsule = PyCapsule_New(held, PENDING_NAME, pending_free);
        if (capsule == NULL) {
            PyMem_Free(held);  /* p still owns the references */
            goto error;
        }
        memset(&p, 0, sizeof(p));  /* the capsule owns them now */
        int failed = PyList_Append(pending, capsule) < 0;
        Py_DECREF(capsule);
        if (failed)
            goto error;
    }
    frames_free(&p);  /* their buffer, when the walk is done */
    if (flush_tallies(w) < 0)
        goto error;
    claim_done(w, w != &local);
    return Py_BuildValue("LL", objects, nbytes);

error: {
    /* Dropping references can run destructors: keep the error aside meanwhile. */
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    refs_free(&p.r);
    frames_free(&p);
    Py_CLEAR(container);
    tallies_discard(w);
    claim_done(w, w != &local);
    PyErr_Restore(type, value, traceback);
    return NULL;
}
}

PyDoc_STRVAR(use_private_doc,
"use_private(on) -> bool\n\n"
"Use the interpreter's faster private helpers where it exports them (the default), or the\n"
"stable ABI only (for tests). Returns whether all three are in use now.");

static PyObject *
use_private(PyObject *module, PyObject *arg)
{
    int on = PyObject_IsTrue(arg);
    if (on < 0)
        return NULL;
    use_getsizeof = on ? found_getsizeof : NULL;
    use_type_lookup = on ? found_type_lookup : NULL;
    use_set_next = on ? found_set_next : NULL;
    int all = use_getsizeof != NULL && use_type_lookup != NULL && use_set_next != NULL;
    PyObject *mode = PyUnicode_FromString(all ? "abi3+private" : "abi3");
    if (mode == NULL)
        return NULL;
    int failed = PyObject_SetAttrString(module, "mode", mode);
    Py_DECREF(mode);
    if (failed)
        return NULL;
    return PyBool_FromLong(all);
}

PyDoc_STRVAR(sizeof_counts_referents_doc,
"sizeof_counts_referents(descriptors) -> None\n\n"
"The C __sizeof__ methods (a tuple of method descriptors) that count an object\n"
"gc.get_referents also lists (sizes.SIZEOF_COUNTS_REFERENTS): a type whose __sizeof__ is one\n"
"of them is sized by object.__sizeof__ from the next walk on, its referent counted once.");

static PyObject *
sizeof_counts_referents(PyObject *module, PyObject *arg)
{
    if (!PyTuple_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "sizeof_counts_referents: a tuple of method descriptors");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyTuple_Size(arg); i++) {
        if (Py_TYPE(PyTuple_GetItem(arg, i)) != &PyMethodDescr_Type) {
            PyErr_SetString(PyExc_TypeError, "sizeof_counts_referents: a tuple of method descriptors");
            return NULL;
        }
    }
    PyObject *old = sizeof_counts_refs;
    Py_INCREF(arg);
    sizeof_counts_refs = arg;
    Py_XDECREF(old);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(tracked_objects_doc,
"tracked_objects(get_objects, counts=None, kinds=None) -> list\n\n"
"gc.get_objects()'s list (``get_objects`` is that function) without the tuples and frozensets\n"
"something else holds once: any of them may be still being built by a thread the GIL left in\n"
"the middle (tuple(generator), PySet_Add into a new frozenset), and CPython grows or fills such\n"
"an object only while its builder holds its one reference: held by this list across a GIL\n"
"yield it makes the builder's next step raise SystemError in the target's code (measured:\n"
"`tuple(x for x in range(2000))` in a thread of the target failed on every inspection). Listed\n"
"and filtered in this one call: no Python code runs in between, so no other thread does.\n"
"``counts`` and ``kinds`` (dicts, optional): what is left out, counted by id(type) into\n"
"``counts`` and its type recorded in ``kinds`` (a census of types still counts it).");

static int
built_by_someone(PyObject *obj)
{
    /* Our list's reference and one more: the builder's, if it is being built. */
    return (PyTuple_Check(obj) || PyFrozenSet_Check(obj)) && Py_REFCNT(obj) == 2;
}

/* One more of ``obj``'s type in counts[id(type)], kinds[id(type)] = type. Allocates ints
 * only (never a tracked object, which could start a collection); a type is keyed by its
 * address: hashing a class may run its metaclass's __hash__. */
static int
tally_left_out(PyObject *counts, PyObject *kinds, PyObject *obj)
{
    PyObject *tp = (PyObject *)Py_TYPE(obj);
    PyObject *key = PyLong_FromVoidPtr(tp);
    if (key == NULL)
        return -1;
    PyObject *had = PyDict_GetItemWithError(counts, key);  /* borrowed */
    long long n = 0;
    if (had != NULL)
        n = PyLong_AsLongLong(had);
    PyObject *value = (had != NULL || !PyErr_Occurred()) ? PyLong_FromLongLong(n + 1) : NULL;
    int failed = value == NULL || PyDict_SetItem(counts, key, value) < 0
                 || (had == NULL && PyDict_SetItem(kinds, key, tp) < 0);
    Py_XDECREF(value);
    Py_DECREF(key);
    return failed ? -1 : 0;
}

static PyObject *
tracked_objects(PyObject *module, PyObject *args)
{
    PyObject *get_objects, *counts = NULL, *kinds = NULL;
    if (!PyArg_ParseTuple(args, "O|O!O!", &get_objects, &PyDict_Type, &counts, &PyDict_Type, &kinds))
        return NULL;
    if ((counts == NULL) != (kinds == NULL)) {
        PyErr_SetString(PyExc_TypeError, "tracked_objects: counts and kinds, or neither");
        return NULL;
    }
    PyObject *objects = PyObject_CallObject(get_objects, NULL);
    if (objects == NULL)
        return NULL;
    if (!PyList_Check(objects)) {
        Py_DECREF(objects);
        PyErr_SetString(PyExc_TypeError, "tracked_objects: get_objects() did not return a list");
        return NULL;
    }
    /* Compacted in place: nothing is freed (what is dropped keeps its other reference, what
     * is moved its place further down until that place is overwritten or cut), so nothing
     * runs, and nothing is allocated that could start a collection. */
    Py_ssize_t n = PyList_Size(objects), kept = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *obj = PyList_GetItem(objects, i);
        if (built_by_someone(obj)) {
            if (counts != NULL && tally_left_out(counts, kinds, obj) < 0) {
                Py_DECREF(objects);  /* (the part already moved is referenced twice: freed alike) */
                return NULL;
            }
            continue;
        }
        if (kept != i) {
            Py_INCREF(obj);
            PyList_SetItem(objects, kept, obj);
        }
        kept++;
    }
    if (kept < n && PyList_SetSlice(objects, kept, n, NULL) < 0) {
        Py_DECREF(objects);
        return NULL;
    }
    return objects;
}

PyDoc_STRVAR(frame_locals_doc,
"frame_locals(frame, frame_type, code, nlocals, f_frame_offset, code_offset, frame_obj_offset,\n"
"             localsplus_offset) -> list or None\n\n"
"The first ``nlocals`` fast locals of a 3.11+ frame (None for an unbound one), read from its\n"
"interpreter frame in this one call, holding the GIL: the frame's thread cannot move\n"
"meanwhile. Never f_locals, which on a running 3.11/3.12 frame writes into it. None when the\n"
"layout does not match: the interpreter frame must point back at ``frame`` and ``code``\n"
"(census_roots.py gives the offsets per version). Runs no Python code.");

static PyObject *
frame_locals(PyObject *module, PyObject *args)
{
    PyObject *frame, *frame_type, *code;
    Py_ssize_t nlocals, f_frame_off, code_off, obj_off, plus_off;
    if (!PyArg_ParseTuple(args, "OOOnnnnn", &frame, &frame_type, &code, &nlocals, &f_frame_off,
                          &code_off, &obj_off, &plus_off))
        return NULL;
    if ((PyObject *)Py_TYPE(frame) != frame_type || nlocals < 0 || nlocals > 65536
        || f_frame_off < 16 || f_frame_off > 64 || code_off < 0 || code_off > 64 || obj_off < 0
        || obj_off > 64 || plus_off < 64 || plus_off > 128
        || (f_frame_off | code_off | obj_off | plus_off) % (Py_ssize_t)sizeof(void *)) {
        PyErr_SetString(PyExc_ValueError, "frame_locals: not a frame, or offsets out of range");
        return NULL;
    }
    /* Allocated before the frame is read: an allocation can run a collection, and with it
     * finalizers that may let the frame's thread run. Nothing below allocates. */
    PyObject *out = PyList_New(nlocals);
    if (out == NULL)
        return NULL;
    char *iframe = *(char **)((char *)frame + f_frame_off);
    if (iframe == NULL || *(PyObject **)(iframe + code_off) != code
        || *(PyObject **)(iframe + obj_off) != frame) {
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    PyObject **plus = (PyObject **)(iframe + plus_off);
    for (Py_ssize_t i = 0; i < nlocals; i++) {
        PyObject *value = plus[i] != NULL ? plus[i] : Py_None;
        Py_INCREF(value);
        PyList_SetItem(out, i, value);
    }
    return out;
}

/* The object graph's walk (graph.py's twin): its own file, sharing the helpers above. */
#include "_graph_walk.c"

static PyMethodDef walk_methods[] = {
    GRAPH_METHODS
    {"claim", claim, METH_VARARGS, claim_doc},
    {"session", session, METH_NOARGS, session_doc},
    {"use_private", use_private, METH_O, use_private_doc},
    {"frame_locals", frame_locals, METH_VARARGS, frame_locals_doc},
    {"tracked_objects", tracked_objects, METH_VARARGS, tracked_objects_doc},
    {"sizeof_counts_referents", sizeof_counts_referents, METH_O, sizeof_counts_referents_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef walk_module = {
    PyModuleDef_HEAD_INIT, "_walk",
    "The census's inner walk in C (optional; census.py has the same loop in Python).",
    -1, walk_methods, NULL, NULL, NULL, NULL,
};

/* type.__dict__[name]: a C descriptor of type's own. */
static PyObject *
type_descr(const char *name)
{
    PyObject *proxy = PyObject_GetAttrString((PyObject *)&PyType_Type, "__dict__");
    if (proxy == NULL)
        return NULL;
    PyObject *descr = PyMapping_GetItemString(proxy, name);
    Py_DECREF(proxy);
    return descr;
}

static PyObject *
import_attr(const char *module_name, const char *name)
{
    PyObject *module = PyImport_ImportModule(module_name);
    if (module == NULL)
        return NULL;
    PyObject *attr = PyObject_GetAttrString(module, name);
    Py_DECREF(module);
    return attr;
}

/* code_type and code_members: of the names below, those the code type has as member
 * descriptors (3.10: the bytecode and the names tuples too; 3.11+ expose those through
 * getters that build new objects, or in 3.12+ cache them in the code object: not read). */
static int
init_code_members(void)
{
    static const char *names[] = {"co_consts", "co_names", "co_filename", "co_name", "co_qualname",
                                  "co_linetable", "co_exceptiontable", "co_code", "co_varnames",
                                  "co_freevars", "co_cellvars"};
    code_type = import_attr("types", "CodeType");
    if (code_type == NULL)
        return -1;
    PyObject *member = PyObject_GetAttrString(code_type, "co_consts");  /* a member on 3.10+ */
    PyObject *found = PyList_New(0);
    if (member == NULL || found == NULL) {
        Py_XDECREF(member);
        Py_XDECREF(found);
        return -1;
    }
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
        PyObject *descr = PyObject_GetAttrString(code_type, names[k]);
        if (descr == NULL) {
            PyErr_Clear();
            continue;
        }
        int is_member = Py_TYPE(descr) == Py_TYPE(member);
        Py_DECREF(descr);
        PyObject *name = is_member ? PyUnicode_InternFromString(names[k]) : NULL;
        if (is_member && (name == NULL || PyList_Append(found, name) < 0)) {
            Py_XDECREF(name);
            Py_DECREF(member);
            Py_DECREF(found);
            return -1;
        }
        Py_XDECREF(name);
    }
    Py_DECREF(member);
    code_members = PyList_AsTuple(found);
    Py_DECREF(found);
    return code_members == NULL ? -1 : 0;
}

PyMODINIT_FUNC
PyInit__walk(void)
{
    /* Built against the stable ABI of 3.10: PyType_GetSlot() reads static types from 3.10
     * on only; an older interpreter uses the census's Python loop. */
    PyObject *info = PySys_GetObject("version_info");  /* borrowed */
    PyObject *minor = info == NULL ? NULL : PySequence_GetItem(info, 1);
    PyObject *major = info == NULL ? NULL : PySequence_GetItem(info, 0);
    long ma = major == NULL ? -1 : PyLong_AsLong(major), mi = minor == NULL ? -1 : PyLong_AsLong(minor);
    Py_XDECREF(major);
    Py_XDECREF(minor);
    if (PyErr_Occurred())
        return NULL;
    if (ma != 3 || mi < 10) {
        PyErr_SetString(PyExc_ImportError, "leakhound's compiled walk needs CPython 3.10 or later");
        return NULL;
    }
    if (sizeof_name == NULL) {
        sizeof_name = PyUnicode_InternFromString("__sizeof__");
        if (sizeof_name == NULL)
            return NULL;
        object_sizeof = (PyObject *)&PyBaseObject_Type;
        object_sizeof = PyObject_GetAttrString(object_sizeof, "__sizeof__");
        sys_getsizeof = import_attr("sys", "getsizeof");
        mro_descr = type_descr("__mro__");
        dict_descr = type_descr("__dict__");
        array_type = import_attr("array", "array");
        if (object_sizeof == NULL || sys_getsizeof == NULL || mro_descr == NULL
            || dict_descr == NULL || array_type == NULL || init_code_members() < 0)
            return NULL;
        if (!PyCFunction_Check(sys_getsizeof)) {
            PyErr_SetString(PyExc_ImportError, "sys.getsizeof is not the built-in one");
            return NULL;
        }
        /* Looked up in the process: present in the interpreter's own symbols (python or
         * libpython), with the signatures declared above, in 3.8 to 3.13. */
        found_getsizeof = (getsizeof_fn)dlsym(RTLD_DEFAULT, "_PySys_GetSizeOf");
        found_type_lookup = (type_lookup_fn)dlsym(RTLD_DEFAULT, "_PyType_Lookup");
        found_set_next = (set_next_fn)dlsym(RTLD_DEFAULT, "_PySet_NextEntry");
    }
    PyObject *module = PyModule_Create(&walk_module);
    if (module == NULL)
        return NULL;
    PyObject *on = use_private(module, Py_True);
    if (on == NULL) {
        Py_DECREF(module);
        return NULL;
    }
    Py_DECREF(on);
    /* Code objects' members are read here (referents_of): the census and the graph leave
     * them out of the natively sized types they hand this module (sizes.for_compiled_walk). */
    if (PyModule_AddIntConstant(module, "READS_CODE", 1) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
