/*
 * The census's inner walk in C: an optional accelerator for census_walk.ClaimWalk.claim_tree.
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
 *   - every other referent is marked; its size (sizes.object_size: sys.getsizeof when the
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
 * of objects would be 18 MB of stack in the target). The entries of a container read in parts
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
 */

#include "_walk.h"

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
"types: looked up anew at every call, they are most of the call's cost. The caches hold\n"
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
        /* an array of objects that owns its data, natively sized: its elements read here, in
         * slices (sizes.native_extra lists none of them: reads_elements) */
        ObjectArray array;
        long code = w->native != NULL && numpy_ndarray != NULL ? native_for(w, Py_TYPE(container)) : 0;
        if (code < 0)
            goto error;
        int sliced = is_big(container) || (code == 1 && object_array(container, &array));
        if (!sliced) {
            sliced = referents_of(w, container, r);  /* 1: its traverse too long to read whole */
            if (sliced < 0)
                goto error;
        }
        if (sliced) {
            /* Read in slices, in place (read_slice). */
            Frame *f = frame_push(&p, n - 1);
            if (f == NULL)
                goto error;
            f->cursor = container;  /* the frame's reference now */
            container = NULL;
            continue;
        }
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

#pragma GCC visibility push(hidden)
PyMethodDef census_walk_methods[] = {
    {"claim", claim, METH_VARARGS, claim_doc},
    {"session", session, METH_NOARGS, session_doc},
    {NULL, NULL, 0, NULL},
};
#pragma GCC visibility pop
