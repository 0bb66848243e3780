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
 * One difference, for the target's sake: a big exact list, tuple, dict or set (more than
 * BIG_CONTAINER entries) is not read whole, as gc.get_referents() would (one step as long
 * as the container, and a reference to each of its entries held at once), but a slice per
 * call (read_slice). Its entries are then always marked, so one the target moves between
 * slices is not counted twice.
 *
 * It stops after about ``limit`` units of work (one per container popped and per referent
 * seen) and returns, so the caller's Python loop runs between calls and the interpreter can
 * hand the GIL to the target's main thread: no call holds the GIL for long. The rest of a big
 * container's referents goes back to the caller in ``pending``, as one capsule that owns
 * them (each call then costs its budget, not the container's length). It never runs a
 * collection and runs no code written in Python but a metaclass's __hash__/__eq__ in the
 * type_index lookup (and Python code of the census's own new_slot). That code can run other
 * threads and do anything, so nothing the walk holds across it can go stale: referents are
 * strong references in a buffer only this call sees, the bitmap regions and the tally arrays
 * are held as exported buffers (freed or resized by nobody while held), and every slot is
 * bounds-checked where it is used.
 *
 * Built for the interpreter leakhound is installed with (hatch_build.py); a target on another
 * Python version cannot import it and the census uses the Python loop.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <string.h>

#define REGION_SHIFT 20
#define REGION_BYTES 8192
#define REGION_CACHE 64
#define TYPE_CACHE 64
/* A __sizeof__ larger than this (256 TiB, more than any machine's address space) is not a
 * size: it reads as 0, like a failing one (census.py: _MAX_OBJECT_BYTES). */
#define MAX_OBJECT_BYTES ((size_t)1 << 48)
#define PENDING_NAME "leakhound._walk.pending"

typedef struct {
    PyObject *regions;               /* dict: address >> 20 -> bytearray(8192) */
    uintptr_t region_keys[REGION_CACHE];
    unsigned char *region_bufs[REGION_CACHE];
    Py_buffer region_views[REGION_CACHE];  /* held while cached: region_bufs stay valid */
    PyObject *type_index;            /* dict: type -> slot */
    PyObject *new_slot;              /* callable(type) -> slot, may grow the arrays */
    PyObject *counts_obj, *sizes_obj;
    Py_buffer counts, sizes;
    int have_buffers;
    PyTypeObject *type_keys[TYPE_CACHE];
    Py_ssize_t type_slots[TYPE_CACHE];
    PyObject *sizeof_name;           /* "__sizeof__" */
    PyObject *object_sizeof;         /* object.__sizeof__, borrowed */
} Walk;

static int
get_buffers(Walk *w)
{
    if (PyObject_GetBuffer(w->counts_obj, &w->counts, PyBUF_WRITABLE | PyBUF_FORMAT) < 0)
        return -1;
    if (PyObject_GetBuffer(w->sizes_obj, &w->sizes, PyBUF_WRITABLE | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&w->counts);
        return -1;
    }
    w->have_buffers = 1;
    if (w->counts.itemsize != 8 || w->sizes.itemsize != 8 || w->counts.format == NULL
        || w->sizes.format == NULL || strcmp(w->counts.format, "q") != 0
        || strcmp(w->sizes.format, "q") != 0) {
        PyErr_SetString(PyExc_TypeError, "counts and sizes must be array('q')");
        return -1;
    }
    return 0;
}

static void
release_buffers(Walk *w)
{
    if (w->have_buffers) {
        PyBuffer_Release(&w->counts);
        PyBuffer_Release(&w->sizes);
        w->have_buffers = 0;
    }
}

static void
release_regions(Walk *w)
{
    for (int h = 0; h < REGION_CACHE; h++) {
        if (w->region_bufs[h] != NULL) {
            w->region_bufs[h] = NULL;
            PyBuffer_Release(&w->region_views[h]);
        }
    }
}

/* The bitmap byte for ``address``, creating its region if needed; NULL on error. */
static unsigned char *
region_for(Walk *w, uintptr_t address)
{
    uintptr_t key = address >> REGION_SHIFT;
    size_t h = (size_t)(key % REGION_CACHE);
    if (w->region_bufs[h] != NULL) {
        if (w->region_keys[h] == key)
            return w->region_bufs[h];
        w->region_bufs[h] = NULL;
        PyBuffer_Release(&w->region_views[h]);
    }
    PyObject *pykey = PyLong_FromSize_t((size_t)key);
    if (pykey == NULL)
        return NULL;
    PyObject *region = PyDict_GetItemWithError(w->regions, pykey);  /* borrowed */
    if (region == NULL) {
        if (PyErr_Occurred()) {
            Py_DECREF(pykey);
            return NULL;
        }
        region = PyByteArray_FromStringAndSize(NULL, REGION_BYTES);
        if (region == NULL) {
            Py_DECREF(pykey);
            return NULL;
        }
        memset(PyByteArray_AS_STRING(region), 0, REGION_BYTES);
        int failed = PyDict_SetItem(w->regions, pykey, region);
        Py_DECREF(region);  /* the dict holds it */
        if (failed) {
            Py_DECREF(pykey);
            return NULL;
        }
    }
    Py_DECREF(pykey);
    if (!PyByteArray_CheckExact(region) || PyByteArray_GET_SIZE(region) != REGION_BYTES) {
        PyErr_SetString(PyExc_TypeError, "bitmap regions must be bytearray(8192)");
        return NULL;
    }
    /* An exported buffer holds the bytearray and forbids resizing it: the pointer stays
     * valid whatever code runs before this call returns. */
    if (PyObject_GetBuffer(region, &w->region_views[h], PyBUF_WRITABLE) < 0)
        return NULL;
    w->region_keys[h] = key;
    w->region_bufs[h] = (unsigned char *)w->region_views[h].buf;
    return w->region_bufs[h];
}

/* The tally slot of ``tp`` (the caller checks it against the arrays); -1 on error. */
static Py_ssize_t
slot_for(Walk *w, PyTypeObject *tp)
{
    size_t h = (size_t)(((uintptr_t)tp >> 4) % TYPE_CACHE);
    if (w->type_keys[h] == tp)
        return w->type_slots[h];
    PyObject *slot = PyDict_GetItemWithError(w->type_index, (PyObject *)tp);  /* borrowed */
    Py_ssize_t value;
    if (slot != NULL) {
        value = PyLong_AsSsize_t(slot);
    }
    else {
        if (PyErr_Occurred())
            return -1;
        /* A new type: the callback appends to the arrays, which cannot grow while we hold
         * their buffers. */
        release_buffers(w);
        slot = PyObject_CallOneArg(w->new_slot, (PyObject *)tp);
        if (slot == NULL)
            return -1;
        value = PyLong_AsSsize_t(slot);
        Py_DECREF(slot);
        if (value == -1 && PyErr_Occurred())
            return -1;
        if (get_buffers(w) < 0)
            return -1;
    }
    if (value == -1 && PyErr_Occurred())
        return -1;
    if (value < 0) {
        PyErr_SetString(PyExc_IndexError, "type slot out of range");
        return -1;
    }
    w->type_keys[h] = tp;
    w->type_slots[h] = value;
    return value;
}

/* A container's referents, held (INCREF'd) in a plain buffer: no list object is allocated
 * per container, so the walk itself never counts towards (and never triggers) a collection
 * of the target's young generation, which would traverse the caller's big lists.
 * items[next:len] are still to be claimed; all of items[0:len] are owned until the
 * container is done. */
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

/* Containers with more entries than this are read in slices: reading one whole (its
 * tp_traverse, a reference to each referent) would be one step as long as the container
 * is big, and a buffer as big. */
#define BIG_CONTAINER 4096

static int
is_big(PyObject *op)
{
    if (PyList_CheckExact(op))
        return PyList_GET_SIZE(op) > BIG_CONTAINER;
    if (PyTuple_CheckExact(op))
        return PyTuple_GET_SIZE(op) > BIG_CONTAINER;
    if (PyDict_CheckExact(op))
        return PyDict_GET_SIZE(op) > BIG_CONTAINER / 2;
    if (PyAnySet_CheckExact(op))
        return PySet_GET_SIZE(op) > BIG_CONTAINER;
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
    Py_ssize_t got = 0;
    if (PyList_CheckExact(c) || PyTuple_CheckExact(c)) {
        int list = PyList_CheckExact(c);
        while (got < want) {
            if (r->pos >= (list ? PyList_GET_SIZE(c) : PyTuple_GET_SIZE(c)))
                break;
            PyObject *item = list ? PyList_GET_ITEM(c, r->pos) : PyTuple_GET_ITEM(c, r->pos);
            r->pos++;
            if (item == NULL)
                continue;
            if (refs_push(r, item) < 0)
                return -1;
            got++;
        }
    }
    else if (PyDict_CheckExact(c)) {
        PyObject *key, *value;
        while (got < want && PyDict_Next(c, &r->pos, &key, &value)) {
            /* Borrowed from the dict: pushed (a strong reference) before anything runs. */
            if (refs_push(r, key) < 0 || refs_push(r, value) < 0)
                return -1;
            got += 2;
        }
    }
    else if (PyAnySet_CheckExact(c)) {
        PyObject *key;
        Py_hash_t hash;
        while (got < want && _PySet_NextEntry(c, &r->pos, &key, &hash)) {
            if (refs_push(r, key) < 0)
                return -1;
            got++;
        }
    }
    return got;
}

/* The destructor of a pending capsule: the caller dropped the rest of a container. */
static void
pending_free(PyObject *capsule)
{
    Refs *held = (Refs *)PyCapsule_GetPointer(capsule, PENDING_NAME);
    if (held == NULL)
        return;
    refs_free(held);
    PyMem_Free(held);
}

static int
visit_referent(PyObject *op, void *arg)
{
    if (op == NULL)  /* a careless tp_traverse; Py_VISIT never passes NULL */
        return 0;
    return refs_push((Refs *)arg, op);
}

/* gc.get_referents(obj), plus a dict's keys, into r. -1 on error. */
static int
referents_of(PyObject *obj, Refs *r)
{
    if (PyObject_IS_GC(obj)) {
        traverseproc traverse = Py_TYPE(obj)->tp_traverse;
        if (traverse != NULL && traverse(obj, visit_referent, r))
            return -1;
    }
    if (PyDict_Check(obj)) {
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

/* Is tp's __sizeof__ C code (a method_descriptor: built-in and extension types, and
 * object.__sizeof__ for classes that do not define one)? _PyType_Lookup runs no code. */
static inline int
sizeof_is_builtin(Walk *w, PyTypeObject *tp)
{
    PyObject *descr = _PyType_Lookup(tp, w->sizeof_name);  /* borrowed */
    return descr != NULL && Py_IS_TYPE(descr, &PyMethodDescr_Type);
}

/* census._getsizeof(op): sys.getsizeof(op, 0) when tp's __sizeof__ is C code, else
 * object.__sizeof__(op) (a __sizeof__ written in Python is never run: a mock's creates new
 * mocks for the walk to meet, without end); any Exception reads as 0 (not only TypeError),
 * and so does a size no object can have. An error that is not an Exception (SystemExit,
 * KeyboardInterrupt) is returned: -1. */
static int
size_of(Walk *w, PyObject *op, PyTypeObject *tp, long long *size)
{
    long long bytes;
    if (sizeof_is_builtin(w, tp)) {
        size_t got = _PySys_GetSizeOf(op);
        bytes = got == (size_t)-1 && PyErr_Occurred() ? -1
              : got > MAX_OBJECT_BYTES ? 0 : (long long)got;
    }
    else {
        PyObject *got = PyObject_CallOneArg(w->object_sizeof, op);
        bytes = got == NULL ? -1 : PyLong_AsLongLong(got);
        Py_XDECREF(got);
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
        PyTypeObject *tp = Py_TYPE(ref);
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
         * extension's C __sizeof__ could assign ref.__class__ and free the old class. */
        Py_INCREF(tp);
        long long size;
        if (size_of(w, ref, tp, &size) < 0) {
            Py_DECREF(tp);
            return -1;
        }
        Py_ssize_t slot = slot_for(w, tp);
        Py_DECREF(tp);
        if (slot < 0)
            return -1;
        /* Checked at every use: Python code ran since the slot was cached. */
        if (slot >= w->counts.len / 8 || slot >= w->sizes.len / 8) {
            PyErr_SetString(PyExc_IndexError, "type slot out of range");
            return -1;
        }
        long long *counts = (long long *)w->counts.buf, *sizes = (long long *)w->sizes.buf;
        /* 0 <= size <= 2**48: only a sum can overflow; the Python loop's array('q') raises
         * OverflowError there too. */
        if (sizes[slot] > LLONG_MAX - size || *nbytes > LLONG_MAX - size) {
            PyErr_SetString(PyExc_OverflowError, "census byte total out of range");
            return -1;
        }
        counts[slot] += 1;
        sizes[slot] += size;
        *objects += 1;
        *nbytes += size;
        if (!leaf && PyList_Append(stack, ref) < 0)
            return -1;
    }
    r->next = stop;
    return stop - start;
}

PyDoc_STRVAR(claim_doc,
"claim(stack, pending, regions, type_index, new_slot, counts, sizes, limit) -> (objects, bytes)\n\n"
"Walk from the containers on stack, claiming what is not yet marked in regions; stop\n"
"after about limit units of work (at least one). The rest of the walk stays on stack, and\n"
"the rest of a big container's referents in pending ([capsule], else empty).");

static PyObject *
claim(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *stack, *pending, *container = NULL;
    Py_ssize_t limit;
    Walk w;
    Refs r = {NULL, 0, 0, 0, NULL, 0};
    memset(&w, 0, sizeof(w));
    if (!PyArg_ParseTuple(args, "O!O!O!O!OOOn:claim", &PyList_Type, &stack, &PyList_Type,
                          &pending, &PyDict_Type, &w.regions, &PyDict_Type, &w.type_index,
                          &w.new_slot, &w.counts_obj, &w.sizes_obj, &limit))
        return NULL;
    if (limit < 1)
        limit = 1;  /* every call makes progress, and never drops what pending held */
    w.sizeof_name = PyUnicode_InternFromString("__sizeof__");
    if (w.sizeof_name == NULL)
        goto error;
    w.object_sizeof = _PyType_Lookup(&PyBaseObject_Type, w.sizeof_name);
    if (w.object_sizeof == NULL) {
        PyErr_SetString(PyExc_SystemError, "object.__sizeof__ not found");
        goto error;
    }
    if (get_buffers(&w) < 0)
        goto error;
    long long objects = 0, nbytes = 0;
    Py_ssize_t work = 0;
    int have_refs = 0, resumed = 0;
    if (PyList_GET_SIZE(pending) == 1
        && PyCapsule_IsValid(PyList_GET_ITEM(pending, 0), PENDING_NAME)) {
        Refs *held = (Refs *)PyCapsule_GetPointer(PyList_GET_ITEM(pending, 0), PENDING_NAME);
        if (held == NULL)
            goto error;
        /* Ours now; the capsule, emptied, frees nothing of it. */
        r = *held;
        memset(held, 0, sizeof(*held));
        if (PyList_SetSlice(pending, 0, 1, NULL) < 0)
            goto error;
        have_refs = resumed = 1;
    }
    else if (PyList_GET_SIZE(pending) != 0) {
        PyErr_SetString(PyExc_TypeError, "pending must be what claim() left in it, or []");
        goto error;
    }
    while (work < limit) {
        if (!have_refs) {
            Py_ssize_t n = PyList_GET_SIZE(stack);
            if (n == 0)
                break;
            /* Held until its referents are claimed, as the Python loop's ``obj``: were the
             * stack its last holder, its leaves would otherwise look held once. */
            container = PyList_GET_ITEM(stack, n - 1);
            Py_INCREF(container);
            if (PyList_SetSlice(stack, n - 1, n, NULL) < 0)
                goto error;
            if (is_big(container)) {
                /* Read in slices; every entry is marked (see read_slice). */
                Py_INCREF(container);
                r.cursor = container;
                r.pos = 0;
                resumed = 1;
            }
            else if (referents_of(container, &r) < 0)
                goto error;
            have_refs = 1;
            work += 1;
        }
        if (r.cursor != NULL && r.next == r.len) {
            refs_clear(&r);
            /* At least one entry: 0 would read as "done" (popping it may have used the budget). */
            Py_ssize_t got = read_slice(&r, limit - work > 1 ? limit - work : 1);
            if (got < 0)
                goto error;
            if (got == 0) {  /* the big container is done */
                Py_CLEAR(r.cursor);
                Py_CLEAR(container);
                have_refs = resumed = 0;
                continue;
            }
        }
        Py_ssize_t done = claim_referents(&w, stack, &r, resumed, limit - work, &objects, &nbytes);
        if (done < 0)
            goto error;
        work += done;
        if (r.cursor != NULL && r.next == r.len && work < limit)
            continue;  /* the next slice */
        if (r.next < r.len || r.cursor != NULL) {
            /* Out of budget inside a big container: the caller passes the rest back. */
            Refs *held = PyMem_Malloc(sizeof(Refs));
            if (held == NULL) {
                PyErr_NoMemory();
                goto error;
            }
            *held = r;
            PyObject *capsule = PyCapsule_New(held, PENDING_NAME, pending_free);
            if (capsule == NULL) {
                PyMem_Free(held);  /* r still owns the references */
                goto error;
            }
            memset(&r, 0, sizeof(r));  /* the capsule owns them now */
            int failed = PyList_Append(pending, capsule) < 0;
            Py_DECREF(capsule);
            if (failed)
                goto error;
            break;
        }
        refs_clear(&r);
        Py_CLEAR(container);
        have_refs = resumed = 0;
    }
    refs_free(&r);
    Py_CLEAR(container);
    release_buffers(&w);
    release_regions(&w);
    Py_XDECREF(w.sizeof_name);
    return Py_BuildValue("LL", objects, nbytes);

error: {
    /* Dropping references can run destructors: keep the error aside meanwhile. */
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    refs_free(&r);
    Py_CLEAR(container);
    release_buffers(&w);
    release_regions(&w);
    Py_XDECREF(w.sizeof_name);
    PyErr_Restore(type, value, traceback);
    return NULL;
}
}

static PyMethodDef walk_methods[] = {
    {"claim", claim, METH_VARARGS, claim_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef walk_module = {
    PyModuleDef_HEAD_INIT, "_walk",
    "The census's inner walk in C (optional; census.py has the same loop in Python).",
    -1, walk_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__walk(void)
{
    return PyModule_Create(&walk_module);
}
