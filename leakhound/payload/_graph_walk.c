/*
 * The object graph's inner walk in C: an optional accelerator for graph.py's Graph._walk.
 *
 * Included by _walk.c (one extension, one build: _walk.abi3.so), whose helpers it shares:
 * the referents held in a plain buffer (Refs), the per-call type cache and the census's sizes
 * (type_info, size_of, slot_for, native_for, instance_values_bytes), the sliced reading of big
 * lists, tuples and sets (read_slice) and the rules for hostile objects that come with them
 * (no __sizeof__ written in Python runs, types are looked up by id, never hashed, nothing
 * the walk holds across code that may run can go stale).
 *
 * It builds the same graph as the Python loop (graph.py: the reference the tests compare it
 * against): node ids in the order objects are met, sizes, type ids, entries of sized
 * containers, edges with their labels, a leaf held once folded into its container, shared
 * leaves (None, True, small ints, names) left out, classes and modules no node of the walk,
 * walls reached from the super-root only. Unlike the Python loop it keeps no reference to
 * the nodes and no dict from id() to node: an open-addressing table of int32 node ids keyed
 * by the address in ``ids`` (as the census's bitmap, an object freed during the walk whose
 * address is reused reads as the old node), and the arrays in blocks of 64Ki items, which are
 * also the chunks the result is sent in (graph_chunk). About 30 bytes a node and 12 an edge.
 *
 * The walk's state lives in a capsule (graph_new); graph_walk runs it for about ``limit``
 * units of work (a container popped, a referent seen) and returns, so the caller's duty
 * cycle, deadline and cancel hook run between calls. A big exact list, tuple, set or dict is
 * read a slice at a time, its rest kept in the state for the next call (a big dict's values
 * carry no labels, in both loops: see PHASE_DICT_VALUES).
 *
 * Python code it calls: the payload's own helpers given to graph_new (a type's id, a label's
 * id, a type's slot descriptors, a native object's buffers), and C descriptors' getters.
 */

#include <errno.h>
#include <stdint.h>
#include <unistd.h>

#define GRAPH_NAME "leakhound._walk.graph"
#define GBLOCK_SHIFT 16
#define GBLOCK_ITEMS ((Py_ssize_t)1 << GBLOCK_SHIFT)
/* getrefcount() as the Python loop sees a referent: its container, its referents list, the
 * loop variable and getrefcount's own argument; here the buffer holds the second. */
#define GRAPH_PY_EXTRA 2
#define GRAPH_ONLY_ONE 4
#define GRAPH_SHARED_LEAF 64
#define GRAPH_MAX_LABEL_CHARS 80
#define GRAPH_WALL 1

typedef struct {
    char **blocks;
    Py_ssize_t nblocks;
    Py_ssize_t len;
    int itemsize;
} Column;

static int
column_push(Column *c, const void *value)
{
    if (c->len == c->nblocks * GBLOCK_ITEMS) {
        char **blocks = PyMem_Realloc(c->blocks, (size_t)(c->nblocks + 1) * sizeof(char *));
        if (blocks == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        c->blocks = blocks;
        char *block = PyMem_Malloc((size_t)GBLOCK_ITEMS * (size_t)c->itemsize);
        if (block == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        c->blocks[c->nblocks++] = block;
    }
    memcpy(c->blocks[c->len >> GBLOCK_SHIFT] + (size_t)(c->len & (GBLOCK_ITEMS - 1)) * (size_t)c->itemsize,
           value, (size_t)c->itemsize);
    c->len++;
    return 0;
}

static inline void *
column_at(Column *c, Py_ssize_t i)
{
    return c->blocks[i >> GBLOCK_SHIFT] + (size_t)(i & (GBLOCK_ITEMS - 1)) * (size_t)c->itemsize;
}

static void
column_free(Column *c)
{
    for (Py_ssize_t b = 0; b < c->nblocks; b++)
        PyMem_Free(c->blocks[b]);
    PyMem_Free(c->blocks);
    c->blocks = NULL;
    c->nblocks = c->len = 0;
}

/* address -> label, for one container's referents (its dict keys or slots). */
typedef struct {
    uintptr_t *keys;
    int32_t *labels;
    size_t mask;
    Py_ssize_t used;
} LabelMap;

static inline size_t
addr_hash(uintptr_t address, size_t mask)
{
    /* Fibonacci hashing: the product's high half mixes every bit of the address. */
    return (size_t)(((uint64_t)(address >> 4) * 0x9E3779B97F4A7C15ULL) >> 32) & mask;
}

/* One bit per 16-byte granule of every MiB of addresses holding a node or one of our own
 * objects (as the census's bitmap; objects are 16-byte aligned): most lookups are of objects
 * that are no node (a leaf to fold, a new object), answered here without the table. */
#define NB_SHIFT 20
#define NB_BYTES ((1 << NB_SHIFT) >> 7)

typedef struct {
    uintptr_t *keys;          /* address >> NB_SHIFT, + 1 (0: empty) */
    unsigned char **bits;
    size_t mask;
    Py_ssize_t used;
    uintptr_t last_key;
    unsigned char *last_bits;
} NodeBits;

static unsigned char *
nodebits_region(NodeBits *nb, uintptr_t address, int create)
{
    uintptr_t key = (address >> NB_SHIFT) + 1;
    if (key == nb->last_key)
        return nb->last_bits;
    if (nb->keys != NULL) {
        size_t k = addr_hash(key << 4, nb->mask);
        while (nb->keys[k] != 0) {
            if (nb->keys[k] == key) {
                nb->last_key = key;
                nb->last_bits = nb->bits[k];
                return nb->last_bits;
            }
            k = (k + 1) & nb->mask;
        }
    }
    if (!create)
        return NULL;
    if (nb->keys == NULL || (size_t)(nb->used + 1) * 2 > nb->mask + 1) {
        size_t cap = nb->keys == NULL ? 256 : (nb->mask + 1) * 2;
        uintptr_t *keys = PyMem_Calloc(cap, sizeof(uintptr_t));
        unsigned char **bits = PyMem_Calloc(cap, sizeof(unsigned char *));
        if (keys == NULL || bits == NULL) {
            PyMem_Free(keys);
            PyMem_Free(bits);
            PyErr_NoMemory();
            return NULL;
        }
        for (size_t h = 0; nb->keys != NULL && h <= nb->mask; h++) {
            if (nb->keys[h] == 0)
                continue;
            size_t k = addr_hash(nb->keys[h] << 4, cap - 1);
            while (keys[k] != 0)
                k = (k + 1) & (cap - 1);
            keys[k] = nb->keys[h];
            bits[k] = nb->bits[h];
        }
        PyMem_Free(nb->keys);
        PyMem_Free(nb->bits);
        nb->keys = keys;
        nb->bits = bits;
        nb->mask = cap - 1;
    }
    unsigned char *region = PyMem_Calloc(NB_BYTES, 1);
    if (region == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    size_t k = addr_hash(key << 4, nb->mask);
    while (nb->keys[k] != 0)
        k = (k + 1) & nb->mask;
    nb->keys[k] = key;
    nb->bits[k] = region;
    nb->used++;
    nb->last_key = key;
    nb->last_bits = region;
    return region;
}

static inline int
nodebits_test(NodeBits *nb, uintptr_t address)
{
    unsigned char *region = nodebits_region(nb, address, 0);
    return region != NULL && (region[(address & ((1 << NB_SHIFT) - 1)) >> 7] >> ((address >> 4) & 7)) & 1;
}

static int
nodebits_set(NodeBits *nb, uintptr_t address)
{
    unsigned char *region = nodebits_region(nb, address, 1);
    if (region == NULL)
        return -1;
    region[(address & ((1 << NB_SHIFT) - 1)) >> 7] |= (unsigned char)(1u << ((address >> 4) & 7));
    return 0;
}

static void
nodebits_free(NodeBits *nb)
{
    for (size_t h = 0; nb->keys != NULL && h <= nb->mask; h++)
        PyMem_Free(nb->bits[h]);
    PyMem_Free(nb->keys);
    PyMem_Free(nb->bits);
    memset(nb, 0, sizeof(*nb));
}

static void
labelmap_clear(LabelMap *m)
{
    if (m->used && m->mask >= 1024) {
        /* Grown by a big dict: smaller again (clearing it for every container would cost). */
        PyMem_Free(m->keys);
        PyMem_Free(m->labels);
        m->keys = NULL;
        m->labels = NULL;
        m->mask = 0;
        m->used = 0;
    }
    else if (m->used) {
        memset(m->keys, 0, (m->mask + 1) * sizeof(uintptr_t));
        m->used = 0;
    }
}

static int
labelmap_grow(LabelMap *m)
{
    size_t cap = m->keys == NULL ? 64 : (m->mask + 1) * 2;
    uintptr_t *keys = PyMem_Calloc(cap, sizeof(uintptr_t));
    int32_t *labels = PyMem_Malloc(cap * sizeof(int32_t));
    if (keys == NULL || labels == NULL) {
        PyMem_Free(keys);
        PyMem_Free(labels);
        PyErr_NoMemory();
        return -1;
    }
    for (size_t h = 0; m->keys != NULL && h <= m->mask; h++) {
        if (m->keys[h] == 0)
            continue;
        size_t k = addr_hash(m->keys[h], cap - 1);
        while (keys[k] != 0)
            k = (k + 1) & (cap - 1);
        keys[k] = m->keys[h];
        labels[k] = m->labels[h];
    }
    PyMem_Free(m->keys);
    PyMem_Free(m->labels);
    m->keys = keys;
    m->labels = labels;
    m->mask = cap - 1;
    return 0;
}

/* names.setdefault(id(value), label), as the Python loop. */
static int
labelmap_setdefault(LabelMap *m, uintptr_t address, int32_t label)
{
    if (m->keys == NULL || (size_t)(m->used + 1) * 2 > m->mask + 1) {
        if (labelmap_grow(m) < 0)
            return -1;
    }
    size_t k = addr_hash(address, m->mask);
    while (m->keys[k] != 0) {
        if (m->keys[k] == address)
            return 0;
        k = (k + 1) & m->mask;
    }
    m->keys[k] = address;
    m->labels[k] = label;
    m->used++;
    return 0;
}

static int32_t
labelmap_get(LabelMap *m, uintptr_t address)
{
    if (m->keys == NULL || m->used == 0)
        return -1;
    size_t k = addr_hash(address, m->mask);
    while (m->keys[k] != 0) {
        if (m->keys[k] == address)
            return m->labels[k];
        k = (k + 1) & m->mask;
    }
    return -1;
}

/* A dict key's label by the key's address, for the whole walk: the same interned attribute
 * names and dict keys come back in container after container, and making "k<key>" and
 * looking it up in the payload's dict was ~10% of the walk (perf). The key's hash is kept
 * beside its address: a key freed during the walk whose address a new string took reads as
 * a miss unless the new one hashes the same (then its label would be the old text's: a
 * label only names an edge, the owners' paths are named again by the target). */
#define KEY_LABELS_MAX 65536

typedef struct {
    uintptr_t *keys;
    Py_hash_t *hashes;
    int32_t *labels;
    size_t mask;
    Py_ssize_t used;
} KeyLabels;

static void
keylabels_free(KeyLabels *c)
{
    PyMem_Free(c->keys);
    PyMem_Free(c->hashes);
    PyMem_Free(c->labels);
    memset(c, 0, sizeof(*c));
}

/* The slot of ``address`` (its own, or the empty one it would take). */
static size_t
keylabels_slot(KeyLabels *c, uintptr_t address)
{
    size_t k = addr_hash(address, c->mask);
    while (c->keys[k] != 0 && c->keys[k] != address)
        k = (k + 1) & c->mask;
    return k;
}

static int
keylabels_put(KeyLabels *c, uintptr_t address, Py_hash_t hash, int32_t label)
{
    if (c->keys == NULL || (size_t)(c->used + 1) * 2 > c->mask + 1) {
        size_t cap = c->keys == NULL ? 1024 : (c->mask + 1) * 2;
        KeyLabels bigger = {PyMem_Calloc(cap, sizeof(uintptr_t)), PyMem_Malloc(cap * sizeof(Py_hash_t)),
                            PyMem_Malloc(cap * sizeof(int32_t)), cap - 1, 0};
        if (bigger.keys == NULL || bigger.hashes == NULL || bigger.labels == NULL) {
            keylabels_free(&bigger);
            PyErr_NoMemory();
            return -1;
        }
        for (size_t h = 0; c->keys != NULL && h <= c->mask; h++) {
            if (c->keys[h] == 0)
                continue;
            size_t k = keylabels_slot(&bigger, c->keys[h]);
            bigger.keys[k] = c->keys[h];
            bigger.hashes[k] = c->hashes[h];
            bigger.labels[k] = c->labels[h];
            bigger.used++;
        }
        keylabels_free(c);
        *c = bigger;
    }
    size_t k = keylabels_slot(c, address);
    if (c->keys[k] == 0)
        c->used++;
    c->keys[k] = address;
    c->hashes[k] = hash;
    c->labels[k] = label;
    return 0;
}

/* A big container's passes: a list's, tuple's or set's slices; a dict's values, then its
 * keys. (A big dict's values carry no labels: its keys are ids and names of a registry or a
 * cache, as many labels as entries; the owners' paths through it are named by the target
 * afterwards, graph_wire.name_paths.) */
enum { PHASE_NONE, PHASE_SLICES, PHASE_DICT_VALUES, PHASE_DICT_KEYS };

typedef struct {
    Column sizes, types, ids, lengths, flags, src, dst, lab;
    NodeBits marked;           /* the addresses of the nodes and of our own objects */
    int32_t *table;            /* node ids by address (in ``ids``), -1 empty */
    size_t table_mask;
    uintptr_t *own;            /* leakhound's own objects: never nodes */
    size_t own_mask;
    Py_ssize_t own_used;
    Py_ssize_t max_nodes;
    Py_ssize_t tracked;        /* nodes that are not leaves (what gc.get_objects() lists) */
    /* The payload's helpers (strong references, dropped by graph_close). */
    PyObject *type_index, *type_id;      /* dict id(type) -> type id; callable(type) -> id */
    PyObject *label_index, *label_of;    /* dict text -> label id; callable(text) -> id */
    PyObject *slot_cache, *slot_labels;  /* dict id(type) -> ((label, descr), ...); callable(type) */
    PyObject *frame_labels, *frame_label;  /* dict id(type) -> label; callable(type) -> label */
    PyObject *frame_types;               /* tuple: frames, coroutines, generators */
    PyObject *native, *native_extra;     /* dict id(type) -> code; callable(obj) -> (bytes, hidden) */
    PyObject *too_big;                   /* the exception over max_nodes */
    int labels_full;                     /* label_of said -1: no new label is made any more */
    Py_ssize_t called;                   /* calls into those helpers this call: work too */
    /* The container being walked (across calls when it is big). */
    PyObject *cur;
    Py_ssize_t cur_node;
    int phase, tag, has_names;
    Py_ssize_t pos, entries;
    long long folded;
    Refs refs;
    LabelMap names;
    KeyLabels key_labels;  /* the label of a str key by its address (key_label) */
} GraphState;

static void
graph_drop_helpers(GraphState *g)
{
    Py_CLEAR(g->type_index);
    Py_CLEAR(g->type_id);
    Py_CLEAR(g->label_index);
    Py_CLEAR(g->label_of);
    Py_CLEAR(g->slot_cache);
    Py_CLEAR(g->slot_labels);
    Py_CLEAR(g->frame_labels);
    Py_CLEAR(g->frame_label);
    Py_CLEAR(g->frame_types);
    Py_CLEAR(g->native);
    Py_CLEAR(g->native_extra);
    Py_CLEAR(g->too_big);
    refs_free(&g->refs);
    Py_CLEAR(g->cur);
    g->phase = PHASE_NONE;
}

static void
graph_capsule_free(PyObject *capsule)
{
    GraphState *g = (GraphState *)PyCapsule_GetPointer(capsule, GRAPH_NAME);
    if (g == NULL)
        return;
    graph_drop_helpers(g);
    Column *cols[] = {&g->sizes, &g->types, &g->ids, &g->lengths, &g->flags, &g->src, &g->dst, &g->lab};
    for (size_t k = 0; k < sizeof(cols) / sizeof(cols[0]); k++)
        column_free(cols[k]);
    PyMem_Free(g->table);
    PyMem_Free(g->own);
    nodebits_free(&g->marked);
    PyMem_Free(g->names.keys);
    PyMem_Free(g->names.labels);
    keylabels_free(&g->key_labels);
    PyMem_Free(g);
}

static GraphState *
graph_of(PyObject *capsule)
{
    GraphState *g = (GraphState *)PyCapsule_GetPointer(capsule, GRAPH_NAME);
    if (g != NULL && g->type_index == NULL) {
        PyErr_SetString(PyExc_ValueError, "the graph is closed");
        return NULL;
    }
    return g;
}

/* -- the address table ------------------------------------------------------------------ */

static inline uintptr_t
node_address(GraphState *g, int32_t node)
{
    return (uintptr_t) * (long long *)column_at(&g->ids, node);
}

/* The node at ``address``, -1 if none, -2 if one of leakhound's own objects. */
static Py_ssize_t
graph_find(GraphState *g, uintptr_t address)
{
    if (!nodebits_test(&g->marked, address))
        return -1;
    size_t k = addr_hash(address, g->table_mask);
    for (;;) {
        int32_t node = g->table[k];
        if (node < 0)
            break;
        if (node_address(g, node) == address)
            return node;
        k = (k + 1) & g->table_mask;
    }
    if (g->own_used) {
        k = addr_hash(address, g->own_mask);
        while (g->own[k] != 0) {
            if (g->own[k] == address)
                return -2;
            k = (k + 1) & g->own_mask;
        }
    }
    return -1;
}

static int
table_resize(GraphState *g, size_t cap)
{
    int32_t *table = PyMem_Malloc(cap * sizeof(int32_t));
    if (table == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memset(table, 0xFF, cap * sizeof(int32_t));
    for (Py_ssize_t node = 1; node < g->ids.len; node++) {
        size_t k = addr_hash(node_address(g, (int32_t)node), cap - 1);
        while (table[k] >= 0)
            k = (k + 1) & (cap - 1);
        table[k] = (int32_t)node;
    }
    PyMem_Free(g->table);
    g->table = table;
    g->table_mask = cap - 1;
    return 0;
}

/* A new node for ``obj`` (not in the table): its size, its type id. */
static Py_ssize_t
graph_add_node(GraphState *g, PyObject *obj, long long size, int32_t type_id)
{
    Py_ssize_t node = g->ids.len;
    if (node > g->max_nodes) {
        PyErr_Format(g->too_big, "more than %zd nodes", g->max_nodes);
        return -1;
    }
    if ((size_t)(node + 1) * 10 > (g->table_mask + 1) * 7) {
        /* One long step (a pass over ``ids``): the table is sized from the census's count
         * up front, so this is for graphs bigger than it guessed. */
        if (table_resize(g, (g->table_mask + 1) * 2) < 0)
            return -1;
    }
    long long address = (long long)(uintptr_t)obj;
    int32_t zero = 0;
    unsigned char noflags = 0;
    if (column_push(&g->ids, &address) < 0 || column_push(&g->sizes, &size) < 0
        || column_push(&g->types, &type_id) < 0 || column_push(&g->lengths, &zero) < 0
        || column_push(&g->flags, &noflags) < 0)
        return -1;
    if (nodebits_set(&g->marked, (uintptr_t)obj) < 0)
        return -1;
    size_t k = addr_hash((uintptr_t)obj, g->table_mask);
    while (g->table[k] >= 0)
        k = (k + 1) & g->table_mask;
    g->table[k] = (int32_t)node;
    if (!is_leaf(obj))
        g->tracked++;
    return node;
}

static int
graph_add_edge(GraphState *g, int32_t i, int32_t j, int32_t label)
{
    if (column_push(&g->src, &i) < 0 || column_push(&g->dst, &j) < 0 || column_push(&g->lab, &label) < 0)
        return -1;
    return 0;
}

/* -- labels ------------------------------------------------------------------------------ */

/* A call into the payload's Python helpers costs as much as this many referents. */
#define GRAPH_CALL_WORK 16

/* An int from a dict keyed by id(type) or text, or from calling ``make(arg)`` (NULL: -1
 * without a call): -2 on error. */
static long
cached_int(GraphState *g, PyObject *cache, PyObject *key, PyObject *make, PyObject *arg)
{
    PyObject *got = PyDict_GetItemWithError(cache, key);  /* borrowed */
    long value;
    if (got != NULL) {
        value = PyLong_AsLong(got);
    }
    else {
        if (PyErr_Occurred())
            return -2;
        if (make == NULL)
            return -1;
        g->called++;
        got = PyObject_CallFunctionObjArgs(make, arg, NULL);
        if (got == NULL)
            return -2;
        value = PyLong_AsLong(got);
        Py_DECREF(got);
    }
    if (value == -1 && PyErr_Occurred())
        return -2;
    return value < -1 || value > INT_MAX ? -1 : value;
}

static long key_label_made(GraphState *g, PyObject *key);

/* label_of("k" + key[:80]) for a str key: -2 on error. Cached by the key's address. */
static long
key_label(GraphState *g, PyObject *key)
{
    Py_hash_t hash = PyObject_Hash(key);  /* an exact str's: computed once, kept in it */
    if (hash == -1)
        return -2;
    KeyLabels *c = &g->key_labels;
    if (c->keys != NULL) {
        size_t k = keylabels_slot(c, (uintptr_t)key);
        if (c->keys[k] == (uintptr_t)key && c->hashes[k] == hash)
            return c->labels[k];
    }
    long label = key_label_made(g, key);
    /* Bounded (~2.6 MiB in the target): the keys that repeat (attribute names, a JSON
     * message's "role" and "content") come early; a cache's unique ids would only fill it. */
    if (label >= 0 && c->used < KEY_LABELS_MAX && keylabels_put(c, (uintptr_t)key, hash, (int32_t)label) < 0)
        return -2;
    return label;
}

/* key_label without the cache. */
static long
key_label_made(GraphState *g, PyObject *key)
{
    Py_ssize_t n = PyUnicode_GetLength(key);
    if (n < 0)
        return -2;
    PyObject *part = PyUnicode_Substring(key, 0, n < GRAPH_MAX_LABEL_CHARS ? n : GRAPH_MAX_LABEL_CHARS);
    if (part == NULL)
        return -2;
    PyObject *text = PyUnicode_FromFormat("k%U", part);
    Py_DECREF(part);
    if (text == NULL)
        return -2;
    long label = cached_int(g, g->label_index, text, g->labels_full ? NULL : g->label_of, text);
    Py_DECREF(text);
    if (label == -1)
        g->labels_full = 1;  /* graph.py's _MAX_LABELS reached (found labels are never -1) */
    return label;
}

/* "t<Type>" for a referent of a frame, coroutine or generator: -2 on error. */
static long
frame_label(GraphState *g, PyTypeObject *tp)
{
    PyObject *key = PyLong_FromVoidPtr((void *)tp);
    if (key == NULL)
        return -2;
    Py_INCREF(tp);
    long label = cached_int(g, g->frame_labels, key, g->frame_label, (PyObject *)tp);
    Py_DECREF(tp);
    Py_DECREF(key);
    return label;
}

/* The labels of obj's slots (member descriptors) into g->names; 1 if its type has any. */
static int
slot_names(GraphState *g, PyObject *obj, PyTypeObject *tp)
{
    PyObject *key = PyLong_FromVoidPtr((void *)tp);
    if (key == NULL)
        return -1;
    PyObject *slots = PyDict_GetItemWithError(g->slot_cache, key);  /* borrowed */
    Py_DECREF(key);
    if (slots == NULL) {
        if (PyErr_Occurred())
            return -1;
        g->called++;
        slots = PyObject_CallFunctionObjArgs(g->slot_labels, (PyObject *)tp, NULL);
    }
    else {
        Py_INCREF(slots);
    }
    if (slots == NULL)
        return -1;
    if (!PyTuple_Check(slots)) {
        Py_DECREF(slots);
        PyErr_SetString(PyExc_TypeError, "slot_labels must return a tuple");
        return -1;
    }
    int has = PyTuple_Size(slots) > 0;
    for (Py_ssize_t s = 0; s < PyTuple_Size(slots); s++) {
        PyObject *pair = PyTuple_GetItem(slots, s);  /* the tuple (held) holds it */
        if (pair == NULL || !PyTuple_Check(pair) || PyTuple_Size(pair) != 2)
            continue;
        long label = PyLong_AsLong(PyTuple_GetItem(pair, 0));
        PyObject *descr = PyTuple_GetItem(pair, 1);
        if (label == -1 && PyErr_Occurred()) {
            Py_DECREF(slots);
            return -1;
        }
        /* A member descriptor's getter reads the slot (C code; Python checked its type). */
        descrgetfunc get = (descrgetfunc)PyType_GetSlot(Py_TYPE(descr), Py_tp_descr_get);
        if (get == NULL) {
            PyErr_Clear();
            continue;
        }
        PyObject *value = get(descr, obj, (PyObject *)tp);
        if (value == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_Exception)) {
                Py_DECREF(slots);
                return -1;
            }
            PyErr_Clear();
            continue;
        }
        int failed = labelmap_setdefault(&g->names, (uintptr_t)value, (int32_t)label);
        Py_DECREF(value);
        if (failed) {
            Py_DECREF(slots);
            return -1;
        }
    }
    Py_DECREF(slots);
    return has;
}

/* -- a container's referents -------------------------------------------------------------- */

/* Up to ``want`` entries of a dict from g->pos: their values (``what`` 0) or keys (1) into
 * g->refs; with ``label``, a value's first str key labels it (g->names). 0 when done. */
static Py_ssize_t
dict_slice(GraphState *g, PyObject *d, int what, int label, Py_ssize_t want)
{
    PyObject *key, *value;
    Py_ssize_t got = 0;
    while (got < want && PyDict_Next(d, &g->pos, &key, &value)) {
        got++;
        /* Borrowed from the dict: held before anything runs. */
        if (refs_push(&g->refs, what ? key : value) < 0)
            return -1;
        if (what == 0 && label && PyUnicode_CheckExact(key)) {
            /* Only the address of the value is kept (as the Python loop's id()). */
            uintptr_t address = (uintptr_t)value;
            Py_INCREF(key);
            long id = key_label(g, key);
            Py_DECREF(key);
            if (id == -2 || labelmap_setdefault(&g->names, address, (int32_t)id) < 0)
                return -1;
        }
    }
    return got;
}

/* Starts walking ``obj`` (node ``i``): its referents into g->refs, or the first of its
 * slices. As the Python loop: a dict's values then its keys (then, for a subclass, its
 * tp_traverse), a module's dict, anything else's tp_traverse; then a native object's hidden
 * references. */
static int
graph_begin(GraphState *g, Walk *w, PyObject *obj, Py_ssize_t i)
{
    PyTypeObject *tp = Py_TYPE(obj);
    TypeInfo *info = type_info(w, tp);
    if (info == NULL)
        return -1;
    unsigned long flags = info->flags;
    traverseproc traverse = info->traverse;
    inquiry is_gc = info->is_gc;
    g->cur_node = i;
    g->folded = 0;
    g->entries = 0;
    g->pos = 0;
    g->phase = PHASE_NONE;
    g->tag = 0;
    g->has_names = 0;
    labelmap_clear(&g->names);
    for (Py_ssize_t k = 0; k < PyTuple_Size(g->frame_types); k++)
        if ((PyObject *)tp == PyTuple_GetItem(g->frame_types, k))
            g->tag = 1;
    Py_INCREF(tp);  /* the native helpers below may run code */
    long code = native_for(w, tp);
    if (code < 0) {
        Py_DECREF(tp);
        return -1;
    }
    long long *size = (long long *)column_at(&g->sizes, i);
    PyObject *hidden = NULL;
    if (code == 1) {
        g->called++;
        PyObject *got = PyObject_CallFunctionObjArgs(g->native_extra, obj, NULL);
        if (got == NULL) {
            Py_DECREF(tp);
            return -1;
        }
        long long extra = 0;
        if (PyTuple_Check(got) && PyTuple_Size(got) == 2) {
            extra = PyLong_AsLongLong(PyTuple_GetItem(got, 0));
            hidden = PyTuple_GetItem(got, 1);
            Py_XINCREF(hidden);
        }
        Py_DECREF(got);
        if (extra == -1 && PyErr_Occurred()) {
            Py_DECREF(tp);
            Py_XDECREF(hidden);
            return -1;
        }
        size = (long long *)column_at(&g->sizes, i);
        if (extra > 0 && *size <= LLONG_MAX - extra)
            *size += extra;
    }
    else if (code >= 2) {
        *size += instance_values_bytes(obj, traverse, code);
    }
    int failed = 0;
    if (flags & Py_TPFLAGS_DICT_SUBCLASS) {
        g->has_names = 1;
        if ((PyObject *)tp == (PyObject *)&PyDict_Type && PyDict_Size(obj) > BIG_CONTAINER / 2) {
            g->phase = PHASE_DICT_VALUES;
        }
        else {
            failed = dict_slice(g, obj, 0, 1, PY_SSIZE_T_MAX) < 0;
            g->entries = g->refs.len;
            g->pos = 0;
            if (!failed)
                failed = dict_slice(g, obj, 1, 0, PY_SSIZE_T_MAX) < 0;
            if (!failed && (PyObject *)tp != (PyObject *)&PyDict_Type && (flags & Py_TPFLAGS_HAVE_GC)
                && traverse != NULL && (is_gc == NULL || is_gc(obj)))
                failed = traverse(obj, visit_referent, &g->refs) != 0;
        }
    }
    else if (is_big(obj)) {
        g->phase = PHASE_SLICES;
        Py_INCREF(obj);
        g->refs.cursor = obj;
        g->refs.pos = 0;
    }
    else {
        failed = referents_of(w, obj, &g->refs) < 0;
        g->entries = g->refs.len;
        if (!failed && !g->tag) {
            int has = slot_names(g, obj, tp);
            failed = has < 0;
            g->has_names = has > 0;
        }
    }
    Py_DECREF(tp);
    if (hidden != NULL) {
        if (!failed && PyList_Check(hidden)) {
            for (Py_ssize_t k = 0; k < PyList_Size(hidden) && !failed; k++)
                failed = refs_push(&g->refs, PyList_GetItem(hidden, k)) < 0;
        }
        Py_DECREF(hidden);
    }
    return failed ? -1 : 0;
}

/* The next slice of a big container into g->refs (emptied first): how many entries it went
 * through (in the labels pass, with nothing in g->refs), 0 when the container is done. */
static Py_ssize_t
graph_next_slice(GraphState *g, Py_ssize_t want)
{
    refs_clear(&g->refs);
    if (g->phase == PHASE_SLICES) {
        Py_ssize_t got = read_slice(&g->refs, want);
        g->entries += got > 0 ? got : 0;
        return got;
    }
    int keys = g->phase == PHASE_DICT_KEYS;
    Py_ssize_t got = dict_slice(g, g->cur, keys, 0, want);
    if (got < 0)
        return -1;
    if (!keys)
        g->entries += got;
    if (got == 0 && !keys) {
        g->phase = PHASE_DICT_KEYS;
        g->pos = 0;
        return graph_next_slice(g, want);
    }
    return got;
}

/* The referents g->refs.items[next:] of the current container, until ``budget`` runs out:
 * folded, left out, or each an edge (and a new node, pushed on ``stack`` unless a leaf).
 * Returns how many it went through, -1 on error. */
static Py_ssize_t
graph_referents(GraphState *g, Walk *w, PyObject *stack, Py_ssize_t budget)
{
    Refs *r = &g->refs;
    Py_ssize_t start = r->next;
    Py_ssize_t stop = r->len - start > budget ? start + budget : r->len;
    int32_t i = (int32_t)g->cur_node;
    for (Py_ssize_t k = start; k < stop; k++) {
        PyObject *ref = r->items[k];  /* owned by r */
        PyTypeObject *rtp = Py_TYPE(ref);
        uintptr_t address = (uintptr_t)ref;
        Py_ssize_t j;
        int leaf = is_leaf(ref);
        if (leaf) {
            j = graph_find(g, address);
            Py_ssize_t count = Py_REFCNT(ref) + GRAPH_PY_EXTRA + (j >= 0 ? 1 : 0);
            if (count <= GRAPH_ONLY_ONE) {
                TypeInfo *info = type_info(w, rtp);
                long long size = 0;
                if (info == NULL || size_of(ref, info, &size) < 0)
                    return -1;
                g->folded += size;
                continue;
            }
            if (count > GRAPH_SHARED_LEAF || rtp == &PyBool_Type || ref == Py_None)
                continue;
        }
        else {
            j = graph_find(g, address);
        }
        if (j == -1) {
            if (PyType_Check(ref) || rtp == &PyModule_Type)
                continue;  /* classes and modules are roots of their own */
            TypeInfo *info = type_info(w, rtp);
            if (info == NULL)
                return -1;
            Py_INCREF(rtp);
            long long size = 0;
            Py_ssize_t type_id = -1;
            if (size_of(ref, info, &size) == 0) {
                info = type_info(w, rtp);
                type_id = info == NULL ? -1 : slot_for(w, info);
            }
            Py_DECREF(rtp);
            if (type_id < 0 || type_id > INT_MAX)
                return -1;
            j = graph_add_node(g, ref, size, (int32_t)type_id);
            if (j < 0)
                return -1;
            if (!leaf && PyList_Append(stack, ref) < 0)
                return -1;
        }
        else if (j < 0 || (*(unsigned char *)column_at(&g->flags, j) & GRAPH_WALL)) {
            continue;
        }
        long label = -1;
        if (g->has_names) {
            label = labelmap_get(&g->names, address);
        }
        else if (g->tag) {
            label = frame_label(g, rtp);
            if (label == -2)
                return -1;
        }
        if (graph_add_edge(g, i, (int32_t)j, (int32_t)label) < 0)
            return -1;
    }
    r->next = stop;
    return stop - start;
}

/* The current container is done: its folded leaves and its entries. */
static void
graph_finish(GraphState *g)
{
    Py_ssize_t i = g->cur_node;
    if (g->folded) {
        long long *size = (long long *)column_at(&g->sizes, i);
        *size += g->folded;
    }
    PyObject *c = g->cur;
    PyTypeObject *tp = Py_TYPE(c);
    if (tp == &PyList_Type || tp == &PyTuple_Type || tp == &PySet_Type || tp == &PyFrozenSet_Type
        || tp == &PyDict_Type) {
        Py_ssize_t entries = g->entries;
        *(int32_t *)column_at(&g->lengths, i) = (int32_t)(entries > 0x7FFFFFFF ? 0x7FFFFFFF : entries);
    }
    g->phase = PHASE_NONE;
    refs_free(&g->refs);
    Py_CLEAR(g->cur);
}

/* -- the module's functions --------------------------------------------------------------- */

PyDoc_STRVAR(graph_new_doc,
"graph_new(max_nodes, expected, type_index, type_id, label_index, label_of, slot_cache,\n"
"          slot_labels, frame_labels, frame_label, frame_types, native, native_extra,\n"
"          too_big) -> capsule\n\n"
"A new object graph (node 0 the super-root) and the payload's helpers its walk calls.");

static PyObject *
graph_new(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_ssize_t max_nodes, expected;
    PyObject *h[12];
    if (!PyArg_ParseTuple(args, "nnO!OO!OO!OO!OO!OOO:graph_new", &max_nodes, &expected,
                          &PyDict_Type, &h[0], &h[1], &PyDict_Type, &h[2], &h[3], &PyDict_Type, &h[4],
                          &h[5], &PyDict_Type, &h[6], &h[7], &PyTuple_Type, &h[8], &h[9], &h[10], &h[11]))
        return NULL;
    if (max_nodes < 1 || max_nodes > INT_MAX - 2) {
        PyErr_SetString(PyExc_ValueError, "max_nodes out of range");
        return NULL;
    }
    if (!PyDict_Check(h[9])) {
        PyErr_SetString(PyExc_TypeError, "native must be a dict");
        return NULL;
    }
    GraphState *g = PyMem_Calloc(1, sizeof(GraphState));
    if (g == NULL)
        return PyErr_NoMemory();
    g->sizes.itemsize = g->ids.itemsize = 8;
    g->types.itemsize = g->lengths.itemsize = g->src.itemsize = g->dst.itemsize = g->lab.itemsize = 4;
    g->flags.itemsize = 1;
    g->max_nodes = max_nodes;
    PyObject **slots[] = {&g->type_index, &g->type_id, &g->label_index, &g->label_of, &g->slot_cache,
                          &g->slot_labels, &g->frame_labels, &g->frame_label, &g->frame_types,
                          &g->native, &g->native_extra, &g->too_big};
    for (int k = 0; k < 12; k++) {
        Py_INCREF(h[k]);
        *slots[k] = h[k];
    }
    PyObject *capsule = PyCapsule_New(g, GRAPH_NAME, graph_capsule_free);
    if (capsule == NULL) {
        graph_drop_helpers(g);
        PyMem_Free(g);
        return NULL;
    }
    /* The table for ``expected`` nodes at a load under 0.6 (grown, in one step, past 0.7). */
    size_t cap = 1024;
    if (expected > max_nodes)
        expected = max_nodes;
    while ((size_t)expected * 10 > cap * 6 && cap < ((size_t)1 << 31))
        cap *= 2;
    long long zero64 = 0;
    int32_t zero32 = 0;
    unsigned char wall = GRAPH_WALL;
    if (table_resize(g, cap) < 0 || column_push(&g->ids, &zero64) < 0 || column_push(&g->sizes, &zero64) < 0
        || column_push(&g->types, &zero32) < 0 || column_push(&g->lengths, &zero32) < 0
        || column_push(&g->flags, &wall) < 0) {
        Py_DECREF(capsule);
        return NULL;
    }
    return capsule;
}

PyDoc_STRVAR(graph_node_doc,
"graph_node(graph, obj, size, type_id) -> node\n\n"
"obj's node: the one it has, -1 for leakhound's own objects, else a new one with this\n"
"size and type id (GraphTooBig past max_nodes).");

static PyObject *
graph_node(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *capsule, *obj;
    long long size;
    int type_id;
    if (!PyArg_ParseTuple(args, "OOLi:graph_node", &capsule, &obj, &size, &type_id))
        return NULL;
    GraphState *g = graph_of(capsule);
    if (g == NULL)
        return NULL;
    Py_ssize_t j = graph_find(g, (uintptr_t)obj);
    if (j == -2)
        return PyLong_FromLong(-1);
    if (j == -1) {
        j = graph_add_node(g, obj, size, (int32_t)type_id);
        if (j < 0)
            return NULL;
    }
    return PyLong_FromSsize_t(j);
}

PyDoc_STRVAR(graph_find_doc,
"graph_find(graph, address) -> node or None (-1: leakhound's own object)");

static PyObject *
graph_find_py(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *capsule;
    unsigned long long address;
    if (!PyArg_ParseTuple(args, "OK:graph_find", &capsule, &address))
        return NULL;
    GraphState *g = graph_of(capsule);
    if (g == NULL)
        return NULL;
    Py_ssize_t j = graph_find(g, (uintptr_t)address);
    if (j == -1)
        Py_RETURN_NONE;
    return PyLong_FromSsize_t(j == -2 ? -1 : j);
}

PyDoc_STRVAR(graph_own_doc, "graph_own(graph, address): never a node (leakhound's own object)");

static PyObject *
graph_own(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *capsule;
    unsigned long long address;
    if (!PyArg_ParseTuple(args, "OK:graph_own", &capsule, &address))
        return NULL;
    GraphState *g = graph_of(capsule);
    if (g == NULL)
        return NULL;
    if (address == 0 || graph_find(g, (uintptr_t)address) != -1)
        Py_RETURN_NONE;
    if (nodebits_set(&g->marked, (uintptr_t)address) < 0)
        return NULL;
    if (g->own == NULL || (size_t)(g->own_used + 1) * 2 > g->own_mask + 1) {
        size_t cap = g->own == NULL ? 64 : (g->own_mask + 1) * 2;
        uintptr_t *own = PyMem_Calloc(cap, sizeof(uintptr_t));
        if (own == NULL)
            return PyErr_NoMemory();
        for (size_t h = 0; g->own != NULL && h <= g->own_mask; h++) {
            if (g->own[h] == 0)
                continue;
            size_t k = addr_hash(g->own[h], cap - 1);
            while (own[k] != 0)
                k = (k + 1) & (cap - 1);
            own[k] = g->own[h];
        }
        PyMem_Free(g->own);
        g->own = own;
        g->own_mask = cap - 1;
    }
    size_t k = addr_hash((uintptr_t)address, g->own_mask);
    while (g->own[k] != 0)
        k = (k + 1) & g->own_mask;
    g->own[k] = (uintptr_t)address;
    g->own_used++;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(graph_edge_doc, "graph_edge(graph, src, dst, label[, wall]): an edge; wall marks dst a wall");

static PyObject *
graph_edge(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *capsule;
    int i, j, label, wall = 0;
    if (!PyArg_ParseTuple(args, "Oiii|p:graph_edge", &capsule, &i, &j, &label, &wall))
        return NULL;
    GraphState *g = graph_of(capsule);
    if (g == NULL)
        return NULL;
    if (i < 0 || j < 0 || i >= g->ids.len || j >= g->ids.len) {
        PyErr_SetString(PyExc_IndexError, "node out of range");
        return NULL;
    }
    if (wall)
        *(unsigned char *)column_at(&g->flags, j) |= GRAPH_WALL;
    else if (graph_add_edge(g, i, j, label) < 0)
        return NULL;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(graph_walk_doc,
"graph_walk(graph, stack, limit) -> work done\n\n"
"Walk from the objects on stack (a list: each a node already), adding nodes and edges;\n"
"stop after about limit units of work (at least one). The rest of the walk stays on stack,\n"
"and the rest of a big container in the graph (0 is returned only when all is done).");

static PyObject *
graph_walk(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *capsule, *stack;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "OO!n:graph_walk", &capsule, &PyList_Type, &stack, &limit))
        return NULL;
    GraphState *g = graph_of(capsule);
    if (g == NULL)
        return NULL;
    if (limit < 1)
        limit = 1;
    Walk w;
    memset(&w, 0, sizeof(w));
    w.type_index = g->type_index;
    w.new_slot = g->type_id;
    w.native = g->native;
    Py_ssize_t work = 0;
    g->called = 0;
    while (work + g->called * GRAPH_CALL_WORK < limit) {
        work += g->called * GRAPH_CALL_WORK;
        g->called = 0;
        if (g->cur == NULL) {
            Py_ssize_t n = PyList_Size(stack);
            if (n == 0)
                break;
            PyObject *obj = PyList_GetItem(stack, n - 1);
            if (obj == NULL)
                goto error;
            Py_INCREF(obj);
            if (PyList_SetSlice(stack, n - 1, n, NULL) < 0) {
                Py_DECREF(obj);
                goto error;
            }
            Py_ssize_t i = graph_find(g, (uintptr_t)obj);
            work += 1;
            if (i <= 0) {  /* not a node (it cannot be: pushed as one) */
                Py_DECREF(obj);
                continue;
            }
            g->cur = obj;
            if (graph_begin(g, &w, obj, i) < 0)
                goto error;
        }
        if (g->phase != PHASE_NONE && g->refs.next == g->refs.len) {
            Py_ssize_t got = graph_next_slice(g, limit - work > 1 ? limit - work : 1);
            if (got < 0)
                goto error;
            if (got == 0) {
                graph_finish(g);
                continue;
            }
        }
        Py_ssize_t done = graph_referents(g, &w, stack, limit - work);
        if (done < 0)
            goto error;
        work += done;
        if (g->refs.next < g->refs.len)
            break;  /* out of budget: the rest next call */
        if (g->phase == PHASE_NONE)
            graph_finish(g);
    }
    walk_release(&w);
    return PyLong_FromSsize_t(work);

error:
    walk_release(&w);
    return NULL;
}

PyDoc_STRVAR(graph_info_doc, "graph_info(graph) -> (nodes, edges, tracked, bytes held)");

static PyObject *
graph_info(PyObject *Py_UNUSED(module), PyObject *capsule)
{
    GraphState *g = (GraphState *)PyCapsule_GetPointer(capsule, GRAPH_NAME);
    if (g == NULL)
        return NULL;
    long long held = 0;
    Column *cols[] = {&g->sizes, &g->types, &g->ids, &g->lengths, &g->flags, &g->src, &g->dst, &g->lab};
    for (size_t k = 0; k < sizeof(cols) / sizeof(cols[0]); k++)
        held += (long long)cols[k]->nblocks * GBLOCK_ITEMS * cols[k]->itemsize;
    held += (long long)(g->table_mask + 1) * 4 + (long long)(g->own_mask + 1) * 8
            + (long long)g->marked.used * NB_BYTES + (long long)(g->marked.mask + 1) * 16;
    return Py_BuildValue("nnnL", g->ids.len, g->src.len, g->tracked, held);
}

PyDoc_STRVAR(graph_chunk_doc,
"graph_chunk(graph, column, k) -> bytes or None\n\n"
"Block k (64Ki items, native byte order) of column 0-6: sizes, types, ids, lengths, src,\n"
"dst, labels; None past the end.");

static PyObject *
graph_chunk(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *capsule;
    int column;
    Py_ssize_t k;
    if (!PyArg_ParseTuple(args, "Oin:graph_chunk", &capsule, &column, &k))
        return NULL;
    GraphState *g = (GraphState *)PyCapsule_GetPointer(capsule, GRAPH_NAME);
    if (g == NULL)
        return NULL;
    Column *cols[] = {&g->sizes, &g->types, &g->ids, &g->lengths, &g->src, &g->dst, &g->lab};
    if (column < 0 || column > 6) {
        PyErr_SetString(PyExc_IndexError, "no such column");
        return NULL;
    }
    Column *c = cols[column];
    if (k < 0 || k >= c->nblocks)
        Py_RETURN_NONE;
    Py_ssize_t items = c->len - k * GBLOCK_ITEMS;
    if (items > GBLOCK_ITEMS)
        items = GBLOCK_ITEMS;
    return PyBytes_FromStringAndSize(c->blocks[k], items * c->itemsize);
}

PyDoc_STRVAR(graph_write_doc,
"graph_write(graph, fd) -> bytes written\n\n"
"Every column's blocks (sizes, types, ids, lengths, src, dst, labels: graph_chunk's order)\n"
"written to the file descriptor fd in one call, the GIL released for all of it: a piece at a\n"
"time from Python, each piece a copy and a wait for the GIL after its write (the busy real\n"
"worker's main thread holds it up to its switch interval), was 0.05-0.26 s for 80 MB.");

static PyObject *
graph_write(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *capsule;
    int fd;
    if (!PyArg_ParseTuple(args, "Oi:graph_write", &capsule, &fd))
        return NULL;
    GraphState *g = (GraphState *)PyCapsule_GetPointer(capsule, GRAPH_NAME);
    if (g == NULL)
        return NULL;
    Column *cols[] = {&g->sizes, &g->types, &g->ids, &g->lengths, &g->src, &g->dst, &g->lab};
    long long total = 0;
    int failed = 0;
    /* The columns are the capsule's alone (the walk is over: graph_close ran) and the capsule
     * is held by our caller's argument: nothing changes them while the GIL is released. */
    Py_BEGIN_ALLOW_THREADS
    for (size_t c = 0; c < sizeof(cols) / sizeof(cols[0]) && !failed; c++) {
        Column *col = cols[c];
        for (Py_ssize_t k = 0; k < col->nblocks && !failed; k++) {
            Py_ssize_t items = col->len - k * GBLOCK_ITEMS;
            if (items > GBLOCK_ITEMS)
                items = GBLOCK_ITEMS;
            const char *at = col->blocks[k];
            size_t left = (size_t)items * (size_t)col->itemsize;
            while (left > 0) {
                ssize_t n = write(fd, at, left);
                if (n < 0) {
                    if (errno == EINTR)
                        continue;
                    failed = errno;
                    break;
                }
                at += n;
                left -= (size_t)n;
                total += n;
            }
        }
    }
    Py_END_ALLOW_THREADS
    if (failed) {
        errno = failed;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromLongLong(total);
}

PyDoc_STRVAR(graph_close_doc, "graph_close(graph): drop the helpers and the walk in progress (not the arrays)");

static PyObject *
graph_close(PyObject *Py_UNUSED(module), PyObject *capsule)
{
    GraphState *g = (GraphState *)PyCapsule_GetPointer(capsule, GRAPH_NAME);
    if (g == NULL)
        return NULL;
    PyMem_Free(g->table);  /* the walk's; the arrays stay for graph_chunk */
    g->table = NULL;
    g->table_mask = 0;
    PyMem_Free(g->own);
    g->own = NULL;
    g->own_mask = 0;
    g->own_used = 0;
    nodebits_free(&g->marked);
    graph_drop_helpers(g);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(graph_unknown_doc, "graph_unknown(graph, objects) -> the objects that are no node");

static PyObject *
graph_unknown(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *capsule, *objects;
    if (!PyArg_ParseTuple(args, "OO!:graph_unknown", &capsule, &PyList_Type, &objects))
        return NULL;
    GraphState *g = graph_of(capsule);
    if (g == NULL)
        return NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t k = 0; k < PyList_Size(objects); k++) {
        PyObject *obj = PyList_GetItem(objects, k);
        if (obj != NULL && graph_find(g, (uintptr_t)obj) == -1 && PyList_Append(out, obj) < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}

#define GRAPH_METHODS \
    {"graph_new", graph_new, METH_VARARGS, graph_new_doc}, \
    {"graph_node", graph_node, METH_VARARGS, graph_node_doc}, \
    {"graph_find", graph_find_py, METH_VARARGS, graph_find_doc}, \
    {"graph_own", graph_own, METH_VARARGS, graph_own_doc}, \
    {"graph_edge", graph_edge, METH_VARARGS, graph_edge_doc}, \
    {"graph_walk", graph_walk, METH_VARARGS, graph_walk_doc}, \
    {"graph_info", graph_info, METH_O, graph_info_doc}, \
    {"graph_chunk", graph_chunk, METH_VARARGS, graph_chunk_doc}, \
    {"graph_write", graph_write, METH_VARARGS, graph_write_doc}, \
    {"graph_close", graph_close, METH_O, graph_close_doc}, \
    {"graph_unknown", graph_unknown, METH_VARARGS, graph_unknown_doc},
