/*
 * The census's inner walk in C: an optional accelerator for census.Census._claim_tree.
 *
 * It does exactly what the pure-Python loop in census.py does, step for step, on the same
 * data structures (the Python loop stays as the fallback and as the reference the tests
 * compare this against):
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
 *   - every other referent is marked; its size (sys.getsizeof) is added to the totals and to
 *     its type's slot in ``counts``/``sizes`` (array('q'), slot from ``type_index``, a new
 *     slot from calling ``new_slot(type)``); a non-leaf is pushed on ``stack``.
 *
 * It stops after about ``limit`` units of work (one per container popped and per referent
 * seen; a big container's referents are split across calls through ``pending``) and returns, so the caller's Python loop runs between calls and the interpreter can
 * hand the GIL to the target's main thread: no call holds the GIL for long. It never runs a
 * collection, calls no user code except a type's own __sizeof__ (as sys.getsizeof does), and
 * keeps no state between calls.
 *
 * Built for the interpreter leakhound is installed with (hatch_build.py); a target on another
 * Python version cannot import it and the census uses the Python loop.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define REGION_SHIFT 20
#define REGION_BYTES 8192
#define REGION_CACHE 64
#define TYPE_CACHE 64

typedef struct {
    PyObject *regions;               /* dict: address >> 20 -> bytearray(8192) */
    uintptr_t region_keys[REGION_CACHE];
    unsigned char *region_bufs[REGION_CACHE];
    PyObject *type_index;            /* dict: type -> slot */
    PyObject *new_slot;              /* callable(type) -> slot, may grow the arrays */
    PyObject *counts_obj, *sizes_obj;
    Py_buffer counts, sizes;
    int have_buffers;
    PyTypeObject *type_keys[TYPE_CACHE];
    Py_ssize_t type_slots[TYPE_CACHE];
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

/* The bitmap byte for ``address``, creating its region if needed; NULL on error. */
static unsigned char *
region_for(Walk *w, uintptr_t address)
{
    uintptr_t key = address >> REGION_SHIFT;
    size_t h = (size_t)(key % REGION_CACHE);
    if (w->region_bufs[h] != NULL && w->region_keys[h] == key)
        return w->region_bufs[h];
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
    /* Stable while the dict holds the bytearray: regions are never resized or removed. */
    w->region_keys[h] = key;
    w->region_bufs[h] = (unsigned char *)PyByteArray_AS_STRING(region);
    return w->region_bufs[h];
}

/* The tally slot of ``tp``; -1 on error. */
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
        if (get_buffers(w) < 0)
            return -1;
    }
    if (value == -1 && PyErr_Occurred())
        return -1;
    if (value < 0 || value >= w->counts.len / 8 || value >= w->sizes.len / 8) {
        PyErr_SetString(PyExc_IndexError, "type slot out of range");
        return -1;
    }
    w->type_keys[h] = tp;
    w->type_slots[h] = value;
    return value;
}

/* A container's referents, held (INCREF'd) in a plain buffer: no list object is allocated
 * per container, so the walk itself never counts towards (and never triggers) a collection
 * of the target's young generation, which would traverse the caller's big lists. */
typedef struct {
    PyObject **items;
    Py_ssize_t len;
    Py_ssize_t cap;
} Refs;

static int
refs_push(Refs *r, PyObject *op)
{
    if (r->len == r->cap) {
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
    r->len = 0;
    for (Py_ssize_t i = 0; i < len; i++)
        Py_DECREF(r->items[i]);
}

static int
visit_referent(PyObject *op, void *arg)
{
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

/* sys.getsizeof(op, 0) */
static long long
size_of(PyObject *op)
{
    size_t size = _PySys_GetSizeOf(op);
    if (size == (size_t)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return (long long)size;
}

/* A referent held by the container and the referents list only. */
#define ONLY_ONE_REFERENCE 2

/* Claim r->items until the budget runs out; returns the index where it stopped
 * (r->len when done), -1 on error. */
static Py_ssize_t
claim_referents(Walk *w, PyObject *stack, Refs *r, int resumed, Py_ssize_t budget,
                long long *objects, long long *nbytes)
{
    Py_ssize_t stop = r->len > budget ? budget : r->len;
    for (Py_ssize_t i = 0; i < stop; i++) {
        PyObject *ref = r->items[i];
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
        /* __sizeof__ of a user type can run Python code; ``ref`` stays alive in r. */
        long long size = size_of(ref);
        Py_ssize_t slot = slot_for(w, Py_TYPE(ref));
        if (slot < 0)
            return -1;
        ((long long *)w->counts.buf)[slot] += 1;
        ((long long *)w->sizes.buf)[slot] += size;
        *objects += 1;
        *nbytes += size;
        if (!leaf && PyList_Append(stack, ref) < 0)
            return -1;
    }
    return stop;
}

PyDoc_STRVAR(claim_doc,
"claim(stack, pending, regions, type_index, new_slot, counts, sizes, limit) -> (objects, bytes)\n\n"
"Walk from the containers on stack, claiming what is not yet marked in regions; stop\n"
"after about limit units of work. The rest of the walk stays on stack, and the rest of\n"
"a big container's referents in pending ([referents], else empty).");

static PyObject *
claim(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *stack, *pending;
    Py_ssize_t limit;
    Walk w;
    Refs r = {NULL, 0, 0};
    memset(&w, 0, sizeof(w));
    if (!PyArg_ParseTuple(args, "O!O!O!O!OOOn:claim", &PyList_Type, &stack, &PyList_Type,
                          &pending, &PyDict_Type, &w.regions, &PyDict_Type, &w.type_index,
                          &w.new_slot, &w.counts_obj, &w.sizes_obj, &limit))
        return NULL;
    if (get_buffers(&w) < 0)
        goto error;
    long long objects = 0, nbytes = 0;
    Py_ssize_t work = 0;
    int have_refs = 0, resumed = 0;
    if (PyList_GET_SIZE(pending) == 1 && PyList_CheckExact(PyList_GET_ITEM(pending, 0))) {
        PyObject *rest = PyList_GET_ITEM(pending, 0);
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(rest); i++) {
            if (refs_push(&r, PyList_GET_ITEM(rest, i)) < 0)
                goto error;
        }
        if (PyList_SetSlice(pending, 0, 1, NULL) < 0)
            goto error;
        have_refs = resumed = 1;
    }
    else if (PyList_GET_SIZE(pending) != 0) {
        PyErr_SetString(PyExc_TypeError, "pending must be [list] or []");
        goto error;
    }
    while (work < limit) {
        if (!have_refs) {
            Py_ssize_t n = PyList_GET_SIZE(stack);
            if (n == 0)
                break;
            PyObject *obj = PyList_GET_ITEM(stack, n - 1);
            Py_INCREF(obj);
            if (PyList_SetSlice(stack, n - 1, n, NULL) < 0) {
                Py_DECREF(obj);
                goto error;
            }
            int failed = referents_of(obj, &r);
            Py_DECREF(obj);
            if (failed)
                goto error;
            have_refs = 1;
            work += 1;
        }
        Py_ssize_t stop = claim_referents(&w, stack, &r, resumed, limit - work, &objects, &nbytes);
        if (stop < 0)
            goto error;
        work += stop;
        if (stop < r.len) {
            /* Out of budget inside a big container: the caller passes the rest back. */
            PyObject *rest = PyList_New(r.len - stop);
            if (rest == NULL)
                goto error;
            for (Py_ssize_t i = stop; i < r.len; i++) {
                Py_INCREF(r.items[i]);
                PyList_SET_ITEM(rest, i - stop, r.items[i]);
            }
            int failed = PyList_Append(pending, rest) < 0;
            Py_DECREF(rest);
            if (failed)
                goto error;
            refs_clear(&r);
            break;
        }
        refs_clear(&r);
        have_refs = resumed = 0;
    }
    refs_clear(&r);
    PyMem_Free(r.items);
    release_buffers(&w);
    return Py_BuildValue("LL", objects, nbytes);

error:
    refs_clear(&r);
    PyMem_Free(r.items);
    release_buffers(&w);
    return NULL;
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
