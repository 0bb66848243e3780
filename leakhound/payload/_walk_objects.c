/*
 * How the compiled walks read one object: its type (a per-call cache looked up by id, never
 * hashed), its size (the census's rule: sizes.py), its referents (tp_traverse into a plain
 * buffer, a big list, tuple, dict or set a slice at a time) and the census's address bitmap.
 * Shared by the census's walk (_census_walk.c) and the object graph's (_graph_walk.c).
 */

#include "_walk.h"

int
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

void
refs_clear(Refs *r)
{
    /* Releasing a reference can run a destructor; nothing below reads r meanwhile. */
    Py_ssize_t len = r->len;
    r->len = r->next = 0;
    for (Py_ssize_t i = 0; i < len; i++)
        Py_DECREF(r->items[i]);
}

void
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
void
walk_release_call(Walk *w)
{
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    refs_free(&w->dead);
    PyErr_Restore(type, value, traceback);
}

/* Drops everything the call holds but the referents; the error, if any, is kept. */
void
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
PyObject *
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
unsigned char *
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
TypeInfo *
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
Py_ssize_t
slot_for(Walk *w, TypeInfo *info)
{
    if (info->slot >= 0)
        return info->slot;
    PyObject *tp = (PyObject *)info->tp;
    Py_INCREF(tp);  /* the lookups below can run code that evicts this entry */
    /* Keyed by id(type), never the type itself: hashing a class runs its metaclass's
     * __hash__, which may be Python code (census_tallies.TypeTally). */
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
 * (counts_referents)? As sizes.sizeof_is_builtin: the first class in the MRO whose dict
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

/* sizes.object_size(op): sys.getsizeof(op, 0) when tp's __sizeof__ is C code, else
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
int
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
    /* the block it takes in the target's allocators (heap_blocks; sizes.heap_block) */
    if (bytes < 0 || bytes > (long long)MAX_OBJECT_BYTES)
        *size = 0;
    else if (block_list_head > 0 && bytes > block_list_head && Py_IS_TYPE(op, &PyList_Type))
        *size = heap_block(block_list_head) + heap_block(bytes - block_list_head);  /* its items: a block */
    else if (block_bytearray_head > 0 && bytes > block_bytearray_head && Py_IS_TYPE(op, &PyByteArray_Type))
        *size = heap_block(block_bytearray_head) + heap_block(bytes - block_bytearray_head);  /* its buffer */
    else if (block_deque_type != NULL && bytes > block_deque_head && Py_IS_TYPE(op, block_deque_type))
        *size = heap_block(block_deque_head)
                + (bytes - block_deque_head) / block_deque_block * heap_block(block_deque_block);  /* its blocks */
    else if (block_lock_extra > 0 && (Py_IS_TYPE(op, block_lock_types[0])
                                      || (block_lock_types[1] != NULL && Py_IS_TYPE(op, block_lock_types[1]))))
        *size = heap_block(bytes) + block_lock_extra;  /* and its semaphore, a block apart */
    else
        *size = heap_block(bytes);
    return 0;
}

/* -- the tallies ----------------------------------------------------------------------- */

/* Two arrays of counts and sizes by slot, ``*len`` long, grown (zeroed) to hold ``slot``;
 * ``first``: their length when empty. */
int
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

/* -- referents ------------------------------------------------------------------------- */

/* BIG_CONTAINER (_walk.h): reading a bigger container whole (its tp_traverse, a reference to
 * each referent) would be one step as long as the container is big, and a buffer as big. */

/* Whether ``tp`` is a class statement's class (its tp_traverse CPython's subtype_traverse:
 * class_traverse), not a class of C code's (an io.BytesIO, an ndarray). Runs no code. */
int
class_statement(PyTypeObject *tp)
{
    return class_traverse != NULL && (PyType_GetFlags(tp) & Py_TPFLAGS_HEAPTYPE)
        && (traverseproc)PyType_GetSlot(tp, Py_tp_traverse) == class_traverse;
}

/* The built-in list, tuple, set or frozenset the class statement's class ``tp`` derives
 * from, NULL for any other class: its tp_traverse, and each of its bases' down to that one,
 * is a class statement's (class_traverse: CPython's subtype_traverse, which visits the
 * object's slots, its __dict__ or attribute values and its type, then calls that base's
 * traverse, which visits the items last). Runs no code. */
PyTypeObject *
sequence_subclass(PyTypeObject *tp)
{
    if (class_traverse == NULL)
        return NULL;
    for (int depth = 0; depth < 64; depth++) {
        if (tp == &PyList_Type || tp == &PyTuple_Type || tp == &PySet_Type || tp == &PyFrozenSet_Type)
            return depth > 0 ? tp : NULL;
        if (!(PyType_GetFlags(tp) & Py_TPFLAGS_HEAPTYPE)
            || (traverseproc)PyType_GetSlot(tp, Py_tp_traverse) != class_traverse)
            return NULL;
        tp = (PyTypeObject *)PyType_GetSlot(tp, Py_tp_base);  /* borrowed */
        if (tp == NULL) {
            PyErr_Clear();
            return NULL;
        }
    }
    return NULL;
}

/* What a big list, tuple or set subclass's traverse visits before its items
 * (sequence_subclass): the items come last, a list's and a tuple's from the last one back
 * (list_traverse, tupletraverse visit ob_item[n-1] first), a set's in its table's order (as
 * _PySet_NextEntry reads them); they begin where the last ITEMS_MATCH objects visited are
 * the first ITEMS_MATCH items in that order. Read whole, a list subclass of 2M rows was
 * ~50 MB of the target's memory for a moment (a reference each in the walk's buffer, and
 * its nodes at once on the walk's stack); read a slice at a time through its traverse, a set
 * subclass's walk took 8.6 s (each slice visited all the entries before it). */
#define BEFORE_ITEMS_MAX 256
#define ITEMS_MATCH 8
typedef struct {
    PyObject *seen[BEFORE_ITEMS_MAX];  /* borrowed: nothing runs while they are looked at */
    PyObject *expected[ITEMS_MATCH];
    int n;
} BeforeItems;

static int
visit_before_items(PyObject *op, void *arg)
{
    BeforeItems *b = (BeforeItems *)arg;
    if (op == NULL)
        return 0;
    if (b->n == BEFORE_ITEMS_MAX)
        return 2;  /* no items after that many: stops, not found */
    b->seen[b->n++] = op;
    if (b->n < ITEMS_MATCH)
        return 0;
    for (int j = 0; j < ITEMS_MATCH; j++) {
        if (b->seen[b->n - ITEMS_MATCH + j] != b->expected[j])
            return 0;
    }
    return 1;  /* the items begin: stops the traversal */
}

/* 1 and, in b->seen[:b->n - ITEMS_MATCH], the big list, tuple or set subclass ``seq``'s own
 * referents; 0 where its traverse is not a class statement's down to the base's or its items
 * were not found so (it is read whole then). Runs no code, sets no error. */
static int
before_items(PyObject *seq, BeforeItems *b)
{
    PyTypeObject *base = sequence_subclass(Py_TYPE(seq));
    b->n = 0;
    if (base == NULL)
        return 0;
    if (base == &PyList_Type || base == &PyTuple_Type) {
        int list = base == &PyList_Type;
        Py_ssize_t len = list ? PyList_Size(seq) : PyTuple_Size(seq);
        if (len <= ITEMS_MATCH)
            return 0;
        for (int j = 0; j < ITEMS_MATCH; j++)
            b->expected[j] = list ? PyList_GetItem(seq, len - 1 - j) : PyTuple_GetItem(seq, len - 1 - j);
    }
    else {
        Py_ssize_t pos = 0;
        Py_hash_t hash;
        for (int j = 0; j < ITEMS_MATCH; j++) {
            if (use_set_next == NULL || !use_set_next(seq, &pos, &b->expected[j], &hash))
                return 0;
        }
    }
    int stopped = class_traverse(seq, visit_before_items, b);
    if (PyErr_Occurred()) {  /* none can be: the items looked at are in range */
        PyErr_Clear();
        return 0;
    }
    return stopped == 1;
}

int
is_big(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    if (tp == &PyList_Type)
        return PyList_Size(op) > BIG_CONTAINER;
    if (tp == &PyTuple_Type)
        return PyTuple_Size(op) > BIG_CONTAINER;
    if (PyDict_Check(op))  /* a subclass too (its own referents: referents_before_entries) */
        return PyDict_Size(op) > BIG_CONTAINER / 2;
    if (tp == &PySet_Type || tp == &PyFrozenSet_Type)
        return PySet_Size(op) > BIG_CONTAINER;
    if (PyList_Check(op) || PyTuple_Check(op)) {  /* a subclass: its own referents first */
        BeforeItems b;
        return (PyList_Check(op) ? PyList_Size(op) : PyTuple_Size(op)) > BIG_CONTAINER && before_items(op, &b);
    }
    if (PyAnySet_Check(op)) {
        /* a subclass: its own referents first; without _PySet_NextEntry, its traverse a
         * slice at a time (read_slice), as an exact set's */
        BeforeItems b;
        return PySet_Size(op) > BIG_CONTAINER && (use_set_next == NULL || before_items(op, &b));
    }
    if (tp == collections_deque) {
        DequeAt at;
        return deque_at(op, 0, &at) && at.size > BIG_CONTAINER;
    }
    return 0;
}

/* A deque's blocks (Modules/_collectionsmodule.c: ``block`` and ``dequeobject``, the same
 * in 3.8-3.13): its items from data[leftindex] of its left block, BLOCKLEN a block, the
 * blocks linked by rightlink. Its tp_traverse visits every item at once (a replay buffer of
 * 2M transitions: a reference each in the walk's buffer, 16 MB of the target's memory, in
 * one step); read here a slice at a time as a big list, from its left end again at each
 * slice (a hop a block: a position is an item count, whatever the deque did meanwhile). */
#define DEQUE_BLOCKLEN 64
#define DEQUE_SIZE_AT 16
#define DEQUE_LEFTBLOCK_AT 24
#define DEQUE_RIGHTBLOCK_AT 32
#define DEQUE_LEFTINDEX_AT 40
#define DEQUE_RIGHTINDEX_AT 48

typedef struct DequeBlock {
    struct DequeBlock *leftlink;
    PyObject *data[DEQUE_BLOCKLEN];
    struct DequeBlock *rightlink;
} DequeBlock;

/* The exact deque ``d`` as its struct says now: its size, and the block and index of its item
 * ``pos`` (at->block NULL past its end); 0 where its struct does not read as a deque's (its
 * first and last items not what the deque's own item lookup gives). Runs no code. */
int
deque_at(PyObject *d, Py_ssize_t pos, DequeAt *at)
{
    char *fields = (char *)d;
    Py_ssize_t size = *(Py_ssize_t *)(fields + DEQUE_SIZE_AT);
    DequeBlock *left = *(DequeBlock **)(fields + DEQUE_LEFTBLOCK_AT);
    DequeBlock *right = *(DequeBlock **)(fields + DEQUE_RIGHTBLOCK_AT);
    Py_ssize_t leftindex = *(Py_ssize_t *)(fields + DEQUE_LEFTINDEX_AT);
    Py_ssize_t rightindex = *(Py_ssize_t *)(fields + DEQUE_RIGHTINDEX_AT);
    if (size < 1 || size != PyObject_Size(d) || left == NULL || right == NULL || leftindex < 0
        || leftindex >= DEQUE_BLOCKLEN || rightindex < 0 || rightindex >= DEQUE_BLOCKLEN) {
        PyErr_Clear();
        return 0;
    }
    /* its ends as deque_item (C) reads them: the struct is the one read here */
    PyObject *first = PySequence_GetItem(d, 0), *last = PySequence_GetItem(d, size - 1);
    int same = first == left->data[leftindex] && last == right->data[rightindex];
    Py_XDECREF(first);
    Py_XDECREF(last);
    PyErr_Clear();
    if (!same)
        return 0;
    at->size = size;
    at->block = NULL;
    at->index = 0;
    if (pos >= size)
        return 1;
    DequeBlock *b = left;
    Py_ssize_t i = leftindex + pos;
    while (i >= DEQUE_BLOCKLEN) {
        b = b->rightlink;
        i -= DEQUE_BLOCKLEN;
        if (b == NULL)
            return 0;
    }
    at->block = b;
    at->index = i;
    return 1;
}

/* The next slice of the exact deque r->cursor's items (from its r->pos-th) into r: how many,
 * 0 when it is done (or no longer reads as a deque). */
static Py_ssize_t
deque_slice(Refs *r, Py_ssize_t want)
{
    DequeAt at;
    Py_ssize_t got = 0;
    if (!deque_at(r->cursor, r->pos, &at) || at.block == NULL)
        return 0;
    DequeBlock *b = (DequeBlock *)at.block;
    Py_ssize_t i = at.index;
    while (got < want && r->pos < at.size) {
        if (refs_push(r, b->data[i]) < 0)  /* a strong reference, before anything runs */
            return -1;
        got++;
        r->pos++;
        if (++i == DEQUE_BLOCKLEN) {
            b = b->rightlink;
            i = 0;
            if (b == NULL)
                break;
        }
    }
    return got;
}

/* numpy's public structs (numpy/ndarraytypes.h: PyArrayObject_fields, PyArray_Descr), the
 * same in numpy 1.x and 2.x on 64-bit: an array's data pointer, its number of dimensions,
 * its dimensions, its dtype and its flags; a dtype's type number. */
#define NPY_DATA_AT 16
#define NPY_ND_AT 24
#define NPY_DIMS_AT 32
#define NPY_STRIDES_AT 40
#define NPY_DESCR_AT 56
#define NPY_FLAGS_AT 64
#define NPY_TYPE_NUM_AT 28
#define NPY_OBJECT_TYPE_NUM 17
#define NPY_ANY_CONTIGUOUS 0x3  /* NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_F_CONTIGUOUS */
#define NPY_OWNDATA 0x4
#define NPY_MAX_DIMS_READ 64

/* Whether ``obj`` is an ndarray of objects (or of a subclass of ndarray) that owns its data,
 * read from its struct as it is now: in *a its data, dimensions and strides, and its number of
 * elements (a pointer each, NULL where none). A view's elements are its base's references,
 * not its own (one reference each, in the base's data): read through the view too, an
 * element held by the base alone looked held once by each, and was counted twice; the view
 * holds its base (the helper lists it), whose elements are read. numpy has no tp_traverse
 * for them; sizes.native_extra listed an exact array's with ravel().tolist() (a subclass's
 * not at all: ravel() runs its __array_finalize__), all in one step and two lists of a
 * reference per element (a pandas column of 3M objects: a stall of 166-703 ms and ~67 MB of
 * the target's memory for a moment). Read here a slice at a time instead, as a big list
 * (read_slice), every field read again at each slice: the target may have resized it
 * meanwhile; an array that is no longer one is done. Strides that are no multiple of a
 * pointer (as_strided) are left to the helper. Runs no code. */
int
object_array(PyObject *obj, ObjectArray *a)
{
    if (numpy_ndarray == NULL || !PyObject_TypeCheck(obj, numpy_ndarray))
        return 0;
    char *fields = (char *)obj;
    int nd = *(int *)(fields + NPY_ND_AT);
    const Py_ssize_t *dims = *(Py_ssize_t **)(fields + NPY_DIMS_AT);
    const Py_ssize_t *strides = *(Py_ssize_t **)(fields + NPY_STRIDES_AT);
    PyObject *descr = *(PyObject **)(fields + NPY_DESCR_AT);
    int flags = *(int *)(fields + NPY_FLAGS_AT);
    char *data = *(char **)(fields + NPY_DATA_AT);
    if (nd < 1 || nd > NPY_MAX_DIMS_READ || dims == NULL || strides == NULL || descr == NULL || data == NULL
        || ((uintptr_t)data & (sizeof(PyObject *) - 1)) || !(flags & NPY_OWNDATA))
        return 0;
    if (numpy_dtype == NULL || !PyObject_TypeCheck(descr, numpy_dtype)
        || *(int *)((char *)descr + NPY_TYPE_NUM_AT) != NPY_OBJECT_TYPE_NUM)
        return 0;
    Py_ssize_t n = 1;
    for (int k = 0; k < nd; k++) {
        Py_ssize_t d = dims[k];
        /* (a dimension of one: its stride is never used, and may be anything) */
        if (d < 0 || (d > 1 && strides[k] % (Py_ssize_t)sizeof(PyObject *) != 0))
            return 0;
        if (d == 0)
            n = 0;
        else if (n > 0) {
            if (n > (PY_SSIZE_T_MAX / (Py_ssize_t)sizeof(PyObject *)) / d)
                return 0;
            n *= d;
        }
    }
    a->data = data;
    a->nd = nd;
    a->contiguous = (flags & NPY_ANY_CONTIGUOUS) != 0;
    a->dims = dims;
    a->strides = strides;
    a->count = n;
    return 1;
}

/* The next slice of the elements of r->cursor, an array of objects (from r->pos, in C order
 * over its dimensions; a contiguous one's in the order of its data) into r: how many, 0 when
 * it is done (or no longer an array of objects that owns its data). */
static Py_ssize_t
object_array_slice(Refs *r, Py_ssize_t want)
{
    ObjectArray a;
    Py_ssize_t got = 0;
    if (!object_array(r->cursor, &a))
        return 0;
    while (got < want && r->pos < a.count) {
        Py_ssize_t pos = r->pos++, offset = 0;
        if (a.contiguous)
            offset = pos * (Py_ssize_t)sizeof(PyObject *);
        else {
            for (int k = a.nd - 1; k >= 0; k--) {
                offset += (pos % a.dims[k]) * a.strides[k];
                pos /= a.dims[k];
            }
        }
        PyObject *item = *(PyObject **)(a.data + offset);
        if (item == NULL)
            continue;
        if (refs_push(r, item) < 0)  /* a strong reference, before anything runs */
            return -1;
        got++;
    }
    return got;
}

/* A big dict subclass's own referents: what its tp_traverse visits before the first entry
 * (its first key or value, in the order of the dict's table: the order dict's own traverse
 * visits them in, which a subclass's traverse calls last, after its own fields: CPython's for
 * Python subclasses, collections' defaultdict and OrderedDict). Its entries are read a slice
 * at a time (the graph's PHASE_DICT_ENTRIES, the census's read_slice), as an exact dict's:
 * read whole, with its traverse, a defaultdict of 2M entries was one step of 650 ms of the
 * graph's walk (the target's event loop 900 ms late) and ~140 MB of the target's memory for a
 * moment, and a reference per entry in the census's. */
typedef struct {
    Refs *r;
    PyObject *first_key, *first_value;
    int ordered;
} BeforeEntries;

static int
visit_before_entries(PyObject *op, void *arg)
{
    BeforeEntries *b = (BeforeEntries *)arg;
    if (op == NULL)
        return 0;
    if (op == b->first_key || op == b->first_value)
        return 1;  /* the entries begin: stops the traversal */
    /* An OrderedDict visits its keys before the table's entries, in its own order (not the
     * table's, once one is moved): the first str, int, bytes or tuple is taken for its first
     * key (looking it up in the dict could compare it with a key whose __eq__ is Python). */
    PyTypeObject *tp = Py_TYPE(op);
    if (b->ordered && (tp == &PyUnicode_Type || tp == &PyLong_Type || tp == &PyBytes_Type || tp == &PyTuple_Type))
        return 1;
    return refs_push(b->r, op);
}

/* -- functools.lru_cache, read from its fields --------------------------------------------
 *
 * A bounded lru_cache's wrapper keeps its entries in links (a doubly linked list through the
 * wrapper's root, each link in its cache dict too) that the collector does not track: its
 * traverse visits every link's key, result and type, three references an entry before its
 * cache dict. 2M entries were a step of ~110 ms read whole, and read a slice at a time every
 * slice went through the ones before it (10M: ~200 ms a slice). As CPython 3.10-3.13 lay
 * them out (Modules/_functoolsmodule.c: lru_cache_object, lru_list_elem), the wrapper's
 * referents are read from its fields (its type, its cache, function, kwd_mark, link type,
 * cache_info type and __dict__: its traverse's, without the links') and a link's are its key,
 * its result and its type: the entries are read from the cache dict a slice at a time, each
 * through its link. (The link's other reference, the wrapper's list's, is said by the graph's
 * walk: _graph_walk.c dict_slice.) */
#define LRU_WRAPPER_BYTES 152
#define LRU_CACHE 72
#define LRU_FUNC 88
#define LRU_KWD_MARK 112
#define LRU_LINK_TYPE 120
#define LRU_INFO_TYPE 128
#define LRU_DICT 136
#define LRU_LINK_BYTES 56
#define LRU_LINK_KEY 40
#define LRU_LINK_RESULT 48

/* The links' type, as the first wrapper read showed it (compared by identity only, never
 * read through: a wrapper's reference keeps it while one is read); forgotten when
 * known_types is given another wrapper class. */
static PyTypeObject *lru_link_type;

void
lru_types_forget(void)
{
    lru_link_type = NULL;
}

PyObject *
lru_link_class_seen(void)
{
    return (PyObject *)lru_link_type;
}

static inline PyObject *
field_at(PyObject *obj, size_t offset)
{
    PyObject *value;
    memcpy(&value, (const char *)obj + offset, sizeof(value));
    return value;
}

static int
visit_fields(PyObject *obj, const size_t *offsets, int n, visitproc visit, void *arg)
{
    for (int k = 0; k < n; k++) {
        PyObject *value = field_at(obj, offsets[k]);
        if (value != NULL) {
            int stopped = visit(value, arg);
            if (stopped)
                return stopped;
        }
    }
    return 0;
}

static int
lru_wrapper_traverse(PyObject *self, visitproc visit, void *arg)
{
    static const size_t fields[] = {LRU_CACHE, LRU_FUNC, LRU_KWD_MARK, LRU_LINK_TYPE, LRU_INFO_TYPE, LRU_DICT};
    int stopped = visit((PyObject *)Py_TYPE(self), arg);
    return stopped ? stopped : visit_fields(self, fields, 6, visit, arg);
}

static int
lru_link_traverse(PyObject *link, visitproc visit, void *arg)
{
    static const size_t fields[] = {LRU_LINK_KEY, LRU_LINK_RESULT};
    int stopped = visit_fields(link, fields, 2, visit, arg);
    return stopped ? stopped : visit((PyObject *)Py_TYPE(link), arg);
}

/* Whether ``tp`` is laid out as the wrapper read here: 152 bytes (not a debug or free-threaded
 * build's; known_types gives no other). */
int
lru_wrapper_fits(PyTypeObject *tp)
{
    PyObject *size = PyObject_GetAttrString((PyObject *)tp, "__basicsize__");  /* (type's own member) */
    int fits = size != NULL && PyLong_Check(size) && PyLong_AsSsize_t(size) == LRU_WRAPPER_BYTES;
    Py_XDECREF(size);
    PyErr_Clear();
    return fits;
}

/* Whether ``t`` (a wrapper's link type field) is the links' type: functools' own, of 56
 * bytes, untracked by the collector; learnt from the first wrapper, and the same for every
 * other (another interpreter's wrappers are read through their traverse). */
static int
lru_link_type_ok(PyObject *t)
{
    if (t == NULL || Py_TYPE(t) != &PyType_Type)
        return 0;
    if (lru_link_type != NULL)
        return (PyTypeObject *)t == lru_link_type;
    if (PyType_GetFlags((PyTypeObject *)t) & Py_TPFLAGS_HAVE_GC)
        return 0;
    /* (type's own members: no code of the class's runs) */
    PyObject *size = PyObject_GetAttrString(t, "__basicsize__");
    PyObject *name = size != NULL ? PyObject_GetAttrString(t, "__name__") : NULL;
    int ok = name != NULL && PyLong_Check(size) && PyLong_AsSsize_t(size) == LRU_LINK_BYTES
             && PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, "_lru_list_elem") == 0;
    Py_XDECREF(size);
    Py_XDECREF(name);
    PyErr_Clear();
    if (ok)
        lru_link_type = (PyTypeObject *)t;
    return ok;
}

/* The cache dict of ``obj`` where it is an lru_cache's wrapper read from its fields
 * (borrowed), else NULL. */
PyObject *
lru_cache_of(PyObject *obj)
{
    return typed_traverse(obj) == lru_wrapper_traverse ? field_at(obj, LRU_CACHE) : NULL;
}

/* Whether ``obj`` is an lru_cache's link (of the type a wrapper read showed). */
int
is_lru_link(PyObject *obj)
{
    return lru_link_type != NULL && Py_TYPE(obj) == lru_link_type;
}

/* The traverse the walks use for ``obj`` in place of its type's: a wrapper's and a link's as
 * above; NULL for any other object (its type's traverse). */
traverseproc
typed_traverse(PyObject *obj)
{
    PyTypeObject *tp = Py_TYPE(obj);
    if (is_lru_link(obj))
        return lru_link_traverse;
    if (lru_wrapper != NULL && tp == lru_wrapper) {
        PyObject *cache = field_at(obj, LRU_CACHE);
        if ((cache == NULL || PyDict_CheckExact(cache)) && lru_link_type_ok(field_at(obj, LRU_LINK_TYPE)))
            return lru_wrapper_traverse;
    }
    return NULL;
}

/* ``obj``'s tp_traverse where gc.get_referents would call it (its type has one and tracks
 * it: Py_TPFLAGS_HAVE_GC and tp_is_gc), else NULL (an error set only on a failure). Every
 * reference it holds: what counts references (census_unreached.still_outside) must see an
 * lru_cache wrapper's references to its links' keys and results, which the walks read as
 * the links' (walk_traverse_of). */
traverseproc
gc_traverse_of(PyObject *obj)
{
    PyTypeObject *tp = Py_TYPE(obj);
    if (!(PyType_GetFlags(tp) & Py_TPFLAGS_HAVE_GC))
        return NULL;
    traverseproc traverse = (traverseproc)PyType_GetSlot(tp, Py_tp_traverse);
    inquiry is_gc = (inquiry)PyType_GetSlot(tp, Py_tp_is_gc);
    return traverse == NULL || (is_gc != NULL && !is_gc(obj)) ? NULL : traverse;
}

/* The traverse the walks read ``obj``'s referents through: typed_traverse's, else
 * gc_traverse_of's. */
traverseproc
walk_traverse_of(PyObject *obj)
{
    traverseproc typed = typed_traverse(obj);
    return typed != NULL ? typed : gc_traverse_of(obj);
}

/* Into r, what the dict subclass ``d`` holds besides its entries (none for an exact dict, or
 * a subclass without a traverse or not tracked by the collector). -1 on error. */
int
referents_before_entries(PyObject *d, Refs *r)
{
    traverseproc traverse = Py_TYPE(d) == &PyDict_Type ? NULL : gc_traverse_of(d);
    if (traverse == NULL)
        return PyErr_Occurred() ? -1 : 0;
    Py_ssize_t pos = 0;
    BeforeEntries b = {r, NULL, NULL, ordered_dict != NULL && PyObject_TypeCheck(d, ordered_dict)};
    if (!PyDict_Next(d, &pos, &b.first_key, &b.first_value))  /* borrowed: nothing runs before the traverse */
        return 0;
    int stopped = traverse(d, visit_before_entries, &b);
    return stopped < 0 || PyErr_Occurred() ? -1 : 0;
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

/* Whether the list, tuple or set ``c`` (r->cursor) is read by its items: an exact one, or a
 * subclass whose own referents (its __dict__, its slots) were found (before_items; into r at
 * its first slice). Else it is read through its traverse (a C subclass's). -1 on error. */
static int
read_by_items(PyObject *c, Refs *r)
{
    PyTypeObject *tp = Py_TYPE(c);
    if (tp == &PyList_Type || tp == &PyTuple_Type || tp == &PySet_Type || tp == &PyFrozenSet_Type)
        return 1;
    BeforeItems b;
    if (!before_items(c, &b))
        return 0;
    for (int k = 0; r->pos == 0 && k < b.n - ITEMS_MATCH; k++) {
        if (refs_push(r, b.seen[k]) < 0)
            return -1;
    }
    return 1;
}

/* The next slice of r->cursor's referents (at most about ``want``) into r: a list's or
 * tuple's items, a dict's keys and values, a set's keys (what tp_traverse visits, plus a
 * dict's str keys, as referents_of), an array of objects' elements (object_array). 0 when
 * the container is done, -1 on error.
 *
 * Bounds are read again at every step: code run while the previous slice was claimed may
 * have changed the container (PyDict_Next and _PySet_NextEntry check their position
 * against the table as it is now). Such a change can make a slice skip or repeat an entry;
 * entries read this way are always marked, so a repeat is not counted twice. */
Py_ssize_t
read_slice(Refs *r, Py_ssize_t want)
{
    PyObject *c = r->cursor;
    PyTypeObject *tp = Py_TYPE(c);
    Py_ssize_t got = 0;
    if (numpy_ndarray != NULL && PyObject_TypeCheck(c, numpy_ndarray))
        return object_array_slice(r, want);
    if (tp == collections_deque)
        return deque_slice(r, want);
    int by_items = PyList_Check(c) || PyTuple_Check(c) || (use_set_next != NULL && PyAnySet_Check(c))
        ? read_by_items(c, r) : 0;
    if (by_items < 0)
        return -1;
    if (by_items && (PyList_Check(c) || PyTuple_Check(c))) {
        int list = PyList_Check(c);
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
    else if (PyDict_Check(c)) {
        PyObject *key, *value;
        /* a subclass: first what it holds itself (a defaultdict's factory, its __dict__) */
        if (r->pos == 0 && referents_before_entries(c, r) < 0)
            return -1;
        while (got < want && PyDict_Next(c, &r->pos, &key, &value)) {
            /* Borrowed from the dict: pushed (a strong reference) before anything runs. */
            if (refs_push(r, key) < 0 || refs_push(r, value) < 0)
                return -1;
            got += 2;
        }
    }
    else if (by_items) {  /* a set, with _PySet_NextEntry */
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
        /* an exact set without _PySet_NextEntry, or an object whose traverse is too long to
         * read whole (referents_of): big slices, each visits all the referents before it */
        SetSlice s = {r, r->pos, want < TRAVERSE_SLICE ? TRAVERSE_SLICE : want, 0};
        int stopped = traverse(c, visit_set_slice, &s);
        if (stopped < 0 || PyErr_Occurred())
            return -1;
        r->pos += s.got;
        got = s.got;
    }
    return got;
}

int
visit_referent(PyObject *op, void *arg)
{
    Refs *r = (Refs *)arg;
    if (op == NULL)  /* a careless tp_traverse; Py_VISIT never passes NULL */
        return 0;
    if (r->limit > 0 && r->len >= r->limit)
        return 1;  /* too many to read whole: stops the traversal (referents_of) */
    return refs_push(r, op);
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

/* gc.get_referents(obj), plus a dict's keys (a code object's members), into r. -1 on error;
 * 1, nothing added to r, where its traverse visits more than TRAVERSE_WHOLE_MAX referents (for
 * read_slice to read a slice at a time: r->cursor). */
int
referents_of(Walk *w, PyObject *obj, Refs *r)
{
    w->added_dict = NULL;  /* whatever returns below (drop_dict_values reads it) */
    if ((PyObject *)Py_TYPE(obj) == code_type)
        return code_referents(obj, r);
    if (PyModule_Check(obj)) {
        /* A module's dict only, never its tp_traverse: an extension's m_traverse may visit
         * freed memory (3.12's _asyncio visits its FutureIter free list, CPython gh-122695),
         * and a reference to a freed object would free it twice (objects.safe_referents). */
        PyObject *dict = PyModule_GetDict(obj);  /* borrowed */
        return dict == NULL ? 0 : refs_push(r, dict);
    }
    traverseproc typed = typed_traverse(obj);
    if (typed != NULL)  /* an lru_cache's wrapper or link: its fields */
        return typed(obj, visit_referent, r) != 0 ? -1 : 0;
    TypeInfo *info = type_info(w, Py_TYPE(obj));
    if (info == NULL)
        return -1;
    /* gc.get_referents: objects the collector tracks (PyObject_IS_GC), by their type's
     * tp_traverse. Read before anything runs: info may be evicted below. */
    unsigned long flags = info->flags;
    traverseproc traverse = info->traverse;
    Py_ssize_t before = r->len;
    if ((flags & Py_TPFLAGS_HAVE_GC) && traverse != NULL
        && (info->is_gc == NULL || info->is_gc(obj))) {
        r->limit = before + TRAVERSE_WHOLE_MAX;
        int stopped = traverse(obj, visit_referent, r);
        r->limit = 0;
        if (stopped == 1 && r->len >= before + TRAVERSE_WHOLE_MAX && !PyErr_Occurred()) {
            /* too many: let go (nothing runs meanwhile that reads r) */
            Py_ssize_t len = r->len;
            r->len = before;
            for (Py_ssize_t k = before; k < len; k++)
                Py_DECREF(r->items[k]);
            return 1;
        }
        if (stopped)
            return -1;
    }
    if (inline_values_dicts && (flags & MANAGED_DICT_FLAG)) {
        PyObject *d = ((PyObject **)obj)[-3];  /* 3.13: the made __dict__, or NULL */
        if (d != NULL && PyDict_CheckExact(d)) {
            Py_ssize_t k = before;
            while (k < r->len && r->items[k] != d)
                k++;
            if (k == r->len) {  /* not visited: the inline values were */
                if (refs_push(r, d) < 0)
                    return -1;
                w->added_dict = d;
            }
        }
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

/* After referents_of(w, obj, r) added a made __dict__ (w->added_dict): its values taken out
 * of r from ``before`` on, each once, for a walk that reads the dict's entries itself (the
 * graph): met from both the object and its dict, a value held once would be counted twice. */
void
drop_dict_values(Walk *w, Refs *r, Py_ssize_t before)
{
    PyObject *d = w->added_dict;
    if (d == NULL)
        return;
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(d, &pos, &key, &value)) {
        for (Py_ssize_t j = before; j < r->len; j++) {
            if (r->items[j] == value) {
                memmove(&r->items[j], &r->items[j + 1], (size_t)(r->len - j - 1) * sizeof(PyObject *));
                r->len--;
                Py_DECREF(value);  /* the object still holds it */
                break;
            }
        }
    }
}

/* How ``tp`` is sized natively: its code in w->native (census_walk.py: 1 buffers and hidden
 * references, handed back in ``found``; 2 or 3 a 3.11/3.12 or 3.13 instance's attribute
 * values), 0 if none, -1 on error. The lookup hashes an int, never the type: no code runs. */
long
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
 * estimate): its referents but types, plus 1; none when its dict was made. As a block of
 * its own (3.11/3.12: it is one; 3.13: inline after the object, whose own size is a
 * multiple of the alignment, so the sum rounds as the two do up to 512 bytes, a pymalloc
 * block; past that it is one malloc chunk, 8-16 bytes less than the two). */
long long
instance_values_bytes(PyObject *obj, traverseproc traverse, long code)
{
    AttrCount c = {0, NULL};
    if (traverse == NULL || traverse(obj, visit_attr, &c) != 0)
        return 0;
    if (code == 2 && c.n == 1 && PyDict_CheckExact(c.last))
        return 0;
    if (code == 3 && ((PyObject **)obj)[-3] != NULL)
        return 0;  /* 3.13: the dict made from them counts them (dict.__sizeof__) */
    long long size = (long long)c.n + 1;
    if (code == 3)
        return heap_block(((size + 7) & ~7LL) + 8 + 8 * size);
    return heap_block(((size + 2 + 7) & ~7LL) + 8 * size);
}
