/*
 * What the compiled walks share (the census's, _census_walk.c, and the object graph's,
 * _graph_walk.c, in one extension: _walk.abi3.so, its module in _walk.c): one call's state
 * (Walk), the referents of a container held in a plain buffer (Refs), the per-call type
 * cache and the census's sizes, the sliced reading of big containers, and what the running
 * interpreter offers. The helpers are defined in _walk_objects.c, the interpreter's offer in
 * _walk.c. Every name here is hidden: the extension exports PyInit__walk only, so no library
 * the target has loaded can stand in for one of these.
 */

#ifndef LEAKHOUND_WALK_H
#define LEAKHOUND_WALK_H

#define Py_LIMITED_API 0x030A0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <string.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

#define REGION_SHIFT 20
#define REGION_BYTES 8192
#define REGION_CACHE 64
#define TYPE_CACHE_BITS 8
#define TYPE_CACHE (1 << TYPE_CACHE_BITS)
#define TYPE_PROBES 8
/* A __sizeof__ larger than this (256 TiB, more than any machine's address space) is not a
 * size: it reads as 0, like a failing one (sizes.MAX_OBJECT_BYTES). */
#define MAX_OBJECT_BYTES ((size_t)1 << 48)
#define PENDING_NAME "leakhound._walk.pending"

/* -- what the running interpreter offers ----------------------------------------------- */

typedef size_t (*getsizeof_fn)(PyObject *);
typedef PyObject *(*type_lookup_fn)(PyTypeObject *, PyObject *);
typedef int (*set_next_fn)(PyObject *, Py_ssize_t *, PyObject **, Py_hash_t *);


extern getsizeof_fn use_getsizeof;
extern type_lookup_fn use_type_lookup;
extern set_next_fn use_set_next;

extern PyObject *sizeof_name;        /* "__sizeof__" */
extern PyObject *object_sizeof;      /* object.__sizeof__ */
extern PyObject *sys_getsizeof;      /* the built-in sys.getsizeof */
extern PyObject *mro_descr;          /* type.__dict__["__mro__"] */
extern PyObject *dict_descr;         /* type.__dict__["__dict__"] */
extern PyObject *array_type;         /* array.array */
extern PyObject *code_type;          /* types.CodeType */
/* 3.13 keeps an instance's attribute values inline after it; a __dict__ made from them
 * (vars(), obj.__dict__) is in the managed dict pointer, the word three before the object,
 * and its type's traverse does not visit that dict while the inline values are valid: it
 * is one of the object's referents all the same (referents_of adds it: Walk.added_dict). */
extern int inline_values_dicts;
extern int split_keys_met;
#define MANAGED_DICT_FLAG (1UL << 4)  /* Py_TPFLAGS_MANAGED_DICT, 3.11-3.13 */
/* The names of the code type's member descriptors for what a code object holds (see
 * code_referents): code objects are not gc-tracked, gc.get_referents lists none of it. */
extern PyObject *code_members;       /* tuple of str */
/* C __sizeof__ methods that count an object gc.get_referents also lists (sizes.py:
 * SIZEOF_COUNTS_REFERENTS, set by sizeof_counts_referents): their types are sized by
 * object.__sizeof__, the referent counted once, on its own. NULL: none. */
extern PyObject *sizeof_counts_refs;  /* tuple of method descriptors */
/* numpy's ndarray and dtype classes (set by known_types, where numpy is loaded; NULL: none):
 * an array of objects that owns its data is read from it a slice at a time (object_array). */
extern PyTypeObject *numpy_ndarray, *numpy_dtype;
/* collections.OrderedDict (set by known_types too; NULL: none): a big one's keys are held
 * twice by it, in its table and its list of nodes (_graph_walk.c graph_next_slice). */
extern PyTypeObject *ordered_dict;
/* collections.deque (known_types; NULL: none): a big exact one is read a slice at a time */
extern PyTypeObject *collections_deque;
/* The tp_traverse of a class statement's class (CPython's subtype_traverse: its slots, its
 * __dict__ or attribute values, its type, then its nearest built-in base's traverse), taken
 * from a class of the payload (known_types; NULL: none): a big list, tuple or set subclass
 * with it is read a slice at a time (sequence_subclass). */
extern traverseproc class_traverse;
int class_statement(PyTypeObject *tp);
/* functools' C lru_cache wrapper (known_types, where its struct is 3.10-3.13's; NULL: none):
 * a bounded one's and its links' referents are read from their fields (typed_traverse). */
extern PyTypeObject *lru_wrapper;
traverseproc typed_traverse(PyObject *obj);
void lru_types_forget(void);
int lru_wrapper_fits(PyTypeObject *tp);
int is_lru_link(PyObject *obj);
PyObject *lru_cache_of(PyObject *obj);  /* borrowed, or NULL */
PyObject *lru_link_class_seen(void);  /* borrowed, or NULL */

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
    /* referents_of stops an object's traverse once ``len`` reaches it (0: never): see
     * TRAVERSE_WHOLE_MAX */
    Py_ssize_t limit;
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
    /* 3.13: the made __dict__ the last referents_of added beside the inline values its
     * object's traverse visited (NULL: none). A dict's traverse does not visit values
     * embedded in their object, so the census keeps them as the object's referents; the
     * graph reads the dict's entries and takes them out of the object's (drop_dict_values). */
    PyObject *added_dict;
} Walk;

/* -- the helpers of both walks (_walk_objects.c) ------------------------------------------ */

int refs_push(Refs *r, PyObject *op);
void refs_clear(Refs *r);
void refs_free(Refs *r);
void walk_release_call(Walk *w);
void walk_release(Walk *w);
PyObject * region_in_dict(PyObject *regions, uintptr_t key);
unsigned char * region_for(Walk *w, uintptr_t address);
TypeInfo * type_info(Walk *w, PyTypeObject *tp);
Py_ssize_t slot_for(Walk *w, TypeInfo *info);
int size_of(PyObject *op, TypeInfo *info, long long *size);
/* The block a request of ``bytes`` takes from the target's allocators (heap_blocks). */
extern long long block_small_max, block_small_align, block_big_overhead, block_big_align, block_big_min;
extern long long block_list_head, block_bytearray_head, block_deque_head, block_deque_block;
extern PyTypeObject *block_deque_type;
extern PyTypeObject *block_lock_types[2];
extern long long block_lock_extra;
static inline long long
heap_block(long long bytes)
{
    if (bytes <= 0 || block_small_align == 0)
        return bytes;
    if (bytes <= block_small_max)
        return (bytes + block_small_align - 1) & ~(block_small_align - 1);
    bytes = (bytes + block_big_overhead + block_big_align - 1) & ~(block_big_align - 1);
    return bytes < block_big_min ? block_big_min : bytes;
}
int grow_tallies(long long **counts, long long **sizes, Py_ssize_t *len, Py_ssize_t slot, Py_ssize_t first);
/* An ndarray of objects as its struct says now (object_array). */
typedef struct {
    char *data;
    int nd;
    int contiguous;
    const Py_ssize_t *dims, *strides;
    Py_ssize_t count;
} ObjectArray;

int object_array(PyObject *obj, ObjectArray *a);
/* A deque's item as its struct says now (deque_at). */
typedef struct {
    Py_ssize_t size;
    void *block;  /* NULL: past its end */
    Py_ssize_t index;
} DequeAt;

int deque_at(PyObject *d, Py_ssize_t pos, DequeAt *at);
traverseproc gc_traverse_of(PyObject *obj);
traverseproc walk_traverse_of(PyObject *obj);
int referents_before_entries(PyObject *d, Refs *r);
int is_big(PyObject *op);
Py_ssize_t read_slice(Refs *r, Py_ssize_t want);
int visit_referent(PyObject *op, void *arg);
int referents_of(Walk *w, PyObject *obj, Refs *r);
void drop_dict_values(Walk *w, Refs *r, Py_ssize_t before);
long native_for(Walk *w, PyTypeObject *tp);
long long instance_values_bytes(PyObject *obj, traverseproc traverse, long code);

/* -- reading this process's heap without a fault (_walk.c) ------------------------------- */

/* A range of the heap: the main arena's mapping ([heap], ``main``) or an anonymous writable
 * one (glibc's other arenas, its mmapped chunks), as sizes._heap_ranges lists them. */
typedef struct {
    uint64_t start, end, main;
} HeapRange;

/* ``n`` bytes at ``from`` of this process into ``to`` through process_vm_readv (an address
 * unmapped meanwhile reads nothing: -1, no fault). */
int self_read(void *to, uintptr_t from, size_t n);
/* The bytes of [start, start + length) on pages in RAM (/proc/self/pagemap), -1 where it
 * cannot be read; in *shared those on a file's or shared memory's pages. */
long long count_resident(uintptr_t start, uint64_t length, long long *shared);
const HeapRange *heap_range_of(const HeapRange *ranges, Py_ssize_t n, uintptr_t address);
uint64_t glibc_chunk_header(uintptr_t chunk, const HeapRange *r, int64_t *offset);
uint64_t glibc_arena_size(uintptr_t chunk, const HeapRange *r, uint64_t word);
void glibc_heaps_forget(void);
int glibc_arena_next_ok(uintptr_t chunk, const uint64_t *head, uint64_t size, const HeapRange *r, uint64_t next);
uint64_t glibc_mmapped_size(uintptr_t chunk, const HeapRange *r, const uint64_t *head);

/* Containers with more entries than this are read in slices (is_big, read_slice). */
#define BIG_CONTAINER 4096
/* Any other object whose traverse visits more than this many referents (a bounded
 * functools.lru_cache's wrapper: three for each entry, the result, the key and the link's
 * type; a C extension's container) is read through its traverse a slice at a time
 * (read_slice: each slice visits all the referents before it), at least TRAVERSE_SLICE
 * referents a slice. Read whole, an lru_cache of 2M entries was a step of ~110 ms and ~100 MB
 * of the target's memory. */
#define TRAVERSE_WHOLE_MAX (4 * BIG_CONTAINER)
#define TRAVERSE_SLICE (1 << 17)
PyTypeObject *sequence_subclass(PyTypeObject *tp);

static inline int
is_leaf(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    return tp == &PyUnicode_Type || tp == &PyBytes_Type || tp == &PyLong_Type
        || tp == &PyFloat_Type || tp == &PyBool_Type || tp == &PyComplex_Type
        || op == Py_None;
}

#pragma GCC visibility pop

#endif
