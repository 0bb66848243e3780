/*
 * The object graph's inner walk in C: an optional accelerator for graph.py's Graph._walk.
 *
 * One extension with the census's walk (_walk.c: _walk.abi3.so), whose helpers it shares
 * (_walk.h, _walk_objects.c):
 * the referents held in a plain buffer (Refs), the per-call type cache and the census's sizes
 * (type_info, size_of, slot_for, native_for, instance_values_bytes), the sliced reading of big
 * lists, tuples and sets (read_slice) and the rules for hostile objects that come with them
 * (no __sizeof__ written in Python runs, types are looked up by id, never hashed, nothing
 * the walk holds across code that may run can go stale).
 *
 * It builds the same graph as the Python loop (graph.py: the reference the tests compare it
 * against), sizes, type ids, entries of sized containers, edges with their labels, a leaf held
 * once folded into its container, shared leaves (None, True, small ints, names) left out,
 * classes and modules no node of the walk, walls reached from the super-root only; but it
 * names a node by its address, not by a dense id: the target keeps no table from address to
 * node (it was ~30% of the walk in perf, one cache miss a lookup, and 16 MiB on a 4.8M-object
 * heap), only bitmaps of the addresses that are nodes, walls and leakhound's own objects (one
 * bit per 16-byte granule: objects are 16-byte aligned and at least 16 bytes long, so a bit
 * is one object; as the census's bitmap, an object freed during the walk whose address is
 * reused reads as the old node). leakhound gives the nodes their ids when it reads the graph
 * (analysis/dominators/graph.py).
 *
 * A node's record (address, size, type id, entries) is made once it is complete: a leaf's
 * when it is met, a container's when its walk is done (its folded leaves added); a node the
 * payload's Python code made (a root) has one when made and, if walked, a second: the last
 * one counts. An edge's record is (source address, destination address, label); 0 is the
 * super-root. The records go into columns of blocks of 1Ki items; with a spool (graph_spool:
 * the file the CLI reads, on the debugger paths) every full block is written out and freed at
 * the next graph_flush (the payload calls it while it yields the GIL anyway), so what the walk
 * keeps in the target is the bitmaps and a few blocks, not the graph. On the wire each block
 * is a frame: two uint32 (column code, items) and the items.
 *
 * The walk's state lives in a capsule (graph_new); graph_walk runs it for about ``limit``
 * units of work (a container popped, a referent seen) and returns, so the caller's duty
 * cycle, deadline and cancel hook run between calls. A big exact list, tuple, set or dict is
 * read a slice at a time, its rest kept in the state for the next call (a big dict's values
 * carry no labels, in both loops: see PHASE_DICT_ENTRIES), and waits while what its slices
 * pushed is walked (GRAPH_SUSPEND_AT).
 *
 * An entry a collection of more than FOLD_MIN_ENTRIES entries alone holds (or one folded
 * itself) is folded into it,
 * with all it alone holds (see STACK_NAMESPACE): no node, its bytes a (collection's address,
 * bytes) record, its other referents edges from the collection labelled "f" and the entry's
 * own name for them.
 *
 * Python code it calls: the payload's own helpers given to graph_new (a type's id, a label's
 * id, a type's slot descriptors, a native object's buffers), and C descriptors' getters.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1  /* mremap (as Python.h's pyconfig.h defines it) */
#endif
#include <errno.h>
#include <stdint.h>
#include <unistd.h>
#include <sys/mman.h>

#include "_walk.h"
#include "_sites.h"


/* The walk's own memory. A table of TABLE_MAP_MIN bytes or more is a mapping of its own,
 * unmapped when it is freed or outgrown: the pages it touched go back to the kernel at once.
 * From malloc, a freed table stays in the heap (glibc raises its mmap threshold to the size
 * of the first mapped block freed, so a table doubled twice is three tables of the heap's),
 * and the target's RSS kept what the walk had touched. One of POOL_MIN bytes up to that is
 * the pool's (below); a smaller one is PyMem's (pymalloc's pools: its small objects). Each
 * has a 16-byte header: its mapping's length (0: PyMem's, POOL_MARK: the pool's), the size
 * asked. Under AddressSanitizer (tests/unit/test_walk_versions.py) every table is PyMem's:
 * its bounds are checked. */
#if defined(__SANITIZE_ADDRESS__)
#define TABLE_MAP_MIN ((size_t)1 << 62)
#define POOL_MIN TABLE_MAP_MIN
#else
#define TABLE_MAP_MIN ((size_t)64 << 10)
#define POOL_MIN ((size_t)512)
#endif
#define TABLE_HEADER 16
#define POOL_MARK ((size_t)1)

/* The pool: the walk's tables between POOL_MIN and TABLE_MAP_MIN (its columns' blocks of
 * 4-8 KiB, its small maps) carved from slabs of POOL_SLAB bytes mapped for them, a free list
 * a size class (POOL_SUB classes a doubling: at most 1/8 more than asked), every slab
 * unmapped when the last of its tables is freed (graph_close, the census's end). From
 * PyMem they were malloc's (above pymalloc's 512 bytes), in the payload thread's own glibc
 * arena, and what they had touched stayed in the target's RSS after the inspection: 1.0 MiB
 * of 3.9 on a 1M-object heap (malloc_info), kept by a thread the target never runs. Under
 * the GIL, as PyMem's were. */
#define POOL_SLAB ((size_t)256 << 10)
#define POOL_SUB 8
#define POOL_CLASSES (7 * POOL_SUB + 1)  /* 512 .. 64 KiB */

typedef struct PoolSlab {
    struct PoolSlab *next;
    size_t used;
} PoolSlab;

static PoolSlab *pool_slabs;
static void *pool_free[POOL_CLASSES];
static size_t pool_live;

/* ``total`` (POOL_MIN <= total < TABLE_MAP_MIN)'s class, and in *size the bytes it gets */
static size_t
pool_class(size_t total, size_t *size)
{
    int e = 63 - __builtin_clzll((unsigned long long)total);
    size_t base = (size_t)1 << e, step = base / POOL_SUB;
    size_t sub = (total - base + step - 1) / step;  /* 0 .. POOL_SUB: the next doubling's first */
    *size = base + sub * step;
    return (size_t)(e - 9) * POOL_SUB + sub;
}

static void *
pool_get(size_t total)
{
    size_t size, c = pool_class(total, &size);
    void *p = pool_free[c];
    if (p != NULL) {
        pool_free[c] = *(void **)p;
    }
    else {
        if (pool_slabs == NULL || pool_slabs->used + size > POOL_SLAB) {
            PoolSlab *slab = mmap(NULL, POOL_SLAB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (slab == MAP_FAILED)
                return NULL;
            slab->next = pool_slabs;
            slab->used = TABLE_HEADER;  /* (the slab's own header: its tables 16-byte aligned) */
            pool_slabs = slab;
        }
        p = (char *)pool_slabs + pool_slabs->used;
        pool_slabs->used += size;
    }
    pool_live++;
    return p;
}

static void
pool_put(void *p, size_t total)
{
    size_t size, c = pool_class(total, &size);
    /* The whole pages of a freed table go back to the kernel at once (a table reused faults
     * its pages in again, as zeros): kept, they were a peak above malloc's, which reuses
     * what is freed for tables of other sizes (VmHWM +0.5-0.7 MiB on a 5M-object heap). */
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)p + sizeof(void *) + page - 1) & ~(page - 1), hi = ((uintptr_t)p + size) & ~(page - 1);
    if (hi > lo)
        madvise((void *)lo, hi - lo, MADV_DONTNEED);
    *(void **)p = pool_free[c];
    pool_free[c] = p;
    if (--pool_live > 0)
        return;
    while (pool_slabs != NULL) {
        PoolSlab *next = pool_slabs->next;
        munmap(pool_slabs, POOL_SLAB);
        pool_slabs = next;
    }
    memset(pool_free, 0, sizeof(pool_free));
}

static void *
table_malloc(size_t size)
{
    if (size > ((size_t)1 << 46))
        return NULL;
    size_t *p;
    if (size + TABLE_HEADER < POOL_MIN) {
        p = PyMem_Malloc(size + TABLE_HEADER);
        if (p == NULL)
            return NULL;
        p[0] = 0;
    }
    else if (size + TABLE_HEADER < TABLE_MAP_MIN) {
        p = pool_get(size + TABLE_HEADER);
        if (p == NULL)
            return NULL;
        p[0] = POOL_MARK;
    }
    else {
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        size_t len = (size + TABLE_HEADER + page - 1) / page * page;
        p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            return NULL;
        p[0] = len;
    }
    p[1] = size;
    return (char *)p + TABLE_HEADER;
}

static void
table_free(void *ptr)
{
    if (ptr == NULL)
        return;
    size_t *p = (size_t *)((char *)ptr - TABLE_HEADER);
    if (p[0] == 0)
        PyMem_Free(p);
    else if (p[0] == POOL_MARK)
        pool_put(p, p[1] + TABLE_HEADER);
    else
        munmap(p, p[0]);
}

static void *
table_calloc(size_t count, size_t size)
{
    if (size != 0 && count > ((size_t)1 << 46) / size)
        return NULL;
    void *ptr = table_malloc(count * size);
    /* (a new mapping is zeros; PyMem's and the pool's may have been another table) */
    if (ptr != NULL && ((size_t *)((char *)ptr - TABLE_HEADER))[0] <= POOL_MARK)
        memset(ptr, 0, count * size);
    return ptr;
}

static void *
table_realloc(void *ptr, size_t size)
{
    if (ptr == NULL)
        return table_malloc(size);
    size_t *p = (size_t *)((char *)ptr - TABLE_HEADER);
    if (p[0] > POOL_MARK && size + TABLE_HEADER >= TABLE_MAP_MIN) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        size_t len = (size + TABLE_HEADER + page - 1) / page * page;
        size_t *q = mremap(p, p[0], len, MREMAP_MAYMOVE);  /* the pages move, not their bytes */
        if (q == MAP_FAILED)
            return NULL;
        q[0] = len;
        q[1] = size;
        return (char *)q + TABLE_HEADER;
    }
    if (p[0] == 0 && size + TABLE_HEADER < POOL_MIN) {
        size_t *q = PyMem_Realloc(p, size + TABLE_HEADER);
        if (q == NULL)
            return NULL;
        q[1] = size;
        return (char *)q + TABLE_HEADER;
    }
    if (p[0] == POOL_MARK && size + TABLE_HEADER >= POOL_MIN && size + TABLE_HEADER < TABLE_MAP_MIN) {
        size_t had, want;
        if (pool_class(p[1] + TABLE_HEADER, &had) == pool_class(size + TABLE_HEADER, &want)) {
            p[1] = size;  /* (its class's bytes hold it) */
            return ptr;
        }
    }
    void *grown = table_malloc(size);
    if (grown == NULL)
        return NULL;
    memcpy(grown, ptr, p[1] < size ? p[1] : size);
    table_free(ptr);
    return grown;
}

#define GRAPH_NAME "leakhound._walk.graph"
#define GBLOCK_SHIFT 10
#define GBLOCK_ITEMS ((Py_ssize_t)1 << GBLOCK_SHIFT)
/* getrefcount() as the Python loop sees a referent: its container, its referents list, the
 * loop variable and getrefcount's own argument; here the buffer holds the second. */
#define GRAPH_PY_EXTRA 2
#define GRAPH_ONLY_ONE 4
#define GRAPH_SHARED_LEAF 64
#define GRAPH_MAX_LABEL_CHARS 80

/* A column of records: blocks of 1Ki items (8 KiB of 8-byte items: what the target holds
 * of each column between two flushes); blocks [0, flushed) are written out and freed. */
/* Blocks written out are kept for reuse, up to this many a column: a new block is fresh
 * memory the kernel has to fault in and zero (the columns are ~80 MB of records on a
 * 4.8M-object heap). */
#define GBLOCK_SPARE 1

typedef struct {
    char **blocks;
    Py_ssize_t nblocks, cap;
    Py_ssize_t len;
    Py_ssize_t flushed;
    int itemsize;
    uint32_t code;  /* the frame's column code on the wire */
    char *spare[GBLOCK_SPARE];
    int nspare;
} Column;

static int
column_push(Column *c, const void *value)
{
    if (c->flushed > c->len >> GBLOCK_SHIFT) {
        PyErr_SetString(PyExc_ValueError, "the graph's records were written out");
        return -1;
    }
    if (c->len == c->nblocks * GBLOCK_ITEMS) {
        if (c->nblocks == c->cap) {
            Py_ssize_t cap = c->cap < 16 ? 16 : 2 * c->cap;
            char **blocks = table_realloc(c->blocks, (size_t)cap * sizeof(char *));
            if (blocks == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            c->blocks = blocks;
            c->cap = cap;
        }
        char *block = c->nspare > 0 ? c->spare[--c->nspare] : table_malloc((size_t)GBLOCK_ITEMS * (size_t)c->itemsize);
        if (block == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        c->blocks[c->nblocks++] = block;
    }
    char *at = c->blocks[c->len >> GBLOCK_SHIFT] + (size_t)(c->len & (GBLOCK_ITEMS - 1)) * (size_t)c->itemsize;
    if (c->itemsize == 8)  /* a store, not a call to memcpy: ~12M of them on a 4.8M-object heap */
        memcpy(at, value, 8);
    else
        memcpy(at, value, 4);
    c->len++;
    return 0;
}

/* Items in block k. */
static inline Py_ssize_t
column_block_items(Column *c, Py_ssize_t k)
{
    Py_ssize_t items = c->len - k * GBLOCK_ITEMS;
    return items > GBLOCK_ITEMS ? GBLOCK_ITEMS : items;
}

/* Blocks not written out yet: [flushed, last); with ``full_only`` the last, partial one is
 * left out (it is still being filled). */
static inline Py_ssize_t
column_last(Column *c, int full_only)
{
    return full_only ? c->len >> GBLOCK_SHIFT : c->nblocks;
}

static void
column_free(Column *c)
{
    for (Py_ssize_t b = c->flushed; b < c->nblocks; b++)
        table_free(c->blocks[b]);
    while (c->nspare > 0)
        table_free(c->spare[--c->nspare]);
    table_free(c->blocks);
    c->blocks = NULL;
    c->nblocks = c->cap = c->len = c->flushed = 0;
}

/* The whole of buf to fd (the GIL released by the caller): 0, or an errno. */
static int
write_all(int fd, const char *at, size_t left)
{
    while (left > 0) {
        ssize_t n = write(fd, at, left);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        at += n;
        left -= (size_t)n;
    }
    return 0;
}

/* Block k of c as a frame (its header, then its items) to fd: 0, or an errno. */
static int
column_write_block(Column *c, Py_ssize_t k, int fd, long long *total)
{
    Py_ssize_t items = column_block_items(c, k);
    uint32_t header[2] = {c->code, (uint32_t)items};
    size_t bytes = (size_t)items * (size_t)c->itemsize;
    int failed = write_all(fd, (const char *)header, sizeof(header));
    if (!failed)
        failed = write_all(fd, c->blocks[k], bytes);
    if (!failed)
        *total += (long long)(sizeof(header) + bytes);
    return failed;
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
 * that are no node (a leaf to fold, a new object), answered here without the table. A MiB
 * holds a few hundred nodes when the leaves are folded (a 1M-object registry: ~160 in each of
 * ~80 MiB), so a region's block is first a small set of its granules (NB_SET_MAX at most, at
 * most half full: ~4 bytes a node) and becomes the bitmap (NB_BYTES) once it holds more: the
 * bitmaps alone were ~0.9 MiB of the target's memory on that heap, ~50 bytes a node. */
/* graph_keep_types' types at most (graph.py's _MAX_KEPT_TYPES): 16 were too few for a worker
 * with ssl, sqlite3, lxml, zstandard (8), grpc, pydantic-core and two pybind11 ABIs loaded,
 * whose every inspection failed ("too many types"). */
#define GRAPH_KEPT_TYPES 64
#define NB_SHIFT 20
#define NB_BYTES ((1 << NB_SHIFT) >> 7)
/* The census's regions (_walk.c) have this layout too: graph_reached copies into them. */
typedef char nb_bytes_are_region_bytes[(NB_BYTES == REGION_BYTES && NB_SHIFT == REGION_SHIFT) ? 1 : -1];
#define NB_SET_FIRST 32
#define NB_SET_MAX 2048       /* slots: 4 KiB, half a bitmap */
#define NB_SET_EMPTY 0xFFFFu  /* an empty slot; the region's last granule makes it a bitmap */

typedef struct {
    uint32_t cap;   /* the set's slots, a power of two; 0: ``data`` is the bitmap */
    uint32_t used;  /* the granules in the set */
    unsigned char data[];  /* cap uint16 granules, or NB_BYTES of bits */
} NodeRegion;

typedef struct {
    uintptr_t *keys;          /* address >> NB_SHIFT, + 1 (0: empty) */
    NodeRegion **bits;
    size_t mask;
    Py_ssize_t used;
    uintptr_t last_key;
    NodeRegion **last_slot;   /* &bits[k] of last_key */
    long long bytes;          /* the regions' blocks */
} NodeBits;

static inline size_t
nb_set_slot(uint32_t granule, uint32_t cap)
{
    return (size_t)((granule * 2654435761u) >> 16) & (cap - 1);
}

/* ``granule`` into a region's set of ``cap`` slots (not in it yet; an empty slot left). */
static inline void
noderegion_put(uint16_t *set, uint32_t cap, uint32_t granule)
{
    size_t k = nb_set_slot(granule, cap);
    while (set[k] != NB_SET_EMPTY)
        k = (k + 1) & (cap - 1);
    set[k] = (uint16_t)granule;
}

static NodeRegion **
nodebits_region(NodeBits *nb, uintptr_t address, int create)
{
    uintptr_t key = (address >> NB_SHIFT) + 1;
    if (key == nb->last_key)
        return nb->last_slot;
    if (nb->keys != NULL) {
        size_t k = addr_hash(key << 4, nb->mask);
        while (nb->keys[k] != 0) {
            if (nb->keys[k] == key) {
                nb->last_key = key;
                nb->last_slot = &nb->bits[k];
                return nb->last_slot;
            }
            k = (k + 1) & nb->mask;
        }
    }
    if (!create)
        return NULL;
    if (nb->keys == NULL || (size_t)(nb->used + 1) * 2 > nb->mask + 1) {
        size_t cap = nb->keys == NULL ? 256 : (nb->mask + 1) * 2;
        uintptr_t *keys = table_calloc(cap, sizeof(uintptr_t));
        NodeRegion **bits = table_calloc(cap, sizeof(NodeRegion *));
        if (keys == NULL || bits == NULL) {
            table_free(keys);
            table_free(bits);
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
        table_free(nb->keys);
        table_free(nb->bits);
        nb->keys = keys;
        nb->bits = bits;
        nb->mask = cap - 1;
    }
    NodeRegion *region = table_malloc(sizeof(NodeRegion) + NB_SET_FIRST * sizeof(uint16_t));
    if (region == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    region->cap = NB_SET_FIRST;
    region->used = 0;
    memset(region->data, 0xFF, NB_SET_FIRST * sizeof(uint16_t));
    nb->bytes += (long long)(sizeof(NodeRegion) + NB_SET_FIRST * sizeof(uint16_t));
    size_t k = addr_hash(key << 4, nb->mask);
    while (nb->keys[k] != 0)
        k = (k + 1) & nb->mask;
    nb->keys[k] = key;
    nb->bits[k] = region;
    nb->used++;
    nb->last_key = key;
    nb->last_slot = &nb->bits[k];
    return nb->last_slot;
}

static inline int
noderegion_test(const NodeRegion *region, uint32_t granule)
{
    if (region->cap == 0)
        return (region->data[granule >> 3] >> (granule & 7)) & 1;
    if (granule == NB_SET_EMPTY)  /* never in a set: its region is a bitmap once it is */
        return 0;
    const uint16_t *set = (const uint16_t *)region->data;
    for (size_t k = nb_set_slot(granule, region->cap);; k = (k + 1) & (region->cap - 1)) {
        if (set[k] == granule)
            return 1;
        if (set[k] == NB_SET_EMPTY)
            return 0;
    }
}

static inline int
nodebits_test(NodeBits *nb, uintptr_t address)
{
    NodeRegion **slot = nodebits_region(nb, address, 0);
    return slot != NULL && noderegion_test(*slot, (uint32_t)((address & ((1 << NB_SHIFT) - 1)) >> 4));
}

/* The region's set made twice as big, or its bitmap once that would pass NB_SET_MAX (or a
 * granule is the empty slot's value): 0, or -1 with MemoryError. */
static int
noderegion_grow(NodeBits *nb, NodeRegion **slot, int to_bitmap)
{
    NodeRegion *old = *slot;
    uint32_t cap = old->cap * 2;
    if (cap > NB_SET_MAX)
        to_bitmap = 1;
    size_t size = sizeof(NodeRegion) + (to_bitmap ? (size_t)NB_BYTES : cap * sizeof(uint16_t));
    NodeRegion *region = table_malloc(size);
    if (region == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    region->cap = to_bitmap ? 0 : cap;
    region->used = old->used;
    memset(region->data, to_bitmap ? 0 : 0xFF, size - sizeof(NodeRegion));
    const uint16_t *from = (const uint16_t *)old->data;
    uint16_t *to = (uint16_t *)region->data;
    for (uint32_t k = 0; k < old->cap; k++) {
        uint32_t granule = from[k];
        if (granule == NB_SET_EMPTY)
            continue;
        if (to_bitmap)
            region->data[granule >> 3] |= (unsigned char)(1u << (granule & 7));
        else
            noderegion_put(to, cap, granule);
    }
    nb->bytes += (long long)size - (long long)(sizeof(NodeRegion) + old->cap * sizeof(uint16_t));
    table_free(old);
    *slot = region;
    return 0;
}

static int
nodebits_set(NodeBits *nb, uintptr_t address)
{
    NodeRegion **slot = nodebits_region(nb, address, 1);
    if (slot == NULL)
        return -1;
    uint32_t granule = (uint32_t)((address & ((1 << NB_SHIFT) - 1)) >> 4);
    NodeRegion *region = *slot;
    if (region->cap != 0) {
        if (noderegion_test(region, granule))
            return 0;
        if (granule == NB_SET_EMPTY || (region->used + 1) * 2 > region->cap) {
            if (noderegion_grow(nb, slot, granule == NB_SET_EMPTY) < 0)
                return -1;
            region = *slot;
        }
    }
    if (region->cap == 0) {
        region->data[granule >> 3] |= (unsigned char)(1u << (granule & 7));
        return 0;
    }
    noderegion_put((uint16_t *)region->data, region->cap, granule);
    region->used++;
    return 0;
}

/* The region's granules as bits into ``to`` (NB_BYTES). */
static void
noderegion_or_into(const NodeRegion *region, unsigned char *to)
{
    if (region->cap == 0) {
        for (size_t k = 0; k < NB_BYTES; k++)
            to[k] |= region->data[k];
        return;
    }
    const uint16_t *set = (const uint16_t *)region->data;
    for (uint32_t k = 0; k < region->cap; k++)
        if (set[k] != NB_SET_EMPTY)
            to[set[k] >> 3] |= (unsigned char)(1u << (set[k] & 7));
}

static void
nodebits_free(NodeBits *nb)
{
    for (size_t h = 0; nb->keys != NULL && h <= nb->mask; h++)
        table_free(nb->bits[h]);
    table_free(nb->keys);
    table_free(nb->bits);
    memset(nb, 0, sizeof(*nb));
}

static void
labelmap_clear(LabelMap *m)
{
    if (m->used && m->mask >= 1024) {
        /* Grown by a big dict: smaller again (clearing it for every container would cost). */
        table_free(m->keys);
        table_free(m->labels);
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
    uintptr_t *keys = table_calloc(cap, sizeof(uintptr_t));
    int32_t *labels = table_malloc(cap * sizeof(int32_t));
    if (keys == NULL || labels == NULL) {
        table_free(keys);
        table_free(labels);
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
    table_free(m->keys);
    table_free(m->labels);
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

/* A map from an object's address to two numbers (a wide and a narrow one), for the whole
 * walk: a dict key's hash and label (key_label), a root's size and type id (graph_begin).
 * Open addressing, filled at most half (three quarters: addrmap_put's ``hits``). */
typedef struct {
    uintptr_t *keys;
    long long *wide;
    int32_t *narrow;
    size_t mask;
    Py_ssize_t used;
} AddrMap;

static void
addrmap_free(AddrMap *m)
{
    table_free(m->keys);
    table_free(m->wide);
    table_free(m->narrow);
    memset(m, 0, sizeof(*m));
}

/* The slot of ``address`` (its own, or the empty one it would take). */
static size_t
addrmap_slot(AddrMap *m, uintptr_t address)
{
    size_t k = addr_hash(address, m->mask);
    while (m->keys[k] != 0 && m->keys[k] != address)
        k = (k + 1) & m->mask;
    return k;
}

/* ``hits``: a map looked up only for what it holds (made: madebits tells first) */
static int
addrmap_put(AddrMap *m, uintptr_t address, long long wide, int32_t narrow, int hits)
{
    /* half full at most where most lookups miss (key_labels: a key not named yet), three
     * quarters where each is a hit (made: madebits tells first; 38,709 roots made on the
     * real verifiers worker, in 2.6 MiB of slots at half full, 1.3 MiB at most now) */
    size_t full = hits ? (m->mask + 1) / 4 * 3 : (m->mask + 1) / 2;
    if (m->keys == NULL || (size_t)(m->used + 1) > full) {
        size_t cap = m->keys == NULL ? 1024 : (m->mask + 1) * 2;
        AddrMap bigger = {table_calloc(cap, sizeof(uintptr_t)), table_malloc(cap * sizeof(long long)),
                          table_malloc(cap * sizeof(int32_t)), cap - 1, 0};
        if (bigger.keys == NULL || bigger.wide == NULL || bigger.narrow == NULL) {
            addrmap_free(&bigger);
            PyErr_NoMemory();
            return -1;
        }
        for (size_t h = 0; m->keys != NULL && h <= m->mask; h++) {
            if (m->keys[h] == 0)
                continue;
            size_t k = addrmap_slot(&bigger, m->keys[h]);
            bigger.keys[k] = m->keys[h];
            bigger.wide[k] = m->wide[h];
            bigger.narrow[k] = m->narrow[h];
            bigger.used++;
        }
        addrmap_free(m);
        *m = bigger;
    }
    size_t k = addrmap_slot(m, address);
    if (m->keys[k] == 0)
        m->used++;
    m->keys[k] = address;
    m->wide[k] = wide;
    m->narrow[k] = narrow;
    return 0;
}

/* 1 and the two numbers kept for ``address``, else 0. */
static int
addrmap_get(AddrMap *m, uintptr_t address, long long *wide, int32_t *narrow)
{
    if (m->used == 0)
        return 0;
    size_t k = addrmap_slot(m, address);
    if (m->keys[k] != address)
        return 0;
    *wide = m->wide[k];
    *narrow = m->narrow[k];
    return 1;
}

/* A dict key's label by the key's address (an AddrMap: the key's hash, its label), for the
 * whole walk: the same interned attribute names and dict keys come back in container after
 * container, and making "k<key>" and looking it up in the payload's dict was ~10% of the walk
 * (perf). The key's hash is kept beside its address: a key freed during the walk whose
 * address a new string took reads as a miss unless the new one hashes the same (then its
 * label would be the old text's: a label only names an edge, the owners' paths are named
 * again by the target). */
#define KEY_LABELS_MAX 65536

/* A big container's passes: a list's, tuple's or set's slices; a dict's values, then its
 * keys. (A big dict's values carry no labels: its keys are ids and names of a registry or a
 * cache, as many labels as entries; the owners' paths through it are named by the target
 * afterwards, graph_wire.name_paths.) */
/* PHASE_DICT_ENTRIES: a big exact dict, each slice its entries' values and keys (a registry's
 * key and what its entry holds of the same leaf are met a few slices apart: PendingLeaf). */
enum { PHASE_NONE, PHASE_SLICES, PHASE_DICT_ENTRIES };


/* The frame codes of the columns (graph_wire.py reads them; 4 and 5 are the Python loop's
 * edges by node id). */
enum { COL_IDS = 0, COL_SIZES = 1, COL_TYPES = 2, COL_LENGTHS = 3, COL_LABELS = 6, COL_SRC = 7, COL_DST = 8,
       COL_FOLD_OWNER = 9, COL_FOLD_BYTES = 10 };

#define FOLD_EDGE_SLOTS 1024

/* A leaf (str, bytes, int...) held a few times (more than once, at most GRAPH_SHARED_LEAF
 * times): its bytes are those of the node it is met from if every reference to it is met from
 * there (a session's name, its registry's key and its attribute: all in the registry). Met
 * from two or three nodes, it is dominated by what dominates them all, as every leaf met from
 * the same ones: they are one node, a LeafGroup, with an edge from each (verifiers' running
 * steps: a prompt's token ids in the response model's list, the stored response's and the
 * step's tokens', ~55k ints a list); from a fourth, it is a node of its own. ``left``:
 * references not met yet. The table starts with room for PENDING_LEAVES and doubles while
 * they are taken, up to PENDING_LEAVES_MAX at once: what waits is every leaf of a list whose
 * twin list comes later in the walk (16k at most made the rest of a 55k list nodes: the real
 * worker's 21M objects at 2 GB were past the 6M-node budget). A leaf met when they are all
 * taken is given to that node at once (``counted``: met again, it is left out). Those whose
 * other holders are never met (held from C) are settled after the walk (graph_settle). No
 * reference is held: the address names it. */
#define PENDING_LEAVES (1 << 11)
#define PENDING_LEAVES_MAX (1 << 18)
#define PENDING_RESERVE_FROM (1 << 14)  /* pending_reserve: rooms this big grow between steps */
#define PENDING_OWNERS 3
typedef struct {
    uintptr_t key;    /* the leaf's address; 0: empty */
    uintptr_t owner[PENDING_OWNERS];  /* the nodes it was met from; 0: none (more) */
    long long size;
    int32_t type, left;
} PendingLeaf;

/* A PendingLeaf as the table keeps it, in 32 bytes, not 48 (the real verifiers worker's 25.6k
 * leaves waiting at once took 3.1 MiB of slots): a word for the leaf and one for each node it
 * was met from, each an address >> 4 (objects are 16-byte aligned, below 2**48) in its low
 * PACKED_ADDRESS_BITS, and in the top bits of the leaf's word its references not met yet, of
 * the first owner's its type id, of the others' the size (low bits, high bits). A leaf whose
 * numbers do not fit (packed_fits) is a node of its own at once, as one met from a fourth
 * node. The leaf's word is 0 in an empty slot. */
#define PACKED_ADDRESS_BITS 44
#define PACKED_ADDRESS ((((uint64_t)1) << PACKED_ADDRESS_BITS) - 1)
#define PACKED_TOP_BITS (64 - PACKED_ADDRESS_BITS)
#define PACKED_TOP_MAX ((((uint64_t)1) << PACKED_TOP_BITS) - 1)
typedef struct {
    uint64_t word[1 + PENDING_OWNERS];
} PackedLeaf;

/* An address the table can hold: not 0 (an empty slot's), 16-byte aligned, below 2**48. */
static inline int
packed_address_fits(uintptr_t address)
{
    return address != 0 && (address & 15) == 0 && ((uint64_t)address >> 4) <= PACKED_ADDRESS;
}

/* Whether a leaf's numbers fit a PackedLeaf. */
static inline int
packed_fits(uintptr_t address, uintptr_t owner, long long size, int32_t type, int32_t left)
{
    return packed_address_fits(address) && packed_address_fits(owner)
           && size >= 0 && (uint64_t)size <= (PACKED_TOP_MAX << PACKED_TOP_BITS | PACKED_TOP_MAX)
           && type >= 0 && (uint64_t)type <= PACKED_TOP_MAX && left >= 0 && (uint64_t)left <= PACKED_TOP_MAX;
}

static inline uintptr_t
packed_key(const PackedLeaf *p)
{
    return (uintptr_t)((p->word[0] & PACKED_ADDRESS) << 4);
}

static inline uintptr_t
packed_owner(const PackedLeaf *p, int m)
{
    return (uintptr_t)((p->word[1 + m] & PACKED_ADDRESS) << 4);
}

static inline void
packed_set_owner(PackedLeaf *p, int m, uintptr_t owner)
{
    p->word[1 + m] = (p->word[1 + m] & ~PACKED_ADDRESS) | ((uint64_t)owner >> 4);
}

static inline int32_t
packed_left(const PackedLeaf *p)
{
    return (int32_t)(p->word[0] >> PACKED_ADDRESS_BITS);
}

static inline void
packed_set_left(PackedLeaf *p, int32_t left)
{
    p->word[0] = (p->word[0] & PACKED_ADDRESS) | ((uint64_t)left << PACKED_ADDRESS_BITS);
}

static void
packed_set(PackedLeaf *p, uintptr_t address, uintptr_t owner, long long size, int32_t type, int32_t left)
{
    uint64_t n = (uint64_t)size;
    p->word[0] = ((uint64_t)address >> 4) | ((uint64_t)left << PACKED_ADDRESS_BITS);
    p->word[1] = ((uint64_t)owner >> 4) | ((uint64_t)type << PACKED_ADDRESS_BITS);
    p->word[2] = (n & PACKED_TOP_MAX) << PACKED_ADDRESS_BITS;
    p->word[3] = (n >> PACKED_TOP_BITS) << PACKED_ADDRESS_BITS;
}

static PendingLeaf
packed_unpack(const PackedLeaf *p)
{
    PendingLeaf q;
    q.key = packed_key(p);
    for (int m = 0; m < PENDING_OWNERS; m++)
        q.owner[m] = packed_owner(p, m);
    q.size = (long long)((p->word[2] >> PACKED_ADDRESS_BITS) | ((p->word[3] >> PACKED_ADDRESS_BITS) << PACKED_TOP_BITS));
    q.type = (int32_t)(p->word[1] >> PACKED_ADDRESS_BITS);
    q.left = packed_left(p);
    return q;
}

/* The node of the leaves of one type met from the same two or three nodes (sorted, 0 after
 * the last): its first leaf's address. Open addressing, doubled when three quarters full (a
 * group is looked up once a leaf's references are all met, far less often than a pending
 * leaf: a plain process's ~4,800 groups, met walking its modules, took 16Ki slots at half
 * full, 0.6 MiB of the target's peak), up to LEAF_GROUPS_MAX. A group is only what spares a
 * node per leaf: when the table holds LEAF_GROUPS_MAX the groups kept are forgotten (the
 * table cleared) and the next leaf of one makes a node of it again, as the first did, with
 * the same edges, so the same dominator: one more node, the group's bytes in two (what
 * dominates both still holds them all). The walk meets a group's leaves together (from one
 * owner's contents): on the real verifiers worker (740k nodes) ~98k groups took 5.2 MiB of
 * the target's peak at most; kept 6,144 at a time (320 KiB), 300 more nodes. */
#define LEAF_GROUPS 1024
#define LEAF_GROUPS_MAX 6144
typedef struct {
    uintptr_t owner[PENDING_OWNERS];  /* owner[0] == 0: empty */
    uintptr_t node;
    int32_t type;
} LeafGroup;

/* A big container whose slices wait while what its last slices pushed is walked (see
 * GRAPH_SUSPEND_AT): its record so far and where its next slice starts. */
typedef struct {
    PyObject *cur, *cursor;  /* strong references */
    uintptr_t owner;
    long long size, folded;
    int32_t type;
    int phase, tag, has_names, foldable;
    Py_ssize_t pos, entries, cursor_pos, base;
} Suspended;

/* A big container's slices push what they find on the stack (a registry of 2.4M sessions:
 * 2.4M entries, 38 MiB with their owner words, before the first was walked): once it has
 * pushed this many, its next slice waits until they are walked, so that the stack holds a
 * few slices' worth at each of at most GRAPH_MAX_SUSPENDED nested big containers. */
#define GRAPH_SUSPEND_AT 4096
#define GRAPH_MAX_SUSPENDED 32

typedef struct {
    /* Node records (address, size, type id, entries) and edge records (source and
     * destination addresses, label): see the top of this file. */
    Column ids, sizes, types, lengths, src, dst, lab;
    /* Bytes of objects folded into a node (see STACK_NAMESPACE): (the node's address, bytes) pairs,
     * summed by leakhound; consecutive folds into one node are one pair (``fold_owner``). */
    Column fold_owner, fold_bytes;
    uintptr_t fold_pending;
    long long fold_pending_bytes;
    long long folded_objects;
    NodeBits marked;           /* the addresses of the nodes and of our own objects, and
                                * of the containers folded while fold_marks_until allows */
    /* Folded containers (held once: met once) are marked only for what lists every tracked
     * object after the walk (graph_unknown, graph_reached): while the walk's tracked count
     * is below this (-1: always). Past it that listing is over the pause budget and never
     * runs, and their bits were a bit per 16 bytes of the heap (0.8% of it). A container
     * that gains a reference after it was walked folded is then walked again when that
     * reference is met (as a folded leaf already was): what the target changes during the
     * walk, where a mark left an edge to no node. */
    Py_ssize_t fold_marks_until;
    NodeBits walls;            /* nodes no edge but the super-root's leads to */
    NodeBits ownbits;          /* leakhound's own objects: never nodes */
    NodeBits madebits;         /* the addresses in ``made``: most containers are not, known
                                * without a probe of its table */
    AddrMap made;              /* the nodes the payload's Python code made (the roots:
                                * classes, frames, tasks... sized there, as the Python loop
                                * does, never by C's size_of here): size, type id */
    Py_ssize_t own_used;
    Py_ssize_t nodes;          /* distinct nodes, the super-root included */
    Py_ssize_t max_nodes;
    Py_ssize_t tracked;        /* nodes that are not leaves (what gc.get_objects() lists) */
    int spool;                 /* where full blocks go at graph_flush, -1: kept */
    long long spooled;         /* bytes written there */
    /* The payload's helpers (strong references, dropped by graph_close). */
    PyObject *type_index, *type_id;      /* dict id(type) -> type id; callable(type) -> id */
    PyObject *slot_cache, *slot_labels;  /* dict id(type) -> ((label, descr), ...); callable(type) */
    PyObject *frame_labels, *frame_label;  /* dict id(type) -> label; callable(type) -> label */
    PyObject *frame_types;               /* tuple: frames, coroutines, generators */
    PyObject *native, *native_extra;     /* dict id(type) -> code; callable(obj) -> (bytes, hidden) */
    PyObject *too_big;                   /* the exception over max_nodes */
    PyObject *also_held;                 /* in g->refs: the next referent is held once more (dict_slice) */
    /* Types never folded (graph_keep_types): a node each, that ``--why TYPE`` can name (their
     * objects hold a C library's memory no size counts: wire.OPAQUE_NATIVE_TYPES) */
    PyTypeObject *kept_types[GRAPH_KEPT_TYPES];
    int nkept_types;
    int labels_full;                     /* the key labels are all taken: no new one is made */
    /* Every label of the compiled walk ("k" + a dict key, "a" + a slot's name, "t" + a frame's
     * type, "f" + a folded entry's label, "d", the roots' names): their UTF-8 texts end to end
     * in ``ltext`` (label k from loff[k] to loff[k + 1]), found by their text through
     * ``lslots`` (open addressing, label + 1, 0: empty, at most half full). In the payload's
     * Python dict each was a str, an int and an index entry: a plain process's ~7,500 labels
     * (its modules' globals) were ~1 MiB of the target's peak there, ~0.2 MiB here. Kept
     * after graph_close (graph_labels reads them), freed with the capsule. */
    char *ltext;
    size_t ltext_len, ltext_cap;
    uint32_t *loff;
    Py_ssize_t nlabels, loff_cap, nkey_labels, max_labels, max_key_labels;
    int32_t *lslots;
    size_t lslots_mask;
    Py_ssize_t called;                   /* calls into those helpers this call: work too */
    /* The container being walked (across calls when it is big): its record so far. */
    PyObject *cur;
    long long cur_size;
    int32_t cur_type;
    int phase, tag, has_names;
    Py_ssize_t pos, entries;
    long long folded;
    Refs refs;
    /* The containers still to walk (strong references), last in first out: what the payload
     * pushes on the list handed to graph_walk moves here at each call (a list's pop through
     * the stable ABI is PyList_SetSlice: ~1% of the walk's CPU). */
    Refs stack;
    /* Per entry of ``stack``: 0 a node, STACK_NAMESPACE a node whose referents are its
     * names (nothing is folded into it), else the address of the node it is folded into. */
    uintptr_t *owners;
    Py_ssize_t owners_cap;
    uintptr_t cur_owner;
    int cur_foldable;          /* a node entries are folded into (see FOLD_MIN_ENTRIES) */
    /* 3.11+: an instance's materialized __dict__ is in the word three before it (the managed
     * dict pointer; Py_TPFLAGS_MANAGED_DICT): its edge is labelled "d", so that leakhound
     * tells it from an attribute whose value is a dict (d_label: -2 not made yet). */
    int managed_dicts;
    long d_label;
    /* The edges from folded entries last made, by a hash of (source, destination): the
     * entries of a registry name the same few objects (3.10's instance dicts their shared
     * keys: 3 edges an instance, all alike), one edge each is enough for the dominators. */
    uintptr_t seen_src[FOLD_EDGE_SLOTS], seen_dst[FOLD_EDGE_SLOTS];
    PackedLeaf *pending;       /* pending_mask + 1 slots (twice the leaves it has room for), open
                                * addressing, made when needed */
    size_t pending_mask;
    Py_ssize_t npending;
    LeafGroup *groups;         /* groups_mask + 1 slots, made when needed */
    size_t groups_mask;
    Py_ssize_t ngroups;
    int32_t seen_lab[FOLD_EDGE_SLOTS];
    /* how many times that edge was made: twice at most, so that leakhound tells an object
     * several entries hold together (400 views of one array in a dict: freeing one entry
     * frees nothing) from one entry's own (analysis/dominators/owners.py ``_edges_to``) */
    unsigned char seen_n[FOLD_EDGE_SLOTS];
    /* label id -> the label "f<label>" of an edge from a folded entry (-2: not asked yet) */
    int32_t *fold_labels;
    Py_ssize_t fold_labels_len;
    Py_ssize_t cur_base;       /* the stack's length when the current container began */
    Suspended suspended[GRAPH_MAX_SUSPENDED];
    int nsuspended;
    LabelMap names;
    AddrMap key_labels;    /* a str key's hash and label by its address (key_label) */
    /* The hashes of the short keys (<= GRAPH_MAX_LABEL_CHARS) a label was made for: once no
     * label is made any more, a key whose hash is not in it has none (only key_label_made
     * makes "k" labels in this walk), known without building its text (a cache's unique
     * keys); one whose hash is there is looked up. No reference to the keys: a reference
     * would change their counts, and what the walk folds. */
    uint32_t *labelled;        /* open addressing, 0 empty; labelled_mask + 1 slots */
    size_t labelled_mask;
    Py_ssize_t nlabelled;
    /* The census the walk makes on the way (graph_tallies): every object it counts, once,
     * by type id, at its own size (a container's before its folded leaves): the nodes, the
     * folded leaves, and the shared leaves (no node) the first time they are met. */
    NodeBits counted;          /* the shared leaves counted */
    int32_t str_type_id;       /* str's type id once a str leaf was met (0: none yet) */
    long long *t_counts, *t_bytes;
    Py_ssize_t t_len;
    long long objects, bytes, native_bytes;
} GraphState;

#define GRAPH_COLUMNS(g) {&(g)->ids, &(g)->sizes, &(g)->types, &(g)->lengths, &(g)->lab, &(g)->src, &(g)->dst, \
                         &(g)->fold_owner, &(g)->fold_bytes}
#define GRAPH_NCOLUMNS 9

static void
graph_drop_helpers(GraphState *g)
{
    Py_CLEAR(g->type_index);
    Py_CLEAR(g->type_id);
    Py_CLEAR(g->slot_cache);
    Py_CLEAR(g->slot_labels);
    Py_CLEAR(g->frame_labels);
    Py_CLEAR(g->frame_label);
    Py_CLEAR(g->frame_types);
    Py_CLEAR(g->native);
    Py_CLEAR(g->native_extra);
    Py_CLEAR(g->too_big);
    Py_CLEAR(g->also_held);
    while (g->nkept_types > 0)
        Py_CLEAR(g->kept_types[--g->nkept_types]);
    refs_free(&g->refs);
    refs_free(&g->stack);
    table_free(g->owners);
    g->owners = NULL;
    g->owners_cap = 0;
    table_free(g->fold_labels);
    g->fold_labels = NULL;
    g->fold_labels_len = 0;
    while (g->nsuspended > 0) {
        Suspended *z = &g->suspended[--g->nsuspended];
        Py_CLEAR(z->cur);
        Py_CLEAR(z->cursor);
    }
    Py_CLEAR(g->cur);
    g->phase = PHASE_NONE;
}

static void
graph_drop_bits(GraphState *g)
{
    nodebits_free(&g->marked);
    nodebits_free(&g->walls);
    nodebits_free(&g->ownbits);
    nodebits_free(&g->counted);
    nodebits_free(&g->madebits);
    addrmap_free(&g->made);
    table_free(g->pending);
    g->pending = NULL;
    g->pending_mask = 0;
    g->npending = 0;
    table_free(g->groups);
    g->groups = NULL;
    g->groups_mask = 0;
    g->ngroups = 0;
    g->own_used = 0;
}

static void
graph_capsule_free(PyObject *capsule)
{
    GraphState *g = (GraphState *)PyCapsule_GetPointer(capsule, GRAPH_NAME);
    if (g == NULL)
        return;
    graph_drop_helpers(g);
    Column *cols[] = GRAPH_COLUMNS(g);
    for (size_t k = 0; k < GRAPH_NCOLUMNS; k++)
        column_free(cols[k]);
    graph_drop_bits(g);
    table_free(g->names.keys);
    table_free(g->names.labels);
    addrmap_free(&g->key_labels);
    table_free(g->ltext);
    table_free(g->loff);
    table_free(g->lslots);
    table_free(g->labelled);
    g->labelled = NULL;
    g->labelled_mask = 0;
    g->nlabelled = 0;
    PyMem_Free(g->t_counts);  /* grow_tallies (_walk_objects.c): PyMem's */
    PyMem_Free(g->t_bytes);
    table_free(g);
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

/* -- nodes and edges ---------------------------------------------------------------------- */

enum { FOUND_NONE = 0, FOUND_NODE = 1, FOUND_OWN = 2 };

/* Whether objects of ``tp`` are never folded (graph_keep_types). */
static inline int
graph_kept_type(const GraphState *g, PyTypeObject *tp)
{
    for (int k = 0; k < g->nkept_types; k++)
        if (g->kept_types[k] == tp)
            return 1;
    /* A kept class with a metaclass of its own keeps its subclasses' objects too (pybind11's
     * base, whose every class derives from it); a class of the built-in metaclass is none. */
    if (g->nkept_types == 0 || Py_TYPE(tp) == &PyType_Type)
        return 0;
    for (int k = 0; k < g->nkept_types; k++)
        if (Py_TYPE(g->kept_types[k]) != &PyType_Type && PyType_IsSubtype(tp, g->kept_types[k]))
            return 1;
    return 0;
}

/* What is at ``address``: a node, one of leakhound's own objects, or neither. */
static inline int
graph_find(GraphState *g, uintptr_t address)
{
    if (!nodebits_test(&g->marked, address))
        return FOUND_NONE;
    if (g->own_used && nodebits_test(&g->ownbits, address))
        return FOUND_OWN;
    return FOUND_NODE;
}

/* ``obj`` is a node from now on (it was none): counted, its address marked. */
static int
graph_mark(GraphState *g, PyObject *obj)
{
    if (g->nodes > g->max_nodes) {
        PyErr_Format(g->too_big, "more than %zd nodes", g->max_nodes);
        return -1;
    }
    if (nodebits_set(&g->marked, (uintptr_t)obj) < 0)
        return -1;
    g->nodes++;
    if (!is_leaf(obj))
        g->tracked++;
    return 0;
}

/* ``count`` objects of ``size`` bytes more of type ``type_id`` in the walk's census. */
static int
graph_tally(GraphState *g, Py_ssize_t type_id, long long count, long long size)
{
    if (type_id < 0) {
        PyErr_SetString(PyExc_IndexError, "type id out of range");
        return -1;
    }
    if (grow_tallies(&g->t_counts, &g->t_bytes, &g->t_len, type_id, 256) < 0)
        return -1;
    /* sizes are at most 2**48: only a sum can overflow */
    if (g->t_bytes[type_id] > LLONG_MAX - size || g->bytes > LLONG_MAX - size) {
        PyErr_SetString(PyExc_OverflowError, "census byte total out of range");
        return -1;
    }
    g->t_counts[type_id] += count;
    g->t_bytes[type_id] += size;
    g->objects += count;
    g->bytes += size;
    return 0;
}

/* A node's record. */
static int
graph_record(GraphState *g, uintptr_t address, long long size, int32_t type_id, int32_t entries)
{
    long long a = (long long)address;
    sites_note_at(address, address);
    if (column_push(&g->ids, &a) < 0 || column_push(&g->sizes, &size) < 0
        || column_push(&g->types, &type_id) < 0 || column_push(&g->lengths, &entries) < 0)
        return -1;
    return 0;
}

static int
graph_add_edge(GraphState *g, uintptr_t i, uintptr_t j, int32_t label)
{
    long long a = (long long)i, b = (long long)j;
    if (column_push(&g->src, &a) < 0 || column_push(&g->dst, &b) < 0 || column_push(&g->lab, &label) < 0)
        return -1;
    return 0;
}

/* Folding. A collection's entry (an exact list, tuple, set, frozenset or dict; not a dict
 * that is another object's names: see STACK_NAMESPACE) whose only reference is the
 * collection's is part of it: nothing else can reach it, so the collection dominates it and
 * everything it alone holds, and freeing the collection returns it. Such an entry is no
 * node: it is walked as part of the collection (folded into it), its size added to the
 * collection's, what it holds alone folded in turn, its other referents edges from the
 * collection. A heap of registries of records is then a graph of its shared objects only
 * (a registry of 2.4M sessions: 7.2M nodes unfolded). */
#define STACK_NAMESPACE ((uintptr_t)1)
/* A collection of at most this many entries (and not folded itself) folds none of its entries:
 * they stay nodes, the owners' search goes down into one that holds most of it (a logger's
 * one handler, and its records; a dict of a few named parts, {"users": {...}}, and the
 * part that grows: folded, the dict was the owner, its 1 item all the leak's growth). On
 * a registry heap, a bench heap and the real verifiers worker folding collections into
 * small ones saved 2-43 nodes of 36k-740k. */
#define FOLD_MIN_ENTRIES 16
/* A str or bytes of at least this many bytes that an instance of a class statement's class or
 * a namespace (a module's globals, an instance's __dict__) alone holds is a node of its own,
 * not folded into its holder: the owner is then ``__main__.CONN.buffer``, not
 * ``__main__.CONN`` or ``__main__`` (a buffer grown by ``buf += chunk``, a log string
 * concatenated, which watch finds again by its attribute: it is a new object each time). A
 * collection's leaves stay its own, as a C object's (an io.BytesIO's buffer: the BytesIO). */
#define BIG_LEAF_BYTES ((long long)256 << 10)

static inline int
is_collection(PyTypeObject *tp)
{
    /* (an exact deque too: a replay buffer's transitions, held by it alone, are its) */
    return tp == &PyList_Type || tp == &PyTuple_Type || tp == &PyDict_Type || tp == &PySet_Type
        || tp == &PyFrozenSet_Type || (collections_deque != NULL && tp == collections_deque);
}

/* ``op`` on the walk's stack (a new reference), with its owner word. */
static int
graph_push(GraphState *g, PyObject *op, uintptr_t owner)
{
    if (refs_push(&g->stack, op) < 0)
        return -1;
    if (g->owners_cap < g->stack.cap) {
        uintptr_t *owners = table_realloc(g->owners, (size_t)g->stack.cap * sizeof(uintptr_t));
        if (owners == NULL) {
            g->stack.len--;
            Py_DECREF(op);
            PyErr_NoMemory();
            return -1;
        }
        g->owners = owners;
        g->owners_cap = g->stack.cap;
    }
    g->owners[g->stack.len - 1] = owner;
    return 0;
}

static long label_of_text(GraphState *g, const char *s, size_t n);

/* The label of an edge from a folded entry to what the entry names ``label``: "f" and that
 * label's text (graph.py's _fold_label, the Python loop's), -1 if there is none (no such
 * label, or they are all taken), -2 on error. */
static long
fold_label(GraphState *g, long label)
{
    if (label < 0 || label >= g->nlabels)
        return -1;
    if (label >= g->fold_labels_len) {
        Py_ssize_t n = label + 256 > 2 * g->fold_labels_len ? label + 256 : 2 * g->fold_labels_len;
        int32_t *grown = table_realloc(g->fold_labels, (size_t)n * sizeof(int32_t));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -2;
        }
        for (Py_ssize_t k = g->fold_labels_len; k < n; k++)
            grown[k] = -2;
        g->fold_labels = grown;
        g->fold_labels_len = n;
    }
    if (g->fold_labels[label] == -2) {
        size_t n = g->loff[label + 1] - g->loff[label];
        char *text = PyMem_Malloc(n + 1);
        if (text == NULL) {
            PyErr_NoMemory();
            return -2;
        }
        text[0] = 'f';
        memcpy(text + 1, g->ltext + g->loff[label], n);  /* (ltext may move: copied first) */
        long value = label_of_text(g, text, n + 1);
        PyMem_Free(text);
        if (value == -2)
            return -2;
        g->fold_labels[label] = (int32_t)value;
    }
    return g->fold_labels[label];
}

/* The pending (owner, bytes) pair out to its columns. */
static int
graph_fold_flush(GraphState *g)
{
    if (g->fold_pending == 0)
        return 0;
    long long a = (long long)g->fold_pending;
    g->fold_pending = 0;
    if (column_push(&g->fold_owner, &a) < 0 || column_push(&g->fold_bytes, &g->fold_pending_bytes) < 0)
        return -1;
    return 0;
}

/* ``size`` more bytes folded into the node at ``owner``. */
static int
graph_fold(GraphState *g, uintptr_t owner, long long size)
{
    if (owner != g->fold_pending || g->fold_pending_bytes > LLONG_MAX - size) {
        if (graph_fold_flush(g) < 0)
            return -1;
        g->fold_pending = owner;
        g->fold_pending_bytes = 0;
    }
    g->fold_pending_bytes += size;
    return 0;
}

/* The pending leaf at ``address``, or NULL. */
static PackedLeaf *
pending_find(GraphState *g, uintptr_t address)
{
    if (g->pending == NULL || g->npending == 0)
        return NULL;
    size_t mask = g->pending_mask;
    for (size_t k = addr_hash(address, mask);; k = (k + 1) & mask) {
        uintptr_t key = packed_key(&g->pending[k]);
        if (key == address)
            return &g->pending[k];
        if (key == 0)
            return NULL;
    }
}

/* The pending leaves of ``from`` (``from_mask``) moved into ``table`` (``mask``, all empty):
 * addresses and numbers only, no object read (pending_reserve runs it without the GIL). */
static void
pending_move(PackedLeaf *table, size_t mask, const PackedLeaf *from, size_t from_mask)
{
    for (size_t j = 0; from != NULL && j <= from_mask; j++) {
        uintptr_t key = packed_key(&from[j]);
        if (key == 0)
            continue;
        size_t k = addr_hash(key, mask);
        while (packed_key(&table[k]) != 0)
            k = (k + 1) & mask;
        table[k] = from[j];
    }
}

/* Room for ``leaves`` pending leaves (a power of two), the ones pending moved over: 0, or -1 on
 * error. ``nogil``: the move runs with the GIL released (pending_reserve, between two steps). */
static int
pending_grow_as(GraphState *g, size_t leaves, int nogil)
{
    size_t mask = 2 * leaves - 1;
    PackedLeaf *table = table_calloc(mask + 1, sizeof(PackedLeaf));
    if (table == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    PackedLeaf *from = g->pending;
    size_t from_mask = g->pending_mask;
    if (nogil) {
        Py_BEGIN_ALLOW_THREADS
        pending_move(table, mask, from, from_mask);
        Py_END_ALLOW_THREADS
    }
    else {
        pending_move(table, mask, from, from_mask);
    }
    table_free(g->pending);
    g->pending = table;
    g->pending_mask = mask;
    return 0;
}

static int
pending_grow(GraphState *g, size_t leaves)
{
    return pending_grow_as(g, leaves, 0);
}

/* Between two steps: the pending table doubled now if the next step's ``limit`` units of work
 * could fill it (each adds a pending leaf at most), its leaves moved with the GIL released.
 * Grown in the step, a move of 128k leaves into a 24 MiB table was one 36 ms stretch of the
 * target's GIL (the real verifiers worker at 2.2 GB: steps of 20-38 ms, the walk's longest
 * hold 52 ms). 1: the GIL was released (the caller's duty cycle begins a new stretch), 0: not
 * needed, -1: error. */
static int
pending_reserve(GraphState *g, Py_ssize_t limit)
{
    size_t room = g->pending == NULL ? 0 : (g->pending_mask + 1) / 2;
    /* A smaller table grows in the step (a move of under 8k leaves: a few ms): reserved ahead
     * of need, every table would be a step's worth of leaves bigger (+0.8 MiB of the target's
     * VmHWM on a 1M-object heap whose pending leaves never passed 2,048). */
    if (room < PENDING_RESERVE_FROM || room >= PENDING_LEAVES_MAX
            || (size_t)g->npending + (size_t)limit + 64 < room)
        return 0;
    return pending_grow_as(g, 2 * room, 1) < 0 ? -1 : 1;
}

/* A new pending leaf: 1, or 0 when they are all taken, 2 when its numbers do not fit the
 * table (packed_fits: the caller makes it a node), -1 on error. */
static int
pending_add(GraphState *g, uintptr_t address, uintptr_t owner, long long size, int32_t type, int32_t left)
{
    if (!packed_fits(address, owner, size, type, left))
        return 2;
    size_t room = g->pending == NULL ? 0 : (g->pending_mask + 1) / 2;
    if ((size_t)g->npending >= room) {
        if (room >= PENDING_LEAVES_MAX)
            return 0;
        if (pending_grow(g, room == 0 ? PENDING_LEAVES : 2 * room) < 0)
            return -1;
    }
    size_t mask = g->pending_mask;
    size_t k = addr_hash(address, mask);
    while (packed_key(&g->pending[k]) != 0)
        k = (k + 1) & mask;
    packed_set(&g->pending[k], address, owner, size, type, left);
    g->npending++;
    return 1;
}

/* ``p`` out of the table (backward-shift deletion: no tombstones). */
static void
pending_remove(GraphState *g, PackedLeaf *p)
{
    size_t mask = g->pending_mask;
    size_t hole = (size_t)(p - g->pending);
    for (size_t k = (hole + 1) & mask; packed_key(&g->pending[k]) != 0; k = (k + 1) & mask) {
        size_t home = addr_hash(packed_key(&g->pending[k]), mask);
        /* the entry at k may move into the hole if its home is not in (hole, k] */
        if (((k - home) & mask) >= ((k - hole) & mask)) {
            g->pending[hole] = g->pending[k];
            hole = k;
        }
    }
    g->pending[hole].word[0] = 0;
    g->npending--;
}

/* A pending leaf met from a fourth node: a node, with an edge from each node it was met from. */
static int
pending_to_node(GraphState *g, PackedLeaf *p, PyObject *leaf)
{
    PendingLeaf q = packed_unpack(p);
    pending_remove(g, p);
    if (graph_mark(g, leaf) < 0 || graph_record(g, q.key, q.size, q.type, 0) < 0)
        return -1;
    for (int m = 0; m < PENDING_OWNERS && q.owner[m] != 0; m++) {
        if (graph_add_edge(g, q.owner[m], q.key, -1) < 0)
            return -1;
    }
    return 0;
}

static size_t
group_hash(const uintptr_t *owners, int32_t type, size_t mask)
{
    uintptr_t h = (uintptr_t)(uint32_t)type;
    for (int m = 0; m < PENDING_OWNERS; m++)
        h = h * 0x9E3779B97F4A7C15ULL ^ owners[m];
    return addr_hash(h, mask);
}

static int
group_is(const LeafGroup *x, const uintptr_t *owners, int32_t type)
{
    if (x->type != type)
        return 0;
    for (int m = 0; m < PENDING_OWNERS; m++) {
        if (x->owner[m] != owners[m])
            return 0;
    }
    return 1;
}

/* The group's slot: its own, or the empty one it would take (NULL: no table yet). */
static LeafGroup *
group_slot(GraphState *g, const uintptr_t *owners, int32_t type)
{
    if (g->groups == NULL)
        return NULL;
    for (size_t k = group_hash(owners, type, g->groups_mask);; k = (k + 1) & g->groups_mask) {
        LeafGroup *x = &g->groups[k];
        if (x->owner[0] == 0 || group_is(x, owners, type))
            return x;
    }
}

/* A new group (0, or -1 on error); the table cleared first when it holds LEAF_GROUPS_MAX. */
static int
group_add(GraphState *g, const uintptr_t *owners, int32_t type, uintptr_t node)
{
    size_t slots = g->groups == NULL ? 0 : g->groups_mask + 1;
    if ((size_t)(g->ngroups + 1) * 4 > slots * 3 && slots * 3 / 4 >= LEAF_GROUPS_MAX) {
        /* full: the groups kept so far forgotten (see LEAF_GROUPS_MAX) */
        memset(g->groups, 0, slots * sizeof(LeafGroup));
        g->ngroups = 0;
    }
    else if ((size_t)(g->ngroups + 1) * 4 > slots * 3) {
        size_t want = slots == 0 ? 2 * LEAF_GROUPS : 2 * slots;
        LeafGroup *table = table_calloc(want, sizeof(LeafGroup));
        if (table == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (size_t j = 0; j < slots; j++) {
            LeafGroup *x = &g->groups[j];
            if (x->owner[0] == 0)
                continue;
            size_t k = group_hash(x->owner, x->type, want - 1);
            while (table[k].owner[0] != 0)
                k = (k + 1) & (want - 1);
            table[k] = *x;
        }
        table_free(g->groups);
        g->groups = table;
        g->groups_mask = want - 1;
    }
    LeafGroup *x = group_slot(g, owners, type);
    for (int m = 0; m < PENDING_OWNERS; m++)
        x->owner[m] = owners[m];
    x->type = type;
    x->node = node;
    g->ngroups++;
    return 0;
}

/* Every reference to the leaf ``q`` met, or the walk over (graph_settle; out of the table
 * already): its bytes given to the one node it was met from (the container being walked,
 * ``current``: its folded bytes), or to its group's node (made with its edges the first
 * time, named by that leaf). */
static int
pending_resolve(GraphState *g, PendingLeaf q, uintptr_t current)
{
    if (q.owner[1] == 0) {
        /* counted: met again (more often than its references: a 3.10 split dict's keys are
         * the class's, one reference for every instance's dict), it is left out, not waited
         * for and counted once more (a metric's 20,000 children were 5% over). Only on 3.10
         * (split_keys_met), and only a str can be such a key: marking every leaf given so
         * (the ints a registry's sessions repeat, their names) was a bitmap over most of the
         * heap, 3.5 MiB more in a 527 MiB target. */
        if (split_keys_met && q.type == g->str_type_id && nodebits_set(&g->counted, q.key) < 0)
            return -1;
        sites_note_at(q.key, q.owner[0]);
        if (q.owner[0] == current) {
            g->folded += q.size;
            return 0;
        }
        return graph_fold(g, q.owner[0], q.size);
    }
    /* sorted, the empty ones last */
    uintptr_t owners[PENDING_OWNERS];
    int n = 0;
    for (; n < PENDING_OWNERS && q.owner[n] != 0; n++) {
        uintptr_t v = q.owner[n];
        int k = n;
        while (k > 0 && owners[k - 1] > v) {
            owners[k] = owners[k - 1];
            k--;
        }
        owners[k] = v;
    }
    for (int m = n; m < PENDING_OWNERS; m++)
        owners[m] = 0;
    LeafGroup *x = group_slot(g, owners, q.type);
    if (x != NULL && x->owner[0] != 0) {
        sites_note_at(q.key, x->node);
        return graph_fold(g, x->node, q.size);
    }
    if (g->nodes > g->max_nodes) {
        PyErr_Format(g->too_big, "more than %zd nodes", g->max_nodes);
        return -1;
    }
    /* as graph_mark, without the object (the address names it) */
    if (nodebits_set(&g->marked, q.key) < 0 || graph_record(g, q.key, q.size, q.type, 0) < 0)
        return -1;
    g->nodes++;
    for (int m = 0; m < n; m++) {
        if (graph_add_edge(g, owners[m], q.key, -1) < 0)
            return -1;
    }
    return group_add(g, owners, q.type, q.key);
}

/* Every full block (``full_only``) or every block left of every column, as frames, to fd,
 * the GIL released; the blocks written are freed. Returns bytes written, -1 on error. The
 * columns are the capsule's alone and the capsule is held by our caller's argument: nothing
 * changes them while the GIL is released. */
static long long
graph_write_blocks(GraphState *g, int fd, int full_only)
{
    Column *cols[] = GRAPH_COLUMNS(g);
    long long total = 0;
    int failed = 0;
    int any = 0;
    for (size_t c = 0; c < GRAPH_NCOLUMNS; c++)
        any |= cols[c]->flushed < column_last(cols[c], full_only);
    if (!any)
        return 0;
    Py_ssize_t written[GRAPH_NCOLUMNS];
    Py_BEGIN_ALLOW_THREADS
    for (size_t c = 0; c < GRAPH_NCOLUMNS; c++) {
        Column *col = cols[c];
        Py_ssize_t last = column_last(col, full_only);
        written[c] = col->flushed;
        for (Py_ssize_t k = col->flushed; k < last && !failed; k++) {
            failed = column_write_block(col, k, fd, &total);
            if (!failed)
                written[c] = k + 1;
        }
    }
    Py_END_ALLOW_THREADS
    /* Freed with the GIL held (PyMem_Free needs it: 3.12 finds its allocator through the
     * thread state). */
    for (size_t c = 0; c < GRAPH_NCOLUMNS; c++) {
        for (Py_ssize_t k = cols[c]->flushed; k < written[c]; k++) {
            if (cols[c]->nspare < GBLOCK_SPARE)
                cols[c]->spare[cols[c]->nspare++] = cols[c]->blocks[k];
            else
                table_free(cols[c]->blocks[k]);
            cols[c]->blocks[k] = NULL;
        }
        cols[c]->flushed = written[c];
    }
    if (failed) {
        errno = failed;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    return total;
}

/* -- labels ------------------------------------------------------------------------------ */

static inline size_t
text_slot(const char *s, size_t n, size_t mask)
{
    uint64_t h = 1469598103934665603ULL;  /* FNV-1a */
    for (size_t k = 0; k < n; k++)
        h = (h ^ (unsigned char)s[k]) * 1099511628211ULL;
    return addr_hash((uintptr_t)h << 4, mask);
}

/* Label ``id`` (its text s[:n]) into ``slots`` (mask + 1 of them, an empty one left). */
static inline void
lslot_put(int32_t *slots, size_t mask, Py_ssize_t id, const char *s, size_t n)
{
    size_t k = text_slot(s, n, mask);
    while (slots[k] != 0)
        k = (k + 1) & mask;
    slots[k] = (int32_t)(id + 1);
}

/* The label of the UTF-8 text s[:n], made if new: its id, -1 when the labels (or, for a
 * "k" label, the key labels) are all taken (graph.py's _MAX_LABELS, _MAX_KEY_LABELS), -2 with
 * MemoryError. */
static long
label_of_text(GraphState *g, const char *s, size_t n)
{
    if (g->lslots != NULL) {
        for (size_t k = text_slot(s, n, g->lslots_mask);; k = (k + 1) & g->lslots_mask) {
            int32_t v = g->lslots[k];
            if (v == 0)
                break;
            uint32_t a = g->loff[v - 1], b = g->loff[v];
            if (b - a == n && memcmp(g->ltext + a, s, n) == 0)
                return v - 1;
        }
    }
    int key = n > 0 && s[0] == 'k';
    if (g->nlabels >= g->max_labels || (key && g->nkey_labels >= g->max_key_labels))
        return -1;
    if (g->ltext_len + n > UINT32_MAX)
        return -1;
    if (g->lslots == NULL || (size_t)(g->nlabels + 1) * 2 > g->lslots_mask + 1) {
        size_t cap = g->lslots == NULL ? 1024 : (g->lslots_mask + 1) * 2;
        int32_t *slots = table_calloc(cap, sizeof(int32_t));
        if (slots == NULL) {
            PyErr_NoMemory();
            return -2;
        }
        for (Py_ssize_t id = 0; id < g->nlabels; id++)
            lslot_put(slots, cap - 1, id, g->ltext + g->loff[id], g->loff[id + 1] - g->loff[id]);
        table_free(g->lslots);
        g->lslots = slots;
        g->lslots_mask = cap - 1;
    }
    if (g->nlabels + 2 > g->loff_cap) {
        Py_ssize_t cap = g->loff_cap < 512 ? 1024 : 2 * g->loff_cap;
        uint32_t *grown = table_realloc(g->loff, (size_t)cap * sizeof(uint32_t));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -2;
        }
        if (g->loff == NULL)
            grown[0] = 0;
        g->loff = grown;
        g->loff_cap = cap;
    }
    if (g->ltext_len + n > g->ltext_cap) {
        size_t cap = g->ltext_cap < 8192 ? 16384 : 2 * g->ltext_cap;
        while (cap < g->ltext_len + n)
            cap *= 2;
        char *grown = table_realloc(g->ltext, cap);
        if (grown == NULL) {
            PyErr_NoMemory();
            return -2;
        }
        g->ltext = grown;
        g->ltext_cap = cap;
    }
    memcpy(g->ltext + g->ltext_len, s, n);
    g->ltext_len += n;
    Py_ssize_t id = g->nlabels++;
    g->loff[id + 1] = (uint32_t)g->ltext_len;
    if (key)
        g->nkey_labels++;
    lslot_put(g->lslots, g->lslots_mask, id, s, n);
    return (long)id;
}

/* label_of_text for a str (ours: its UTF-8 is cached in it). A lone surrogate (a file name
 * decoded with surrogateescape, as a dict key) has no UTF-8: its text is kept as
 * "surrogatepass" writes it, and read back so (graph_labels). */
static long
label_of_str(GraphState *g, PyObject *text)
{
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(text, &n);
    if (s != NULL)
        return label_of_text(g, s, (size_t)n);
    if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
        return -2;
    PyErr_Clear();
    PyObject *raw = PyUnicode_AsEncodedString(text, "utf-8", "surrogatepass");
    if (raw == NULL)
        return -2;
    char *bytes;
    long label = PyBytes_AsStringAndSize(raw, &bytes, &n) < 0 ? -2 : label_of_text(g, bytes, (size_t)n);
    Py_DECREF(raw);
    return label;
}

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

/* The set of labelled keys' hashes, 32 bits of each (a collision only sends a key the long
 * way, which is exact): at most graph.py's _MAX_KEY_LABELS (15,000). Open addressing from
 * LABELLED_SLOTS slots, doubled when half full (a walk labels a few thousand keys). */
#define LABELLED_SLOTS (1 << 10)

static inline uint32_t
labelled_value(Py_hash_t hash)
{
    uint32_t v = (uint32_t)((uint64_t)hash ^ ((uint64_t)hash >> 32));
    return v ? v : 1;
}

/* v's slot in a table of mask + 1 slots: its own, or the empty one it would take (there is
 * always one: the table is at most half full). */
static inline size_t
labelled_slot(const uint32_t *table, size_t mask, uint32_t v)
{
    size_t k = (size_t)(v * 2654435761u) & mask;
    while (table[k] != v && table[k] != 0)
        k = (k + 1) & mask;
    return k;
}

static int
labelled_has(GraphState *g, Py_hash_t hash)
{
    if (g->labelled == NULL)
        return 0;
    uint32_t v = labelled_value(hash);
    return g->labelled[labelled_slot(g->labelled, g->labelled_mask, v)] == v;
}

static int
labelled_add(GraphState *g, Py_hash_t hash)
{
    size_t slots = g->labelled == NULL ? 0 : g->labelled_mask + 1;
    if ((size_t)(g->nlabelled + 1) * 2 > slots) {
        size_t want = slots == 0 ? LABELLED_SLOTS : 2 * slots;
        uint32_t *table = table_calloc(want, sizeof(uint32_t));
        if (table == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (size_t j = 0; j < slots; j++)
            if (g->labelled[j] != 0)
                table[labelled_slot(table, want - 1, g->labelled[j])] = g->labelled[j];
        table_free(g->labelled);
        g->labelled = table;
        g->labelled_mask = want - 1;
    }
    uint32_t v = labelled_value(hash);
    size_t k = labelled_slot(g->labelled, g->labelled_mask, v);
    if (g->labelled[k] == 0) {
        g->labelled[k] = v;
        g->nlabelled++;
    }
    return 0;
}

/* The label of "k" + key[:80] for a str key: -2 on error. Cached by the key's address. */
static long
key_label(GraphState *g, PyObject *key)
{
    Py_hash_t hash = PyObject_Hash(key);  /* an exact str's: computed once, kept in it */
    if (hash == -1)
        return -2;
    AddrMap *c = &g->key_labels;
    long long known_hash;
    int32_t known_label;
    if (addrmap_get(c, (uintptr_t)key, &known_hash, &known_label) && known_hash == (long long)hash)
        return known_label;
    /* Only a key met again is cached (its text's hash labelled before: the labelled set): the
     * names of a module's globals are met once each, and were ~7,000 of a plain process's
     * entries (0.3 MiB of the target's peak) for nothing. */
    int again = labelled_has(g, hash);
    long label = key_label_made(g, key);
    /* Bounded (~2.6 MiB in the target): the keys that repeat (attribute names, a JSON
     * message's "role" and "content") come early; a cache's unique ids would only fill it. */
    if (label >= 0 && again && c->used < KEY_LABELS_MAX
            && addrmap_put(c, (uintptr_t)key, (long long)hash, (int32_t)label, 0) < 0)
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
    Py_hash_t hash = PyObject_Hash(key);  /* kept in the str: no work */
    if (hash == -1)
        return -2;
    if (n <= GRAPH_MAX_LABEL_CHARS && g->labels_full && !labelled_has(g, hash))
        return -1;
    PyObject *part = PyUnicode_Substring(key, 0, n < GRAPH_MAX_LABEL_CHARS ? n : GRAPH_MAX_LABEL_CHARS);
    if (part == NULL)
        return -2;
    PyObject *text = PyUnicode_FromFormat("k%U", part);
    Py_DECREF(part);
    if (text == NULL)
        return -2;
    long label = label_of_str(g, text);  /* (full: a text already labelled is still found) */
    Py_DECREF(text);
    if (label == -1)
        g->labels_full = 1;  /* graph.py makes no key label any more (found labels are never -1) */
    if (label >= 0 && n <= GRAPH_MAX_LABEL_CHARS && labelled_add(g, hash) < 0)
        return -2;
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
slot_names(GraphState *g, Walk *w, PyObject *obj, PyTypeObject *tp)
{
    TypeInfo *info = type_info(w, tp);
    if (info == NULL)
        return -1;
    PyObject *slots = info->graph_slots;  /* borrowed from the slot cache */
    if (slots != NULL) {
        if (PyTuple_Check(slots) && PyTuple_Size(slots) == 0)
            return 0;  /* most types: no slots */
        Py_INCREF(slots);
    }
    else {
        PyObject *key = PyLong_FromVoidPtr((void *)tp);
        if (key == NULL)
            return -1;
        slots = PyDict_GetItemWithError(g->slot_cache, key);  /* borrowed */
        Py_DECREF(key);
        if (slots == NULL) {
            if (PyErr_Occurred())
                return -1;
            g->called++;
            slots = PyObject_CallFunctionObjArgs(g->slot_labels, (PyObject *)tp, NULL);
        }
        else {
            Py_INCREF(slots);
            info = type_info(w, tp);  /* the same entry: nothing ran since (a dict lookup by int) */
            if (info != NULL && info->tp == tp)
                info->graph_slots = slots;  /* the cache holds it as long as the graph */
        }
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

/* None, a bool, a small int (shared leaves, left out), a module no edge will lead to
 * (graph_referents: one that is no node is a root of its own; a wall or our own is reached
 * from the super-root only) or a class that is no root, so its dict key needs no label: a
 * module's dict holds hundreds of modules, and their names' labels were part of the ~1 MiB of
 * labels every walk made in the target. (A class root is held by what holds it: an edge.) */
static int small_int(PyObject *ref);

static inline int
no_edge_to(GraphState *g, PyObject *value)
{
    if (value == Py_None || Py_TYPE(value) == &PyBool_Type || small_int(value))
        return 1;  /* shared leaves: left out, wherever they are met */
    if (!PyType_Check(value) && Py_TYPE(value) != &PyModule_Type)
        return 0;
    if (PyType_Check(value))  /* a class (a wall, a root of its own) is held by the dict: an edge */
        return !nodebits_test(&g->walls, (uintptr_t)value);
    return graph_find(g, (uintptr_t)value) != FOUND_NODE || nodebits_test(&g->walls, (uintptr_t)value);
}

/* g->also_held, made the first time (an object() of our own). -1 on error. */
static int
also_held_made(GraphState *g)
{
    if (g->also_held == NULL)
        g->also_held = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type);
    return g->also_held == NULL ? -1 : 0;
}

/* Up to ``want`` entries of a dict from g->pos: their values (``what`` 0), keys (1) or both
 * (2, each value then its key; 3: an OrderedDict's, g->also_held before each key: see
 * graph_referents) into g->refs; with ``label``, a value's first str key labels it
 * (g->names). An lru_cache's link (typed_traverse), held by its wrapper's list too, has
 * g->also_held before it: held by the cache alone, it is part of it. 0 when done. */
static Py_ssize_t
dict_slice(GraphState *g, PyObject *d, int what, int label, Py_ssize_t want)
{
    PyObject *key, *value;
    Py_ssize_t got = 0;
    while (got < want && PyDict_Next(d, &g->pos, &key, &value)) {
        got++;
        /* Borrowed from the dict: held before anything runs. */
        int link = what != 1 && is_lru_link(value);
        if (link && (also_held_made(g) < 0 || refs_push(&g->refs, g->also_held) < 0))
            return -1;
        if (refs_push(&g->refs, what == 1 ? key : value) < 0 || (what == 3 && refs_push(&g->refs, g->also_held) < 0)
            || (what >= 2 && refs_push(&g->refs, key) < 0))
            return -1;
        if (what == 0 && label && PyUnicode_CheckExact(key) && !no_edge_to(g, value)) {
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

/* ``obj`` (the current node) is read a slice at a time (read_slice), from its start. */
static void
graph_slices(GraphState *g, PyObject *obj)
{
    g->phase = PHASE_SLICES;
    Py_INCREF(obj);
    g->refs.cursor = obj;
    g->refs.pos = 0;
}

/* The labels of what ``obj`` holds in its own fields (g->names, by address): its made
 * __dict__ ("d", 3.11+'s managed dict) and its slots' values (slot_names). -1 on error. */
static int
own_names(GraphState *g, Walk *w, PyObject *obj, PyTypeObject *tp)
{
    if (g->managed_dicts && (PyType_GetFlags(tp) & MANAGED_DICT_FLAG)) {
        uintptr_t d = (uintptr_t)((PyObject **)obj)[-3];  /* a dict, NULL, or 3.12's tagged values */
        if (d != 0 && !(d & 1)) {
            if (g->d_label == -2) {
                g->d_label = label_of_text(g, "d", 1);
                if (g->d_label == -2)
                    return -1;
            }
            if (g->d_label >= 0) {
                if (labelmap_setdefault(&g->names, d, (int32_t)g->d_label) < 0)
                    return -1;
                g->has_names = 1;
            }
        }
    }
    int has = slot_names(g, w, obj, tp);
    if (has < 0)
        return -1;
    g->has_names = g->has_names || has > 0;
    return 0;
}

/* The labels of a native object's hidden references (``names``: a str or None for each of
 * ``hidden``, by position; the payload's own lists): a tensor's ``grad_fn``. -1 on error. */
static int
hidden_labels(GraphState *g, PyObject *hidden, PyObject *names)
{
    Py_ssize_t n = PyList_Size(hidden);
    for (Py_ssize_t k = 0; k < n && k < PyList_Size(names); k++) {
        PyObject *name = PyList_GetItem(names, k);
        if (!PyUnicode_CheckExact(name))
            continue;
        Py_ssize_t len = 0;
        const char *text = PyUnicode_AsUTF8AndSize(name, &len);
        if (text == NULL)
            return -1;
        long label = label_of_text(g, text, (size_t)len);
        if (label == -2)
            return -1;
        if (label >= 0) {
            if (labelmap_setdefault(&g->names, (uintptr_t)PyList_GetItem(hidden, k), (int32_t)label) < 0)
                return -1;
            g->has_names = 1;
        }
    }
    return 0;
}

/* Starts walking ``obj`` (a node): its record so far (size, type id), its referents into
 * g->refs, or the first of its slices. As the Python loop: a dict's values then its keys (a
 * big one a slice of both at a time; then, for a subclass, its tp_traverse), a module's dict,
 * anything else's tp_traverse; then a native object's hidden references. */
static int
graph_begin(GraphState *g, Walk *w, PyObject *obj)
{
    PyTypeObject *tp = Py_TYPE(obj);
    TypeInfo *info = type_info(w, tp);
    if (info == NULL)
        return -1;
    g->folded = 0;
    g->entries = 0;
    g->pos = 0;
    g->cur_foldable = 0;
    if (is_collection(tp)) {
        Py_ssize_t n = PyObject_Length(obj);  /* an exact built-in: no code runs */
        if (n < 0)
            return -1;
        g->cur_foldable = n > FOLD_MIN_ENTRIES;
    }
    g->phase = PHASE_NONE;
    g->tag = 0;
    g->has_names = 0;
    labelmap_clear(&g->names);
    if (info->frame_like < 0) {
        info->frame_like = 0;
        for (Py_ssize_t k = 0; k < PyTuple_Size(g->frame_types); k++)
            if ((PyObject *)tp == PyTuple_GetItem(g->frame_types, k))
                info->frame_like = 1;
    }
    g->tag = info->frame_like;
    Py_INCREF(tp);  /* the size and the native helpers below may run code */
    long long base = 0;
    int32_t made_type = 0;
    int made = 0;
    if (nodebits_test(&g->madebits, (uintptr_t)obj) && addrmap_get(&g->made, (uintptr_t)obj, &base, &made_type)) {
        made = 1;
        g->cur_type = made_type;  /* a root: sized by the payload's Python code */
    }
    else {
        /* found by this walk, which sized it then: sized again (as then) */
        Py_ssize_t type_id = -1;
        if (size_of(obj, info, &base) == 0) {
            info = type_info(w, tp);
            type_id = info == NULL ? -1 : slot_for(w, info);
        }
        if (type_id < 0 || type_id > INT_MAX || info == NULL) {
            Py_DECREF(tp);
            return -1;
        }
        g->cur_type = (int32_t)type_id;
    }
    g->cur_size = base;
    unsigned long flags = info->flags;
    traverseproc traverse = info->traverse;
    inquiry is_gc = info->is_gc;
    long code = native_for(w, tp);
    if (code < 0) {
        Py_DECREF(tp);
        return -1;
    }
    long long *size = &g->cur_size;
    PyObject *hidden = NULL, *hidden_names = NULL;
    ObjectArray array;
    /* an array of objects: its elements read in slices (read_slice), not listed by the helper */
    int array_sliced = code == 1 && object_array(obj, &array);
    if (code == 1) {
        g->called++;
        PyObject *got = PyObject_CallFunctionObjArgs(g->native_extra, obj, array_sliced ? Py_True : Py_False, NULL);
        if (got == NULL) {
            Py_DECREF(tp);
            return -1;
        }
        long long extra = 0;
        if (PyTuple_Check(got) && (PyTuple_Size(got) == 2 || PyTuple_Size(got) == 3)) {
            extra = PyLong_AsLongLong(PyTuple_GetItem(got, 0));
            hidden = PyTuple_GetItem(got, 1);
            Py_XINCREF(hidden);
            if (PyTuple_Size(got) == 3) {
                /* the labels of the hidden references, by position (a tensor's grad_fn) */
                hidden_names = PyTuple_GetItem(got, 2);
                Py_XINCREF(hidden_names);
            }
        }
        Py_DECREF(got);
        if (extra == -1 && PyErr_Occurred()) {
            Py_DECREF(tp);
            Py_XDECREF(hidden);
            Py_XDECREF(hidden_names);
            return -1;
        }
        if (extra > 0 && *size <= LLONG_MAX - extra) {
            *size += extra;
            g->native_bytes += extra;
        }
        else if (extra < 0 && *size + extra >= 0)
            *size += extra;  /* of its own size, what is not in RAM (sizes.py _untouched_data) */
    }
    else if (code >= 2) {
        *size += instance_values_bytes(obj, traverse, code);
    }
    /* In the walk's census at the size its record gets (a root made by the payload's Python
     * code was counted when made: what the walk adds to it). */
    if (graph_tally(g, g->cur_type, made ? 0 : 1, made ? *size - base : *size) < 0) {
        Py_DECREF(tp);
        Py_XDECREF(hidden);
        Py_XDECREF(hidden_names);
        return -1;
    }
    int failed = 0;
    if (flags & Py_TPFLAGS_DICT_SUBCLASS) {
        g->has_names = 1;
        if (PyDict_Size(obj) > BIG_CONTAINER / 2) {
            /* a subclass's own referents (a defaultdict's factory, an instance's __dict__ and
             * slots, an OrderedDict's): those its traverse visits before the entries */
            failed = referents_before_entries(obj, &g->refs) < 0;
            g->phase = PHASE_DICT_ENTRIES;
        }
        else {
            Py_ssize_t entries = dict_slice(g, obj, 0, 1, PY_SSIZE_T_MAX);
            failed = entries < 0;
            g->entries = entries > 0 ? entries : 0;  /* (not g->also_held's before an lru's links) */
            g->pos = 0;
            if (!failed)
                failed = dict_slice(g, obj, 1, 0, PY_SSIZE_T_MAX) < 0;
            if (!failed && (PyObject *)tp != (PyObject *)&PyDict_Type && (flags & Py_TPFLAGS_HAVE_GC)
                && traverse != NULL && (is_gc == NULL || is_gc(obj)))
                failed = traverse(obj, visit_referent, &g->refs) != 0;
        }
    }
    else if (is_big(obj)) {
        graph_slices(g, obj);
        /* a list, tuple or set subclass: what it holds itself comes first, named */
        if ((PyList_Check(obj) || PyTuple_Check(obj) || PyAnySet_Check(obj)) && !is_collection(tp) && !g->tag)
            failed = own_names(g, w, obj, tp) < 0;
    }
    else {
        Py_ssize_t before = g->refs.len;
        int got = referents_of(w, obj, &g->refs);
        failed = got < 0;
        if (got == 1)  /* its traverse too long to read whole: a slice at a time */
            graph_slices(g, obj);
        else if (!failed)
            drop_dict_values(w, &g->refs, before);  /* the walk reads the dict's entries */
        g->entries = g->refs.len;
        if (!failed && !g->tag)
            failed = own_names(g, w, obj, tp) < 0;
    }
    Py_DECREF(tp);
    if (!failed && array_sliced && g->phase == PHASE_NONE)
        graph_slices(g, obj);
    if (hidden != NULL) {
        if (!failed && PyList_Check(hidden)) {
            for (Py_ssize_t k = 0; k < PyList_Size(hidden) && !failed; k++)
                failed = refs_push(&g->refs, PyList_GetItem(hidden, k)) < 0;
            if (!failed && hidden_names != NULL && PyList_Check(hidden_names) && !g->tag)
                failed = hidden_labels(g, hidden, hidden_names) < 0;
        }
        Py_DECREF(hidden);
    }
    Py_XDECREF(hidden_names);
    return failed ? -1 : 0;
}

/* An int of the interpreter's cache (-5..256): everyone's, never freed, whatever its count
 * (3.10 and 3.11's are not immortal: one held by a few nodes, its count near the thresholds,
 * would be a pending leaf, grouped by what the walkers' own frames hold). */
static int
small_int(PyObject *ref)
{
    if (Py_TYPE(ref) != &PyLong_Type)
        return 0;
    int overflow = 0;
    long v = PyLong_AsLongAndOverflow(ref, &overflow);
    return !overflow && v >= -5 && v <= 256;
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
    /* An OrderedDict holds each key twice, in its table and in its list of nodes (its traverse
     * visits both; a small one's are read so): the key is read once, its other reference
     * said by g->also_held before it. Else its keys looked held by something the walk never
     * meets, and waited (PendingLeaf) to the end of the walk: 2M of them, 16 MiB of table. */
    int ordered = ordered_dict != NULL && PyObject_TypeCheck(g->cur, ordered_dict);
    if (ordered && also_held_made(g) < 0)
        return -1;
    Py_ssize_t got = dict_slice(g, g->cur, ordered ? 3 : 2, 0, want);
    if (got < 0)
        return -1;
    g->entries += got;
    return got;
}

/* A leaf's type id (-1 on error) and, in *size, its size. The type is held across the
 * sizing, as it was before __sizeof__ ran (the census's rule, claim_referents). */
static Py_ssize_t
leaf_type_and_size(Walk *w, PyObject *ref, long long *size)
{
    PyTypeObject *rtp = Py_TYPE(ref);
    TypeInfo *info = type_info(w, rtp);
    if (info == NULL)
        return -1;
    Py_INCREF(rtp);
    Py_ssize_t type_id = -1;
    if (size_of(ref, info, size) == 0) {
        info = type_info(w, rtp);
        type_id = info == NULL ? -1 : slot_for(w, info);
    }
    Py_DECREF(rtp);
    return type_id;
}

/* The referents g->refs.items[next:] of the current container, until ``budget`` runs out:
 * folded, left out, or each an edge (and a new node: a leaf's record made, anything else
 * pushed on g->stack). Returns how many it went through, -1 on error. */
static Py_ssize_t
graph_referents(GraphState *g, Walk *w, Py_ssize_t budget)
{
    Refs *r = &g->refs;
    Py_ssize_t start = r->next;
    Py_ssize_t stop = r->len - start > budget ? start + budget : r->len;
    uintptr_t owner = g->cur_owner;
    int collection = is_collection(Py_TYPE(g->cur));
    /* the node the edges come from, and the one entries held once are folded into (0: none) */
    uintptr_t i = owner > STACK_NAMESPACE ? owner : (uintptr_t)g->cur;
    uintptr_t fold_into = owner > STACK_NAMESPACE ? owner : (owner == 0 && collection ? i : 0);
    /* every entry held alone, where this collection is folded itself or has more than
     * FOLD_MIN_ENTRIES entries (a small one folds none: see FOLD_MIN_ENTRIES) */
    int fold_any = owner > STACK_NAMESPACE || g->cur_foldable;
    /* a dict held by what is no collection (an instance's __dict__, a frame's locals) names
     * that object's parts: its entries are not folded into it */
    uintptr_t child_owner = collection ? 0 : STACK_NAMESPACE;
    /* (an lru_cache's cache is no namespace: its entries, its links, fold into it) */
    PyObject *lru_cache = collection ? NULL : lru_cache_of(g->cur);
    /* a reference the current container holds to the next referent besides the one in r (an
     * OrderedDict's key: dict_slice): met with it */
    Py_ssize_t also_held = 0;
    for (Py_ssize_t k = start; k < stop; k++) {
        PyObject *ref = r->items[k];  /* owned by r */
        if (ref == g->also_held && ref != NULL) {
            also_held = 1;
            if (k + 1 == stop && stop < r->len)
                stop++;  /* with its referent */
            continue;
        }
        Py_ssize_t refcnt = Py_REFCNT(ref) - also_held;
        also_held = 0;
        PyTypeObject *rtp = Py_TYPE(ref);
        uintptr_t address = (uintptr_t)ref;
        int leaf = is_leaf(ref);
        int found = graph_find(g, address);
        if (leaf) {
            Py_ssize_t count = refcnt + GRAPH_PY_EXTRA + (found == FOUND_NODE ? 1 : 0);
            int shared = count > GRAPH_SHARED_LEAF || rtp == &PyBool_Type || ref == Py_None || small_int(ref);
            if (count <= GRAPH_ONLY_ONE || (shared && found == FOUND_NONE && !nodebits_test(&g->counted, address))) {
                /* folded into its container, or a shared leaf met the first time: counted */
                long long size = 0;
                Py_ssize_t type_id = leaf_type_and_size(w, ref, &size);
                if (type_id < 0 || graph_tally(g, type_id, 1, size) < 0)
                    return -1;
                if (!shared && size >= BIG_LEAF_BYTES
                    && (owner == STACK_NAMESPACE || (owner == 0 && !collection && class_statement(Py_TYPE(g->cur))))) {
                    /* a big part of an instance or a namespace: a node (see BIG_LEAF_BYTES),
                     * its allocation its own (--sites: it was its holder's) */
                    if (graph_mark(g, ref) < 0 || graph_record(g, address, size, (int32_t)type_id, 0) < 0)
                        return -1;
                    sites_note(ref, address);
                    found = FOUND_NODE;
                }
                else if (!shared) {
                    sites_note(ref, i);
                    g->folded += size;
                    continue;
                }
                if (nodebits_set(&g->counted, address) < 0)
                    return -1;
            }
            if (shared)
                continue;
            if (found == FOUND_NONE) {
                if (nodebits_test(&g->counted, address))
                    continue;  /* its bytes given already to the node it was first met from */
                /* held a few times: its bytes are the node's it is met from, if every
                 * reference to it is (PendingLeaf) */
                PackedLeaf *p = pending_find(g, address);
                if (p != NULL) {
                    int m = 0;
                    while (m < PENDING_OWNERS && packed_owner(p, m) != 0 && packed_owner(p, m) != i)
                        m++;
                    /* a node it was met from, or one more (whose address fits the table) */
                    if (m < PENDING_OWNERS && packed_address_fits(i)) {
                        int32_t left = packed_left(p) - 1;
                        packed_set_owner(p, m, i);
                        if (left <= 0) {
                            PendingLeaf q = packed_unpack(p);
                            pending_remove(g, p);
                            if (pending_resolve(g, q, i) < 0)
                                return -1;
                        }
                        else {
                            packed_set_left(p, left);
                        }
                        continue;
                    }
                    if (pending_to_node(g, p, ref) < 0)
                        return -1;
                    found = FOUND_NODE;
                }
                else {
                    long long size = 0;
                    Py_ssize_t type_id = leaf_type_and_size(w, ref, &size);
                    if (type_id < 0 || type_id > INT_MAX)
                        return -1;
                    if (rtp == &PyUnicode_Type)
                        g->str_type_id = (int32_t)type_id;
                    int added = pending_add(g, address, i, size, (int32_t)type_id, (int32_t)(count - GRAPH_ONLY_ONE));
                    if (added < 0 || graph_tally(g, type_id, 1, size) < 0)
                        return -1;
                    if (added == 2) {
                        /* its numbers do not fit the table: a node of its own at once, as a leaf
                         * met from a fourth node (its edge from this one made below) */
                        if (graph_mark(g, ref) < 0 || graph_record(g, address, size, (int32_t)type_id, 0) < 0)
                            return -1;
                        found = FOUND_NODE;
                    }
                    else {
                        sites_note(ref, i);  /* until its other references are met (pending_resolve) */
                        if (!added) {
                            /* none more can wait: its bytes are this node's (an upper bound on
                             * what freeing it returns: a node each was past any graph budget,
                             * see PENDING_LEAVES), counted once */
                            if (nodebits_set(&g->counted, address) < 0)
                                return -1;
                            g->folded += size;
                        }
                        continue;
                    }
                }
            }
        }
        if (found == FOUND_NONE) {
            if (PyType_Check(ref) || rtp == &PyModule_Type)
                continue;  /* classes and modules are roots of their own */
            if (!leaf && fold_into && fold_any && refcnt + GRAPH_PY_EXTRA <= GRAPH_ONLY_ONE
                && !graph_kept_type(g, rtp)) {
                /* held by this collection alone: part of it (see STACK_NAMESPACE), no edge */
                if (((g->fold_marks_until < 0 || g->tracked < g->fold_marks_until)
                     && nodebits_set(&g->marked, address) < 0) || graph_push(g, ref, fold_into) < 0)
                    return -1;
                g->tracked++;
                g->folded_objects++;
                continue;
            }
            if (graph_mark(g, ref) < 0)
                return -1;
            if (leaf) {
                long long size = 0;
                Py_ssize_t type_id = leaf_type_and_size(w, ref, &size);
                if (type_id < 0 || type_id > INT_MAX || graph_record(g, address, size, (int32_t)type_id, 0) < 0
                    || graph_tally(g, type_id, 1, size) < 0)
                    return -1;
            }
            else if (graph_push(g, ref, PyDict_CheckExact(ref) && ref != lru_cache ? child_owner : 0) < 0) {
                return -1;  /* its record is made when it is walked (graph_finish) */
            }
        }
        else if (found == FOUND_OWN || (nodebits_test(&g->walls, address)
                                         && (ref == (PyObject *)Py_TYPE(g->cur) || !PyType_Check(ref)))) {
            /* (a class, met from what is not its instance, is held by it: an edge; a class is
             * a root only until something named holds it, then an object like any other:
             * passes.soften's yielding roots) */
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
        if (owner > STACK_NAMESPACE) {
            if (label >= 0) {
                label = fold_label(g, label);  /* from a folded entry: "f" and its own name */
                if (label == -2)
                    return -1;
            }
            size_t h = addr_hash(address ^ (i * 0x9E3779B97F4A7C15ULL), FOLD_EDGE_SLOTS - 1);
            if (g->seen_src[h] == i && g->seen_dst[h] == address && g->seen_lab[h] == (int32_t)label) {
                if (g->seen_n[h] >= 2)
                    continue;  /* the same edge from the same collection: made twice already */
                g->seen_n[h] = 2;
            }
            else {
                g->seen_src[h] = i;
                g->seen_dst[h] = address;
                g->seen_lab[h] = (int32_t)label;
                g->seen_n[h] = 1;
            }
        }
        if (graph_add_edge(g, i, address, (int32_t)label) < 0)
            return -1;
    }
    r->next = stop;
    return stop - start;
}

/* The current container is done: its record, with its folded leaves and its entries. */
static int
graph_finish(GraphState *g)
{
    PyObject *c = g->cur;
    PyTypeObject *tp = Py_TYPE(c);
    int32_t entries = 0;
    Py_ssize_t n = 0;
    if (collections_deque != NULL && tp == collections_deque)
        /* its length, not its referents: 3.12+'s deque (a heap type) visits its type too */
        n = PyObject_Length(c);  /* an exact built-in: no code runs */
    else if (tp == &PyList_Type || tp == &PyTuple_Type || tp == &PySet_Type || tp == &PyFrozenSet_Type
             || (PyType_GetFlags(tp) & Py_TPFLAGS_DICT_SUBCLASS))
        /* a dict subclass (an OrderedDict, a defaultdict) too: its entries are its values */
        n = g->entries;
    else if (PyList_Check(c) || PyTuple_Check(c) || PyAnySet_Check(c))
        /* a list, tuple or set subclass (mock's _CallList): its length as the built-in has it
         * (PyList_Size and the others read the object: no __len__ of the subclass runs), not
         * its referents (its own attributes among them) */
        n = PyList_Check(c) ? PyList_Size(c) : PyTuple_Check(c) ? PyTuple_Size(c) : PySet_Size(c);
    if (n >= 0)
        entries = (int32_t)(n > 0x7FFFFFFF ? 0x7FFFFFFF : n);
    else
        PyErr_Clear();
    long long size = g->cur_size;
    if (g->folded && size <= LLONG_MAX - g->folded)
        size += g->folded;
    sites_note(c, g->cur_owner > STACK_NAMESPACE ? g->cur_owner : (uintptr_t)c);
    int failed = g->cur_owner > STACK_NAMESPACE ? graph_fold(g, g->cur_owner, size)
                                                : graph_record(g, (uintptr_t)c, size, g->cur_type, entries);
    g->cur_owner = 0;
    g->phase = PHASE_NONE;
    /* The buffer is kept for the next container (a malloc and a free per container were ~5%
     * of the walk), unless a big one grew it. */
    if (g->refs.cap > 4096)
        refs_free(&g->refs);
    else {
        refs_clear(&g->refs);
        Py_CLEAR(g->refs.cursor);
    }
    Py_CLEAR(g->cur);
    return failed;
}

/* The current big container waits (its slice read to the end): what its slices pushed is
 * walked first. The slice's references are let go, as before the next slice. */
static void
graph_suspend(GraphState *g)
{
    Suspended *z = &g->suspended[g->nsuspended++];
    z->cur = g->cur;
    z->owner = g->cur_owner;
    z->size = g->cur_size;
    z->folded = g->folded;
    z->type = g->cur_type;
    z->phase = g->phase;
    z->tag = g->tag;
    z->has_names = g->has_names;
    z->foldable = g->cur_foldable;
    z->pos = g->pos;
    z->entries = g->entries;
    z->cursor = g->refs.cursor;
    z->cursor_pos = g->refs.pos;
    z->base = g->cur_base;
    g->refs.cursor = NULL;
    refs_clear(&g->refs);
    g->cur = NULL;
    g->cur_owner = 0;
    g->phase = PHASE_NONE;
}

/* The last container that waited is the current one again. */
static void
graph_resume(GraphState *g)
{
    Suspended *z = &g->suspended[--g->nsuspended];
    refs_clear(&g->refs);
    Py_CLEAR(g->refs.cursor);
    labelmap_clear(&g->names);  /* a big container's entries carry no names */
    g->cur = z->cur;
    g->cur_owner = z->owner;
    g->cur_size = z->size;
    g->folded = z->folded;
    g->cur_type = z->type;
    g->phase = z->phase;
    g->tag = z->tag;
    g->has_names = z->has_names;
    g->cur_foldable = z->foldable;
    g->pos = z->pos;
    g->entries = z->entries;
    g->refs.cursor = z->cursor;
    g->refs.pos = z->cursor_pos;
    g->cur_base = z->base;
    z->cur = z->cursor = NULL;
}

/* -- the module's functions --------------------------------------------------------------- */

PyDoc_STRVAR(graph_new_doc,
"graph_new(max_nodes, type_index, type_id, slot_cache, slot_labels,\n"
"          frame_labels, frame_label, frame_types, native, native_extra, too_big) -> capsule\n\n"
"A new object graph (the super-root's record first: address 0) and the payload's helpers its\n"
"walk calls.");

static PyObject *
graph_new(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_ssize_t max_nodes;
    PyObject *h[10];
    if (!PyArg_ParseTuple(args, "nO!OO!OO!OO!OOO:graph_new", &max_nodes,
                          &PyDict_Type, &h[0], &h[1], &PyDict_Type, &h[2],
                          &h[3], &PyDict_Type, &h[4], &h[5], &PyTuple_Type, &h[6], &h[7], &h[8], &h[9]))
        return NULL;
    if (max_nodes < 1 || max_nodes > INT_MAX - 2) {
        PyErr_SetString(PyExc_ValueError, "max_nodes out of range");
        return NULL;
    }
    if (!PyDict_Check(h[7])) {
        PyErr_SetString(PyExc_TypeError, "native must be a dict");
        return NULL;
    }
    GraphState *g = table_calloc(1, sizeof(GraphState));
    if (g == NULL)
        return PyErr_NoMemory();
    g->fold_marks_until = -1;
    g->sizes.itemsize = g->ids.itemsize = g->src.itemsize = g->dst.itemsize = 8;
    g->types.itemsize = g->lengths.itemsize = g->lab.itemsize = 4;
    g->fold_owner.itemsize = g->fold_bytes.itemsize = 8;
    g->fold_owner.code = COL_FOLD_OWNER;
    g->fold_bytes.code = COL_FOLD_BYTES;
    g->ids.code = COL_IDS;
    g->sizes.code = COL_SIZES;
    g->types.code = COL_TYPES;
    g->lengths.code = COL_LENGTHS;
    g->lab.code = COL_LABELS;
    g->src.code = COL_SRC;
    g->dst.code = COL_DST;
    g->max_nodes = max_nodes;
    g->spool = -1;
    g->d_label = -2;
    g->max_labels = g->max_key_labels = INT32_MAX - 1;  /* graph_label sets graph.py's */
    {
        const char *v = Py_GetVersion();  /* "3.11.7 (main, ...": 3.11-3.13 keep dicts managed */
        int minor = v[0] == '3' && v[1] == '.' ? atoi(v + 2) : 0;
        g->managed_dicts = minor >= 11 && minor <= 13;
    }
    PyObject **slots[] = {&g->type_index, &g->type_id, &g->slot_cache,
                          &g->slot_labels, &g->frame_labels, &g->frame_label, &g->frame_types,
                          &g->native, &g->native_extra, &g->too_big};
    for (int k = 0; k < 10; k++) {
        Py_INCREF(h[k]);
        *slots[k] = h[k];
    }

    PyObject *capsule = PyCapsule_New(g, GRAPH_NAME, graph_capsule_free);
    if (capsule == NULL) {
        graph_drop_helpers(g);
        table_free(g);
        return NULL;
    }
    g->nodes = 1;  /* the super-root */
    if (graph_record(g, 0, 0, 0, 0) < 0) {
        Py_DECREF(capsule);
        return NULL;
    }
    return capsule;
}

/* The handle Python code gets for a node: its address (0 is the super-root), -1 for
 * leakhound's own objects. */
PyDoc_STRVAR(graph_node_doc,
"graph_node(graph, obj, size, type_id) -> node\n\n"
"obj's node (its address): the one it has, -1 for leakhound's own objects, else a new one\n"
"with this size and type id, its record made (GraphTooBig past max_nodes).");

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
    int found = graph_find(g, (uintptr_t)obj);
    if (found == FOUND_OWN)
        return PyLong_FromLong(-1);
    if (found == FOUND_NONE
        && (graph_mark(g, obj) < 0 || graph_record(g, (uintptr_t)obj, size, (int32_t)type_id, 0) < 0
            || addrmap_put(&g->made, (uintptr_t)obj, size, (int32_t)type_id, 1) < 0
            || nodebits_set(&g->madebits, (uintptr_t)obj) < 0
            || graph_tally(g, type_id, 1, size) < 0))
        return NULL;
    return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)obj);
}

PyDoc_STRVAR(graph_find_doc,
"graph_find(graph, address) -> the node (its address) or None (-1: leakhound's own object)");

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
    int found = address == 0 ? FOUND_NONE : graph_find(g, (uintptr_t)address);
    if (found == FOUND_NONE)
        Py_RETURN_NONE;
    if (found == FOUND_OWN)
        return PyLong_FromLong(-1);
    return PyLong_FromUnsignedLongLong(address);
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
    if (address == 0 || graph_find(g, (uintptr_t)address) != FOUND_NONE)
        Py_RETURN_NONE;
    if (nodebits_set(&g->marked, (uintptr_t)address) < 0 || nodebits_set(&g->ownbits, (uintptr_t)address) < 0)
        return NULL;
    g->own_used++;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(graph_fold_marks_doc,
"graph_fold_marks(graph, until): mark the containers it folds only while fewer than ``until``\n"
"tracked objects were met (-1, the default: always); past that, graph_unknown and\n"
"graph_reached are not to be used (what lists every tracked object is over its budget).");

static PyObject *
graph_fold_marks(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *capsule;
    Py_ssize_t until;
    if (!PyArg_ParseTuple(args, "On:graph_fold_marks", &capsule, &until))
        return NULL;
    GraphState *g = graph_of(capsule);
    if (g == NULL)
        return NULL;
    g->fold_marks_until = until < 0 ? -1 : until;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(graph_keep_types_doc,
"graph_keep_types(graph, types): objects of these types (a tuple of at most 16 classes, exactly\n"
"these) are never folded into what holds them: a node each (graph.py's keep_types).");

static PyObject *
graph_keep_types(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *capsule, *types;
    if (!PyArg_ParseTuple(args, "OO!:graph_keep_types", &capsule, &PyTuple_Type, &types))
        return NULL;
    GraphState *g = graph_of(capsule);
    if (g == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_Size(types);
    if (n > GRAPH_KEPT_TYPES) {
        PyErr_SetString(PyExc_ValueError, "graph_keep_types: too many types");
        return NULL;
    }
    for (Py_ssize_t k = 0; k < n; k++)
        if (!PyType_Check(PyTuple_GetItem(types, k))) {
            PyErr_SetString(PyExc_TypeError, "graph_keep_types: not a class");
            return NULL;
        }
    while (g->nkept_types > 0)
        Py_CLEAR(g->kept_types[--g->nkept_types]);
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *tp = PyTuple_GetItem(types, k);
        Py_INCREF(tp);
        g->kept_types[g->nkept_types++] = (PyTypeObject *)tp;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(graph_edge_doc,
"graph_edge(graph, src, dst, label[, wall]): an edge between two nodes (their addresses, 0\n"
"the super-root); wall marks dst a wall instead (no edge but the super-root's leads to it)");

static PyObject *
graph_edge(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *capsule;
    unsigned long long i, j;
    int label, wall = 0;
    if (!PyArg_ParseTuple(args, "OKKi|p:graph_edge", &capsule, &i, &j, &label, &wall))
        return NULL;
    GraphState *g = graph_of(capsule);
    if (g == NULL)
        return NULL;
    if ((i != 0 && graph_find(g, (uintptr_t)i) != FOUND_NODE) || j == 0 || graph_find(g, (uintptr_t)j) != FOUND_NODE) {
        PyErr_SetString(PyExc_IndexError, "no such node");
        return NULL;
    }
    if (wall) {
        if (nodebits_set(&g->walls, (uintptr_t)j) < 0)
            return NULL;
    }
    else if (graph_add_edge(g, (uintptr_t)i, (uintptr_t)j, label) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(graph_reserve_doc,
"graph_reserve(graph, limit) -> bool\n\n"
"Between two graph_walk calls: make room now for what a call of ``limit`` units of work may\n"
"add to the walk's tables, moving them with the GIL released. True when it released the GIL\n"
"(the caller's duty cycle then begins a new stretch).");

static PyObject *
graph_reserve(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *capsule;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "On:graph_reserve", &capsule, &limit))
        return NULL;
    GraphState *g = graph_of(capsule);
    if (g == NULL)
        return NULL;
    int released = pending_reserve(g, limit < 1 ? 1 : limit);
    if (released < 0)
        return NULL;
    return PyBool_FromLong(released);
}

PyDoc_STRVAR(graph_walk_doc,
"graph_walk(graph, stack, limit) -> work done\n\n"
"Walk from the objects on stack (a list: each a node already; taken off it, onto the graph's\n"
"own stack, above what is left there), adding nodes and edges; stop after about limit units\n"
"of work (at least one). The rest of the walk stays in the graph: its stack and the rest of\n"
"a big container (0 is returned only when all is done).");

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
    Py_ssize_t pushed = PyList_Size(stack);
    for (Py_ssize_t k = 0; k < pushed; k++) {
        PyObject *root = PyList_GetItem(stack, k);
        if (graph_push(g, root, PyDict_CheckExact(root) ? STACK_NAMESPACE : 0) < 0)
            goto error;
    }
    if (pushed > 0 && PyList_SetSlice(stack, 0, pushed, NULL) < 0)
        goto error;
    while (work + g->called * GRAPH_CALL_WORK < limit) {
        work += g->called * GRAPH_CALL_WORK;
        g->called = 0;
        if (g->cur == NULL) {
            if (g->nsuspended > 0 && g->stack.len <= g->suspended[g->nsuspended - 1].base) {
                graph_resume(g);
                continue;
            }
            if (g->stack.len == 0)
                break;
            PyObject *obj = g->stack.items[--g->stack.len];  /* its reference, ours now */
            uintptr_t owner = g->owners[g->stack.len];
            work += 1;
            /* pushed as a node, or folded (owner: its node; unmarked past fold_marks_until) */
            if (owner <= STACK_NAMESPACE && graph_find(g, (uintptr_t)obj) != FOUND_NODE) {  /* it cannot be */
                Py_DECREF(obj);
                continue;
            }
            g->cur = obj;
            g->cur_owner = owner;
            g->cur_base = g->stack.len;
            if (graph_begin(g, &w, obj) < 0)
                goto error;
        }
        if (g->phase != PHASE_NONE && g->refs.next == g->refs.len) {
            if (g->stack.len - g->cur_base > GRAPH_SUSPEND_AT && g->nsuspended < GRAPH_MAX_SUSPENDED) {
                graph_suspend(g);
                continue;
            }
            Py_ssize_t got = graph_next_slice(g, limit - work > 1 ? limit - work : 1);
            if (got < 0)
                goto error;
            if (got == 0) {
                if (graph_finish(g) < 0)
                    goto error;
                continue;
            }
        }
        Py_ssize_t done = graph_referents(g, &w, limit - work);
        if (done < 0)
            goto error;
        work += done;
        if (g->refs.next < g->refs.len)
            break;  /* out of budget: the rest next call */
        if (g->phase == PHASE_NONE && graph_finish(g) < 0)
            goto error;
    }
    walk_release(&w);
    return PyLong_FromSsize_t(work);

error:
    walk_release(&w);
    return NULL;
}

/* Bytes of the frames not written out yet. */
static long long
graph_pending_bytes(GraphState *g)
{
    Column *cols[] = GRAPH_COLUMNS(g);
    long long bytes = 0;
    for (size_t c = 0; c < GRAPH_NCOLUMNS; c++) {
        Py_ssize_t items = cols[c]->len - cols[c]->flushed * GBLOCK_ITEMS;
        bytes += (long long)items * cols[c]->itemsize + 8LL * (cols[c]->nblocks - cols[c]->flushed);
    }
    return bytes;
}


PyDoc_STRVAR(graph_info_doc,
"graph_info(graph) -> (nodes, edges, tracked, bytes held, bytes written out, bytes of frames left,\n"
"                      objects folded into their collections, labels)");

static PyObject *
graph_info(PyObject *Py_UNUSED(module), PyObject *capsule)
{
    GraphState *g = (GraphState *)PyCapsule_GetPointer(capsule, GRAPH_NAME);
    if (g == NULL)
        return NULL;
    long long held = 0;
    Column *cols[] = GRAPH_COLUMNS(g);
    for (size_t k = 0; k < GRAPH_NCOLUMNS; k++)
        held += (long long)(cols[k]->nblocks - cols[k]->flushed) * GBLOCK_ITEMS * cols[k]->itemsize;
    NodeBits *bits[] = {&g->marked, &g->walls, &g->ownbits, &g->counted, &g->madebits};
    for (size_t k = 0; k < sizeof(bits) / sizeof(bits[0]); k++)
        held += bits[k]->bytes + (long long)(bits[k]->mask + (bits[k]->keys ? 1 : 0)) * 16;
    AddrMap *maps[] = {&g->made, &g->key_labels};
    for (size_t k = 0; k < sizeof(maps) / sizeof(maps[0]); k++)
        held += maps[k]->keys ? (long long)(maps[k]->mask + 1) * (long long)(sizeof(uintptr_t) + sizeof(long long) + 4) : 0;
    /* the labelled keys, the tallies and the spare blocks */
    held += g->labelled != NULL ? (long long)(g->labelled_mask + 1) * 4 : 0;
    held += (long long)g->t_len * 16;
    for (size_t k = 0; k < GRAPH_NCOLUMNS; k++)
        held += (long long)cols[k]->nspare * GBLOCK_ITEMS * cols[k]->itemsize;
    held += (long long)g->owners_cap * (long long)sizeof(uintptr_t);
    held += g->pending != NULL ? (long long)(g->pending_mask + 1) * (long long)sizeof(PackedLeaf) : 0;
    held += g->groups != NULL ? (long long)(g->groups_mask + 1) * (long long)sizeof(LeafGroup) : 0;
    held += (long long)g->ltext_cap + (long long)g->loff_cap * 4 + (g->lslots != NULL ? (long long)(g->lslots_mask + 1) * 4 : 0);
    return Py_BuildValue("nnnLLLLn", g->nodes, g->src.len, g->tracked, held, g->spooled, graph_pending_bytes(g),
                         g->folded_objects, g->nlabels);
}

PyDoc_STRVAR(graph_reached_doc,
"graph_reached(graph, regions) -> how many regions it has\n\n"
"What the walk reached, in the census's bitmap (census_tallies.Claimed.regions: a dict of\n"
"address >> 20 -> bytearray(8192), a bit per 16 bytes): the nodes and our own objects, and\n"
"the shared leaves it counted, OR-ed into ``regions``. Before graph_close (it frees them).");

static PyObject *
graph_reached(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *capsule, *regions;
    if (!PyArg_ParseTuple(args, "OO!:graph_reached", &capsule, &PyDict_Type, &regions))
        return NULL;
    GraphState *g = graph_of(capsule);
    if (g == NULL)
        return NULL;
    NodeBits *bits[] = {&g->marked, &g->counted};
    for (size_t b = 0; b < sizeof(bits) / sizeof(bits[0]); b++) {
        NodeBits *nb = bits[b];
        for (size_t h = 0; nb->keys != NULL && h <= nb->mask; h++) {
            if (nb->keys[h] == 0)
                continue;
            PyObject *region = region_in_dict(regions, nb->keys[h] - 1);  /* borrowed */
            if (region == NULL)
                return NULL;
            unsigned char *to = (unsigned char *)PyByteArray_AsString(region);
            noderegion_or_into(nb->bits[h], to);
        }
    }
    return PyLong_FromSsize_t(PyDict_Size(regions));
}

PyDoc_STRVAR(graph_tallies_doc,
"graph_tallies(graph) -> (counts, bytes, objects, total bytes, native bytes)\n\n"
"The walk's census: per type id (two bytes objects of int64 in native order, one item a\n"
"type id), every object it counted once at its own size; valid after graph_close too.");

static PyObject *
graph_tallies(PyObject *Py_UNUSED(module), PyObject *capsule)
{
    GraphState *g = (GraphState *)PyCapsule_GetPointer(capsule, GRAPH_NAME);
    if (g == NULL)
        return NULL;
    Py_ssize_t n = g->t_len;
    while (n > 0 && g->t_counts[n - 1] == 0 && g->t_bytes[n - 1] == 0)
        n--;
    return Py_BuildValue("y#y#LLL", (const char *)g->t_counts, n * (Py_ssize_t)sizeof(long long),
                         (const char *)g->t_bytes, n * (Py_ssize_t)sizeof(long long),
                         g->objects, g->bytes, g->native_bytes);
}

PyDoc_STRVAR(graph_frame_doc,
"graph_frame(graph, k) -> bytes or None\n\n"
"Frame k of the blocks not written out (the columns in turn, each block a frame: two uint32,\n"
"the column's code and its items, then the items in native byte order); None past the end.");

static PyObject *
graph_frame(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *capsule;
    Py_ssize_t k;
    if (!PyArg_ParseTuple(args, "On:graph_frame", &capsule, &k))
        return NULL;
    GraphState *g = (GraphState *)PyCapsule_GetPointer(capsule, GRAPH_NAME);
    if (g == NULL)
        return NULL;
    Column *cols[] = GRAPH_COLUMNS(g);
    for (size_t c = 0; c < GRAPH_NCOLUMNS && k >= 0; c++) {
        Column *col = cols[c];
        Py_ssize_t left = col->nblocks - col->flushed;
        if (k >= left) {
            k -= left;
            continue;
        }
        Py_ssize_t b = col->flushed + k;
        Py_ssize_t items = column_block_items(col, b);
        uint32_t header[2] = {col->code, (uint32_t)items};
        PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)sizeof(header) + items * col->itemsize);
        if (out == NULL)
            return NULL;
        memcpy(PyBytes_AsString(out), header, sizeof(header));
        memcpy(PyBytes_AsString(out) + sizeof(header), col->blocks[b], (size_t)items * (size_t)col->itemsize);
        return out;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(graph_spool_doc,
"graph_spool(graph, fd): full blocks go to the file descriptor fd at each graph_flush");

static PyObject *
graph_spool(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *capsule;
    int fd;
    if (!PyArg_ParseTuple(args, "Oi:graph_spool", &capsule, &fd))
        return NULL;
    GraphState *g = graph_of(capsule);
    if (g == NULL)
        return NULL;
    g->spool = fd;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(graph_flush_doc,
"graph_flush(graph) -> bytes written\n\n"
"Every full block to the spool (graph_spool) as frames, the GIL released, and freed: the\n"
"payload calls it where it yields the GIL anyway (a release of its own would make a busy\n"
"target's main thread wait its switch interval to give the GIL back). 0 without a spool.");

static PyObject *
graph_flush(PyObject *Py_UNUSED(module), PyObject *capsule)
{
    GraphState *g = (GraphState *)PyCapsule_GetPointer(capsule, GRAPH_NAME);
    if (g == NULL)
        return NULL;
    if (g->spool < 0)
        return PyLong_FromLong(0);
    long long written = graph_write_blocks(g, g->spool, 1);
    if (written < 0)
        return NULL;
    g->spooled += written;
    return PyLong_FromLongLong(written);
}

PyDoc_STRVAR(graph_write_doc,
"graph_write(graph, fd) -> bytes written\n\n"
"Every block not written out yet (graph_frame's order) to the file descriptor fd in one call,\n"
"the GIL released for all of it, and freed: from Python each piece would be a copy and a wait\n"
"for the GIL after its write (a busy target's main thread holds it up to its switch interval).");

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
    if (g->type_index != NULL) {
        PyErr_SetString(PyExc_ValueError, "the walk is not over (graph_close)");
        return NULL;
    }
    long long written = graph_write_blocks(g, fd, 0);
    if (written < 0)
        return NULL;
    if (fd == g->spool)
        g->spooled += written;
    return PyLong_FromLongLong(written);
}

static int
pending_by_address(const void *a, const void *b)
{
    uintptr_t x = ((const PendingLeaf *)a)->key, y = ((const PendingLeaf *)b)->key;
    return x < y ? -1 : x > y;
}

PyDoc_STRVAR(graph_settle_doc,
"graph_settle(graph): the leaves still pending (some reference never met: held from C or by a\n"
"frame) given to the node they were met from, or to their group's node. After the walk.");

static PyObject *
graph_settle(PyObject *Py_UNUSED(module), PyObject *capsule)
{
    GraphState *g = graph_of(capsule);
    if (g == NULL)
        return NULL;
    /* a node with the edges met only is dominated as its leaf would be; counted, for the
     * census after the walk. In address order: the Python loop settles in the same order, so
     * a group is named by the same leaf in both. */
    if (g->pending == NULL || g->npending == 0)
        Py_RETURN_NONE;
    Py_ssize_t n = 0;
    PendingLeaf *left = table_malloc((size_t)g->npending * sizeof(PendingLeaf));
    if (left == NULL)
        return PyErr_NoMemory();
    for (size_t k = 0; k <= g->pending_mask; k++) {
        if (packed_key(&g->pending[k]) != 0 && n < g->npending)
            left[n++] = packed_unpack(&g->pending[k]);
        g->pending[k].word[0] = 0;
    }
    g->npending = 0;
    qsort(left, (size_t)n, sizeof(PendingLeaf), pending_by_address);
    for (Py_ssize_t k = 0; k < n; k++) {
        if (nodebits_set(&g->counted, left[k].key) < 0 || pending_resolve(g, left[k], 0) < 0) {
            table_free(left);
            return NULL;
        }
    }
    table_free(left);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(graph_add_bytes_doc,
"graph_add_bytes(graph, address, type_id, bytes) -> bool\n\n"
"``bytes`` more of the node at ``address`` (what a C library holds for it, measured after the walk:\n"
"sizes.scanned_object_sizes), in its size and in its type's native bytes; False where it is no node.");

static PyObject *
graph_add_bytes(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *capsule;
    unsigned long long address;
    Py_ssize_t type_id;
    long long size;
    if (!PyArg_ParseTuple(args, "OKnL:graph_add_bytes", &capsule, &address, &type_id, &size))
        return NULL;
    GraphState *g = graph_of(capsule);
    if (g == NULL)
        return NULL;
    if (address == 0 || size <= 0 || (size_t)size > MAX_OBJECT_BYTES || graph_find(g, (uintptr_t)address) != FOUND_NODE)
        Py_RETURN_FALSE;
    if (graph_tally(g, type_id, 0, size) < 0 || graph_fold(g, (uintptr_t)address, size) < 0)
        return NULL;
    g->native_bytes += size;
    Py_RETURN_TRUE;
}

PyDoc_STRVAR(graph_close_doc, "graph_close(graph): drop the helpers, the bitmaps and the walk in progress (not the records)");

static PyObject *
graph_close(PyObject *Py_UNUSED(module), PyObject *capsule)
{
    GraphState *g = (GraphState *)PyCapsule_GetPointer(capsule, GRAPH_NAME);
    if (g == NULL)
        return NULL;
    int failed = graph_fold_flush(g);
    graph_drop_bits(g);
    graph_drop_helpers(g);
    if (failed)
        return NULL;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(graph_label_doc,
"graph_label(graph, text[, max_labels, max_key_labels]) -> the label of text (made if new), or -1\n"
"when the labels are all taken (a \"k\" label: the key labels); with the limits, they are set\n"
"first (text None: only that).");

static PyObject *
graph_label(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *capsule, *text;
    Py_ssize_t max_labels = -1, max_key_labels = -1;
    if (!PyArg_ParseTuple(args, "OO|nn:graph_label", &capsule, &text, &max_labels, &max_key_labels))
        return NULL;
    if (text != Py_None && !PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "a label is a str");
        return NULL;
    }
    GraphState *g = graph_of(capsule);
    if (g == NULL)
        return NULL;
    if (max_labels >= 0) {
        g->max_labels = max_labels < INT32_MAX - 1 ? max_labels : INT32_MAX - 1;
        g->max_key_labels = max_key_labels;
    }
    if (text == Py_None)
        Py_RETURN_NONE;
    long label = label_of_str(g, text);
    return label == -2 ? NULL : PyLong_FromLong(label);
}

PyDoc_STRVAR(graph_labels_doc,
"graph_labels(graph[, start, stop]) -> the labels' texts, by label, from ``start`` to ``stop`` (all by\n"
"default; valid after graph_close too). A slice at a time, the result is written without the whole\n"
"list of str in the target at once (graph_wire.LabelTexts: ~7,500-10,000 labels, ~0.7 MiB as str).");

static PyObject *
graph_labels(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *capsule;
    Py_ssize_t start = 0, stop = PY_SSIZE_T_MAX;
    if (!PyArg_ParseTuple(args, "O|nn:graph_labels", &capsule, &start, &stop))
        return NULL;
    GraphState *g = (GraphState *)PyCapsule_GetPointer(capsule, GRAPH_NAME);
    if (g == NULL)
        return NULL;
    if (stop > g->nlabels)
        stop = g->nlabels;
    if (start < 0)
        start = 0;
    if (start > stop)
        start = stop;
    PyObject *out = PyList_New(stop - start);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t k = start; k < stop; k++) {
        PyObject *text = PyUnicode_DecodeUTF8(g->ltext + g->loff[k], (Py_ssize_t)(g->loff[k + 1] - g->loff[k]),
                                              "surrogatepass");
        if (text == NULL || PyList_SetItem(out, k - start, text) < 0) {  /* (steals text) */
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
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
        if (obj != NULL && graph_find(g, (uintptr_t)obj) == FOUND_NONE && PyList_Append(out, obj) < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}

#pragma GCC visibility push(hidden)
PyMethodDef graph_walk_methods[] = {
    {"graph_new", graph_new, METH_VARARGS, graph_new_doc},
    {"graph_node", graph_node, METH_VARARGS, graph_node_doc},
    {"graph_find", graph_find_py, METH_VARARGS, graph_find_doc},
    {"graph_own", graph_own, METH_VARARGS, graph_own_doc},
    {"graph_fold_marks", graph_fold_marks, METH_VARARGS, graph_fold_marks_doc},
    {"graph_keep_types", graph_keep_types, METH_VARARGS, graph_keep_types_doc},
    {"graph_edge", graph_edge, METH_VARARGS, graph_edge_doc},
    {"graph_walk", graph_walk, METH_VARARGS, graph_walk_doc},
    {"graph_reserve", graph_reserve, METH_VARARGS, graph_reserve_doc},
    {"graph_info", graph_info, METH_O, graph_info_doc},
    {"graph_tallies", graph_tallies, METH_O, graph_tallies_doc},
    {"graph_reached", graph_reached, METH_VARARGS, graph_reached_doc},
    {"graph_frame", graph_frame, METH_VARARGS, graph_frame_doc},
    {"graph_spool", graph_spool, METH_VARARGS, graph_spool_doc},
    {"graph_flush", graph_flush, METH_O, graph_flush_doc},
    {"graph_write", graph_write, METH_VARARGS, graph_write_doc},
    {"graph_close", graph_close, METH_O, graph_close_doc},
    {"graph_add_bytes", graph_add_bytes, METH_VARARGS, graph_add_bytes_doc},
    {"graph_settle", graph_settle, METH_O, graph_settle_doc},
    {"graph_unknown", graph_unknown, METH_VARARGS, graph_unknown_doc},
    {"graph_label", graph_label, METH_VARARGS, graph_label_doc},
    {"graph_labels", graph_labels, METH_VARARGS, graph_labels_doc},
    {NULL, NULL, 0, NULL},
};
#pragma GCC visibility pop
