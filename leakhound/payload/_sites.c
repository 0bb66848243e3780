/*
 * Sampled allocation sites: a hook on the interpreter's PYMEM_DOMAIN_MEM and PYMEM_DOMAIN_OBJ
 * allocators that records, for about one allocation per ``mean_bytes`` allocated (Poisson
 * sampling by bytes, as tcmalloc/pprof and Chrome's sampling heap profiler do), the Python
 * stack that allocated the block, and forgets the block when it is freed. What is left at the
 * end is where the surviving new bytes came from; the object graph's walk (_graph_walk.c)
 * tells which node each surviving block became part of (sites_note), and leakhound maps that
 * node to its dominator owner.
 *
 * The rules that keep it safe in someone else's process:
 * - It always delegates to the allocators it found (saved at start), so a block allocated
 *   before the hook is freed by the same allocator after it, and the other way round.
 * - Both domains are called with the GIL held (CPython's documented contract), so the tables
 *   need no lock; nothing here releases the GIL.
 * - Nothing the hook runs allocates: the tables are libc's malloc'd at start (no hooked
 *   domain), the stack is read from the interpreter's frames without making
 *   frame objects (3.11+: PyThreadState_GetFrame would allocate one, and 3.11's allocation
 *   of a gc object can run a collection, with finalizers, inside the target's malloc). A
 *   thread-local flag stops any recursion and keeps the payload's own thread out.
 * - It ends by itself: every sampled allocation compares the clock with the deadline given
 *   at start, and past it the allocators saved at start are put
 *   back (the payload's timer thread does the same for an idle target). If another hook was
 *   installed on top of this one, removing ours would cut it off: ours then only delegates.
 *
 * Reading the stack needs a few private offsets (the thread state's current frame, the
 * interpreter frame's fields, where a code object's instructions begin); they are checked
 * at start against the caller's own frame, and a layout that does not match refuses to start.
 */

#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>

#include "_walk.h"
#include "_sites.h"

/* The allocator API is outside the stable ABI; its layout and entry points are the same on
 * every CPython since 3.4 (Include/cpython/pymem.h). */
enum { DOMAIN_MEM = 1, DOMAIN_OBJ = 2 };
typedef struct {
    void *ctx;
    void *(*malloc)(void *ctx, size_t size);
    void *(*calloc)(void *ctx, size_t nelem, size_t elsize);
    void *(*realloc)(void *ctx, void *ptr, size_t new_size);
    void (*free)(void *ctx, void *ptr);
} Allocator;
PyAPI_FUNC(void) PyMem_GetAllocator(int domain, Allocator *allocator);
PyAPI_FUNC(void) PyMem_SetAllocator(int domain, Allocator *allocator);
PyAPI_FUNC(PyFrameObject *) PyFrame_GetBack(PyFrameObject *frame);
PyAPI_FUNC(int) PyCode_Addr2Line(PyObject *code, int byte_offset);

typedef PyThreadState *(*unchecked_tstate_fn)(void);

#pragma GCC visibility push(hidden)

#define MAX_DEPTH 48
#define EMPTY ((uintptr_t)0)
/* The free path's filter: a bit per hash of a sampled block's address, so that a free of
 * a block that was never sampled (nearly all of them) reads 8 KiB that stay in cache, not the
 * sample table (measured: the table's lookup on every free was most of the hook's cost). Bits
 * of freed samples stay set until the filter is rebuilt from the table. */
#define FILTER_SHIFT 16
#define FILTER_WORDS ((1 << FILTER_SHIFT) / 64)

typedef struct {
    PyObject *code;  /* a strong reference once the stack is interned */
    int line;
} Frame;

typedef struct {
    uintptr_t ptr;   /* the block's address; EMPTY: a free slot */
    size_t size;
    uintptr_t node;  /* the graph node it is part of (sites_note), 0 if none was seen */
    uint32_t stack;
    uint32_t unused;
} Entry;

typedef struct {
    uint64_t hash;
    uint32_t first;  /* index into ``frames`` */
    uint32_t depth;
} Stack;

typedef struct {
    Allocator saved;
    int domain;
} Domain;

static Domain mem_domain = {{0}, DOMAIN_MEM};
static Domain obj_domain = {{0}, DOMAIN_OBJ};

/* This thread is in the hook, or is the payload's: read only as a sample is taken (a
 * thread-local read in a dlopen'd library is a call to __tls_get_addr: too dear per call). */
static __thread int in_hook;

/* Whether the hook is in the allocator chain (it stays there, only delegating, when another
 * hook was put on top of it), and whether it records. */
static int installed, tracking;
int sites_noting;

static double mean_bytes = 512.0 * 1024;
static long long countdown, interval, consumed;  /* bytes: to the next sample, of the last interval, before it */
static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static double deadline, started;  /* CLOCK_MONOTONIC seconds */
static uint64_t filter[FILTER_WORDS];
static size_t filter_stale;  /* samples removed since the filter was built */
static int expired, unhook_refused;

static Entry *entries;
static size_t entries_mask, live, max_live;
static Stack *stacks;
static size_t stacks_mask, n_stacks, max_stacks;
static Frame *frames;
static size_t n_frames, max_frames;
static long long sampled_total, dropped, dropped_stacks;
static size_t table_bytes;

/* What reads the stack: 3.10's frame objects, or 3.11+'s interpreter frames. */
static int minor;
static unchecked_tstate_fn get_tstate;
static PyTypeObject *stack_code_type;
static Py_ssize_t code_start;   /* offsetof(PyCodeObject, co_code_adaptive): the type's basicsize */
static Py_ssize_t ts_frame, cf_frame = -1;  /* tstate->current_frame, or tstate->cframe->current_frame */
static Py_ssize_t fr_code, fr_previous, fr_instr, fr_owner;
#define OWNED_BY_CSTACK 3

static double
now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t
next_random(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    rng_state = x;
    return x;
}

/* ln(r) for an integer r >= 1, to ~1e-6: without libm, which a target need not have loaded
 * with its symbols exported (the whole module, the census's walk too, would not load). */
static double
log_of(uint64_t r)
{
    int k = 63 - __builtin_clzll(r);
    double m = (double)r / (double)((uint64_t)1 << k);  /* [1, 2) */
    double t = (m - 1.0) / (m + 1.0), t2 = t * t;
    double series = t * (1.0 + t2 * (1.0 / 3 + t2 * (1.0 / 5 + t2 * (1.0 / 7 + t2 * (1.0 / 9)))));
    return k * 0.69314718055994531 + 2.0 * series;
}

/* Bytes until the next sample: exponential with mean ``mean_bytes``. */
static long long
next_interval(void)
{
    uint64_t r = (next_random() >> 11) + 1;  /* [1, 2^53]: u = r / 2^53 in (0, 1] */
    double bytes = (53 * 0.69314718055994531 - log_of(r)) * mean_bytes;
    return bytes < 1.0 ? 1 : (long long)bytes;
}

static inline size_t
slot_of(uintptr_t ptr, size_t mask)
{
    return (size_t)(((uint64_t)(ptr >> 4) * 0x9E3779B97F4A7C15ULL) >> 17) & mask;
}

static inline uint64_t
filter_bit(uintptr_t ptr, size_t *word)
{
    size_t h = (size_t)(((uint64_t)(ptr >> 4) * 0x9E3779B97F4A7C15ULL) >> (64 - FILTER_SHIFT));
    *word = h >> 6;
    return (uint64_t)1 << (h & 63);
}

static void
filter_rebuild(void)
{
    memset(filter, 0, sizeof(filter));
    for (size_t k = 0; entries != NULL && k <= entries_mask; k++) {
        if (entries[k].ptr != EMPTY) {
            size_t word;
            uint64_t bit = filter_bit(entries[k].ptr, &word);
            filter[word] |= bit;
        }
    }
    filter_stale = 0;
}

static Entry *
entry_find(uintptr_t ptr)
{
    size_t k = slot_of(ptr, entries_mask);
    while (entries[k].ptr != EMPTY) {
        if (entries[k].ptr == ptr)
            return &entries[k];
        k = (k + 1) & entries_mask;
    }
    return NULL;
}

/* ``e`` out of the table (backward-shift deletion: no tombstones, lookups stay short). */
static void
entry_remove(Entry *e)
{
    size_t hole = (size_t)(e - entries);
    for (size_t k = (hole + 1) & entries_mask; entries[k].ptr != EMPTY; k = (k + 1) & entries_mask) {
        size_t home = slot_of(entries[k].ptr, entries_mask);
        int between = hole <= k ? (hole < home && home <= k) : (hole < home || home <= k);
        if (!between) {
            entries[hole] = entries[k];
            hole = k;
        }
    }
    entries[hole].ptr = EMPTY;
    live--;
    filter_stale++;
}

static inline void
forget(void *ptr)
{
    if (live == 0 || ptr == NULL)
        return;
    size_t word;
    uint64_t bit = filter_bit((uintptr_t)ptr, &word);
    if (__builtin_expect(!(filter[word] & bit), 1))
        return;
    Entry *e = entry_find((uintptr_t)ptr);
    if (e != NULL)
        entry_remove(e);
}

/* The stack of the running thread into ``out``: how many frames (0: none to read). */
static int
read_stack(Frame *out)
{
    PyThreadState *ts = get_tstate();
    if (ts == NULL)
        return 0;
    int n = 0;
    if (minor < 11) {
        /* 3.10: every frame is a frame object already; nothing here allocates. */
        PyFrameObject *f = PyThreadState_GetFrame(ts);
        while (f != NULL && n < MAX_DEPTH) {
            PyCodeObject *code = PyFrame_GetCode(f);
            out[n].code = (PyObject *)code;  /* the frame keeps it alive while it is read */
            out[n].line = PyFrame_GetLineNumber(f);
            Py_DECREF(code);
            n++;
            PyFrameObject *back = PyFrame_GetBack(f);
            Py_DECREF(f);
            f = back;
        }
        Py_XDECREF(f);
        return n;
    }
    char *f;
    if (cf_frame < 0) {
        f = *(char **)((char *)ts + ts_frame);
    }
    else {
        char *cframe = *(char **)((char *)ts + ts_frame);
        if (cframe == NULL)
            return 0;
        f = *(char **)(cframe + cf_frame);
    }
    for (int guard = 0; f != NULL && n < MAX_DEPTH && guard < 4096; guard++) {
        PyObject *code = *(PyObject **)(f + fr_code);
        if (*(f + fr_owner) != OWNED_BY_CSTACK && code != NULL && Py_TYPE(code) == stack_code_type) {
            char *instr = *(char **)(f + fr_instr);
            Py_ssize_t offset = instr - ((char *)code + code_start);
            /* a frame that has not begun points before its first instruction: its first line */
            int line = offset < 0 ? PyCode_Addr2Line(code, -1)
                     : offset < Py_SIZE(code) * 2 ? PyCode_Addr2Line(code, (int)offset) : -1;
            out[n].code = code;
            out[n].line = line;
            n++;
        }
        f = *(char **)(f + fr_previous);
    }
    return n;
}

/* An immortal object's count is never written: 3.13's ``_Py_InitCleanup`` (the shim frame of
   a class's ``__init__`` call) is a ``const`` code object in read-only memory, and this module's
   limited-API Py_INCREF is a plain increment (it killed a 3.13 target allocating in __init__
   from threads). Immortal (3.12+): the low 32 bits of the count negative; it never dies, so
   it needs no reference held. */
static inline int
is_immortal(PyObject *op)
{
    return minor >= 12 && (int32_t)Py_REFCNT(op) < 0;
}

static inline void
keep_code(PyObject *code)
{
    if (!is_immortal(code))
        Py_INCREF(code);
}

static inline void
release_code(PyObject *code)
{
    if (!is_immortal(code))
        Py_DECREF(code);
}

/* The interned stack for ``frame[0:depth]``: its index, or -1 when the table is full. */
static long
intern_stack(Frame *frame, int depth)
{
    uint64_t h = 1469598103934665603ULL;
    for (int i = 0; i < depth; i++) {
        h = (h ^ (uint64_t)(uintptr_t)frame[i].code) * 1099511628211ULL;
        h = (h ^ (uint64_t)(unsigned)frame[i].line) * 1099511628211ULL;
    }
    h |= 1;  /* 0 marks a free slot */
    size_t k = (size_t)(h >> 7) & stacks_mask;
    while (stacks[k].hash != 0) {
        Stack *s = &stacks[k];
        if (s->hash == h && s->depth == (uint32_t)depth) {
            Frame *known = frames + s->first;
            int same = 1;
            for (int i = 0; i < depth && same; i++)
                same = known[i].code == frame[i].code && known[i].line == frame[i].line;
            if (same)
                return (long)k;
        }
        k = (k + 1) & stacks_mask;
    }
    if (n_stacks >= max_stacks || n_frames + (size_t)depth > max_frames)
        return -1;
    for (int i = 0; i < depth; i++) {
        keep_code(frame[i].code);
        frames[n_frames + (size_t)i] = frame[i];
    }
    stacks[k].hash = h;
    stacks[k].first = (uint32_t)n_frames;
    stacks[k].depth = (uint32_t)depth;
    n_frames += (size_t)depth;
    n_stacks++;
    return (long)k;
}

static void unhook(void);

static int
past_deadline(void)
{
    if (now_seconds() < deadline)
        return 0;
    expired = 1;
    unhook();
    return 1;
}

/* A sample is due: the stack of the allocation of ``size`` bytes at ``ptr``, kept. */
__attribute__((noinline, cold)) static void
take_sample(void *ptr, size_t size)
{
    consumed += interval - countdown;
    interval = countdown = next_interval();
    if (in_hook)
        return;  /* the payload's own thread (or the hook itself): not the target's */
    in_hook = 1;
    if (!past_deadline()) {
        Frame stack[MAX_DEPTH];
        int depth = read_stack(stack);
        long index = depth > 0 ? intern_stack(stack, depth) : -1;
        sampled_total++;
        if (filter_stale > 4096 && filter_stale > live)
            filter_rebuild();
        if (index < 0)
            dropped_stacks++;
        else if (live >= max_live)
            dropped++;
        else {
            uintptr_t key = (uintptr_t)ptr;
            size_t k = slot_of(key, entries_mask);
            while (entries[k].ptr != EMPTY && entries[k].ptr != key)
                k = (k + 1) & entries_mask;
            if (entries[k].ptr == EMPTY)
                live++;
            entries[k].ptr = key;
            entries[k].size = size;
            entries[k].node = 0;
            entries[k].stack = (uint32_t)index;
            size_t word;
            uint64_t bit = filter_bit(key, &word);
            filter[word] |= bit;
        }
    }
    in_hook = 0;
}

/* Every hooked allocation: a countdown, and rarely a sample. */
static inline void
maybe_sample(void *ptr, size_t size)
{
    countdown -= (long long)size;
    if (__builtin_expect(countdown <= 0, 0))
        take_sample(ptr, size);
}

static void *
hook_malloc(void *ctx, size_t size)
{
    Domain *d = (Domain *)ctx;
    void *ptr = d->saved.malloc(d->saved.ctx, size);
    if (ptr != NULL && tracking)
        maybe_sample(ptr, size);
    return ptr;
}

static void *
hook_calloc(void *ctx, size_t nelem, size_t elsize)
{
    Domain *d = (Domain *)ctx;
    void *ptr = d->saved.calloc(d->saved.ctx, nelem, elsize);
    if (ptr != NULL && tracking)
        maybe_sample(ptr, nelem * elsize);
    return ptr;
}

static void *
hook_realloc(void *ctx, void *old, size_t size)
{
    Domain *d = (Domain *)ctx;
    void *ptr = d->saved.realloc(d->saved.ctx, old, size);
    if (ptr != NULL && tracking) {
        /* a moved or resized block is a new one: the old one's sample goes, the new size is
         * sampled as any allocation (pprof's rule) */
        forget(old);
        maybe_sample(ptr, size);
    }
    return ptr;
}

static void
hook_free(void *ctx, void *ptr)
{
    Domain *d = (Domain *)ctx;
    if (tracking)
        forget(ptr);
    d->saved.free(d->saved.ctx, ptr);
}

static int
is_ours(Domain *d)
{
    Allocator now;
    PyMem_GetAllocator(d->domain, &now);
    return now.malloc == hook_malloc && now.ctx == d;
}

/* Stop recording and take the hook out of the chain, when it is on top of it. */
static void
unhook(void)
{
    tracking = 0;
    sites_noting = 0;
    if (!installed)
        return;
    if (is_ours(&mem_domain) && is_ours(&obj_domain)) {
        PyMem_SetAllocator(DOMAIN_MEM, &mem_domain.saved);
        PyMem_SetAllocator(DOMAIN_OBJ, &obj_domain.saved);
        installed = 0;
        unhook_refused = 0;
    }
    else {
        unhook_refused = 1;  /* another hook wraps ours: it stays, only delegating */
    }
}

static void
free_tables(void)
{
    for (size_t i = 0; i < n_frames; i++)
        release_code(frames[i].code);
    free(entries);
    free(stacks);
    free(frames);
    entries = NULL;
    stacks = NULL;
    frames = NULL;
    live = n_stacks = n_frames = 0;
    table_bytes = 0;
}

static size_t
power_of_two_above(size_t n)
{
    size_t p = 16;
    while (p < n)
        p <<= 1;
    return p;
}

/* The offsets read_stack uses, for this interpreter, checked against the caller's frame. */
static int
learn_layout(void)
{
    PyObject *info = PySys_GetObject("version_info");  /* borrowed */
    PyObject *m = info != NULL ? PySequence_GetItem(info, 1) : NULL;
    if (m == NULL)
        return -1;
    minor = (int)PyLong_AsLong(m);
    Py_DECREF(m);
    PyObject *gil = PySys_GetObject("_is_gil_enabled");
    if (gil != NULL) {
        PyObject *on = PyObject_CallNoArgs(gil);
        int enabled = on == NULL ? -1 : PyObject_IsTrue(on);
        Py_XDECREF(on);
        if (enabled != 1) {
            PyErr_Clear();
            PyErr_SetString(PyExc_RuntimeError, "this interpreter runs without the GIL: the allocation hook "
                            "relies on it");
            return -1;
        }
    }
    get_tstate = (unchecked_tstate_fn)dlsym(RTLD_DEFAULT, "PyThreadState_GetUnchecked");
    if (get_tstate == NULL)
        get_tstate = (unchecked_tstate_fn)dlsym(RTLD_DEFAULT, "_PyThreadState_UncheckedGet");
    if (get_tstate == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the interpreter does not export its thread state getter");
        return -1;
    }
    PyFrameObject *caller = PyEval_GetFrame();  /* borrowed */
    if (caller == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "sites_start must be called from Python code");
        return -1;
    }
    PyCodeObject *caller_code = PyFrame_GetCode(caller);
    stack_code_type = Py_TYPE(caller_code);
    PyObject *basic = PyObject_GetAttrString((PyObject *)stack_code_type, "__basicsize__");
    code_start = basic != NULL ? PyLong_AsSsize_t(basic) : -1;
    Py_XDECREF(basic);
    if (code_start < 0) {
        Py_DECREF(caller_code);
        return -1;
    }
    if (minor < 11) {
        Py_DECREF(caller_code);
        return 0;
    }
    if (minor > 13) {
        Py_DECREF(caller_code);
        PyErr_Format(PyExc_RuntimeError, "the interpreter frames of Python 3.%d are not known", minor);
        return -1;
    }
    if (minor == 11) {
        ts_frame = 56; cf_frame = 8;
        fr_code = 32; fr_previous = 48; fr_instr = 56; fr_owner = 69;
    }
    else {
        ts_frame = minor == 12 ? 56 : 72;
        cf_frame = minor == 12 ? 0 : -1;
        fr_code = 0; fr_previous = 8; fr_instr = 56; fr_owner = 70;
    }
    /* The caller's frame object points at its interpreter frame (PyFrameObject.f_frame, after
     * the object header and f_back), which is the thread's current one while it calls us. */
    char *iframe = *(char **)((char *)caller + 3 * sizeof(void *));
    PyThreadState *ts = get_tstate();
    char *current = NULL;
    if (ts != NULL) {
        char *at = *(char **)((char *)ts + ts_frame);
        current = cf_frame < 0 ? at : at != NULL ? *(char **)(at + cf_frame) : NULL;
    }
    int matches = iframe != NULL && current == iframe && *(PyObject **)(iframe + fr_code) == (PyObject *)caller_code;
    Py_DECREF(caller_code);
    if (!matches) {
        PyErr_Format(PyExc_RuntimeError, "the frame layout of this Python 3.%d build is not the one known", minor);
        return -1;
    }
    return 0;
}

PyObject *
sites_start(PyObject *self, PyObject *args)
{
    double mean, seconds;
    Py_ssize_t max_samples;
    if (!PyArg_ParseTuple(args, "ddn", &mean, &seconds, &max_samples))
        return NULL;
    if (!(mean >= 1.0 && mean <= 1e12) || !(seconds > 0 && seconds <= 86400.0) || max_samples < 1
        || max_samples > (1 << 22)) {
        PyErr_SetString(PyExc_ValueError, "sites_start: mean bytes, seconds or samples out of range");
        return NULL;
    }
    if (learn_layout() < 0)
        return NULL;
    unhook();
    free_tables();
    size_t slots = power_of_two_above((size_t)max_samples * 2);
    size_t want_stacks = (size_t)max_samples < 4096 ? (size_t)max_samples : 4096;
    size_t stack_slots = power_of_two_above(want_stacks * 2);
    size_t want_frames = want_stacks * 16;
    entries = calloc(slots, sizeof(Entry));
    stacks = calloc(stack_slots, sizeof(Stack));
    frames = calloc(want_frames, sizeof(Frame));
    if (entries == NULL || stacks == NULL || frames == NULL) {
        free_tables();
        return PyErr_NoMemory();
    }
    table_bytes = slots * sizeof(Entry) + stack_slots * sizeof(Stack) + want_frames * sizeof(Frame);
    entries_mask = slots - 1;
    max_live = (size_t)max_samples;
    stacks_mask = stack_slots - 1;
    max_stacks = want_stacks;
    max_frames = want_frames;
    sampled_total = dropped = dropped_stacks = 0;
    memset(filter, 0, sizeof(filter));
    filter_stale = 0;
    mean_bytes = mean;
    rng_state ^= (uint64_t)(now_seconds() * 1e9);
    if (rng_state == 0)
        rng_state = 0x9E3779B97F4A7C15ULL;
    interval = countdown = next_interval();
    consumed = 0;
    started = now_seconds();
    deadline = started + seconds;
    expired = 0;
    if (!installed) {
        Allocator hook;
        PyMem_GetAllocator(DOMAIN_MEM, &mem_domain.saved);
        PyMem_GetAllocator(DOMAIN_OBJ, &obj_domain.saved);
        hook.malloc = hook_malloc;
        hook.calloc = hook_calloc;
        hook.realloc = hook_realloc;
        hook.free = hook_free;
        hook.ctx = &mem_domain;
        PyMem_SetAllocator(DOMAIN_MEM, &hook);
        hook.ctx = &obj_domain;
        PyMem_SetAllocator(DOMAIN_OBJ, &hook);
        installed = 1;
    }
    tracking = 1;
    return Py_BuildValue("{s:n,s:d}", "table_bytes", (Py_ssize_t)table_bytes, "mean_bytes", mean_bytes);
}

static PyObject *
state_dict(void)
{
    return Py_BuildValue("{s:i,s:i,s:i,s:i,s:n,s:L,s:L,s:L,s:L,s:n,s:n,s:d,s:d,s:d}",
                         "installed", installed, "tracking", tracking, "expired", expired,
                         "unhook_refused", unhook_refused, "live", (Py_ssize_t)live,
                         "sampled", sampled_total, "allocated_bytes", consumed + interval - countdown, "dropped", dropped, "dropped_stacks", dropped_stacks,
                         "stacks", (Py_ssize_t)n_stacks, "table_bytes", (Py_ssize_t)table_bytes,
                         "seconds_left", tracking ? deadline - now_seconds() : 0.0, "mean_bytes", mean_bytes,
                         "seconds", started > 0 ? now_seconds() - started : 0.0);
}

PyObject *
sites_stop(PyObject *self, PyObject *unused)
{
    unhook();
    PyObject *out = state_dict();
    free_tables();
    return out;
}

PyObject *
sites_state(PyObject *self, PyObject *unused)
{
    return state_dict();
}

PyObject *
sites_ignore_thread(PyObject *self, PyObject *flag)
{
    int on = PyObject_IsTrue(flag);
    if (on < 0)
        return NULL;
    in_hook = on;
    Py_RETURN_NONE;
}

/* Notes from the graph's walk: which node the block of each surviving sample is part of. */
PyObject *
sites_noting_set(PyObject *self, PyObject *flag)
{
    int on = PyObject_IsTrue(flag);
    if (on < 0)
        return NULL;
    if (on && tracking) {
        for (size_t k = 0; k <= entries_mask; k++)
            entries[k].node = 0;
    }
    sites_noting = on && tracking;
    Py_RETURN_NONE;
}

static inline void
note_block(uintptr_t block, uintptr_t node, size_t within)
{
    Entry *e = entry_find(block);
    if (e != NULL && e->size > within)
        e->node = node;
}

/* Exact built-ins whose buffer is a block of its own: (type, offset of the pointer). The
 * layouts are the same on 3.10-3.13 (list.ob_item, dict.ma_keys, set.table, bytearray.ob_bytes). */
void
sites_note_slow(PyObject *op, uintptr_t node)
{
    uintptr_t at = (uintptr_t)op;
    if (live == 0)
        return;
    /* An object's block begins at the object (not gc-tracked), at its GC header (16 bytes
     * before), or before that at 3.11+'s pre-header of managed dict and weakref pointers. */
    note_block(at, node, 0);
    note_block(at - 16, node, 16);
    note_block(at - 32, node, 32);
    PyTypeObject *tp = Py_TYPE(op);
    Py_ssize_t buffer = -1;
    if (tp == &PyList_Type)
        buffer = 3 * (Py_ssize_t)sizeof(void *);
    else if (tp == &PyDict_Type)
        buffer = 4 * (Py_ssize_t)sizeof(void *);
    else if (tp == &PySet_Type || tp == &PyFrozenSet_Type)
        buffer = 5 * (Py_ssize_t)sizeof(void *);
    else if (tp == &PyByteArray_Type)
        buffer = 4 * (Py_ssize_t)sizeof(void *);
    if (buffer > 0) {
        uintptr_t block = *(uintptr_t *)((char *)op + buffer);
        if (block != 0)
            note_block(block, node, 0);
    }
}

void
sites_note_address(uintptr_t at, uintptr_t node)
{
    if (live == 0)
        return;
    note_block(at, node, 0);
    note_block(at - 16, node, 16);
}

/* The surviving samples: ([(address, bytes, stack, node)], [[(file, line, function)]], state). */
PyObject *
sites_read(PyObject *self, PyObject *unused)
{
    PyObject *samples = PyList_New(0), *out_stacks = PyList_New(0), *index = PyDict_New();
    PyObject *out = NULL;
    if (samples == NULL || out_stacks == NULL || index == NULL)
        goto done;
    /* Taken from the table before anything below allocates (an allocation may free a sample). */
    size_t n = 0;
    Entry *copy = NULL;
    if (tracking && live > 0) {
        copy = malloc(live * sizeof(Entry));
        if (copy == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        for (size_t k = 0; k <= entries_mask; k++)
            if (entries[k].ptr != EMPTY)
                copy[n++] = entries[k];
    }
    for (size_t i = 0; i < n; i++) {
        PyObject *key = PyLong_FromUnsignedLong(copy[i].stack);
        PyObject *known = key != NULL ? PyDict_GetItemWithError(index, key) : NULL;
        Py_ssize_t number;
        if (known != NULL) {
            number = PyLong_AsSsize_t(known);
        }
        else if (key == NULL || PyErr_Occurred()) {
            Py_XDECREF(key);
            free(copy);
            goto done;
        }
        else {
            Stack *s = &stacks[copy[i].stack];
            PyObject *stack = PyList_New(0);
            for (uint32_t j = 0; stack != NULL && j < s->depth; j++) {
                Frame *f = &frames[s->first + j];
                PyObject *file = PyObject_GetAttrString(f->code, "co_filename");
                PyObject *name = PyObject_GetAttrString(f->code, minor >= 11 ? "co_qualname" : "co_name");
                PyObject *row = file != NULL && name != NULL ? Py_BuildValue("(OiO)", file, f->line, name) : NULL;
                Py_XDECREF(file);
                Py_XDECREF(name);
                if (row == NULL || PyList_Append(stack, row) < 0) {
                    Py_XDECREF(row);
                    Py_CLEAR(stack);
                    break;
                }
                Py_DECREF(row);
            }
            number = PyList_Size(out_stacks);
            PyObject *value = PyLong_FromSsize_t(number);
            if (stack == NULL || value == NULL || PyList_Append(out_stacks, stack) < 0
                || PyDict_SetItem(index, key, value) < 0) {
                Py_XDECREF(stack);
                Py_XDECREF(value);
                Py_DECREF(key);
                free(copy);
                goto done;
            }
            Py_DECREF(stack);
            Py_DECREF(value);
        }
        Py_DECREF(key);
        PyObject *row = Py_BuildValue("(Knnk)", (unsigned long long)copy[i].ptr, (Py_ssize_t)copy[i].size, number,
                                      (unsigned long)copy[i].node);
        if (row == NULL || PyList_Append(samples, row) < 0) {
            Py_XDECREF(row);
            free(copy);
            goto done;
        }
        Py_DECREF(row);
    }
    free(copy);
    PyObject *state = state_dict();
    if (state != NULL)
        out = Py_BuildValue("(OON)", samples, out_stacks, state);
done:
    Py_XDECREF(samples);
    Py_XDECREF(out_stacks);
    Py_XDECREF(index);
    return out;
}

PyMethodDef sites_methods[] = {
    {"sites_start", sites_start, METH_VARARGS,
     "sites_start(mean_bytes, seconds, max_samples): hook the allocators and sample allocation stacks"},
    {"sites_stop", sites_stop, METH_NOARGS, "sites_stop(): put the allocators back; the tracker's last state"},
    {"sites_state", sites_state, METH_NOARGS, "sites_state(): the tracker's state"},
    {"sites_ignore_thread", sites_ignore_thread, METH_O,
     "sites_ignore_thread(flag): leave this thread's allocations unsampled"},
    {"sites_noting", sites_noting_set, METH_O,
     "sites_noting(flag): let the graph's walk note which node each sample is part of"},
    {"sites_read", sites_read, METH_NOARGS, "sites_read(): (samples, stacks, state)"},
    {NULL, NULL, 0, NULL},
};

#pragma GCC visibility pop
