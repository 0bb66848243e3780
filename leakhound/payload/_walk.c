/*
 * The extension module ``_walk``: the census's walk (_census_walk.c) and the object graph's
 * (_graph_walk.c), each an optional accelerator of a Python loop that computes the same
 * numbers (census_walk.py, graph.py), with their shared helpers (_walk_objects.c, _walk.h),
 * built as one extension: _walk.abi3.so. Here: what the running interpreter offers, the
 * settings both walks read, a 3.11+ frame's locals for the roots, and the module's init.
 *
* One build for every CPython from 3.10 on: the stable ABI (abi3, Py_LIMITED_API 3.10;
 * hatch_build.py builds _walk.abi3.so with whichever Python installs leakhound). Three
 * helpers outside the stable ABI make it faster where the running interpreter exports them
 * with the signature they have had since 3.8 (_PySys_GetSizeOf, _PyType_Lookup,
 * _PySet_NextEntry: all of 3.10-3.13 do); they are looked up when the module loads, and
 * where one is missing the walk uses its stable-ABI equivalent (``mode`` says which).
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1  /* process_vm_readv */
#endif
#include <dlfcn.h>
#include <fcntl.h>

#include "_walk.h"

#include <sys/uio.h>
#include <unistd.h>

#pragma GCC visibility push(hidden)
extern PyMethodDef census_walk_methods[];
extern PyMethodDef graph_walk_methods[];
extern PyMethodDef sites_methods[];
extern PyMethodDef libc_methods[];
extern PyMethodDef ssl_scan_methods[];
#pragma GCC visibility pop

static getsizeof_fn found_getsizeof;
getsizeof_fn use_getsizeof;
static type_lookup_fn found_type_lookup;
type_lookup_fn use_type_lookup;
static set_next_fn found_set_next;
set_next_fn use_set_next;

PyObject *sizeof_name;        /* "__sizeof__" */
PyObject *object_sizeof;      /* object.__sizeof__ */
PyObject *sys_getsizeof;      /* the built-in sys.getsizeof */
PyObject *mro_descr;          /* type.__dict__["__mro__"] */
PyObject *dict_descr;         /* type.__dict__["__dict__"] */
PyObject *array_type;         /* array.array */
PyObject *code_type;          /* types.CodeType */
int inline_values_dicts;
/* 3.10: an instance's split dict's keys are met in every instance's dict (one reference, the
 * class's keys): a leaf can be met more often than its references (_graph_walk.c pending_resolve) */
int split_keys_met;
/* The names of the code type's member descriptors for what a code object holds (see
 * code_referents): code objects are not gc-tracked, gc.get_referents lists none of it. */
PyObject *code_members;       /* tuple of str */
/* C __sizeof__ methods that count an object gc.get_referents also lists (sizes.py:
 * SIZEOF_COUNTS_REFERENTS, set by sizeof_counts_referents): their types are sized by
 * object.__sizeof__, the referent counted once, on its own. NULL: none. */
PyObject *sizeof_counts_refs;  /* tuple of method descriptors */
PyTypeObject *numpy_ndarray, *numpy_dtype, *ordered_dict, *collections_deque;  /* strong references (known_types) */
traverseproc class_traverse;
PyTypeObject *lru_wrapper;  /* a strong reference (known_types) */
/* The allocators' rounding (sizes.HEAP_BLOCKS, set by heap_blocks): a request of at most
 * block_small_max bytes takes a multiple of block_small_align (pymalloc's size classes), a
 * bigger one block_big_overhead more, rounded up to block_big_align, at least block_big_min
 * (glibc's malloc chunks). block_small_align 0: sizes as requested (no model). */
long long block_small_max, block_small_align, block_big_overhead, block_big_align, block_big_min;
/* sys.getsizeof([]): a list's header, its items a block of their own (0: one block); the
 * same for a bytearray (its buffer) and a deque (its blocks of block_deque_block bytes, of
 * the type block_deque_type: _collections' own, not exported) */
long long block_list_head, block_bytearray_head, block_deque_head, block_deque_block;
PyTypeObject *block_deque_type;
/* _thread's lock classes whose lock is a block apart (sizes.LOCK_TYPES: a semaphore on
 * 3.10-3.13), each object block_lock_extra bytes more than its own block; NULL: none */
PyTypeObject *block_lock_types[2];
long long block_lock_extra;

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

PyDoc_STRVAR(known_types_doc,
"known_types(ndarray, dtype[, ordered_dict, deque, heap_class, lru_wrapper]) -> None\n\n"
"numpy's ndarray and dtype classes (sizes.native_types, where numpy is loaded; None, None:\n"
"none): from the next walk on, an array of objects that owns its data is read from its data\n"
"a slice at a time, as a big list (object_array), its elements not listed by sizes.native_extra.\n"
"``ordered_dict``: collections.OrderedDict, whose big ones' keys it holds twice; ``deque``:\n"
"collections.deque, a big one read a slice at a time from its blocks (deque_at); ``heap_class``:\n"
"a class statement's class, whose tp_traverse (subtype_traverse) tells a big list, tuple or set\n"
"subclass read a slice at a time (sequence_subclass) from any other; ``lru_wrapper``:\n"
"functools._lru_cache_wrapper where its struct is 3.10-3.13's (152 bytes), whose links' keys and\n"
"results are then their links' referents, not the wrapper's (typed_traverse).");

static PyObject *
known_types(PyObject *module, PyObject *args)
{
    PyObject *ndarray, *dtype, *odict = Py_None, *deque = Py_None, *heap_class = Py_None, *lru = Py_None;
    if (!PyArg_ParseTuple(args, "OO|OOOO:known_types", &ndarray, &dtype, &odict, &deque, &heap_class, &lru))
        return NULL;
    if (heap_class != Py_None && (!PyType_Check(heap_class)
                                  || !(PyType_GetFlags((PyTypeObject *)heap_class) & Py_TPFLAGS_HEAPTYPE))) {
        PyErr_SetString(PyExc_TypeError, "known_types: heap_class is a class statement's class, or None");
        return NULL;
    }
    if ((ndarray == Py_None) != (dtype == Py_None)
        || (ndarray != Py_None && (!PyType_Check(ndarray) || !PyType_Check(dtype)))
        || (odict != Py_None && !PyType_Check(odict)) || (deque != Py_None && !PyType_Check(deque))
        || (lru != Py_None && !PyType_Check(lru))) {
        PyErr_SetString(PyExc_TypeError, "known_types: two classes, or None and None (and classes or None)");
        return NULL;
    }
    PyTypeObject *old[5] = {numpy_ndarray, numpy_dtype, ordered_dict, collections_deque, lru_wrapper};
    numpy_ndarray = ndarray == Py_None ? NULL : (PyTypeObject *)ndarray;
    numpy_dtype = dtype == Py_None ? NULL : (PyTypeObject *)dtype;
    ordered_dict = odict == Py_None ? NULL : (PyTypeObject *)odict;
    collections_deque = deque == Py_None ? NULL : (PyTypeObject *)deque;
    lru_wrapper = lru == Py_None || !lru_wrapper_fits((PyTypeObject *)lru) ? NULL : (PyTypeObject *)lru;
    if (lru_wrapper != old[4])
        lru_types_forget();
    Py_XINCREF(numpy_ndarray);
    Py_XINCREF(numpy_dtype);
    Py_XINCREF(ordered_dict);
    Py_XINCREF(collections_deque);
    Py_XINCREF(lru_wrapper);
    for (int k = 0; k < 5; k++)
        Py_XDECREF(old[k]);
    /* a function of the interpreter's, there as long as it runs: no reference needed */
    class_traverse = heap_class == Py_None ? NULL
                                           : (traverseproc)PyType_GetSlot((PyTypeObject *)heap_class, Py_tp_traverse);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(reads_elements_doc,
"reads_elements(obj) -> bool\n\n"
"Whether the walks read ``obj``'s elements themselves, a slice at a time: an array of objects\n"
"that owns its data (known_types). sizes.native_extra lists none of them then.");

static PyObject *
reads_elements(PyObject *module, PyObject *obj)
{
    ObjectArray a;
    return PyBool_FromLong(object_array(obj, &a));
}

PyDoc_STRVAR(dict_entry_of_doc,
"dict_entry_of(d, address) -> (key, value) or None\n\n"
"The entry of the dict ``d`` (a subclass too: its table) whose value's id is ``address``: one\n"
"pass over the table, no list made (graph_wire.step_label names a path through a registry of\n"
"1.5M entries without its keys and values as two lists: 24 MB of the target's). Runs no code.");

static PyObject *
dict_entry_of(PyObject *module, PyObject *args)
{
    PyObject *d, *key, *value;
    unsigned long long address;
    if (!PyArg_ParseTuple(args, "OK:dict_entry_of", &d, &address))
        return NULL;
    if (!PyDict_Check(d))
        Py_RETURN_NONE;
    Py_ssize_t pos = 0;
    while (PyDict_Next(d, &pos, &key, &value)) {
        if ((unsigned long long)(uintptr_t)value == address)
            return PyTuple_Pack(2, key, value);
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(class_statement_doc,
"class_statement(tp) -> bool\n\n"
"Whether the class ``tp`` is a class statement's (its traverse CPython's subtype_traverse, as\n"
"known_types' heap_class has it), not a class of C code's (an io.BytesIO, an ndarray): whose\n"
"instance's big str or bytes is a node of its own in the walks (_graph_walk.c BIG_LEAF_BYTES).");

static PyObject *
class_statement_of(PyObject *module, PyObject *tp)
{
    return PyBool_FromLong(PyType_Check(tp) && class_statement((PyTypeObject *)tp));
}

PyDoc_STRVAR(dict_value_of_doc,
"dict_value_of(d, name) -> value or None\n\n"
"The value of the dict ``d`` (a subclass too: its table) under the str key equal to ``name`` (a\n"
"str), compared only with keys that are exact strs: one pass over the table, no hash or\n"
"``__eq__`` of a key of the program's runs (sampling follows a rebound entry by its key).");

static PyObject *
dict_value_of(PyObject *module, PyObject *args)
{
    PyObject *d, *name, *key, *value;
    if (!PyArg_ParseTuple(args, "OU:dict_value_of", &d, &name))
        return NULL;
    if (!PyDict_Check(d))
        Py_RETURN_NONE;
    Py_ssize_t pos = 0;
    while (PyDict_Next(d, &pos, &key, &value)) {
        if (key == name || (PyUnicode_CheckExact(key) && PyUnicode_Compare(key, name) == 0))
            return Py_NewRef(value);
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(dict_own_referents_doc,
"dict_own_referents(d) -> list\n\n"
"What the dict ``d`` holds besides its entries (a subclass's __dict__, slots, a defaultdict's\n"
"factory: referents_before_entries), without listing its entries.");

static PyObject *
dict_own_referents(PyObject *module, PyObject *d)
{
    if (!PyDict_Check(d))
        return PyList_New(0);
    Refs r = {0};
    if (referents_before_entries(d, &r) < 0) {
        refs_free(&r);
        return NULL;
    }
    PyObject *out = PyList_New(r.len);
    for (Py_ssize_t k = 0; out != NULL && k < r.len; k++) {
        Py_INCREF(r.items[k]);
        if (PyList_SetItem(out, k, r.items[k]) < 0)  /* (steals it) */
            Py_CLEAR(out);
    }
    refs_free(&r);
    return out;
}

PyDoc_STRVAR(typed_referents_doc,
"typed_referents(obj) -> list or None\n\n"
"What the compiled walks read as ``obj``'s referents in place of gc.get_referents(obj), for\n"
"the objects they read from their fields (an lru_cache's wrapper: its fields without its\n"
"links'; a link: its key, result and type); None for any other object. The Python loop's\n"
"graph is then the compiled walk's (graph.py).");

static int
visit_append(PyObject *op, void *arg)
{
    return PyList_Append((PyObject *)arg, op);
}

static PyObject *
typed_referents(PyObject *module, PyObject *obj)
{
    traverseproc typed = typed_traverse(obj);
    if (typed == NULL)
        return Py_NewRef(Py_None);
    PyObject *out = PyList_New(0);
    if (out != NULL && typed(obj, visit_append, out) != 0)
        Py_CLEAR(out);
    return out;
}

PyDoc_STRVAR(lru_cache_dict_doc,
"lru_cache_dict(obj) -> dict or None\n\n"
"The cache dict of ``obj`` where it is an lru_cache's wrapper the walks read from its fields\n"
"(typed_referents), else None: no namespace, its entries fold into it.");

static PyObject *
lru_cache_dict(PyObject *module, PyObject *obj)
{
    PyObject *cache = lru_cache_of(obj);
    return Py_NewRef(cache != NULL ? cache : Py_None);
}

PyDoc_STRVAR(lru_link_class_doc,
"lru_link_class() -> type or None\n\n"
"The class of an lru_cache's links, as the first wrapper the walks read showed it\n"
"(typed_referents); None before one was read.");

static PyObject *
lru_link_class(PyObject *module, PyObject *Py_UNUSED(args))
{
    PyObject *tp = lru_link_class_seen();
    return Py_NewRef(tp != NULL ? tp : Py_None);
}

PyDoc_STRVAR(referent_with_id_doc,
"referent_with_id(obj, address) -> object or None\n\n"
"The object whose id is ``address`` among those ``obj``'s tp_traverse visits (what\n"
"gc.get_referents(obj) lists; an lru_cache's wrapper and links: what the walks read,\n"
"typed_referents), or None: one pass, no list made (a list of a big container's referents\n"
"was ~50 MB and ~100 ms, to name one step of a path through it). A module is never\n"
"traversed (objects.safe_referents): None.");

typedef struct {
    uintptr_t address;
    PyObject *found;  /* borrowed while the traverse runs */
} WithId;

static int
visit_with_id(PyObject *op, void *arg)
{
    WithId *f = (WithId *)arg;
    if (op == NULL || (uintptr_t)op != f->address)
        return 0;
    f->found = op;
    return 1;  /* found: stops the traversal */
}

static PyObject *
referent_with_id(PyObject *module, PyObject *args)
{
    PyObject *obj, *address;
    if (!PyArg_ParseTuple(args, "OO!:referent_with_id", &obj, &PyLong_Type, &address))
        return NULL;
    WithId f = {(uintptr_t)PyLong_AsVoidPtr(address), NULL};
    if (PyErr_Occurred())
        return NULL;
    traverseproc traverse = PyModule_Check(obj) ? NULL : walk_traverse_of(obj);
    if (traverse == NULL)
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    traverse(obj, visit_with_id, &f);
    if (PyErr_Occurred())
        return NULL;
    return Py_NewRef(f.found != NULL ? f.found : Py_None);
}

PyDoc_STRVAR(heap_blocks_doc,
"heap_blocks(model, deque=None, locks=None, lock_block=0) -> None\n\n"
"How the target's allocators round a request (sizes.HEAP_BLOCKS): a tuple (small_max,\n"
"small_align, big_overhead, big_align, big_min, list_head, bytearray_head, deque_head,\n"
"deque_block) of non-negative ints, or None for sizes as requested. From the next walk on,\n"
"every object's size is the blocks it takes (a list's: its list_head bytes and its items, two\n"
"blocks; a bytearray's: its header and its buffer; a deque's, of the type ``deque``: its\n"
"header and its blocks of deque_block bytes; a lock of one of the types ``locks``: its block\n"
"and lock_block bytes more, its semaphore's).");

#define HEAP_BLOCKS_INTS 9

static PyObject *
heap_blocks(PyObject *module, PyObject *args)
{
    PyObject *arg, *deque = Py_None, *locks = Py_None;
    long long lock_extra = 0;
    if (!PyArg_ParseTuple(args, "O|OOL:heap_blocks", &arg, &deque, &locks, &lock_extra))
        return NULL;
    if (deque != Py_None && !PyType_Check(deque)) {
        PyErr_SetString(PyExc_TypeError, "heap_blocks: deque is a type or None");
        return NULL;
    }
    PyObject *lock_types[2] = {NULL, NULL};
    if (locks != Py_None) {
        if (!PyTuple_Check(locks) || PyTuple_Size(locks) > 2 || lock_extra < 0 || lock_extra > 4096) {
            PyErr_SetString(PyExc_TypeError, "heap_blocks: locks is a tuple of at most 2 types, or None");
            return NULL;
        }
        for (Py_ssize_t i = 0; i < PyTuple_Size(locks); i++) {
            lock_types[i] = PyTuple_GetItem(locks, i);
            if (lock_types[i] == NULL || !PyType_Check(lock_types[i])) {
                PyErr_Clear();
                PyErr_SetString(PyExc_TypeError, "heap_blocks: locks is a tuple of at most 2 types, or None");
                return NULL;
            }
        }
    }
    long long v[HEAP_BLOCKS_INTS] = {0};
    if (arg != Py_None) {
        if (!PyTuple_Check(arg) || PyTuple_Size(arg) != HEAP_BLOCKS_INTS) {
            PyErr_SetString(PyExc_TypeError, "heap_blocks: None or a tuple of 9 ints");
            return NULL;
        }
        for (Py_ssize_t i = 0; i < HEAP_BLOCKS_INTS; i++) {
            PyObject *item = PyTuple_GetItem(arg, i);
            v[i] = item != NULL && PyLong_CheckExact(item) ? PyLong_AsLongLong(item) : -1;
            if (v[i] < 0 || v[i] > 1 << 20 || ((i == 1 || i == 3) && v[i] & (v[i] - 1))) {
                PyErr_Clear();
                PyErr_SetString(PyExc_ValueError, "heap_blocks: small non-negative ints, alignments powers of 2");
                return NULL;
            }
        }
        if (v[1] == 0 || v[3] == 0)
            v[1] = 0;
        if (v[8] == 0)
            v[7] = 0;
    }
    block_small_max = v[0];
    block_small_align = v[1];
    block_big_overhead = v[2];
    block_big_align = v[3];
    block_big_min = v[4];
    block_list_head = v[5];
    block_bytearray_head = v[6];
    block_deque_head = v[7];
    block_deque_block = v[8];
    PyTypeObject *old = block_deque_type;
    block_deque_type = deque != Py_None && v[8] > 0 ? (PyTypeObject *)deque : NULL;
    Py_XINCREF(block_deque_type);
    Py_XDECREF(old);
    for (int i = 0; i < 2; i++) {
        PyTypeObject *was = block_lock_types[i];
        block_lock_types[i] = lock_extra > 0 ? (PyTypeObject *)lock_types[i] : NULL;
        Py_XINCREF(block_lock_types[i]);
        Py_XDECREF(was);
    }
    block_lock_extra = block_lock_types[0] != NULL ? lock_extra : 0;
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

/* Whether ``obj`` is a tuple or frozenset ``count`` references hold: with our list's
 * reference, one more (2) is one its builder may still be filling (tracked_objects leaves it
 * out) or one its referrer alone holds (count_references and held_once_referents go through
 * it: what it references is its referrer's). */
static int
held_once(PyObject *obj, Py_ssize_t count)
{
    return (PyTuple_Check(obj) || PyFrozenSet_Check(obj)) && Py_REFCNT(obj) == count;
}

static int
built_by_someone(PyObject *obj)
{
    /* Our list's reference and one more: the builder's, if it is being built. */
    return held_once(obj, 2);
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

PyDoc_STRVAR(count_references_doc,
"count_references(objects, start, stop, keys) -> list\n\n"
"How many times objects[start:stop] (a list) reference each of ``keys`` (a sorted list of\n"
"addresses): their referents (a module's: its dict, never its tp_traverse, as\n"
"objects.safe_referents) looked up in place, a binary search each, and through a tuple or\n"
"frozenset one of them alone holds (tracked_objects leaves those out: a function's closure,\n"
"whose cells it holds); nothing is allocated and no Python code runs while the objects are\n"
"read.");

typedef struct {
    const unsigned long long *keys;
    Py_ssize_t nkeys;
    long long *counts;
    int depth;  /* held-once tuples and frozensets gone through to get here */
} KeyCounts;

/* How deep count_references goes through tuples and frozensets held once (a tuple in a tuple:
 * a closure's cell's contents are not, they are tracked and listed), and how big one may be
 * (a bigger one's referents are not looked at: what it references looks held from C, as before
 * this pass; held_once_referents would list them all at once in the target). */
#define HELD_ONCE_DEPTH 4
#define HELD_ONCE_MAX_ITEMS 4096

/* The traverse of ``op`` if it is a tuple or frozenset of at most HELD_ONCE_MAX_ITEMS that
 * ``count`` references hold (its referrer's, and those of the lists we hold it in): one its
 * referrer alone holds, left out of tracked_objects' lists (built_by_someone), so what it
 * references is referenced from its referrer for the counts. */
static traverseproc
held_once_traverse(PyObject *op, Py_ssize_t count)
{
    /* (an untracked one holds untracked objects only: never a member or a key; a tuple of a
     * C-held list of rows of ints was a list of all its ints in the target) */
    if (op == NULL || !held_once(op, count) || !PyObject_GC_IsTracked(op))
        return NULL;
    Py_ssize_t n = PyTuple_Check(op) ? PyTuple_Size(op) : PySet_Size(op);
    if (n < 0 || n > HELD_ONCE_MAX_ITEMS) {
        if (PyErr_Occurred())
            PyErr_Clear();
        return NULL;
    }
    traverseproc traverse = gc_traverse_of(op);
    if (PyErr_Occurred())
        PyErr_Clear();
    return traverse;
}

static int
visit_count_key(PyObject *op, void *arg)
{
    KeyCounts *c = (KeyCounts *)arg;
    if (c->depth < HELD_ONCE_DEPTH) {
        traverseproc traverse = held_once_traverse(op, 1);
        if (traverse != NULL) {
            c->depth++;
            traverse(op, visit_count_key, c);
            c->depth--;
        }
    }
    unsigned long long address = (unsigned long long)(uintptr_t)op;
    Py_ssize_t lo = 0, hi = c->nkeys;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (c->keys[mid] < address)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (op != NULL && lo < c->nkeys && c->keys[lo] == address)
        c->counts[lo]++;
    return 0;
}

static PyObject *
count_references(PyObject *module, PyObject *args)
{
    PyObject *objects, *keys;
    Py_ssize_t start, stop;
    if (!PyArg_ParseTuple(args, "O!nnO!", &PyList_Type, &objects, &start, &stop, &PyList_Type, &keys))
        return NULL;
    Py_ssize_t n = PyList_Size(keys);
    unsigned long long *addresses = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(*addresses));
    long long *counts = PyMem_Calloc((size_t)(n ? n : 1), sizeof(*counts));
    PyObject *out = NULL;
    if (addresses == NULL || counts == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        addresses[k] = PyLong_AsUnsignedLongLong(PyList_GetItem(keys, k));
        if (PyErr_Occurred())
            goto done;
        if (k && addresses[k] < addresses[k - 1]) {
            PyErr_SetString(PyExc_ValueError, "count_references: keys not sorted");
            goto done;
        }
    }
    KeyCounts c = {addresses, n, counts, 0};
    for (Py_ssize_t i = start < 0 ? 0 : start; i < stop && i < PyList_Size(objects); i++) {
        PyObject *obj = PyList_GetItem(objects, i);  /* borrowed: the list holds it */
        if (PyModule_Check(obj)) {
            PyObject *dict = PyModule_GetDict(obj);  /* borrowed */
            if (dict != NULL)
                visit_count_key(dict, &c);
            continue;
        }
        traverseproc traverse = gc_traverse_of(obj);
        if (PyErr_Occurred())
            PyErr_Clear();
        if (traverse != NULL)
            traverse(obj, visit_count_key, &c);
    }
    out = PyList_New(n);
    for (Py_ssize_t k = 0; out != NULL && k < n; k++) {
        PyObject *count = PyLong_FromLongLong(counts[k]);
        if (count == NULL)
            Py_CLEAR(out);
        else
            PyList_SetItem(out, k, count);
    }
done:
    PyMem_Free(addresses);
    PyMem_Free(counts);
    return out;
}

PyDoc_STRVAR(held_once_referents_doc,
"held_once_referents(refs, start, stop) -> list\n\n"
"The referents of the tuples and frozensets in refs[start:stop] (gc.get_referents' list)\n"
"that one referrer alone holds besides ``refs`` (a function's closure: tracked_objects leaves\n"
"such objects out, so what they reference looks referenced from outside its list), and of\n"
"those among them alike, a few levels deep, as count_references goes through them.");

static PyObject *
held_once_referents(PyObject *module, PyObject *args)
{
    PyObject *refs;
    Py_ssize_t start, stop;
    if (!PyArg_ParseTuple(args, "O!nn", &PyList_Type, &refs, &start, &stop))
        return NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    /* Level by level: refs[start:stop], then what the last level added to ``out`` (its
     * reference there stands for the one ``refs`` had: the same count, 2, marks one held
     * once). */
    PyObject *level = refs;
    Py_ssize_t from = start < 0 ? 0 : start;
    Py_ssize_t end = stop < PyList_Size(refs) ? stop : PyList_Size(refs);
    for (int depth = 0; depth < HELD_ONCE_DEPTH && from < end; depth++) {
        Py_ssize_t before = PyList_Size(out);
        for (Py_ssize_t i = from; i < end; i++) {
            PyObject *op = PyList_GetItem(level, i);  /* borrowed: the list holds it */
            traverseproc traverse = held_once_traverse(op, 2);
            if (traverse != NULL && (traverse(op, visit_append, out) != 0 || PyErr_Occurred())) {
                Py_DECREF(out);
                return NULL;
            }
        }
        level = out;
        from = before;
        end = PyList_Size(out);
    }
    return out;
}

PyDoc_STRVAR(frame_locals_doc,
"frame_locals(frame, frame_type, code, nlocals, f_frame_offset, code_offset, frame_obj_offset,\n"
"             localsplus_offset) -> list or None\n\n"
"The first ``nlocals`` fast locals of a frame (None for an unbound one), read from its\n"
"interpreter frame (3.11+) or, with ``f_frame_offset`` 0, from the frame object itself (3.10:\n"
"``localsplus_offset`` is its f_localsplus, ``nlocals`` at most its size) in this one call,\n"
"holding the GIL: the frame's thread cannot move meanwhile. Never f_locals, which on a\n"
"running frame writes into it. None when the layout does not match: the interpreter frame\n"
"must point back at ``frame`` (3.11+) and at ``code`` (roots.py gives the offsets per\n"
"version). Runs no Python code.");

static PyObject *
frame_locals(PyObject *module, PyObject *args)
{
    PyObject *frame, *frame_type, *code;
    Py_ssize_t nlocals, f_frame_off, code_off, obj_off, plus_off;
    if (!PyArg_ParseTuple(args, "OOOnnnnn", &frame, &frame_type, &code, &nlocals, &f_frame_off,
                          &code_off, &obj_off, &plus_off))
        return NULL;
    /* 3.10: the frame object is its own interpreter frame, its locals at its end */
    int own = f_frame_off == 0;
    if ((PyObject *)Py_TYPE(frame) != frame_type || nlocals < 0 || nlocals > 65536
        || (own ? nlocals > Py_SIZE(frame) || plus_off < 64 || plus_off > 512
                : f_frame_off < 16 || f_frame_off > 64 || plus_off < 64 || plus_off > 128)
        || code_off < 0 || code_off > 64 || obj_off < 0 || obj_off > 64
        || (f_frame_off | code_off | obj_off | plus_off) % (Py_ssize_t)sizeof(void *)) {
        PyErr_SetString(PyExc_ValueError, "frame_locals: not a frame, or offsets out of range");
        return NULL;
    }
    /* Allocated before the frame is read: an allocation can run a collection, and with it
     * finalizers that may let the frame's thread run. Nothing below allocates. */
    PyObject *out = PyList_New(nlocals);
    if (out == NULL)
        return NULL;
    char *iframe = own ? (char *)frame : *(char **)((char *)frame + f_frame_off);
    if (iframe == NULL || *(PyObject **)(iframe + code_off) != code
        || (!own && *(PyObject **)(iframe + obj_off) != frame)) {
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

PyDoc_STRVAR(stringio_parts_doc,
"stringio_parts(obj, stringio_type, basicsize, layout) -> (bytes, (object or None, ...)) or None\n\n"
"An io.StringIO's storage, which its __sizeof__ and gc.get_referents leave out: its buffer\n"
"of UCS4 characters (``buf_size`` of them, the bytes requested) and, while it accumulates\n"
"writes, what holds them: 3.10/3.11 (layout 1) its _PyAccu's two lists, 3.12/3.13 (layout\n"
"2) its _PyUnicodeWriter's str. The fields are read in this one call, holding the GIL, at\n"
"the offsets every one of those versions has on a 64-bit build (buf, pos, string_size,\n"
"buf_size, state, then the accumulator); ``basicsize`` is the type's, checked by the caller\n"
"(sizes.py). None when the object does not look as expected. Runs no Python code.");

static PyObject *
stringio_parts(PyObject *module, PyObject *args)
{
    PyObject *obj, *type;
    Py_ssize_t basicsize;
    int layout;
    if (!PyArg_ParseTuple(args, "OOni", &obj, &type, &basicsize, &layout))
        return NULL;
    if (!PyType_Check(type) || !PyObject_TypeCheck(obj, (PyTypeObject *)type) || (layout != 1 && layout != 2)
        || sizeof(void *) != 8 || basicsize != (layout == 1 ? 120 : 168)) {
        PyErr_SetString(PyExc_ValueError, "stringio_parts: not a StringIO of a known layout");
        return NULL;
    }
    /* Allocated before the object is read (an allocation can run a collection, and with it
     * finalizers that may let another thread write to it). Nothing below allocates. */
    PyObject *held = PyTuple_New(2);
    if (held == NULL)
        return NULL;
    PyObject *found[2] = {NULL, NULL};
    const char *p = (const char *)obj;
    const void *buf = *(void *const *)(p + 16);
    Py_ssize_t pos = *(const Py_ssize_t *)(p + 24), size = *(const Py_ssize_t *)(p + 32);
    size_t buf_size = *(const size_t *)(p + 40);
    int state = *(const int *)(p + 48);
    if ((state != 1 && state != 2) || pos < 0 || size < 0 || buf_size > ((size_t)1 << 40)) {
        Py_DECREF(held);
        Py_RETURN_NONE;
    }
    if (state == 2) {  /* accumulating */
        PyObject *first = *(PyObject *const *)(p + 56);
        if (layout == 1) {  /* _PyAccu: large, small (lists, either may be NULL) */
            PyObject *second = *(PyObject *const *)(p + 64);
            if ((first != NULL && !PyList_CheckExact(first)) || (second != NULL && !PyList_CheckExact(second))) {
                Py_DECREF(held);
                Py_RETURN_NONE;
            }
            found[0] = first;
            found[1] = second;
        } else {  /* _PyUnicodeWriter: its buffer, a str (NULL before the first write) */
            if (first != NULL && !PyUnicode_CheckExact(first)) {
                Py_DECREF(held);
                Py_RETURN_NONE;
            }
            found[0] = first;
        }
    }
    long long bytes = buf != NULL ? (long long)buf_size * 4 : 0;
    for (int k = 0; k < 2; k++) {
        PyObject *one = found[k] != NULL ? found[k] : Py_None;
        Py_INCREF(one);
        PyTuple_SetItem(held, k, one);  /* (no allocation: the references are ours from here) */
    }
    return Py_BuildValue("(LN)", bytes, held);
}

/* zlib's internal states (deflate.h, inflate.h of zlib 1.2.9 to 1.3.1, 64-bit): the bytes of
 * each struct as zlib 1.2.13 allocates it, and the fields read. Every block is zlib's
 * ZALLOC, which CPython's zlib module routes to PyMem_RawMalloc. */
#define ZLIB_DEFLATE_STATE 5936
#define ZLIB_INFLATE_STATE 7144
#define ZLIB_STREAM_STATE 56        /* z_stream.state */
#define ZLIB_MODE_FIRST 16180       /* inflate_mode HEAD .. SYNC (zlib 1.2.9+) */
#define ZLIB_MODE_LAST 16211

PyDoc_STRVAR(zlib_state_blocks_doc,
"zlib_state_blocks(obj, zlib_type, basicsize, kind) -> (int, ...) or None\n\n"
"The blocks a zlib stream object's C state holds, which its __sizeof__ leaves out (a\n"
"compressobj() is ~262 KB of them): kind 1, a zlib.Compress (deflate's state, window, prev,\n"
"head and pending buffer); 2, a zlib.Decompress (inflate's state and window, once it has\n"
"one); 3, a zlib._ZlibDecompressor (the same, and the input it keeps). ``obj``'s type must\n"
"be ``zlib_type`` exactly, whose basic size (the caller's check, sizes.py) is the layout's\n"
"(168; 184 for kind 3); its z_stream sits after the object's head. The state is read only where it points back to\n"
"that z_stream and its fields agree with each other (a window of 1 << bits bytes, its mask,\n"
"the hash table's size, bits and mask): another zlib's layout gives None. Runs no Python\n"
"code, holding the GIL (zlib's state is made and freed only under it).");

static PyObject *
zlib_state_blocks(PyObject *module, PyObject *args)
{
    PyObject *obj, *type;
    Py_ssize_t basicsize;
    int kind;
    if (!PyArg_ParseTuple(args, "OOni", &obj, &type, &basicsize, &kind))
        return NULL;
    if (!PyType_Check(type) || Py_TYPE(obj) != (PyTypeObject *)type || kind < 1 || kind > 3
        || sizeof(void *) != 8 || basicsize != (kind == 3 ? 184 : 168)) {
        PyErr_SetString(PyExc_ValueError, "zlib_state_blocks: not a zlib stream object of a known layout");
        return NULL;
    }
    const char *zst = (const char *)obj + 16;
    const char *s = *(const char *const *)(zst + ZLIB_STREAM_STATE);
    if (s == NULL || ((uintptr_t)s & 7) != 0 || *(const char *const *)s != zst)
        Py_RETURN_NONE;  /* ended (flushed), or not a state of this stream */
    unsigned long long blocks[5] = {0, 0, 0, 0, 0};
    int n;
    if (kind == 1) {
        uint32_t w_size = *(const uint32_t *)(s + 80), w_bits = *(const uint32_t *)(s + 84);
        uint32_t w_mask = *(const uint32_t *)(s + 88), hash_size = *(const uint32_t *)(s + 132);
        uint32_t hash_bits = *(const uint32_t *)(s + 136), hash_mask = *(const uint32_t *)(s + 140);
        unsigned long long window_size = *(const unsigned long long *)(s + 104);
        unsigned long long pending_size = *(const unsigned long long *)(s + 24);
        if (w_bits < 8 || w_bits > 16 || w_size != (1u << w_bits) || w_mask != w_size - 1
            || window_size != 2ull * w_size || hash_bits < 7 || hash_bits > 16 || hash_size != (1u << hash_bits)
            || hash_mask != hash_size - 1 || pending_size > (1ull << 20))
            Py_RETURN_NONE;
        blocks[0] = ZLIB_DEFLATE_STATE;
        blocks[1] = 2ull * w_size;     /* window: 2 * w_size bytes */
        blocks[2] = 2ull * w_size;     /* prev: w_size Pos (ush) */
        blocks[3] = 2ull * hash_size;  /* head: hash_size Pos */
        blocks[4] = pending_size;
        n = 5;
    }
    else {
        uint32_t mode = *(const uint32_t *)(s + 8), wbits = *(const uint32_t *)(s + 56);
        uint32_t wsize = *(const uint32_t *)(s + 60), whave = *(const uint32_t *)(s + 64);
        const void *window = *(const void *const *)(s + 72);
        if (mode < ZLIB_MODE_FIRST || mode > ZLIB_MODE_LAST || wbits > 15 || (wsize != 0 && wsize != (1u << wbits))
            || whave > wsize)
            Py_RETURN_NONE;
        blocks[0] = ZLIB_INFLATE_STATE;
        blocks[1] = window != NULL ? (1ull << wbits) : 0;
        n = 2;
        if (kind == 3) {  /* input_buffer, input_buffer_size: after zdict, lock, unused_data */
            const void *input = *(const void *const *)((const char *)obj + 152);
            Py_ssize_t size = *(const Py_ssize_t *)((const char *)obj + 160);
            blocks[2] = input != NULL && size > 0 && size < ((Py_ssize_t)1 << 40) ? (unsigned long long)size : 0;
            n = 3;
        }
    }
    PyObject *out = PyTuple_New(n);  /* (the fields are copied: an allocation may run code) */
    if (out == NULL)
        return NULL;
    for (int k = 0; k < n; k++) {
        PyObject *one = PyLong_FromUnsignedLongLong(blocks[k]);
        if (one == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SetItem(out, k, one);
    }
    return out;
}

/* The C state of bz2's and lzma's stream objects, which their __sizeof__ leaves out: a
 * BZ2Compressor(9) holds ~7.5 MB of blocks, a BZ2Decompressor ~3.7 MB once it has read a
 * block, an LZMADecompressor of the default preset's streams ~8.4 MB. bz2's are read from
 * its state's fields (bzlib_private.h of bzip2 1.0.6-1.0.8, 64-bit: EState's arr1, arr2 and
 * ftab; DState's tt, ll16 and ll4), each a glibc chunk checked as such (its header and, in
 * an arena, the next chunk's "previous in use" bit, inside the heap's ranges this process
 * has: ``ranges``, the main arena's and the anonymous mappings, where the other arenas and
 * the mmapped chunks are), so that a field of another layout counts nothing; every read goes
 * through process_vm_readv on this process (a wrong address reads nothing: no fault; where a
 * seccomp profile refuses it, nothing is counted). lzma's are liblzma's own count
 * (lzma_memusage, which decoders keep: their dictionary and coders). */
int
self_read(void *to, uintptr_t from, size_t n)
{
    struct iovec local = {to, n}, remote = {(void *)from, n};
    return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == (ssize_t)n ? 0 : -1;
}

const HeapRange *
heap_range_of(const HeapRange *ranges, Py_ssize_t n, uintptr_t address)
{
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (ranges[mid].end <= address)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && ranges[lo].start <= address ? &ranges[lo] : NULL;
}

/* The size of the glibc chunk whose header is at ``chunk`` (prev_size, or an mmapped chunk's
 * offset in its mapping, then size and flags), its offset in *offset (-1: a chunk in an
 * arena); 0 if the header, or after an arena chunk the next chunk's (its previous-in-use bit
 * set, a size of 16-byte granules), is no chunk's. ``r``: the heap range it lies in, whose
 * bounds and kind (the main arena's heap, anonymous mappings) it must fit; NULL where none is
 * known (every read goes through process_vm_readv all the same). */
uint64_t
glibc_chunk_header(uintptr_t chunk, const HeapRange *r, int64_t *offset)
{
    uint64_t head[2];
    if (self_read(head, chunk, 16) < 0)
        return 0;
    if (head[1] & 2) {
        uint64_t size = glibc_mmapped_size(chunk, r, head);
        *offset = (int64_t)head[0];
        return size;
    }
    uint64_t size = glibc_arena_size(chunk, r, head[1]);
    uint64_t next;
    if (size == 0 || self_read(&next, chunk + size + 8, 8) < 0 || !glibc_arena_next_ok(chunk, head, size, r, next))
        return 0;
    *offset = -1;
    return size;
}

/* The size of the chunk at ``chunk`` whose header is ``head`` (prev_size, size) if glibc
 * mmapped it on its own (a big allocation's): its offset in its mapping in prev_size, its size
 * a page multiple, inside ``r`` (an anonymous mapping; NULL: none known); else 0. */
uint64_t
glibc_mmapped_size(uintptr_t chunk, const HeapRange *r, const uint64_t *head)
{
    uint64_t at = head[0], size = head[1] & ~(uint64_t)7;
    if (!(head[1] & 2) || (at & 15) != 0 || at >= 65536 || chunk < at || ((chunk - at) & 4095) != 0
        || (size & 4095) != 0 || size == 0 || (r != NULL && (r->main || chunk - at < r->start || chunk + size > r->end)))
        return 0;
    return size;
}

/* glibc's arenas but the main one live in heaps: mappings of GLIBC_HEAP_MAX bytes at most,
 * aligned to it, each starting with its heap_info (the arena's malloc_state, its previous heap,
 * the bytes in use, ...). An anonymous mapping is no heap otherwise (pymalloc's arenas, a
 * numpy buffer): a pair of words there that reads as a chunk's header and the next one's is
 * no chunk. Measured on a real worker (677 pydantic validators and their serializers): a stale
 * word of a validator's reached such a "chunk" of 7.5 MB inside pymalloc's arenas, one run in
 * three, and took it. (glibc's default: 2 * 4 MiB * sizeof(long); its hugetlb tunable makes
 * heaps of another size, whose chunks are then not counted: less, never another's.) */
#define GLIBC_HEAP_MAX ((uint64_t)64 << 20)
#define GLIBC_HEAP_OF(chunk) ((uint64_t)(chunk) & ~(GLIBC_HEAP_MAX - 1))  /* its heap's start */
#define GLIBC_HEAP_SLOTS 1024  /* (a slot per aligned start, by its bits: 64 GiB without a clash) */

/* The heaps looked at since glibc_heaps_forget: (start + 1, bytes in use; 0: no heap), in
 * the slot of their start's bits; a start met again in a slot another took is read again. */
static uint64_t heap_start[GLIBC_HEAP_SLOTS], heap_used[GLIBC_HEAP_SLOTS];

/* Forget the heaps looked at (a heap may be freed, its address mapped again): called by each
 * function that is given the heap's ranges, before it reads a chunk. */
void
glibc_heaps_forget(void)
{
    memset(heap_start, 0, sizeof(heap_start));
}

/* The bytes in use of the glibc heap at ``start`` (its heap_info's), 0 if it is none: a size of
 * pages up to GLIBC_HEAP_MAX, a previous heap at an aligned address or none, an arena right
 * after a heap_info (32 bytes; 48 from glibc 2.35) at the start of an aligned heap. */
static uint64_t
glibc_heap_used(uint64_t start)
{
    size_t slot = (size_t)(start / GLIBC_HEAP_MAX) % GLIBC_HEAP_SLOTS;
    if (heap_start[slot] == start + 1)
        return heap_used[slot];
    uint64_t info[3];  /* ar_ptr, prev, size */
    uint64_t used = 0;
    if (self_read(info, (uintptr_t)start, sizeof(info)) == 0) {
        uint64_t arena_at = info[0] & (GLIBC_HEAP_MAX - 1);
        if (info[2] != 0 && info[2] <= GLIBC_HEAP_MAX && (info[2] & 4095) == 0
            && (info[1] & (GLIBC_HEAP_MAX - 1)) == 0 && (arena_at == 32 || arena_at == 48))
            used = info[2];
    }
    heap_start[slot] = start + 1;
    heap_used[slot] = used;
    return used;
}

/* The size of the arena chunk at ``chunk`` whose size word is ``word`` (flags in its low bits),
 * 0 if it is no arena chunk's (mmapped, or not of ``r``'s kind and bounds: the main arena in the
 * main heap, the others in anonymous mappings, inside a glibc heap's bytes in use). */
uint64_t
glibc_arena_size(uintptr_t chunk, const HeapRange *r, uint64_t word)
{
    uint64_t size = word & ~(uint64_t)7, flags = word & 7;
    if ((flags & 2) || size < 32 || (size & 15) != 0 || size > ((uint64_t)1 << 36)
        || (r != NULL && ((!(flags & 4)) != (r->main != 0) || chunk + size + 16 > r->end)))
        return 0;
    if (flags & 4) {
        uint64_t start = GLIBC_HEAP_OF(chunk);
        if (chunk < start + 32 || chunk + size + 16 > start + glibc_heap_used(start))
            return 0;
    }
    return size;
}

/* A chunk of GLIBC_CHAIN_MIN bytes or more is taken only where the chunks after it read as
 * chunks too, for GLIBC_CHAIN_HOPS of them or up to the end of its heap, and its own data does
 * not: a stale word that points at another chunk's start (16 bytes short of where a chunk
 * once began) finds a "size" in the data before it, and a chain of headers right after.
 * Measured on a real worker (677 TypeAdapters of openai's models): such a word of a
 * validator's found 6.6 MB one run in four (1.05-1.06 of what freeing them returns, 0.96
 * otherwise), the size read in a string's tail ("age\0", "ate\0"). */
#define GLIBC_CHAIN_MIN ((uint64_t)64 << 10)
#define GLIBC_CHAIN_HOPS 8

static int
glibc_chain_ok(uint64_t at, uint64_t word, uint64_t nonmain, uint64_t end)
{
    for (int hop = 0;; hop++) {
        uint64_t size = word & ~(uint64_t)7;
        if ((word & 2) || ((word & 4) != 0) != (nonmain != 0) || (size & 15) != 0 || size < 16 || at + size > end)
            return 0;
        if (size < 32 || at + size + 16 > end || hop + 1 == GLIBC_CHAIN_HOPS)
            return 1;  /* a fencepost (a heap's end), the end of the heap, or far enough */
        at += size;
        if (self_read(&word, (uintptr_t)at + 8, 8) < 0)
            return 0;
    }
}

/* Whether ``next``, the size word after the arena chunk at ``chunk`` of ``size`` bytes whose
 * header is ``head`` (prev_size, size), is a chunk's whose previous one is in use, inside ``r``
 * (and after a big chunk, glibc_chain_ok). */
int
glibc_arena_next_ok(uintptr_t chunk, const uint64_t *head, uint64_t size, const HeapRange *r, uint64_t next)
{
    uint64_t next_size = next & ~(uint64_t)7;
    if (!(next & 1) || next_size < 16 || (next_size & 15) != 0 || (r != NULL && chunk + size + next_size > r->end))
        return 0;
    if (size < GLIBC_CHAIN_MIN || r == NULL)
        return 1;
    uint64_t start = r->main ? r->start : GLIBC_HEAP_OF(chunk) + 32;
    uint64_t end = r->main ? r->end : GLIBC_HEAP_OF(chunk) + glibc_heap_used(GLIBC_HEAP_OF(chunk));
    if (!glibc_chain_ok((uint64_t)chunk + size, next, !r->main, end))
        return 0;
    /* where the chunk before it is free (its "previous in use" bit clear), prev_size is that
     * chunk's size, written at its start too, and the one before that is in use (glibc merges
     * free neighbours; its fast bins' chunks count as in use). An 11.2 MB "chunk" so found in
     * a Rust table's buckets had a prev_size of 0xa6000000000000. */
    if (!(head[1] & 1)) {
        uint64_t before = head[0], prev[2];
        if (before < 32 || (before & 15) != 0 || before > (uint64_t)chunk - start
            || self_read(prev, chunk - before, sizeof(prev)) < 0 || (prev[1] & ~(uint64_t)7) != before || !(prev[1] & 1))
            return 0;
    }
    /* a word 16 bytes short of a chunk's start, whose data starts with that chunk's header (a
     * chain of them): the 6.6 MB were such a word, twice, the size read in the text before */
    uint64_t inner[2];
    return self_read(inner, chunk + 16, sizeof(inner)) < 0 || !(inner[1] & 1)
           || !glibc_chain_ok((uint64_t)chunk + 16, inner[1], !r->main, end);
}

/* The bytes of the live glibc chunk whose user pointer is ``p`` (as mallinfo counts them: the
 * chunk's size, an mmapped chunk's mapping), 0 if ``p`` starts none. */
static unsigned long long
glibc_chunk_bytes(uintptr_t p, const HeapRange *ranges, Py_ssize_t n)
{
    if ((p & 15) != 0 || p < 16)
        return 0;
    const HeapRange *r = heap_range_of(ranges, n, p - 16);
    int64_t offset;
    uint64_t size = r != NULL ? glibc_chunk_header(p - 16, r, &offset) : 0;
    return size + (size != 0 && offset > 0 ? (uint64_t)offset : 0);
}

/* The chunks of the pointers at ``state + offsets[k]``, each at least ``least[k]`` bytes if
 * not NULL; -1 if one is not such a chunk. */
static long long
field_chunks(uintptr_t state, const int *offsets, const unsigned long long *least, int count,
             const HeapRange *ranges, Py_ssize_t n)
{
    long long total = 0;
    for (int k = 0; k < count; k++) {
        uintptr_t p;
        if (self_read(&p, state + (uintptr_t)offsets[k], 8) < 0)
            return -1;
        if (p == 0)
            continue;
        unsigned long long size = glibc_chunk_bytes(p, ranges, n);
        if (size == 0 || size < least[k])
            return -1;
        total += (long long)size;
    }
    return total;
}

typedef uint64_t (*lzma_memusage_fn)(const void *);

/* An lzma encoder's count: liblzma keeps none for encoders (lzma_memusage answers 0), but it
 * computes one for a filter chain (lzma_raw_encoder_memusage, which lzma_easy_encoder_memusage
 * is: 97,620,491 bytes for the default preset, 97,594,160 freed by ending such a stream). The
 * xz stream encoder keeps its chain (lzma_stream_coder.filters, after its block encoder and
 * block options): looked for in the coder's first bytes as the one run of (filter id, options)
 * pairs ending with LZMA_VLI_UNKNOWN whose last filter is LZMA2 with options of sane values
 * (dictionary, lc/lp/pb, mode, nice_len, match finder). The count is asked of a chain of our
 * own (LZMA2 with a copy of those options): the library reads nothing of the target's. */
#define LZMA_FILTER_LZMA2 0x21ull
#define LZMA_VLI_UNKNOWN (~0ull)
#define LZMA_OPTIONS_BYTES 96     /* lzma_options_lzma, 64-bit */
#define LZMA_CODER_SCAN 1536      /* the stream coder's bytes looked at */

static int
lzma_filter_id_known(uint64_t id)
{
    return (id >= 0x03 && id <= 0x0B) || id == LZMA_FILTER_LZMA2 || id == 0x4000000000000001ull
        || id == 0x4000000000000002ull;
}

/* Whether ``opts`` (LZMA_OPTIONS_BYTES) are an lzma_options_lzma's of sane values. */
static int
lzma_options_sane(const unsigned char *opts)
{
    uint32_t f[12];
    memcpy(f, opts + 16, sizeof(f));  /* preset_dict_size, lc, lp, pb, mode, nice_len, mf, depth, ... */
    uint32_t dict_size;
    memcpy(&dict_size, opts, 4);
    uint32_t lc = f[1], lp = f[2], pb = f[3], mode = f[4], nice_len = f[5], mf = f[6];
    return dict_size >= 4096 && dict_size <= (1u << 30) + (1u << 29) && lc <= 4 && lp <= 4 && lc + lp <= 4
        && pb <= 4 && (mode == 1 || mode == 2) && nice_len >= 2 && nice_len <= 273
        && (mf == 0x03 || mf == 0x04 || mf == 0x12 || mf == 0x13 || mf == 0x14);
}

/* liblzma's count for the chain the stream coder ``coder`` keeps, -1 where none is found. */
static long long
lzma_encoder_bytes(uintptr_t coder, uint64_t (*raw_memusage)(const void *), const HeapRange *ranges, Py_ssize_t n)
{
    unsigned long long size = glibc_chunk_bytes(coder, ranges, n);
    size_t len = size > 16 ? (size_t)(size - 16) : 0;
    if (len > LZMA_CODER_SCAN)
        len = LZMA_CODER_SCAN;
    uint64_t words[LZMA_CODER_SCAN / 8];
    if (len < 64 || self_read(words, coder, len) < 0)
        return -1;
    size_t count = len / 8;
    unsigned char found_opts[LZMA_OPTIONS_BYTES];
    int matches = 0;
    for (size_t w = 0; w + 3 < count && matches < 2; w++) {
        size_t k = w, filters = 0;
        uint64_t last = 0, last_opts = 0;
        while (k + 1 < count && filters < 4 && lzma_filter_id_known(words[k])) {
            last = words[k];
            last_opts = words[k + 1];
            filters++;
            k += 2;
        }
        if (filters == 0 || k >= count || words[k] != LZMA_VLI_UNKNOWN || last != LZMA_FILTER_LZMA2 || last_opts == 0)
            continue;
        unsigned char opts[LZMA_OPTIONS_BYTES];
        if (self_read(opts, (uintptr_t)last_opts, sizeof(opts)) < 0 || !lzma_options_sane(opts))
            continue;
        memcpy(found_opts, opts, sizeof(opts));
        matches++;
        w = k;  /* past this chain */
    }
    if (matches != 1)
        return -1;
    memset(found_opts + 8, 0, 8);    /* preset_dict: none (it is not counted) */
    memset(found_opts + 80, 0, 16);  /* the reserved pointers */
    struct {
        uint64_t id;
        void *options;
    } chain[2] = {{LZMA_FILTER_LZMA2, found_opts}, {LZMA_VLI_UNKNOWN, NULL}};
    uint64_t bytes = raw_memusage(chain);
    return bytes == UINT64_MAX || bytes > ((uint64_t)1 << 40) ? -1 : (long long)bytes;
}

PyDoc_STRVAR(stream_state_bytes_doc,
"stream_state_bytes(obj, type, basicsize, kind, ranges) -> (int, int) or None\n\n"
"The bytes of the C state of a compression stream object, and the size of the input it\n"
"keeps (its ``input_buffer``): kind 1, an _lzma.LZMADecompressor (basic size 224: liblzma's\n"
"lzma_memusage of its stream, found in the liblzma.so.5 this process has loaded); 4, an\n"
"_lzma.LZMACompressor of the xz format (192: liblzma's lzma_raw_encoder_memusage of the chain\n"
"its stream encoder keeps, lzma_encoder_bytes); 2, a\n"
"_bz2.BZ2Compressor (112); 3, a _bz2.BZ2Decompressor (152). ``obj``'s type must be ``type``\n"
"exactly (the caller's check of the class, sizes.py). bz2's state is read only where it\n"
"points back to the object's stream and its block size agrees; ``ranges``: bytes of\n"
"(start, end, main) uint64 triples, sorted, disjoint. None: no state (ended), another\n"
"layout, or nothing read. Runs no Python code.");

static PyObject *
stream_state_bytes(PyObject *module, PyObject *args)
{
    PyObject *obj, *type, *ranges;
    Py_ssize_t basicsize;
    int kind;
    static const Py_ssize_t basicsizes[] = {0, 224, 112, 152, 192};
    static lzma_memusage_fn lzma_memusage;
    static uint64_t (*raw_memusage)(const void *);
    static int looked_up;
    if (!PyArg_ParseTuple(args, "OOniO!", &obj, &type, &basicsize, &kind, &PyBytes_Type, &ranges))
        return NULL;
    if (!PyType_Check(type) || Py_TYPE(obj) != (PyTypeObject *)type || kind < 1 || kind > 4
        || sizeof(void *) != 8 || basicsize != basicsizes[kind] || PyBytes_Size(ranges) % (Py_ssize_t)sizeof(HeapRange) != 0) {
        PyErr_SetString(PyExc_ValueError, "stream_state_bytes: not a stream object of a known layout");
        return NULL;
    }
    const char *o = (const char *)obj;
    const HeapRange *heap = (const HeapRange *)PyBytes_AsString(ranges);
    Py_ssize_t n = PyBytes_Size(ranges) / (Py_ssize_t)sizeof(HeapRange);
    glibc_heaps_forget();
    long long bytes = -1, input = 0;
    if (kind == 1 || kind == 4) {  /* lzma_allocator at 16, lzma_stream at 40: its allocator (+48), internal (+56) */
        if (!looked_up) {
            void *lib = dlopen("liblzma.so.5", RTLD_NOW | RTLD_NOLOAD);
            if (lib != NULL) {
                lzma_memusage = (lzma_memusage_fn)dlsym(lib, "lzma_memusage");
                raw_memusage = (uint64_t (*)(const void *))dlsym(lib, "lzma_raw_encoder_memusage");
                dlclose(lib);  /* the module's reference keeps it loaded */
            }
            looked_up = 1;
        }
        uintptr_t internal = *(const uintptr_t *)(o + 96), coder;
        if (*(const void *const *)(o + 88) != (const void *)(o + 16) || internal == 0)
            Py_RETURN_NONE;
        if (kind == 1) {
            if (lzma_memusage != NULL)
                bytes = (long long)lzma_memusage(o + 40);
            if (*(const void *const *)(o + 200) != NULL)
                input = *(const long long *)(o + 208);
        }
        else if (raw_memusage != NULL && self_read(&coder, internal, 8) == 0 && coder != 0) {
            bytes = lzma_encoder_bytes(coder, raw_memusage, heap, n);  /* (lzma_internal.next.coder) */
        }
    }
    else {  /* bz_stream at 16: its state (+48), whose first field is the stream */
        uintptr_t state = *(const uintptr_t *)(o + 64), back;
        unsigned long long state_bytes = state != 0 ? glibc_chunk_bytes(state, heap, n) : 0;
        if (state_bytes < 4096 || self_read(&back, state, 8) < 0 || back != (uintptr_t)(o + 16))
            Py_RETURN_NONE;
        int32_t fields[2];
        if (kind == 2) {  /* EState: nblockMAX (112), blockSize100k (664); arr1, arr2, ftab */
            static const int offsets[] = {24, 32, 40};
            if (self_read(&fields[0], state + 112, 4) < 0 || self_read(&fields[1], state + 664, 4) < 0
                || fields[1] < 1 || fields[1] > 9 || fields[0] != 100000 * fields[1] - 19)
                Py_RETURN_NONE;
            unsigned long long items = 100000ull * (unsigned long long)fields[1];
            const unsigned long long least[] = {items * 4, items * 4, 65537 * 4};
            bytes = field_chunks(state, offsets, least, 3, heap, n);
        }
        else {  /* DState: blockSize100k (40), smallDecompress (44, a byte); tt, ll16, ll4 */
            static const int offsets[] = {3152, 3160, 3168};
            if (self_read(fields, state + 40, 8) < 0 || fields[0] < 0 || fields[0] > 9 || (fields[1] & 0xff) > 1)
                Py_RETURN_NONE;
            static const unsigned long long least[] = {0, 0, 0};
            bytes = field_chunks(state, offsets, least, 3, heap, n);
            if (*(const void *const *)(o + 120) != NULL)
                input = *(const long long *)(o + 128);
        }
        if (bytes >= 0)
            bytes += (long long)state_bytes;
    }
    if (bytes < 0)
        Py_RETURN_NONE;
    if (input < 0 || input > ((long long)1 << 40))
        input = 0;
    return Py_BuildValue("(LL)", bytes, input);
}

/* hashlib's OpenSSL digest objects (_hashlib.HASH, HASHXOF: ``EVP_MD_CTX *ctx`` after the
 * header; then, before 3.13, a ``PyThread_type_lock`` made once the object has hashed a big
 * buffer): sys.getsizeof says 32 bytes, and the context and the provider's digest state (a
 * sha256's 128 bytes, a sha3's 432) are outside it. The context is a glibc chunk (checked as
 * such); what it owns is each word of it that starts another chunk (the provider's state, a
 * legacy digest's md_data), but the digest method it points to (EVP_MD_CTX_get0_md: a fetched
 * method every context of that algorithm shares) and any word it holds twice (the method it
 * runs and the one it fetched, where the one asked for was another). Every read goes
 * through process_vm_readv. */
#define EVP_CTX_MAX_BYTES 512
#define EVP_OWN_MAX_BYTES 65536
#define HMAC_CTX_MAX_BYTES 128
typedef const void *(*evp_md_of_fn)(const void *);

/* The bytes of the digest context at ``ctx`` (a glibc chunk of ``size`` bytes: a context's
 * size, else -1) and of the chunks it owns: each word that starts one, but its method
 * (``md_of(ctx)``, asked once the chunk is known to be a context's size) and a word it holds
 * twice. */
static long long
evp_ctx_bytes(uintptr_t ctx, unsigned long long size, evp_md_of_fn md_of, const HeapRange *heap, Py_ssize_t n)
{
    if (size < 48 || size > EVP_CTX_MAX_BYTES)
        return -1;
    uint64_t words[EVP_CTX_MAX_BYTES / 8];
    size_t nwords = (size_t)(size - 8) / 8;  /* its usable words (an arena chunk's) */
    if (self_read(words, ctx, nwords * 8) < 0)
        return -1;
    uintptr_t md = (uintptr_t)md_of((const void *)ctx);
    long long total = (long long)size;
    for (size_t k = 0; k < nwords; k++) {
        uintptr_t w = (uintptr_t)words[k];
        if (w == 0 || w == md || w == ctx)
            continue;
        /* a word the context holds twice is a method's too (the digest it runs and the one it
         * fetched, where the one asked for was another: a legacy static one) */
        int again = 0;
        for (size_t j = 0; j < nwords && !again; j++)
            again = j != k && (uintptr_t)words[j] == w;
        if (again)
            continue;
        unsigned long long own = glibc_chunk_bytes(w, heap, n);
        if (own > 0 && own <= EVP_OWN_MAX_BYTES)
            total += (long long)own;
    }
    return total;
}

PyDoc_STRVAR(evp_digest_bytes_doc,
"evp_digest_bytes(obj, type, basicsize, has_lock, ranges[, hmac]) -> int or None\n\n"
"The bytes of the OpenSSL digest context of a _hashlib.HASH (or HASHXOF) object ``obj`` of\n"
"exactly ``type`` (basic size ``basicsize``: 32), and of the chunks it owns, and of its lock\n"
"(``has_lock``: before 3.13, a pointer after the context's); ``ranges`` as for\n"
"stream_state_bytes. ``hmac``: a _hashlib.HMAC, whose HMAC_CTX holds three digest contexts\n"
"(and the method, HMAC_CTX_get_md, which is shared). None where a context is not a glibc\n"
"chunk of a context's size, or OpenSSL's getters (EVP_MD_CTX_get0_md, EVP_MD_CTX_md before\n"
"3.0) are not found. Runs no Python code.");

static PyObject *
evp_digest_bytes(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *obj, *type, *ranges;
    Py_ssize_t basicsize;
    int has_lock, hmac = 0;
    static evp_md_of_fn md_of, hmac_md_of;
    static int looked_up;
    if (!PyArg_ParseTuple(args, "OOnpO!|p", &obj, &type, &basicsize, &has_lock, &PyBytes_Type, &ranges, &hmac))
        return NULL;
    if (!PyType_Check(type) || Py_TYPE(obj) != (PyTypeObject *)type || basicsize != 32 || sizeof(void *) != 8
        || PyBytes_Size(ranges) % (Py_ssize_t)sizeof(HeapRange) != 0) {
        PyErr_SetString(PyExc_ValueError, "evp_digest_bytes: not a digest object of a known layout");
        return NULL;
    }
    if (!looked_up) {
        static const char *libs[] = {"libcrypto.so.3", "libcrypto.so.1.1"};
        for (size_t k = 0; k < sizeof(libs) / sizeof(libs[0]) && md_of == NULL; k++) {
            void *lib = dlopen(libs[k], RTLD_NOW | RTLD_NOLOAD);
            if (lib == NULL)
                continue;
            md_of = (evp_md_of_fn)dlsym(lib, k == 0 ? "EVP_MD_CTX_get0_md" : "EVP_MD_CTX_md");
            hmac_md_of = (evp_md_of_fn)dlsym(lib, "HMAC_CTX_get_md");
            dlclose(lib);  /* _hashlib's reference keeps it loaded */
        }
        looked_up = 1;
    }
    const HeapRange *heap = (const HeapRange *)PyBytes_AsString(ranges);
    Py_ssize_t n = PyBytes_Size(ranges) / (Py_ssize_t)sizeof(HeapRange);
    glibc_heaps_forget();
    uintptr_t ctx = *(const uintptr_t *)((const char *)obj + 16);
    uintptr_t lock = has_lock ? *(const uintptr_t *)((const char *)obj + 24) : 0;
    if (md_of == NULL || (hmac && hmac_md_of == NULL))
        Py_RETURN_NONE;
    long long total = 0;
    /* the object's reference keeps its context; a thread hashing with the GIL released
     * writes its state, not which method it is */
    if (ctx != 0 && !hmac) {
        total = evp_ctx_bytes(ctx, glibc_chunk_bytes(ctx, heap, n), md_of, heap, n);
    }
    else if (ctx != 0) {  /* HMAC_CTX: the method, then its digest contexts */
        unsigned long long size = glibc_chunk_bytes(ctx, heap, n);
        uint64_t words[HMAC_CTX_MAX_BYTES / 8];
        size_t nwords = (size_t)(size - 8) / 8;
        if (size < 32 || size > HMAC_CTX_MAX_BYTES || self_read(words, ctx, nwords * 8) < 0)
            Py_RETURN_NONE;
        uintptr_t md = (uintptr_t)hmac_md_of((const void *)ctx);
        total = (long long)size;
        for (size_t k = 0; k < nwords && total >= 0; k++) {
            uintptr_t w = (uintptr_t)words[k];
            unsigned long long context = w == 0 || w == md || w == ctx ? 0 : glibc_chunk_bytes(w, heap, n);
            if (context == 0)
                continue;
            long long one = evp_ctx_bytes(w, context, md_of, heap, n);
            total = one < 0 ? -1 : total + one;
        }
    }
    if (total < 0)
        Py_RETURN_NONE;
    if (lock != 0) {
        unsigned long long size = glibc_chunk_bytes(lock, heap, n);
        if (size > 0 && size <= 256)
            total += (long long)size;
    }
    return PyLong_FromLongLong(total);
}

/* The interpreter's atexit callbacks (3.10-3.13: PyInterpreterState.atexit, a struct of
 * ``atexit_py_callback **callbacks; int ncallbacks; int callback_len;``, each callback
 * {func, args, kwargs}): held from C only, no referent of any object, so a callback's data
 * (a bound method registered per connection) was ``<held from C: ...>``, or in no owner on a
 * heap too big to list every tracked object. The struct's place in the interpreter's state
 * differs by version: it is looked for, word by word, as the one triple whose count is the
 * module's own (atexit._ncallbacks()), whose length is 32 grown by 16 some times (as the
 * module grows it) and whose callbacks are each a callable object with a tuple or NULL and a dict or
 * NULL. Every read goes through process_vm_readv (self_read): a word that is no pointer
 * reads nothing. */
#define ATEXIT_SCAN_BYTES (512 * 1024)
#define ATEXIT_MAX_LEN (1 << 24)

static int
is_object_of(uintptr_t address, PyTypeObject *type)
{
    uintptr_t tp;
    return address != 0 && (address & 7) == 0 && self_read(&tp, address + 8, 8) == 0 && tp == (uintptr_t)type;
}

/* A callable object's address: its type's type is a type (``type`` or a metaclass of it). */
static int
is_plain_object(uintptr_t address)
{
    uintptr_t tp, meta, metameta;
    return address != 0 && (address & 7) == 0 && self_read(&tp, address + 8, 8) == 0 && tp != 0
        && self_read(&meta, tp + 8, 8) == 0
        && (meta == (uintptr_t)&PyType_Type
            || (self_read(&metameta, meta + 8, 8) == 0 && metameta == (uintptr_t)&PyType_Type));
}

/* 1 if ``table`` (``len`` slots, ``count`` used) holds callbacks only, with ``out`` (a list,
 * or NULL: only checked) given each one's func, args and kwargs (None where NULL); 0 if not;
 * -1 on an error. */
static int
atexit_table(uintptr_t table, int count, int len, PyObject *out)
{
    for (int k = 0; k < count; k++) {
        uintptr_t entry, fields[3];
        if (self_read(&entry, table + 8 * (uintptr_t)k, 8) < 0)
            return 0;
        if (entry == 0)
            continue;  /* unregistered */
        if (self_read(fields, entry, 24) < 0 || !is_plain_object(fields[0])
            || (fields[1] != 0 && !is_object_of(fields[1], &PyTuple_Type))
            || (fields[2] != 0 && !is_object_of(fields[2], &PyDict_Type)))
            return 0;
        for (int f = 0; out != NULL && f < 3; f++)
            if (PyList_Append(out, fields[f] != 0 ? (PyObject *)fields[f] : Py_None) < 0)
                return -1;
    }
    return 1;
}

PyDoc_STRVAR(atexit_callbacks_doc,
"atexit_callbacks(ncallbacks) -> list or None\n\n"
"The interpreter's atexit callbacks, as many as ``ncallbacks()`` (atexit._ncallbacks, a C\n"
"function: called here, with no other thread running between it and the reading), as a flat list\n"
"of func, args, kwargs (None where unset) each: read from the interpreter's state where one\n"
"place only has them (3.10-3.13's layout of the struct); None where none or several do.\n"
"Runs no Python code; holding the GIL (the module changes them only under it).");

static PyObject *
atexit_callbacks(PyObject *module, PyObject *ncallbacks)
{
    if (!PyCFunction_Check(ncallbacks)) {
        PyErr_SetString(PyExc_TypeError, "atexit_callbacks: ncallbacks must be a built-in function");
        return NULL;
    }
    PyObject *counted = PyObject_CallObject(ncallbacks, NULL);
    if (counted == NULL)
        return NULL;
    long count = PyLong_AsLong(counted);
    Py_DECREF(counted);
    if (count == -1 && PyErr_Occurred())
        return NULL;
    if (count <= 0 || count > ATEXIT_MAX_LEN || sizeof(void *) != 8)
        Py_RETURN_NONE;
    uintptr_t base = (uintptr_t)PyInterpreterState_Get();
    uint64_t words[512];
    uintptr_t found = 0;
    int found_len = 0, matches = 0;
    for (uintptr_t at = 0; at < ATEXIT_SCAN_BYTES && matches < 2; at += sizeof(words) - 16) {
        if (self_read(words, base + at, sizeof(words)) < 0)
            break;
        for (size_t w = 0; w + 1 < sizeof(words) / 8 && matches < 2; w++) {
            int32_t n = (int32_t)(words[w + 1] & 0xffffffffu), len = (int32_t)(words[w + 1] >> 32);
            if (n != count || len < n || len < 32 || len > ATEXIT_MAX_LEN || (len - 32) % 16 != 0
                || words[w] == 0 || (words[w] & 7) != 0)
                continue;
            if (found == words[w])
                continue;  /* the same triple, read again where two pieces overlap */
            if (atexit_table(words[w], (int)count, len, NULL) == 1) {
                found = words[w];
                found_len = len;
                matches++;
            }
        }
    }
    if (matches != 1)
        Py_RETURN_NONE;
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    int got = atexit_table(found, (int)count, found_len, out);
    if (got != 1) {
        Py_DECREF(out);
        if (got < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    return out;
}

/* SQLite's own count of the memory it holds (sqlite3_memory_used: every connection's page
 * cache, schema and statements, through its allocator), from the SQLite already loaded: the
 * system's libsqlite3 (CPython's _sqlite3 links it) or, where _sqlite3 has it built in, that
 * module's own (``module_file``). Nothing is loaded (RTLD_NOLOAD). It takes SQLite's memory
 * mutex for a moment, with the GIL held: a thread forking meanwhile (os.fork needs the GIL)
 * would leave its child that mutex locked for good, and the child's first SQLite allocation
 * waiting on it; SQLite holds it only inside an allocation, never calling Python, so the
 * wait is short. -1 where there is none, or its count is off (SQLITE_DEFAULT_MEMSTATUS=0
 * builds say 0). */
typedef long long (*sqlite_used_fn)(void);

PyDoc_STRVAR(sqlite_memory_used_doc,
"sqlite_memory_used(module_file) -> bytes, or -1\n\n"
"``module_file``: _sqlite3's file (a str), or None. Runs no Python code.");

/* The handle of the SQLite library this process has loaded that has ``symbol``:
 * libsqlite3.so.0, else _sqlite3's own file (``module_file``, a str or None: a build with
 * SQLite linked in), never loading one; NULL where none has it. The caller dlcloses it (the
 * module's reference keeps it loaded). *error: 1 where ``module_file`` cannot be read (a
 * Python error set). */
static void *
sqlite_library(PyObject *module_file, const char *symbol, int *error)
{
    const char *names[2] = {"libsqlite3.so.0", NULL};
    *error = 0;
    if (PyUnicode_Check(module_file)) {
        names[1] = PyUnicode_AsUTF8AndSize(module_file, NULL);
        if (names[1] == NULL) {
            *error = 1;
            return NULL;
        }
    }
    for (int k = 0; k < 2; k++) {
        void *lib = names[k] != NULL ? dlopen(names[k], RTLD_NOW | RTLD_NOLOAD) : NULL;
        if (lib != NULL && dlsym(lib, symbol) != NULL)
            return lib;
        if (lib != NULL)
            dlclose(lib);
    }
    return NULL;
}

static PyObject *
sqlite_memory_used(PyObject *Py_UNUSED(module), PyObject *module_file)
{
    sqlite_used_fn used = NULL;
    int error;
    void *lib = sqlite_library(module_file, "sqlite3_memory_used", &error);
    if (error)
        return NULL;
    if (lib != NULL) {
        used = (sqlite_used_fn)dlsym(lib, "sqlite3_memory_used");
        dlclose(lib);
    }
    if (used == NULL)
        return PyLong_FromLong(-1);
    long long bytes = used();
    return PyLong_FromLongLong(bytes > 0 ? bytes : -1);
}

/* A connection's own memory, as SQLite counts it (sqlite3_db_status: its page cache, its
 * schemas, its prepared statements): what sqlite3_memory_used counts for all connections,
 * one connection's share. Read only where nothing can wait on it: the connection's mutex
 * taken with sqlite3_mutex_try (a connection another thread is using, inside a query with
 * the GIL released, is skipped; one without a mutex, of a library built without threads, too),
 * and every database of it known to have a cache of its own (one opened with
 * ``cache=shared`` has btree mutexes other connections take too, which the counts take):
 * none of its btrees sharable, read from SQLite's structs (sqlite_btrees_sharable), or where
 * their layout is not the one checked, by its databases' file names (an in-memory database,
 * whose name cannot say, is then not read; before SQLite 3.39, which cannot list the attached
 * ones, main's and temp's are looked at). The GIL is held throughout: no thread closes the
 * connection meanwhile (3.11+ clear the object's pointer under the GIL before closing with it
 * released, 3.10 closes with it held), and no Python thread forks (os.fork needs the GIL)
 * while SQLite's mutexes are held here (a child would inherit them locked, for good). Nothing waits long:
 * the connection's mutex is only tried, a btree that is not sharable takes none, and the
 * page cache's and allocator's are held by others only inside SQLite's own steps. */
typedef int (*sqlite_db_status_fn)(void *, int, int *, int *, int);
typedef void *(*sqlite_db_mutex_fn)(void *);
typedef int (*sqlite_mutex_try_fn)(void *);
typedef void (*sqlite_mutex_leave_fn)(void *);
typedef const char *(*sqlite_db_filename_fn)(void *, const char *);
typedef const char *(*sqlite_db_name_fn)(void *, int);
typedef const char *(*sqlite_uri_parameter_fn)(const char *, const char *);
#define SQLITE_DBSTATUS_CACHE_USED 1
#define SQLITE_DBSTATUS_SCHEMA_USED 2
#define SQLITE_DBSTATUS_STMT_USED 3
#define SQLITE_MAX_ATTACHED_SEEN 125

static struct {
    int looked_up;
    sqlite_db_status_fn db_status;
    sqlite_db_mutex_fn db_mutex;
    sqlite_mutex_try_fn mutex_try;
    sqlite_mutex_leave_fn mutex_leave;
    sqlite_db_filename_fn db_filename;
    sqlite_db_name_fn db_name;  /* 3.39+; without it, main and temp only */
    sqlite_uri_parameter_fn uri_parameter;
} sqlite_api;

/* Whether a btree of the connection is sharable (opened for a shared cache): 0 none, 1 one,
 * -1 not known. Read as SQLite itself tells (btreeEnterAll: a btree that is not sharable
 * takes no mutex and has its cache to itself) from its structs, whose first fields have kept
 * their places since 3.22 (2018) and are checked against what the API says before any is
 * trusted: ``sqlite3.mutex`` (word 3) is sqlite3_db_mutex's, ``aDb`` (word 4) holds ``nDb``
 * (the int after it) entries of 32 bytes, each ``{name, Btree *, ...}`` whose name is
 * sqlite3_db_name's own pointer (3.39+; "main" first before) and whose Btree starts
 * ``{sqlite3 *db, BtShared *, u8 inTrans, u8 sharable}`` with this connection. Every word is
 * read through self_read (a bad pointer is an error, never a fault). Called with the
 * connection's mutex held: no database is attached or detached meanwhile. An in-memory
 * database is told so too, which its file name cannot say. */
static int
sqlite_btrees_sharable(void *db)
{
    uintptr_t head[6];
    int32_t count;
    if (self_read(head, (uintptr_t)db, sizeof(head)) != 0)
        return -1;
    memcpy(&count, &head[5], sizeof(count));  /* (nDb: the int at byte 40) */
    if ((void *)head[3] != sqlite_api.db_mutex(db) || head[4] == 0 || count < 2 || count > SQLITE_MAX_ATTACHED_SEEN)
        return -1;
    for (int32_t i = 0; i < count; i++) {
        uintptr_t entry[2];
        if (self_read(entry, head[4] + 32u * (uintptr_t)i, sizeof(entry)) != 0 || entry[0] == 0)
            return -1;
        if (sqlite_api.db_name != NULL) {
            if ((uintptr_t)sqlite_api.db_name(db, i) != entry[0])
                return -1;
        } else if (i == 0) {
            char name[5];
            if (self_read(name, entry[0], sizeof(name)) != 0 || memcmp(name, "main", 5) != 0)
                return -1;
        }
        if (entry[1] == 0)
            continue;  /* not opened (temp, until used) */
        struct { uintptr_t db, shared; unsigned char in_trans, sharable; } btree;
        if (self_read(&btree, entry[1], sizeof(btree)) != 0 || btree.db != (uintptr_t)db || btree.shared == 0
            || btree.in_trans > 2 || btree.sharable > 1)  /* (TRANS_NONE, _READ, _WRITE; a flag) */
            return -1;
        if (btree.sharable)
            return 1;
    }
    return 0;
}

/* 1 unless every database of the connection is known to have a cache of its own: none of its
 * btrees sharable (sqlite_btrees_sharable) or, where that cannot be read, a file's opened
 * without ``cache=shared``, or the temporary one (the connection's alone). An in-memory one
 * has no file name to read that in (``file::memory:?cache=shared``'s neither): not known. */
static int
sqlite_shares_a_cache(void *db)
{
    int sharable = sqlite_btrees_sharable(db);
    if (sharable >= 0)
        return sharable;
    for (int i = 0; i < SQLITE_MAX_ATTACHED_SEEN; i++) {
        const char *name = sqlite_api.db_name != NULL ? sqlite_api.db_name(db, i) : (i == 0 ? "main" : i == 1 ? "temp" : NULL);
        if (name == NULL)
            return 0;
        if (i == 1)
            continue;  /* temp */
        const char *file = sqlite_api.db_filename(db, name);
        if (file == NULL || file[0] == 0)
            return 1;
        const char *cache = sqlite_api.uri_parameter(file, "cache");
        if (cache != NULL && strcmp(cache, "private") != 0)
            return 1;
    }
    return 1;  /* more databases than looked at: not known */
}

PyDoc_STRVAR(sqlite_connection_bytes_doc,
"sqlite_connection_bytes(obj, connection_type, module_file) -> bytes, or None\n\n"
"``obj``: an instance of ``connection_type`` (_sqlite3's Connection, checked by the caller: a\n"
"C type whose ``sqlite3 *`` is its word after the header, 3.10-3.13; NULL once closed);\n"
"``module_file``: _sqlite3's file. The connection's page cache, schemas and statements as\n"
"SQLite counts them; None where the connection is closed, in use by another thread, has no\n"
"mutex, shares a cache, or the library is not found. Runs no Python code.");

static PyObject *
sqlite_connection_bytes(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *obj, *type, *module_file;
    if (!PyArg_ParseTuple(args, "OOO", &obj, &type, &module_file))
        return NULL;
    if (!PyType_Check(type) || !PyObject_TypeCheck(obj, (PyTypeObject *)type) || sizeof(void *) != 8) {
        PyErr_SetString(PyExc_ValueError, "sqlite_connection_bytes: not a connection");
        return NULL;
    }
    if (!sqlite_api.looked_up) {
        int error;
        void *lib = sqlite_library(module_file, "sqlite3_db_status", &error);
        if (error)
            return NULL;
        if (lib != NULL) {
            sqlite_api.db_status = (sqlite_db_status_fn)dlsym(lib, "sqlite3_db_status");
            sqlite_api.db_mutex = (sqlite_db_mutex_fn)dlsym(lib, "sqlite3_db_mutex");
            sqlite_api.mutex_try = (sqlite_mutex_try_fn)dlsym(lib, "sqlite3_mutex_try");
            sqlite_api.mutex_leave = (sqlite_mutex_leave_fn)dlsym(lib, "sqlite3_mutex_leave");
            sqlite_api.db_filename = (sqlite_db_filename_fn)dlsym(lib, "sqlite3_db_filename");
            sqlite_api.db_name = (sqlite_db_name_fn)dlsym(lib, "sqlite3_db_name");
            sqlite_api.uri_parameter = (sqlite_uri_parameter_fn)dlsym(lib, "sqlite3_uri_parameter");
            dlclose(lib);  /* the module's reference keeps it loaded */
            if (sqlite_api.db_mutex == NULL || sqlite_api.mutex_try == NULL || sqlite_api.mutex_leave == NULL
                || sqlite_api.db_filename == NULL || sqlite_api.uri_parameter == NULL)
                sqlite_api.db_status = NULL;
        }
        sqlite_api.looked_up = 1;
    }
    void *db = *(void *const *)((const char *)obj + 16);
    if (db == NULL || sqlite_api.db_status == NULL)
        Py_RETURN_NONE;
    /* the GIL held: the connection is not closed while its mutex is looked at */
    void *mutex = sqlite_api.db_mutex(db);
    if (mutex == NULL || sqlite_api.mutex_try(mutex) != 0)
        Py_RETURN_NONE;
    long long total = -1;
    if (!sqlite_shares_a_cache(db)) {
        static const int ops[] = {SQLITE_DBSTATUS_CACHE_USED, SQLITE_DBSTATUS_SCHEMA_USED, SQLITE_DBSTATUS_STMT_USED};
        total = 0;
        for (size_t k = 0; k < sizeof(ops) / sizeof(ops[0]) && total >= 0; k++) {
            int current = 0, highest = 0;
            if (sqlite_api.db_status(db, ops[k], &current, &highest, 0) != 0 || current < 0)
                total = -1;
            else
                total += current;
        }
    }
    sqlite_api.mutex_leave(mutex);
    if (total < 0)
        Py_RETURN_NONE;
    return PyLong_FromLongLong(total);
}

/* The bytes of [start, start + length) on pages this process has in RAM, from
 * /proc/self/pagemap (bit 63: present): what freeing a buffer of that range takes off the
 * RSS; in ``*shared``, those of them on pages of a file or of shared memory (bit 61: in the
 * ledger's "mapped files" too, a mapping with a path). Called with the GIL released: the
 * address is only an index into pagemap, never read through (a range freed meanwhile reads
 * as absent). -1 where pagemap cannot be read (a seccomp profile, an old kernel) or the
 * range is over RESIDENT_MAX_PAGES. */
#define RESIDENT_MAX_PAGES ((uint64_t)1 << 22)
#define RESIDENT_CHUNK 1024

long long
count_resident(uintptr_t start, uint64_t length, long long *shared)
{
    *shared = 0;
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0 || length == 0)
        return length == 0 ? 0 : -1;
    uint64_t first = start / (uint64_t)page, last = (start + length - 1) / (uint64_t)page;
    uint64_t pages = last - first + 1;
    if (pages > RESIDENT_MAX_PAGES)
        return -1;
    int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    uint64_t entries[RESIDENT_CHUNK], done = 0;
    long long bytes = 0;
    while (done < pages) {
        uint64_t want = pages - done < RESIDENT_CHUNK ? pages - done : RESIDENT_CHUNK;
        if (pread(fd, entries, want * 8, (off_t)((first + done) * 8)) != (ssize_t)(want * 8))
            break;
        for (uint64_t k = 0; k < want; k++) {
            if (!(entries[k] >> 63))
                continue;
            /* the part of this page in the range (the first and last may be partly outside) */
            uint64_t low = (first + done + k) * (uint64_t)page, high = low + (uint64_t)page;
            if (low < start)
                low = start;
            if (high > start + length)
                high = start + length;
            bytes += (long long)(high - low);
            if ((entries[k] >> 61) & 1)
                *shared += (long long)(high - low);
        }
        done += want;
    }
    close(fd);
    return done == pages ? bytes : -1;
}

PyDoc_STRVAR(resident_bytes_doc,
"resident_bytes(address, length) -> (the bytes of that range in RAM, those of them a file's\n"
"or shared memory's), or (-1, 0)\n\n"
"Reads /proc/self/pagemap with the GIL released; never reads the range itself.");

static PyObject *
resident_bytes(PyObject *Py_UNUSED(module), PyObject *args)
{
    unsigned long long address, length;
    if (!PyArg_ParseTuple(args, "KK:resident_bytes", &address, &length))
        return NULL;
    if (sizeof(void *) != 8 || address == 0 || length > ((unsigned long long)1 << 46))
        return Py_BuildValue("(ii)", -1, 0);
    long long bytes, shared;
    Py_BEGIN_ALLOW_THREADS
    bytes = count_resident((uintptr_t)address, (uint64_t)length, &shared);
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(LL)", bytes, bytes < 0 ? 0LL : shared);
}

/* The resident bytes of an mmap.mmap's mapping (count_resident): what unmapping it takes off
 * the RSS. Its length alone (what it was sized by) is the address space: a memory-mapped file
 * of GBs read in a few places (numpy.memmap, np.load(mmap_mode=...)), or an anonymous map
 * never written, holds a fraction of it. The mapping's address is read from the object
 * (CPython's mmap_object: ``data``, then ``size``, right after the object's header,
 * 3.8-3.13), trusted only where ``size`` is the length the object's own __len__ gave and
 * ``data`` a page's start. (-1, 0) where it cannot be read (another layout, no pagemap) or
 * the map is over RESIDENT_MAX_PAGES (its length is counted then). */
PyDoc_STRVAR(mapped_resident_doc,
"mapped_resident(mmap, length, basicsize) -> (resident bytes of its mapping, those of them a\n"
"file's or shared memory's), or (-1, 0)\n\n"
"``length``: len(mmap), read through mmap's own __len__; ``basicsize``: its class's\n"
"__basicsize__ (the fields read are inside it). Runs no Python code.");

static PyObject *
mapped_resident(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *obj;
    Py_ssize_t length, basicsize;
    if (!PyArg_ParseTuple(args, "Onn:mapped_resident", &obj, &length, &basicsize))
        return NULL;
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0 || length <= 0 || sizeof(void *) != 8
        || basicsize < (Py_ssize_t)(sizeof(PyObject) + 2 * sizeof(void *)))
        return Py_BuildValue("(ii)", length == 0 ? 0 : -1, 0);
    uintptr_t data = *(const uintptr_t *)((const char *)obj + sizeof(PyObject));
    Py_ssize_t size = *(const Py_ssize_t *)((const char *)obj + sizeof(PyObject) + sizeof(void *));
    if (data == 0 || data % (uintptr_t)page != 0 || size != length)
        return Py_BuildValue("(ii)", -1, 0);
    long long resident, shared;
    Py_BEGIN_ALLOW_THREADS
    resident = count_resident(data, (uint64_t)length, &shared);
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(LL)", resident, resident < 0 ? 0LL : shared);
}

/* protobuf's messages in its C core (upb, ``google._upb._message``, the default backend since
 * protobuf 4.21) keep their fields in upb arenas: chains of malloc'd blocks no __sizeof__ and
 * no tp_traverse shows (a Struct of 20 strings of 300 bytes: 64 bytes by sys.getsizeof, 10 KB
 * freed with it). A message, and each of its repeated and map fields' containers, holds its
 * arena's Python object right after its header (PyUpb_Message, PyUpb_RepeatedContainer,
 * PyUpb_MapContainer: ``arena``), which holds the ``upb_Arena *`` right after its own
 * (PyUpb_Arena). The arena starts with the bump pointer of its newest block and that block's
 * end (after its allocator's pointer before protobuf 4.22). Where it keeps its list of blocks
 * (each ``{next, size}``, then its bytes; the size a size_t since protobuf 6, 32 bits before)
 * changed across upb's versions, so it is found, not assumed: the word (and the size's width)
 * that starts a chain (read through process_vm_readv: a wrong guess reads nothing, no fault)
 * that ends, has a block whose end is the arena's end with the bump pointer in it, and a block
 * the arena itself lives in or right after (upb puts an arena's state in its first malloc'd
 * block: at its start since protobuf 6, its end before). Found once, that word is looked at
 * first. */
#define UPB_ARENA_WORDS 12
#define UPB_MAX_BLOCKS (1 << 18)
/* The block the bump pointer is in is among a chain's first ones (upb_chain_bytes): a chain
 * whose first blocks are not it is given up there, and a word that is no chain's start (a
 * count, a pointer into a cycle of other structures) costs a few reads, not a walk. */
#define UPB_END_WITHIN 8
/* Searches for the layout at most, in a process's life: each reads a few words of up to 40
 * candidates; once found the layout is read alone. */
#define UPB_MAX_SEARCHES 64
#define UPB_WEAKMAP_WORDS 6
static int upb_blocks_word = -1, upb_narrow_size = 0, upb_head_word = 0, upb_searches = 0;
static int upb_weakmap_word = -1;

#define UPB_BLOCK_SIZE(word, narrow) ((narrow) ? (uint64_t)(uint32_t)(word) : (uint64_t)(word))

/* Whether ``block`` is the block in use with the bump pointer ``ptr`` in it, its size field a
 * hint for the next block's size (protobuf 6.3x: ``size_or_hint``): its glibc chunk (the
 * header before it: 8 bytes of overhead, 16 mmapped) ends at ``end``. The header is checked
 * as glibc_chunk_bytes checks one (glibc_chunk_header, no range of mappings known here). */
static int
upb_hinted_block_in_use(uintptr_t block, uintptr_t ptr, uintptr_t end)
{
    if (block < 32 || (block & 15) != 0 || ptr < block || ptr > end || end - block < 16)
        return 0;
    int64_t offset;
    uint64_t chunk = glibc_chunk_header(block - 16, NULL, &offset);
    if (chunk == 0 || chunk > ((uint64_t)1 << 40) || block - 16 + chunk < block - 16)
        return 0;
    uint64_t usable = chunk - (offset >= 0 ? 16 : 8);
    return end - block <= usable && usable - (end - block) < 32;
}

/* The bytes of the blocks in the chain starting at ``block`` and their count in *count, -1 if
 * it is not the chain of the arena at ``arena`` (bump pointer ``ptr``, end ``end``) or of the
 * object at ``inside`` that lives in it; a chain that meets itself again (Brent's check) or
 * goes on past UPB_MAX_BLOCKS is none. The block in use, which ends at ``end``, is one of the
 * first UPB_END_WITHIN (a big allocation's block of its own comes before it); or it is the
 * first and its size field a hint (upb_hinted_block_in_use), its size ``end`` less its start. */
static long long
upb_chain_bytes(uintptr_t block, int narrow, uintptr_t ptr, uintptr_t end, uintptr_t inside, long long *count)
{
    if (block == 0 || (block & 7) != 0)
        return -1;
    int hinted = upb_hinted_block_in_use(block, ptr, end), in_use = hinted;
    long long total = 0, n = 0, lap = 0, power = 1;
    int has_inside = 0;
    uintptr_t mark = block;
    while (block != 0) {
        uint64_t head[2];
        if ((block & 7) != 0 || n >= UPB_MAX_BLOCKS || self_read(head, block, sizeof head) < 0)
            return -1;
        uint64_t size = hinted && n == 0 ? end - block : UPB_BLOCK_SIZE(head[1], narrow);
        if (size < sizeof head || size > ((uint64_t)1 << 40) || block + size < block)
            return -1;
        if (block + size == end && ptr >= block && ptr <= end)
            in_use = 1;
        if (inside >= block && inside <= block + size)  /* protobuf 4/5: an arena right after its first block */
            has_inside = 1;
        total += (long long)size;
        n++;
        if (!in_use && n >= UPB_END_WITHIN)
            return -1;
        block = (uintptr_t)head[0];
        if (block == mark)
            return -1;
        if (++lap == power) {
            mark = block;
            power <<= 1;
            lap = 0;
        }
    }
    *count = n;
    return in_use && has_inside ? total : -1;
}

/* The bytes of the blocks of the upb_Arena at ``arena`` (their count in *count), -1 where its
 * chain is not found; ``inside``: an address that must be in one of them (the arena's own, or
 * that of a structure upb allocated in it). The layout found is read; ``search``: where it is
 * not known yet or does not fit, look for it (UPB_MAX_SEARCHES at most). */
static long long
upb_arena_blocks(uintptr_t arena, uintptr_t inside, long long *count, int search)
{
    uint64_t words[UPB_ARENA_WORDS];
    if (arena == 0 || (arena & 7) != 0 || sizeof(void *) != 8 || self_read(words, arena, sizeof words) < 0)
        return -1;
    int known = upb_blocks_word, narrow = upb_narrow_size, head = upb_head_word;
    if (known >= 2 && words[head] <= words[head + 1]) {
        long long got = upb_chain_bytes((uintptr_t)words[known], narrow, words[head], words[head + 1], inside, count);
        if (got >= 0 || !search)
            return got;
    }
    if (!search || upb_searches >= UPB_MAX_SEARCHES)
        return -1;
    upb_searches++;
    /* the bump pointer and the end first (protobuf 5+), or after the allocator's (4.x) */
    for (int h = 0; h < 2; h++) {
        if (words[h] > words[h + 1])
            continue;
        for (int width = 0; width < 2; width++) {
            for (int k = h + 2; k < UPB_ARENA_WORDS; k++) {
                if ((k == known && width == narrow && h == head) || words[k] == 0)
                    continue;
                long long got = upb_chain_bytes((uintptr_t)words[k], width, words[h], words[h + 1], inside, count);
                if (got >= 0) {
                    upb_blocks_word = k;
                    upb_narrow_size = width;
                    upb_head_word = h;
                    return got;
                }
            }
        }
    }
    return -1;
}

/* The upb_Arena of an arena object (its type checked by the caller) */
static uintptr_t
upb_arena_of(PyObject *arena_obj)
{
    uintptr_t arena = 0;
    if (self_read(&arena, (uintptr_t)arena_obj + sizeof(PyObject), sizeof arena) < 0)
        return 0;
    return arena;
}

PyDoc_STRVAR(upb_arena_bytes_doc,
"upb_arena_bytes(arena) -> (bytes of its blocks, their count), or None\n\n"
"``arena``: a ``google._upb._message.Arena`` (its exact type checked by the caller). None where\n"
"its chain of blocks is not found. Runs no Python code.");

static PyObject *
upb_arena_bytes(PyObject *Py_UNUSED(module), PyObject *arena_obj)
{
    uintptr_t arena = upb_arena_of(arena_obj);
    long long bytes, count = 0;
    /* the caller's reference keeps the arena; another thread may add a block meanwhile */
    Py_BEGIN_ALLOW_THREADS
    bytes = upb_arena_blocks(arena, arena, &count, 1);
    Py_END_ALLOW_THREADS
    if (bytes < 0)
        Py_RETURN_NONE;
    return Py_BuildValue("(LL)", bytes, count);
}

/* The bytes of the blocks of the arena the map of a message's unset submessages lives in (a
 * word of the map, UPB_WEAKMAP_WORDS at most: the one found is looked at first), read with
 * the arenas' layout already found; -1 where there is none. */
static long long
upb_weakmap_blocks(uintptr_t map, long long *count)
{
    uint64_t words[UPB_WEAKMAP_WORDS];
    if (upb_blocks_word < 0 || self_read(words, map, sizeof words) < 0)
        return -1;
    int known = upb_weakmap_word;
    if (known >= 0) {
        long long got = upb_arena_blocks((uintptr_t)words[known], map, count, 0);
        if (got >= 0)
            return got;
    }
    for (int k = 0; k < UPB_WEAKMAP_WORDS; k++) {
        if (k == known)
            continue;
        long long got = upb_arena_blocks((uintptr_t)words[k], map, count, 0);
        if (got >= 0) {
            upb_weakmap_word = k;
            return got;
        }
    }
    return -1;
}

PyDoc_STRVAR(upb_held_doc,
"upb_held(obj, arena_type, weakmap_offset) -> (its arena object or None, bytes of its own\n"
"arena of unset fields, their blocks' count)\n\n"
"``obj``: a upb message or container (the caller checked its class is one, its basic size\n"
"large enough); its arena object is returned only if the word after its header is an object\n"
"of type ``arena_type``. ``weakmap_offset`` (a message's, 0 for none): where a message keeps\n"
"the map of its unset submessages' objects, which upb allocates in an arena of its own (one\n"
"block of ~350 bytes a message): counted only where that arena's chain has the map in it,\n"
"read with the layout of the arenas (found from its arena object's first). Runs no Python\n"
"code.");

static PyObject *
upb_held(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *obj, *arena_type;
    Py_ssize_t weakmap_offset;
    if (!PyArg_ParseTuple(args, "OOn:upb_held", &obj, &arena_type, &weakmap_offset))
        return NULL;
    uintptr_t held = 0, held_type = 0;
    PyObject *arena_obj = Py_None;
    if (self_read(&held, (uintptr_t)obj + sizeof(PyObject), sizeof held) == 0 && held != 0 && (held & 7) == 0
        && self_read(&held_type, held + sizeof(PyObject) - sizeof(void *), sizeof held_type) == 0
        && held_type == (uintptr_t)arena_type)
        arena_obj = (PyObject *)held;
    long long own = 0, count = 0;
    uintptr_t map = 0;
    if (weakmap_offset >= (Py_ssize_t)(sizeof(PyObject) + sizeof(void *)) && (weakmap_offset & 7) == 0
        && self_read(&map, (uintptr_t)obj + (uintptr_t)weakmap_offset, sizeof map) == 0 && map != 0) {
        if (upb_blocks_word < 0 && arena_obj != Py_None) {  /* the layout, from its own arena */
            long long n = 0;
            uintptr_t arena = upb_arena_of(arena_obj);
            (void)upb_arena_blocks(arena, arena, &n, 1);
        }
        long long n = 0, got = upb_weakmap_blocks(map, &n);
        if (got >= 0) {
            own = got;
            count = n;
        }
    }
    return Py_BuildValue("(OLL)", arena_obj, own, count);
}

static PyMethodDef walk_methods[] = {
    {"use_private", use_private, METH_O, use_private_doc},
    {"frame_locals", frame_locals, METH_VARARGS, frame_locals_doc},
    {"tracked_objects", tracked_objects, METH_VARARGS, tracked_objects_doc},
    {"count_references", count_references, METH_VARARGS, count_references_doc},
    {"held_once_referents", held_once_referents, METH_VARARGS, held_once_referents_doc},
    {"sizeof_counts_referents", sizeof_counts_referents, METH_O, sizeof_counts_referents_doc},
    {"known_types", known_types, METH_VARARGS, known_types_doc},
    {"dict_entry_of", dict_entry_of, METH_VARARGS, dict_entry_of_doc},
    {"dict_value_of", dict_value_of, METH_VARARGS, dict_value_of_doc},
    {"class_statement", class_statement_of, METH_O, class_statement_doc},
    {"dict_own_referents", dict_own_referents, METH_O, dict_own_referents_doc},
    {"referent_with_id", referent_with_id, METH_VARARGS, referent_with_id_doc},
    {"typed_referents", typed_referents, METH_O, typed_referents_doc},
    {"lru_link_class", lru_link_class, METH_NOARGS, lru_link_class_doc},
    {"lru_cache_dict", lru_cache_dict, METH_O, lru_cache_dict_doc},
    {"reads_elements", reads_elements, METH_O, reads_elements_doc},
    {"heap_blocks", heap_blocks, METH_VARARGS, heap_blocks_doc},
    {"stringio_parts", stringio_parts, METH_VARARGS, stringio_parts_doc},
    {"zlib_state_blocks", zlib_state_blocks, METH_VARARGS, zlib_state_blocks_doc},
    {"stream_state_bytes", stream_state_bytes, METH_VARARGS, stream_state_bytes_doc},
    {"evp_digest_bytes", evp_digest_bytes, METH_VARARGS, evp_digest_bytes_doc},
    {"atexit_callbacks", atexit_callbacks, METH_O, atexit_callbacks_doc},
    {"mapped_resident", mapped_resident, METH_VARARGS, mapped_resident_doc},
    {"resident_bytes", resident_bytes, METH_VARARGS, resident_bytes_doc},
    {"sqlite_memory_used", sqlite_memory_used, METH_O, sqlite_memory_used_doc},
    {"sqlite_connection_bytes", sqlite_connection_bytes, METH_VARARGS, sqlite_connection_bytes_doc},
    {"upb_arena_bytes", upb_arena_bytes, METH_O, upb_arena_bytes_doc},
    {"upb_held", upb_held, METH_VARARGS, upb_held_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef walk_module = {
    PyModuleDef_HEAD_INIT, "_walk",
    "The census's and the object graph's inner walks in C (optional: census_walk.py and graph.py\n"
    "have the same loops in Python).",
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
    inline_values_dicts = mi == 13;
    split_keys_met = mi == 10;
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
    if (PyModule_AddFunctions(module, census_walk_methods) < 0
        || PyModule_AddFunctions(module, graph_walk_methods) < 0
        || PyModule_AddFunctions(module, sites_methods) < 0
        || PyModule_AddFunctions(module, libc_methods) < 0
        || PyModule_AddFunctions(module, ssl_scan_methods) < 0) {
        Py_DECREF(module);
        return NULL;
    }
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
