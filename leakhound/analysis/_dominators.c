/* The dominator tree of an object graph, in leakhound's own process (never in a target).
 *
 * dominators(n, src, dst, sizes) -> (idom, retained)
 *   n      number of nodes; node 0 is the super-root
 *   src    int32 bytes, dst int32 bytes: the edges (src[i] -> dst[i])
 *   sizes  int64 bytes of n sizes
 * returns two bytes objects: idom (int32 per node, the immediate dominator's node id; -1 for
 * the root and for nodes the root does not reach) and retained (int64 per node: the sum of
 * the sizes of the nodes it dominates, itself included; 0 where unreachable).
 *
 * Semi-NCA (Georgiadis' thesis; Lengauer-Tarjan's semidominators with path compression, then
 * immediate dominators as nearest common ancestors in the DFS tree): near-linear, all
 * iterative (object graphs have chains millions deep), int32 arrays only. The pure-Python
 * twin in dominators.py computes the same arrays.
 */
#define PY_SSIZE_T_CLEAN
#define Py_LIMITED_API 0x030A0000 /* one build, _dominators.abi3.so, for every CPython 3.10+ */
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int32_t i32;

static const char *get_bytes(PyObject *obj, Py_ssize_t itemsize, Py_ssize_t count, const char *what) {
    if (!PyBytes_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s: bytes expected", what);
        return NULL;
    }
    if (PyBytes_Size(obj) != itemsize * count) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes, expected %zd", what, PyBytes_Size(obj), itemsize * count);
        return NULL;
    }
    return PyBytes_AsString(obj);
}

/* Whether every one of ``count`` values lies in [lo, hi); else a ValueError "WHAT out of range". */
static int all_within(const i32 *values, Py_ssize_t count, Py_ssize_t lo, Py_ssize_t hi, const char *what) {
    for (Py_ssize_t i = 0; i < count; i++)
        if (values[i] < lo || values[i] >= hi) {
            PyErr_Format(PyExc_ValueError, "%s out of range", what);
            return 0;
        }
    return 1;
}

/* A counting sort of ``count`` items by their ``keys`` (each in [0, n)): ``ids`` the items in key
   order, ``off`` (n + 1 zeroed ints) where each key's run starts in it; ``pos``: n ints of scratch. */
static void group_by(const i32 *keys, Py_ssize_t count, Py_ssize_t n, i32 *off, i32 *ids, i32 *pos) {
    Py_ssize_t i;
    for (i = 0; i < count; i++)
        off[keys[i] + 1]++;
    for (i = 0; i < n; i++)
        off[i + 1] += off[i];
    memcpy(pos, off, n * 4);
    for (i = 0; i < count; i++)
        ids[pos[keys[i]]++] = (i32)i;
}

static PyObject *dominators(PyObject *self, PyObject *args) {
    Py_ssize_t n, m;
    PyObject *src_obj, *dst_obj, *sizes_obj;
    if (!PyArg_ParseTuple(args, "nnOOO", &n, &m, &src_obj, &dst_obj, &sizes_obj))
        return NULL;
    if (n < 1 || n >= INT32_MAX || m < 0) {
        PyErr_SetString(PyExc_ValueError, "bad node or edge count");
        return NULL;
    }
    const i32 *src = (const i32 *)get_bytes(src_obj, 4, m, "src");
    const i32 *dst = src ? (const i32 *)get_bytes(dst_obj, 4, m, "dst") : NULL;
    const int64_t *sizes = dst ? (const int64_t *)get_bytes(sizes_obj, 8, n, "sizes") : NULL;
    if (!sizes)
        return NULL;
    PyObject *idom_out = PyBytes_FromStringAndSize(NULL, n * 4);
    PyObject *ret_out = PyBytes_FromStringAndSize(NULL, n * 8);
    i32 *succ_off = calloc(n + 1, 4), *succ = malloc((m ? m : 1) * 4);
    i32 *pred_off = calloc(n + 1, 4), *pred = malloc((m ? m : 1) * 4);
    i32 *order = malloc(n * 4), *pre = malloc(n * 4), *parent = malloc(n * 4);
    i32 *semi = malloc(n * 4), *label = malloc(n * 4), *anc = malloc(n * 4), *idom = malloc(n * 4);
    i32 *stack = malloc(n * 4), *epos = malloc(n * 4);
    int64_t *ret = malloc(n * 8);
    char *idom_bytes = idom_out ? PyBytes_AsString(idom_out) : NULL;
    char *ret_bytes = ret_out ? PyBytes_AsString(ret_out) : NULL;
    int bad = 0;
    Py_ssize_t i;
    if (!idom_bytes || !ret_bytes || !succ_off || !succ || !pred_off || !pred || !order || !pre || !parent ||
        !semi || !label || !anc || !idom || !stack || !epos || !ret) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        bad = 1;
        goto done;
    }
    if (!all_within(src, m, 0, n, "edge") || !all_within(dst, m, 0, n, "edge")) {
        bad = 1;
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    /* CSR of successors and predecessors (counting sort, stable: edge order kept). */
    for (i = 0; i < m; i++) {
        succ_off[src[i] + 1]++;
        pred_off[dst[i] + 1]++;
    }
    for (i = 0; i < n; i++) {
        succ_off[i + 1] += succ_off[i];
        pred_off[i + 1] += pred_off[i];
    }
    memcpy(epos, succ_off, n * 4);
    for (i = 0; i < m; i++)
        succ[epos[src[i]]++] = dst[i];
    memcpy(epos, pred_off, n * 4);
    for (i = 0; i < m; i++)
        pred[epos[dst[i]]++] = src[i];
    /* Iterative DFS from node 0: preorder numbers (pre[node], order[number]). */
    for (i = 0; i < n; i++)
        pre[i] = -1;
    i32 count = 0, top = 0;
    pre[0] = count;
    order[count++] = 0;
    parent[0] = -1;
    stack[top++] = 0;
    memcpy(epos, succ_off, n * 4);
    while (top) {
        i32 v = stack[top - 1];
        if (epos[v] < succ_off[v + 1]) {
            i32 w = succ[epos[v]++];
            if (pre[w] < 0) {
                pre[w] = count;
                order[count] = w;
                parent[count] = pre[v];
                count++;
                stack[top++] = w;
            }
        } else {
            top--;
        }
    }
    /* Semidominators, in preorder numbers, with path compression (iterative). */
    for (i = 0; i < count; i++) {
        semi[i] = (i32)i;
        label[i] = (i32)i;
        anc[i] = -1;
    }
    for (i32 w = count - 1; w > 0; w--) {
        i32 node = order[w];
        i32 s = semi[w];
        for (i32 e = pred_off[node]; e < pred_off[node + 1]; e++) {
            i32 v = pre[pred[e]];
            if (v < 0)
                continue; /* a predecessor the root does not reach */
            i32 u = v;
            if (anc[v] >= 0) {
                /* compress(v): climb while the ancestor is itself linked, then unwind */
                i32 depth = 0, x = v;
                while (anc[anc[x]] >= 0) {
                    stack[depth++] = x;
                    x = anc[x];
                }
                while (depth) {
                    x = stack[--depth];
                    i32 a = anc[x];
                    if (semi[label[a]] < semi[label[x]])
                        label[x] = label[a];
                    anc[x] = anc[a];
                }
                u = label[v];
            }
            if (semi[u] < s)
                s = semi[u];
        }
        semi[w] = s;
        anc[w] = parent[w];
    }
    /* Immediate dominators: the nearest common ancestor of parent and semidominator. */
    idom[0] = 0;
    for (i32 w = 1; w < count; w++) {
        i32 d = parent[w];
        while (d > semi[w])
            d = idom[d];
        idom[w] = d;
    }
    /* Retained sizes: children before parents (reverse preorder). */
    for (i32 w = 0; w < count; w++)
        ret[w] = sizes[order[w]];
    for (i32 w = count - 1; w > 0; w--)
        ret[idom[w]] += ret[w];
    {
        i32 *idom_node = (i32 *)idom_bytes;
        int64_t *ret_node = (int64_t *)ret_bytes;
        for (i = 0; i < n; i++) {
            idom_node[i] = -1;
            ret_node[i] = 0;
        }
        for (i32 w = 1; w < count; w++)
            idom_node[order[w]] = order[idom[w]];
        for (i32 w = 0; w < count; w++)
            ret_node[order[w]] = ret[w];
    }
    Py_END_ALLOW_THREADS
done:
    free(succ_off); free(succ); free(pred_off); free(pred); free(order); free(pre); free(parent);
    free(semi); free(label); free(anc); free(idom); free(stack); free(epos); free(ret);
    if (bad) {
        Py_XDECREF(idom_out);
        Py_XDECREF(ret_out);
        return NULL;
    }
    return Py_BuildValue("(NN)", idom_out, ret_out);
}


/* ---- naming: cheapest paths from the roots ------------------------------------------------
 *
 * paths(n, m, src, dst, types, lab, type_back, label_back, roots, root_dist, blocked, back_cost, targets,
 *       named_cost, unnamed_cost, pass_cost)
 *   types int32 per node, lab int32 per edge (-1: none), type_back one byte per type (1: a
 *   back-reference), label_back one byte per label (1: a back-reference, 2: no name, a local
 *   named by its type, 3: a step a name passes through: an instance's __dict__), roots int32 per root (node), root_dist
 *   int64 per root, blocked one byte per node (1: never entered by an edge: a root)
 * returns (via int32 per node: the edge it is best reached by, -1 for roots and unreached;
 *          root_of int32 per node: the index of its root, -1 unreached)
 * Dijkstra with a binary heap of (distance, node); an edge costs back_cost when it leaves a
 * back-reference type or carries a back-reference label, unnamed_cost when it has no name (no
 * label: a container's entry; a label of kind 2), pass_cost for kind 3, else named_cost (of
 * two paths as long, the one with fewer unnamed steps). ``targets``: one byte per
 * node (1: its path is wanted), or empty for all: the search stops once every target is
 * settled (a path's nodes settle before its end, so their ``via`` is final too).
 */
typedef struct { int64_t dist; i32 node; i32 root; } entry;

static void heap_push(entry *h, Py_ssize_t *len, entry x) {
    Py_ssize_t i = (*len)++;
    while (i > 0) {
        Py_ssize_t p = (i - 1) / 2;
        if (h[p].dist < x.dist || (h[p].dist == x.dist && h[p].root <= x.root))
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static entry heap_pop(entry *h, Py_ssize_t *len) {
    entry top = h[0], x = h[--(*len)];
    Py_ssize_t i = 0, n = *len;
    for (;;) {
        Py_ssize_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && (h[c + 1].dist < h[c].dist || (h[c + 1].dist == h[c].dist && h[c + 1].root < h[c].root)))
            c++;
        if (x.dist < h[c].dist || (x.dist == h[c].dist && x.root <= h[c].root))
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
    return top;
}

static PyObject *paths(PyObject *self, PyObject *args) {
    Py_ssize_t n, m, ntypes, nlabels, nroots;
    long long back_cost, named_cost = 1, unnamed_cost = 1, pass_cost = 1;
    PyObject *src_o, *dst_o, *types_o, *lab_o, *tc_o, *lc_o, *roots_o, *rd_o, *blocked_o, *targets_o;
    if (!PyArg_ParseTuple(args, "nnOOOOOOOOOLO|LLL", &n, &m, &src_o, &dst_o, &types_o, &lab_o, &tc_o, &lc_o, &roots_o,
                          &rd_o, &blocked_o, &back_cost, &targets_o, &named_cost, &unnamed_cost,
                          &pass_cost))
        return NULL;
    if (n < 1 || n >= INT32_MAX || m < 0 || !PyBytes_Check(tc_o) || !PyBytes_Check(lc_o) || !PyBytes_Check(roots_o)) {
        PyErr_SetString(PyExc_ValueError, "bad arguments");
        return NULL;
    }
    ntypes = PyBytes_Size(tc_o);
    nlabels = PyBytes_Size(lc_o);
    nroots = PyBytes_Size(roots_o) / 4;
    const i32 *src = (const i32 *)get_bytes(src_o, 4, m, "src");
    const i32 *dst = src ? (const i32 *)get_bytes(dst_o, 4, m, "dst") : NULL;
    const i32 *types = dst ? (const i32 *)get_bytes(types_o, 4, n, "types") : NULL;
    const i32 *lab = types ? (const i32 *)get_bytes(lab_o, 4, m, "lab") : NULL;
    const i32 *roots = lab ? (const i32 *)get_bytes(roots_o, 4, nroots, "roots") : NULL;
    const int64_t *root_dist = roots ? (const int64_t *)get_bytes(rd_o, 8, nroots, "root_dist") : NULL;
    const unsigned char *blocked = root_dist ? (const unsigned char *)get_bytes(blocked_o, 1, n, "blocked") : NULL;
    if (!blocked)
        return NULL;
    const unsigned char *targets = NULL;
    if (!PyBytes_Check(targets_o) || (PyBytes_Size(targets_o) && PyBytes_Size(targets_o) != n)) {
        PyErr_SetString(PyExc_ValueError, "targets: bytes, one per node or none");
        return NULL;
    }
    Py_ssize_t wanted = 0;
    if (PyBytes_Size(targets_o)) {
        targets = (const unsigned char *)PyBytes_AsString(targets_o);
        for (Py_ssize_t t = 0; t < n; t++)
            wanted += targets[t] != 0;
    }
    const unsigned char *tc = (const unsigned char *)PyBytes_AsString(tc_o);
    const unsigned char *lc = (const unsigned char *)PyBytes_AsString(lc_o);
    Py_ssize_t i;
    if (!all_within(src, m, 0, n, "edge") || !all_within(dst, m, 0, n, "edge")
            || !all_within(lab, m, INT32_MIN, nlabels, "edge") || !all_within(types, n, 0, ntypes, "type")
            || !all_within(roots, nroots, 0, n, "root"))
        return NULL;
    PyObject *via_out = PyBytes_FromStringAndSize(NULL, n * 4);
    PyObject *root_out = PyBytes_FromStringAndSize(NULL, n * 4);
    i32 *off = calloc(n + 1, 4), *ids = malloc((m ? m : 1) * 4), *pos = malloc(n * 4);
    int64_t *best = malloc(n * 8);
    unsigned char *done = calloc(n, 1);
    entry *heap = malloc((m + nroots + 1) * sizeof(entry));
    if (!via_out || !root_out || !off || !ids || !pos || !best || !done || !heap) {
        free(off); free(ids); free(pos); free(best); free(done); free(heap);
        Py_XDECREF(via_out);
        Py_XDECREF(root_out);
        return PyErr_NoMemory();
    }
    i32 *via = (i32 *)PyBytes_AsString(via_out), *root_of = (i32 *)PyBytes_AsString(root_out);
    Py_BEGIN_ALLOW_THREADS
    group_by(src, m, n, off, ids, pos);
    for (i = 0; i < n; i++) {
        best[i] = -1;
        via[i] = -1;
        root_of[i] = -1;
    }
    Py_ssize_t len = 0;
    for (i = 0; i < nroots; i++) {
        i32 v = roots[i];
        if (best[v] < 0 || root_dist[i] < best[v]) {
            best[v] = root_dist[i];
            root_of[v] = (i32)i;
            entry x = {root_dist[i], v, (i32)i};
            heap_push(heap, &len, x);
        }
    }
    while (len) {
        entry x = heap_pop(heap, &len);
        i32 v = x.node;
        if (done[v] || x.dist > best[v])
            continue;
        done[v] = 1;
        if (targets && targets[v] && --wanted == 0)
            break;
        int out = tc[types[v]];
        for (i32 k = off[v]; k < off[v + 1]; k++) {
            i32 e = ids[k], w = dst[e];
            if (done[w] || blocked[w])
                continue;
            int kind = lab[e] >= 0 ? lc[lab[e]] : 2;
            int64_t d = x.dist + ((out || kind == 1) ? back_cost : kind == 2 ? unnamed_cost
                                  : kind == 3 ? pass_cost : named_cost);
            if (best[w] < 0 || d < best[w]) {
                best[w] = d;
                via[w] = e;
                root_of[w] = root_of[v];
                entry y = {d, w, root_of[v]};
                heap_push(heap, &len, y);
            }
        }
    }
    Py_END_ALLOW_THREADS
    free(off); free(ids); free(pos); free(best); free(done); free(heap);
    return Py_BuildValue("(NN)", via_out, root_out);
}

/* tree(n, idom, retained) -> (offsets int32 n + 1, children int32, dominated int64 per node)
 * The dominator tree as CSR, each node's children by retained size (biggest first), and the
 * number of nodes each dominates (itself included). */
/* A child and its retained size, sorted by size (biggest first), then id (the order they
 * come in: ascending ids, kept by a stable sort). */
typedef struct { int64_t ret; i32 id; } kid;

static inline int kid_before(const kid *a, const kid *b) {
    return a->ret > b->ret || (a->ret == b->ret && a->id < b->id);
}

/* ``k[0:n]`` sorted (``tmp``: room for n): insertion sort for short runs, then bottom-up
 * merges; no comparator calls and the sizes beside the ids (qsort through a callback that
 * looked each size up was half of tree() on a 1.5M-node tree). */
static void kids_sort(kid *k, kid *tmp, i32 n) {
    const i32 run = 16;
    for (i32 lo = 0; lo < n; lo += run) {
        i32 hi = lo + run < n ? lo + run : n;
        for (i32 i = lo + 1; i < hi; i++) {
            kid x = k[i];
            i32 j = i - 1;
            while (j >= lo && kid_before(&x, &k[j])) {
                k[j + 1] = k[j];
                j--;
            }
            k[j + 1] = x;
        }
    }
    kid *from = k, *to = tmp;
    for (i32 width = run; width < n; width *= 2) {
        for (i32 lo = 0; lo < n; lo += 2 * width) {
            i32 mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
            i32 a = lo, b = mid, o = lo;
            while (a < mid && b < hi)
                to[o++] = kid_before(&from[b], &from[a]) ? from[b++] : from[a++];
            while (a < mid)
                to[o++] = from[a++];
            while (b < hi)
                to[o++] = from[b++];
        }
        kid *t = from;
        from = to;
        to = t;
    }
    if (from != k)
        memcpy(k, from, (size_t)n * sizeof(kid));
}

static PyObject *tree(PyObject *self, PyObject *args) {
    Py_ssize_t n;
    PyObject *idom_o, *ret_o;
    if (!PyArg_ParseTuple(args, "nOO", &n, &idom_o, &ret_o))
        return NULL;
    if (n < 1 || n >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "bad node count");
        return NULL;
    }
    const i32 *idom = (const i32 *)get_bytes(idom_o, 4, n, "idom");
    const int64_t *ret = idom ? (const int64_t *)get_bytes(ret_o, 8, n, "retained") : NULL;
    if (!ret)
        return NULL;
    Py_ssize_t i;
    if (!all_within(idom, n, -1, n, "idom"))
        return NULL;
    PyObject *off_o = PyBytes_FromStringAndSize(NULL, (n + 1) * 4);
    PyObject *kids_o = PyBytes_FromStringAndSize(NULL, n * 4);
    PyObject *count_o = PyBytes_FromStringAndSize(NULL, n * 8);
    i32 *pos = malloc(n * 4), *order = malloc(n * 4);
    if (!off_o || !kids_o || !count_o || !pos || !order) {
        free(pos); free(order);
        Py_XDECREF(off_o); Py_XDECREF(kids_o); Py_XDECREF(count_o);
        return PyErr_NoMemory();
    }
    i32 *off = (i32 *)PyBytes_AsString(off_o), *kids = (i32 *)PyBytes_AsString(kids_o);
    int64_t *count = (int64_t *)PyBytes_AsString(count_o);
    kid *pairs = NULL, *spare = NULL;  /* room for the longest list of children */
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    memset(off, 0, (n + 1) * 4);
    memset(kids, 0xff, n * 4);
    for (i = 1; i < n; i++)
        if (idom[i] >= 0)
            off[idom[i] + 1]++;
    for (i = 0; i < n; i++)
        off[i + 1] += off[i];
    memcpy(pos, off, n * 4);
    for (i = 1; i < n; i++)
        if (idom[i] >= 0)
            kids[pos[idom[i]]++] = (i32)i;
    i32 longest = 0;
    for (i = 0; i < n; i++)
        if (off[i + 1] - off[i] > longest)
            longest = off[i + 1] - off[i];
    pairs = malloc((size_t)(longest ? longest : 1) * sizeof(kid));
    spare = malloc((size_t)(longest ? longest : 1) * sizeof(kid));
    failed = !pairs || !spare;
    for (i = 0; i < n && !failed; i++) {
        i32 a = off[i], b = off[i + 1];
        if (b - a < 2)
            continue;
        for (i32 k = a; k < b; k++) {
            pairs[k - a].ret = ret[kids[k]];
            pairs[k - a].id = kids[k];
        }
        kids_sort(pairs, spare, b - a);
        for (i32 k = a; k < b; k++)
            kids[k] = pairs[k - a].id;
    }
    /* preorder from node 0, then counts children before parents */
    i32 top = 0, count_order = 0;
    pos[top++] = 0;
    while (top) {
        i32 v = pos[--top];
        order[count_order++] = v;
        for (i32 k = off[v]; k < off[v + 1]; k++)
            pos[top++] = kids[k];
    }
    for (i = 0; i < n; i++)
        count[i] = 1;
    for (i32 k = count_order - 1; k > 0; k--)
        count[idom[order[k]]] += count[order[k]];
    Py_END_ALLOW_THREADS
    free(pos); free(order); free(pairs); free(spare);
    if (failed) {
        Py_DECREF(off_o); Py_DECREF(kids_o); Py_DECREF(count_o);
        return PyErr_NoMemory();
    }
    return Py_BuildValue("(NNN)", off_o, kids_o, count_o);
}

/* csr(n, m, keys) -> (offsets int32 n + 1, edge ids int32 m): the edges grouped by key
 * (src: out-edges, dst: in-edges), each group in edge order. */
static PyObject *csr(PyObject *self, PyObject *args) {
    Py_ssize_t n, m;
    PyObject *keys_o;
    if (!PyArg_ParseTuple(args, "nnO", &n, &m, &keys_o))
        return NULL;
    if (n < 1 || n >= INT32_MAX || m < 0 || m >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "bad counts");
        return NULL;
    }
    const i32 *keys = (const i32 *)get_bytes(keys_o, 4, m, "keys");
    if (!keys)
        return NULL;
    if (!all_within(keys, m, 0, n, "key"))
        return NULL;
    PyObject *off_o = PyBytes_FromStringAndSize(NULL, (n + 1) * 4);
    PyObject *ids_o = PyBytes_FromStringAndSize(NULL, (m ? m : 1) * 4);
    i32 *pos = malloc(n * 4);
    if (!off_o || !ids_o || !pos) {
        free(pos);
        Py_XDECREF(off_o); Py_XDECREF(ids_o);
        return PyErr_NoMemory();
    }
    i32 *off = (i32 *)PyBytes_AsString(off_o), *ids = (i32 *)PyBytes_AsString(ids_o);
    memset(off, 0, (n + 1) * 4);
    group_by(keys, m, n, off, ids, pos);
    free(pos);
    if (!m) { /* one spare int for malloc's sake: hand back no ids */
        Py_DECREF(ids_o);
        ids_o = PyBytes_FromStringAndSize(NULL, 0);
        if (!ids_o) {
            Py_DECREF(off_o);
            return NULL;
        }
    }
    return Py_BuildValue("(NN)", off_o, ids_o);
}

/* soft(n, m, src, dst, lab, soft_roots[, yielding_roots]) -> (src, dst, lab): the edges without
 * those from what only soft roots (threads' frames, objects held from C) reach into what the
 * other roots reach; a yielding root (a class, a signal handler) is soft until the other roots
 * reach it, then no root at all. A soft root then dominates only what nothing else holds: a function iterating over a
 * registry (a list of its entries in a local) does not take the registry's entries from it
 * (passes.py soften: why objects held from C are soft too). A soft root is soft however it
 * is reached: a running generator's frame links to its caller's (f_back). */
static PyObject *soft(PyObject *self, PyObject *args) {
    Py_ssize_t n, m, nsoft, nyield, i;
    PyObject *src_o, *dst_o, *lab_o, *soft_o, *yield_o = NULL;
    if (!PyArg_ParseTuple(args, "nnOOOO|O", &n, &m, &src_o, &dst_o, &lab_o, &soft_o, &yield_o))
        return NULL;
    if (n < 1 || n >= INT32_MAX || m < 0 || !PyBytes_Check(soft_o) || (yield_o && !PyBytes_Check(yield_o))) {
        PyErr_SetString(PyExc_ValueError, "bad arguments");
        return NULL;
    }
    nsoft = PyBytes_Size(soft_o) / 4;
    nyield = yield_o ? PyBytes_Size(yield_o) / 4 : 0;
    const i32 *yields = yield_o ? (const i32 *)PyBytes_AsString(yield_o) : NULL;
    if (yields && !all_within(yields, nyield, 0, n, "root"))
        return NULL;
    const i32 *src = (const i32 *)get_bytes(src_o, 4, m, "src");
    const i32 *dst = src ? (const i32 *)get_bytes(dst_o, 4, m, "dst") : NULL;
    const i32 *lab = dst ? (const i32 *)get_bytes(lab_o, 4, m, "lab") : NULL;
    const i32 *softs = lab ? (const i32 *)get_bytes(soft_o, 4, nsoft, "soft_roots") : NULL;
    if (!softs)
        return NULL;
    if (!all_within(src, m, 0, n, "edge") || !all_within(dst, m, 0, n, "edge")
            || !all_within(softs, nsoft, 0, n, "root"))
        return NULL;
    unsigned char *is_soft = calloc(n, 1), *hard = calloc(n, 1);
    i32 *off = calloc(n + 1, 4), *ids = malloc((m ? m : 1) * 4), *pos = malloc(n * 4), *stack = malloc(n * 4);
    if (!is_soft || !hard || !off || !ids || !pos || !stack) {
        free(is_soft); free(hard); free(off); free(ids); free(pos); free(stack);
        return PyErr_NoMemory();
    }
    for (i = 0; i < nsoft; i++)
        is_soft[softs[i]] = 1;
    for (i = 0; i < nyield; i++)
        is_soft[yields[i]] = 3;  /* soft until something named holds it */
    group_by(src, m, n, off, ids, pos);
    /* what the hard roots reach: from node 0, not through a soft root */
    i32 top = 0;
    hard[0] = 1;
    stack[top++] = 0;
    while (top) {
        i32 v = stack[--top];
        for (i32 k = off[v]; k < off[v + 1]; k++) {
            i32 w = dst[ids[k]];
            if (is_soft[w] == 3 && v != 0)
                is_soft[w] = 2;  /* a yielding root something named holds: an object like any other */
            if (hard[w] || (is_soft[w] && is_soft[w] != 2))
                continue;
            hard[w] = 1;
            stack[top++] = w;
        }
    }
    /* kept: edges from what the hard roots reach, and edges into what they do not; but not the
     * super-root's edge to a yielding root they reach (a class its module or a list holds): that
     * one is an object like any other, held by what holds it, and walked as one */
#define SOFT_KEPT(i) ((hard[src[i]] || !hard[dst[i]]) && !(src[i] == 0 && is_soft[dst[i]] == 2))
    Py_ssize_t kept = 0;
    for (i = 0; i < m; i++)
        if (SOFT_KEPT(i))
            kept++;
    PyObject *s2 = PyBytes_FromStringAndSize(NULL, kept * 4), *d2 = PyBytes_FromStringAndSize(NULL, kept * 4);
    PyObject *l2 = PyBytes_FromStringAndSize(NULL, kept * 4);
    if (s2 && d2 && l2) {
        i32 *a = (i32 *)PyBytes_AsString(s2), *b = (i32 *)PyBytes_AsString(d2), *c = (i32 *)PyBytes_AsString(l2);
        Py_ssize_t k = 0;
        for (i = 0; i < m; i++)
            if (SOFT_KEPT(i)) {
                a[k] = src[i];
                b[k] = dst[i];
                c[k] = lab[i];
                k++;
            }
    }
    free(is_soft); free(hard); free(off); free(ids); free(pos); free(stack);
    if (!s2 || !d2 || !l2) {
        Py_XDECREF(s2); Py_XDECREF(d2); Py_XDECREF(l2);
        return NULL;
    }
    return Py_BuildValue("(NNN)", s2, d2, l2);
}

/* -- the graph's records as they come (leakhound.graph/4): frames (two native uint32: column
 * code, items; then the items) read from the target's graph.bin while its walk still runs,
 * fed in any pieces (a frame may be cut anywhere). With nodes named by address (the compiled
 * walk: edge columns 7 and 8), a node's first record gives it its id, a later one replaces
 * its size, type and entries (a root walked after it was made); an edge's ends are looked up
 * as soon as both have a record, the others again at the end; an edge with an end that never
 * had a record is left out. The ids, and the edges' order, are those a reading of the whole
 * file at once gives (the pure-Python twin in dominators/graph.py: ``Records``). With nodes
 * named by id (the Python walk), the columns are only gathered. */

#define FRAME_COLUMNS 11
#define COL_IDS 0
#define COL_SIZES 1
#define COL_TYPES 2
#define COL_LENGTHS 3
#define COL_SRC_ID 4
#define COL_DST_ID 5
#define COL_LABEL 6
#define COL_SRC_ADDRESS 7
#define COL_DST_ADDRESS 8
/* (a node's address, bytes): what the walk folded into that node, added to its size */
#define COL_FOLD_ADDRESS 9
#define COL_FOLD_BYTES 10
static const int column_item_bytes[FRAME_COLUMNS] = {8, 8, 4, 4, 4, 4, 4, 8, 8, 8, 8};

typedef struct {
    char *data;
    size_t len, cap;
} buf;

static int buf_reserve(buf *b, size_t more) {
    if (b->len + more <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more)
        cap *= 2;
    char *data = realloc(b->data, cap);
    if (!data)
        return -1;
    b->data = data;
    b->cap = cap;
    return 0;
}

static int buf_append(buf *b, const char *at, size_t n) {
    if (buf_reserve(b, n) < 0)
        return -1;
    memcpy(b->data + b->len, at, n);
    b->len += n;
    return 0;
}

/* Open addressing, key and id side by side (one cache line a probe), filled at most half;
 * lookups prefetched a few records ahead (the addresses come in no useful order). */
typedef struct {
    uint64_t key;
    i32 id; /* -1: empty */
    i32 unused;
} addr_entry;

typedef struct {
    addr_entry *slots;
    size_t mask, used;
} addr_table;

static inline size_t addr_home(const addr_table *t, uint64_t address) {
    /* Fibonacci hashing: every bit of the address mixed in (a hash near the identity made
     * probe runs thousands long on a real worker's heap: 4-10 s to resolve, seen) */
    return (size_t)(((address >> 4) * 0x9E3779B97F4A7C15ULL) >> 32) & t->mask;
}

static inline size_t addr_slot(const addr_table *t, uint64_t address) {
    size_t k = addr_home(t, address);
    while (t->slots[k].id >= 0 && t->slots[k].key != address)
        k = (k + 1) & t->mask;
    return k;
}

static inline i32 addr_lookup(const addr_table *t, uint64_t address) {
    return t->slots[addr_slot(t, address)].id;
}

/* Room for ``more`` keys at most half full: the table doubled and refilled when needed. */
static int addr_reserve(addr_table *t, size_t more) {
    size_t cap = t->slots ? t->mask + 1 : 0;
    if ((t->used + more) * 2 <= cap)
        return 0;
    size_t want = cap ? cap : 1 << 16;
    while ((t->used + more) * 2 > want)
        want <<= 1;
    addr_entry *slots = malloc(want * sizeof(addr_entry));
    if (!slots)
        return -1;
    memset(slots, 0xFF, want * sizeof(addr_entry));
    addr_table bigger = {slots, want - 1, t->used};
    for (size_t k = 0; k < cap; k++)
        if (t->slots[k].id >= 0)
            slots[addr_slot(&bigger, t->slots[k].key)] = t->slots[k];
    free(t->slots);
    *t = bigger;
    return 0;
}

#define ADDR_AHEAD 12
#define RECORDS_NAME "leakhound._dominators.records"

typedef struct {
    buf col[FRAME_COLUMNS]; /* the items of each column as they came */
    buf carry;              /* the start of a frame cut off at the end of a piece */
    int by_address;         /* edge columns 7/8 seen: nodes are named by address */
    size_t nodes_in;        /* node records taken into the table */
    size_t edges_in;        /* edge records looked up once */
    addr_table t;
    /* by address: node id -> address, size, type, entries; per edge record its ends' ids
     * (-1: not known yet) and its label */
    buf o_ids, o_sizes, o_types, o_lengths, o_src, o_dst;
    size_t nodes;
    /* The edge records with an end unknown when looked up (uint32 indices, in order), looked
     * up again as the nodes come in (records_retry): an edge from a container to what it
     * holds comes before the record of what it holds (made when that one's walk is done),
     * and looking them all up at the end was most of the time left after the walk. */
    buf pend;
    size_t nodes_at_retry;
} records;

static void records_free(PyObject *capsule) {
    records *r = PyCapsule_GetPointer(capsule, RECORDS_NAME);
    if (!r)
        return;
    for (int c = 0; c < FRAME_COLUMNS; c++)
        free(r->col[c].data);
    free(r->carry.data); free(r->t.slots);
    free(r->o_ids.data); free(r->o_sizes.data); free(r->o_types.data); free(r->o_lengths.data);
    free(r->o_src.data); free(r->o_dst.data); free(r->pend.data);
    free(r);
}

static records *records_of(PyObject *capsule) {
    return PyCapsule_GetPointer(capsule, RECORDS_NAME);
}

static PyObject *records_new(PyObject *self, PyObject *args) {
    records *r = calloc(1, sizeof(records));
    if (!r)
        return PyErr_NoMemory();
    PyObject *capsule = PyCapsule_New(r, RECORDS_NAME, records_free);
    if (!capsule)
        free(r);
    return capsule;
}

/* The node records not taken yet (all four columns in): each address's first gives its id. */
static int records_take_nodes(records *r) {
    size_t k = r->col[COL_IDS].len / 8;
    if (r->col[COL_SIZES].len / 8 < k) k = r->col[COL_SIZES].len / 8;
    if (r->col[COL_TYPES].len / 4 < k) k = r->col[COL_TYPES].len / 4;
    if (r->col[COL_LENGTHS].len / 4 < k) k = r->col[COL_LENGTHS].len / 4;
    if (k <= r->nodes_in)
        return 0;
    size_t more = k - r->nodes_in;
    if (addr_reserve(&r->t, more) < 0 || buf_reserve(&r->o_ids, more * 8) < 0 || buf_reserve(&r->o_sizes, more * 8) < 0
        || buf_reserve(&r->o_types, more * 4) < 0 || buf_reserve(&r->o_lengths, more * 4) < 0)
        return -1;
    const uint64_t *ids = (const uint64_t *)r->col[COL_IDS].data;
    const int64_t *sizes = (const int64_t *)r->col[COL_SIZES].data;
    const i32 *types = (const i32 *)r->col[COL_TYPES].data, *lengths = (const i32 *)r->col[COL_LENGTHS].data;
    addr_table *t = &r->t;
    for (size_t i = r->nodes_in; i < k; i++) {
        if (i + ADDR_AHEAD < k)
            __builtin_prefetch(&t->slots[addr_home(t, ids[i + ADDR_AHEAD])], 1);
        size_t slot = addr_slot(t, ids[i]);
        i32 id = t->slots[slot].id;
        if (id < 0) {
            id = (i32)r->nodes++;
            t->slots[slot].key = ids[i];
            t->slots[slot].id = id;
            t->used++;
            ((int64_t *)r->o_ids.data)[id] = (int64_t)ids[i];
        }
        ((int64_t *)r->o_sizes.data)[id] = sizes[i];
        ((i32 *)r->o_types.data)[id] = types[i];
        ((i32 *)r->o_lengths.data)[id] = lengths[i];
    }
    r->o_ids.len = r->o_sizes.len = r->nodes * 8;
    r->o_types.len = r->o_lengths.len = r->nodes * 4;
    r->nodes_in = k;
    return 0;
}

/* The edge records not looked up yet (both address columns in): their ends' ids, -1 for an
 * end without a record so far (looked up again at the end). */
static int records_take_edges(records *r) {
    size_t m = r->col[COL_SRC_ADDRESS].len / 8;
    if (r->col[COL_DST_ADDRESS].len / 8 < m)
        m = r->col[COL_DST_ADDRESS].len / 8;
    if (m <= r->edges_in)
        return 0;
    size_t more = m - r->edges_in;
    if (buf_reserve(&r->o_src, more * 4) < 0 || buf_reserve(&r->o_dst, more * 4) < 0)
        return -1;
    const uint64_t *src = (const uint64_t *)r->col[COL_SRC_ADDRESS].data;
    const uint64_t *dst = (const uint64_t *)r->col[COL_DST_ADDRESS].data;
    i32 *a = (i32 *)r->o_src.data, *b = (i32 *)r->o_dst.data;
    const addr_table *t = &r->t;
    if (m > UINT32_MAX || buf_reserve(&r->pend, more * 4) < 0)
        return -1;
    uint32_t *pend = (uint32_t *)r->pend.data;
    size_t np = r->pend.len / 4;
    if (!t->slots) {
        memset(a + r->edges_in, 0xFF, more * 4);
        memset(b + r->edges_in, 0xFF, more * 4);
        for (size_t i = r->edges_in; i < m; i++)
            pend[np++] = (uint32_t)i;
    } else {
        for (size_t i = r->edges_in; i < m; i++) {
            if (i + ADDR_AHEAD < m) {
                __builtin_prefetch(&t->slots[addr_home(t, src[i + ADDR_AHEAD])], 0);
                __builtin_prefetch(&t->slots[addr_home(t, dst[i + ADDR_AHEAD])], 0);
            }
            a[i] = addr_lookup(t, src[i]);
            b[i] = addr_lookup(t, dst[i]);
            if (a[i] < 0 || b[i] < 0)
                pend[np++] = (uint32_t)i;
        }
    }
    r->pend.len = np * 4;
    r->o_src.len = r->o_dst.len = m * 4;
    r->edges_in = m;
    return 0;
}

/* The pending edges' unknown ends looked up again; the ones still unknown stay pending. */
static void records_retry(records *r) {
    const addr_table *t = &r->t;
    if (!t->slots)
        return;
    const uint64_t *src = (const uint64_t *)r->col[COL_SRC_ADDRESS].data;
    const uint64_t *dst = (const uint64_t *)r->col[COL_DST_ADDRESS].data;
    i32 *a = (i32 *)r->o_src.data, *b = (i32 *)r->o_dst.data;
    uint32_t *pend = (uint32_t *)r->pend.data;
    size_t np = r->pend.len / 4, kept = 0;
    for (size_t k = 0; k < np; k++) {
        if (k + ADDR_AHEAD < np) {
            uint32_t j = pend[k + ADDR_AHEAD];
            __builtin_prefetch(&t->slots[addr_home(t, a[j] < 0 ? src[j] : dst[j])], 0);
        }
        uint32_t i = pend[k];
        if (a[i] < 0)
            a[i] = addr_lookup(t, src[i]);
        if (b[i] < 0)
            b[i] = addr_lookup(t, dst[i]);
        if (a[i] < 0 || b[i] < 0)
            pend[kept++] = i;
    }
    r->pend.len = kept * 4;
    r->nodes_at_retry = r->nodes;
}

/* records_feed(records, piece) -> None: the frames in ``piece`` (bytes), taken in. */
static PyObject *records_feed(PyObject *self, PyObject *args) {
    PyObject *capsule;
    const char *piece;
    Py_ssize_t len;
    if (!PyArg_ParseTuple(args, "Oy#", &capsule, &piece, &len))
        return NULL;
    records *r = records_of(capsule);
    if (!r)
        return NULL;
    const char *error = NULL;
    Py_BEGIN_ALLOW_THREADS
    const char *at = piece, *end = piece + len;
    while (r->carry.len && !error) { /* a frame cut at the end of the last piece, completed */
        size_t need = 8;
        if (r->carry.len >= 8) {
            uint32_t head[2];
            memcpy(head, r->carry.data, 8);
            if (head[0] >= FRAME_COLUMNS) {
                error = "unknown graph column";
                break;
            }
            need = 8 + (size_t)head[1] * (size_t)column_item_bytes[head[0]];
            if (r->carry.len >= need) {
                if (buf_append(&r->col[head[0]], r->carry.data + 8, need - 8) < 0)
                    error = "out of memory";
                r->carry.len = 0;
                break;
            }
        }
        if (at == end)
            break;
        size_t take = need - r->carry.len;
        if (take > (size_t)(end - at))
            take = (size_t)(end - at);
        if (buf_append(&r->carry, at, take) < 0)
            error = "out of memory";
        at += take;
    }
    while (!error && !r->carry.len && at < end) {
        uint32_t head[2];
        if (end - at < 8) {
            if (buf_append(&r->carry, at, (size_t)(end - at)) < 0)
                error = "out of memory";
            break;
        }
        memcpy(head, at, 8);
        if (head[0] >= FRAME_COLUMNS) {
            error = "unknown graph column";
            break;
        }
        size_t bytes = (size_t)head[1] * (size_t)column_item_bytes[head[0]];
        if ((size_t)(end - at) - 8 < bytes) {
            if (buf_append(&r->carry, at, (size_t)(end - at)) < 0)
                error = "out of memory";
            break;
        }
        if (buf_append(&r->col[head[0]], at + 8, bytes) < 0) {
            error = "out of memory";
            break;
        }
        at += 8 + bytes;
    }
    if (!error && (r->col[COL_SRC_ADDRESS].len || r->col[COL_DST_ADDRESS].len))
        r->by_address = 1;
    if (!error && r->by_address && (records_take_nodes(r) < 0 || records_take_edges(r) < 0))
        error = "out of memory";
    /* Again once the nodes have grown by a quarter: each pending edge is looked at a few
     * times at most, while the target walks (this runs on leakhound's own core). */
    if (!error && r->by_address && r->nodes >= r->nodes_at_retry + r->nodes_at_retry / 4 + 65536)
        records_retry(r);
    Py_END_ALLOW_THREADS
    if (error) {
        if (error[0] == 'o')
            return PyErr_NoMemory();
        PyErr_SetString(PyExc_ValueError, error);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *buf_bytes(const buf *b) {
    return PyBytes_FromStringAndSize(b->data ? b->data : "", (Py_ssize_t)b->len);
}

/* records_finish(records, roots) -> (cut, by_address, n, ids, sizes, types, lengths, e, src, dst,
 * lab, roots, m): the columns (by address: resolved, the roots' ids (-1 for none) and ``m`` the
 * edge records read; else as they came, the roots given back); ``cut``: bytes of a frame left
 * incomplete. Once: the label column is compacted in place. */
static PyObject *records_finish(PyObject *self, PyObject *args) {
    PyObject *capsule, *roots_o;
    Py_ssize_t nroots;
    if (!PyArg_ParseTuple(args, "OnO", &capsule, &nroots, &roots_o))
        return NULL;
    records *r = records_of(capsule);
    if (!r)
        return NULL;
    const uint64_t *roots = (const uint64_t *)get_bytes(roots_o, 8, nroots, "roots");
    if (!roots)
        return NULL;
    if (!r->by_address)
        return Py_BuildValue("(ninNNNNnNNNOn)", (Py_ssize_t)r->carry.len, 0, (Py_ssize_t)(r->col[COL_IDS].len / 8),
                             buf_bytes(&r->col[COL_IDS]), buf_bytes(&r->col[COL_SIZES]),
                             buf_bytes(&r->col[COL_TYPES]), buf_bytes(&r->col[COL_LENGTHS]),
                             (Py_ssize_t)(r->col[COL_SRC_ID].len / 4), buf_bytes(&r->col[COL_SRC_ID]),
                             buf_bytes(&r->col[COL_DST_ID]), buf_bytes(&r->col[COL_LABEL]), roots_o,
                             (Py_ssize_t)0);
    i32 *o_roots = malloc((size_t)(nroots ? nroots : 1) * 4);
    if (!o_roots)
        return PyErr_NoMemory();
    size_t e = 0;
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    failed = records_take_nodes(r) < 0 || records_take_edges(r) < 0;
    if (!failed) {
        /* the ends unknown when last looked up, again; then the edges with both ends, in order */
        records_retry(r);
        const i32 *lab = (const i32 *)r->col[COL_LABEL].data;
        size_t labels = r->col[COL_LABEL].len / 4;
        i32 *a = (i32 *)r->o_src.data, *b = (i32 *)r->o_dst.data;
        const addr_table *t = &r->t;
        /* the label column is rewritten in place, compacted with the ends */
        i32 *c = (i32 *)r->col[COL_LABEL].data;
        for (size_t i = 0; i < r->edges_in && i < labels; i++) {
            i32 x = a[i], y = b[i];
            if (x < 0 || y < 0)
                continue; /* an end that never had a record: left out (counted by the caller) */
            a[e] = x;
            b[e] = y;
            c[e] = lab[i];
            e++;
        }
        r->o_src.len = r->o_dst.len = e * 4;
        r->col[COL_LABEL].len = e * 4;
        for (Py_ssize_t i = 0; i < nroots; i++)
            o_roots[i] = t->slots ? addr_lookup(t, roots[i]) : -1;
        /* the folds, after every record (a node's last record sets its own size) */
        size_t folds = r->col[COL_FOLD_ADDRESS].len / 8;
        if (r->col[COL_FOLD_BYTES].len / 8 < folds)
            folds = r->col[COL_FOLD_BYTES].len / 8;
        const uint64_t *fa = (const uint64_t *)r->col[COL_FOLD_ADDRESS].data;
        const int64_t *fb = (const int64_t *)r->col[COL_FOLD_BYTES].data;
        int64_t *sizes = (int64_t *)r->o_sizes.data;
        for (size_t i = 0; i < folds && t->slots; i++) {
            i32 id = addr_lookup(t, fa[i]);
            if (id >= 0 && fb[i] >= 0 && sizes[id] <= INT64_MAX - fb[i])
                sizes[id] += fb[i];
        }
    }
    Py_END_ALLOW_THREADS
    if (failed) {
        free(o_roots);
        return PyErr_NoMemory();
    }
    PyObject *out = Py_BuildValue("(ninNNNNnNNNNn)", (Py_ssize_t)r->carry.len, 1, (Py_ssize_t)r->nodes,
                                  buf_bytes(&r->o_ids), buf_bytes(&r->o_sizes), buf_bytes(&r->o_types),
                                  buf_bytes(&r->o_lengths), (Py_ssize_t)e, buf_bytes(&r->o_src), buf_bytes(&r->o_dst),
                                  buf_bytes(&r->col[COL_LABEL]),
                                  PyBytes_FromStringAndSize((const char *)o_roots, nroots * 4), (Py_ssize_t)r->edges_in);
    free(o_roots);
    return out;
}

/* shared()'s memo, kept from one call to the next (a capsule: ``shared_state(n, roots)``): per
 * node its part of v, its depth under v and its row, valid while ``stamp`` is the call's
 * ``gen`` (no pass over every node per call: owners.py asks for one namespace after another). */
#define SHARED_STATE "leakhound.dominators.shared_state"
typedef struct {
    Py_ssize_t n, m;
    i32 gen;
    /* owners.py SHARED_MAX_PARTS (more parts hold it: the program's fabric, left out) and
     * SHARED_RESOLVE_DEPTH (how many times over a shared part stands for its own parts) */
    int max_parts, resolve_depth;
    /* owners.py SHARED_MAX_KIN: a kid's parts that are kids held together themselves, looked at */
    int max_kin, max_referrers;
    i32 *stamp, *part, *depth, *row;
    signed char *own;  /* whether v holds the node itself (-1: not known yet) */
    unsigned char *is_root;
    /* the graph's columns, checked once (held: bytes objects, immutable) */
    PyObject *held[7];
    const i32 *idom, *src, *poff, *pids, *types;
    const int64_t *ret, *cnt;
} shared_memo;

static void shared_memo_drop(shared_memo *st) {
    free(st->stamp); free(st->part); free(st->depth); free(st->row); free(st->is_root); free(st->own);
    for (int k = 0; k < 7; k++)
        Py_XDECREF(st->held[k]);
    free(st);
}

static void shared_memo_free(PyObject *capsule) {
    shared_memo *st = PyCapsule_GetPointer(capsule, SHARED_STATE);
    if (st != NULL)
        shared_memo_drop(st);
}

/* The node's memo made current (part -2: not known yet, -1: not under v; depth -1; row -1). */
static inline void memo_touch(shared_memo *st, i32 x) {
    if (st->stamp[x] != st->gen) {
        st->stamp[x] = st->gen;
        st->part[x] = -2;
        st->depth[x] = -1;
        st->row[x] = -1;
        st->own[x] = -1;
    }
}

/* The depth of x under v in the dominator tree (depth[v] = 0); x lies under v. */
static i32 depth_under(const i32 *idom, shared_memo *st, i32 x) {
    i32 at = x;
    for (;;) {
        memo_touch(st, at);
        if (st->depth[at] >= 0)
            break;
        at = idom[at];
    }
    i32 d = st->depth[at], steps = 0;
    for (i32 y = x; y != at; y = idom[y])
        steps++;
    for (i32 y = x; y != at; y = idom[y])
        st->depth[y] = d + steps--;
    return st->depth[x];
}

static i32 common_under(const i32 *idom, shared_memo *st, i32 a, i32 b) {
    if (a == b)
        return a;
    i32 da = depth_under(idom, st, a), db = depth_under(idom, st, b);
    while (da > db) { a = idom[a]; da--; }
    while (db > da) { b = idom[b]; db--; }
    while (a != b) { a = idom[a]; b = idom[b]; }
    return a;
}

/* shared_state(n, m, idom, src, pred_off, pred_ids, roots, retained, counts, types, max_parts,
 * resolve_depth, max_kin, max_referrers) -> the memo shared() keeps between calls over one graph of n nodes and m
 * edges: its columns checked once (each a bytes object; ``roots``: int32 node ids, never a kid
 * held together), and owners.py's bounds. */
static PyObject *shared_state(PyObject *self, PyObject *args) {
    Py_ssize_t n, m;
    PyObject *o[7], *roots_o;  /* idom, src, pred_off, pred_ids, retained, counts, types */
    int max_parts, resolve_depth, max_kin, max_referrers;
    if (!PyArg_ParseTuple(args, "nnOOOOOOOOiiii", &n, &m, &o[0], &o[1], &o[2], &o[3], &roots_o, &o[4], &o[5], &o[6],
                          &max_parts, &resolve_depth, &max_kin, &max_referrers))
        return NULL;
    if (n < 1 || n >= INT32_MAX || m < 0 || m >= INT32_MAX || !PyBytes_Check(roots_o) || max_parts < 2
            || resolve_depth < 0 || max_kin < 0 || max_referrers < 0) {
        PyErr_SetString(PyExc_ValueError, "bad arguments");
        return NULL;
    }
    Py_ssize_t nr = PyBytes_Size(roots_o) / 4;
    const i32 *roots = (const i32 *)PyBytes_AsString(roots_o);
    const i32 *idom = (const i32 *)get_bytes(o[0], 4, n, "idom");
    const i32 *src = idom ? (const i32 *)get_bytes(o[1], 4, m, "src") : NULL;
    const i32 *poff = src ? (const i32 *)get_bytes(o[2], 4, n + 1, "pred_off") : NULL;
    const i32 *pids = poff ? (const i32 *)get_bytes(o[3], 4, m, "pred_ids") : NULL;
    const int64_t *ret = pids ? (const int64_t *)get_bytes(o[4], 8, n, "retained") : NULL;
    const int64_t *cnt = ret ? (const int64_t *)get_bytes(o[5], 8, n, "counts") : NULL;
    const i32 *types = cnt ? (const i32 *)get_bytes(o[6], 4, n, "types") : NULL;
    if (!types || !all_within(roots, nr, 0, n, "root") || !all_within(idom, n, -1, n, "idom")
            || !all_within(src, m, 0, n, "src") || !all_within(pids, m, 0, m, "pred id"))
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++)
        if (poff[i] < 0 || poff[i] > poff[i + 1] || poff[i + 1] > m) {
            PyErr_SetString(PyExc_ValueError, "pred_off out of range");
            return NULL;
        }
    shared_memo *st = calloc(1, sizeof(shared_memo));
    if (st == NULL)
        return PyErr_NoMemory();
    st->n = n;
    st->m = m;
    st->max_parts = max_parts;
    st->resolve_depth = resolve_depth;
    st->max_kin = max_kin;
    st->max_referrers = max_referrers;
    st->stamp = calloc((size_t)n, 4);  /* gen starts at 1: nothing current */
    st->part = malloc((size_t)n * 4);
    st->depth = malloc((size_t)n * 4);
    st->row = malloc((size_t)n * 4);
    st->is_root = calloc((size_t)n, 1);
    st->own = malloc((size_t)n);
    if (!st->stamp || !st->part || !st->depth || !st->row || !st->is_root || !st->own) {
        shared_memo_drop(st);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < nr; i++)
        st->is_root[roots[i]] = 1;
    for (int k = 0; k < 7; k++) {
        Py_INCREF(o[k]);
        st->held[k] = o[k];
    }
    st->idom = idom; st->src = src; st->poff = poff; st->pids = pids; st->ret = ret; st->cnt = cnt;
    st->types = types;
    PyObject *capsule = PyCapsule_New(st, SHARED_STATE, shared_memo_free);
    if (capsule == NULL)
        shared_memo_drop(st);
    return capsule;
}


typedef struct {
    i32 group, type;
    int64_t bytes;
} typed_share;

static int typed_share_cmp(const void *a, const void *b) {
    const typed_share *x = a, *y = b;
    if (x->group != y->group)
        return x->group < y->group ? -1 : 1;
    return x->type < y->type ? -1 : x->type > y->type;
}

/* Room for ``want`` more in a growing i32 buffer pair (parts and anchors): 0, or -1. */
static int grow_pair(i32 **a, i32 **b, Py_ssize_t *cap, Py_ssize_t used, Py_ssize_t want) {
    if (used + want <= *cap)
        return 0;
    Py_ssize_t cap2 = *cap ? *cap : 1024;
    while (cap2 < used + want)
        cap2 *= 2;
    i32 *a2 = realloc(*a, (size_t)cap2 * 4);
    if (!a2)
        return -1;
    *a = a2;
    i32 *b2 = realloc(*b, (size_t)cap2 * 4);
    if (!b2)
        return -1;
    *b = b2;
    *cap = cap2;
    return 0;
}

/* Adds (q, anchor) to the set [start, *used) of out/anc (merging anchors): 0, or -1. */
static int add_part(i32 **out, i32 **anc, Py_ssize_t *cap, Py_ssize_t start, Py_ssize_t *used, i32 q, i32 anchor,
                    const i32 *idom, shared_memo *depth) {
    for (Py_ssize_t s = start; s < *used; s++)
        if ((*out)[s] == q) {
            (*anc)[s] = common_under(idom, depth, (*anc)[s], anchor);
            return 0;
        }
    if (grow_pair(out, anc, cap, *used, 1))
        return -1;
    (*out)[*used] = q;
    (*anc)[*used] = anchor;
    (*used)++;
    return 0;
}

/* Whether v holds x itself (an edge from v to x): x is one of v's own parts. */
static int holds_itself(shared_memo *st, i32 v, i32 x) {
    memo_touch(st, x);
    if (st->own[x] < 0) {
        st->own[x] = 0;
        for (i32 j = st->poff[x]; j < st->poff[x + 1]; j++)
            if (st->src[st->pids[j]] == v) {
                st->own[x] = 1;
                break;
            }
    }
    return st->own[x];
}

/* How many of parts[0, used) are no kid held together (no row of this call). */
static Py_ssize_t plain_parts(shared_memo *st, const i32 *parts, Py_ssize_t used) {
    Py_ssize_t plain = 0;
    for (Py_ssize_t s = 0; s < used; s++) {
        memo_touch(st, parts[s]);
        plain += st->row[parts[s]] < 0;
    }
    return plain;
}

static i32 chain_find(i32 *up, i32 k) {
    while (up[k] != k) {
        up[k] = up[up[k]];
        k = up[k];
    }
    return k;
}

/* The group whose parts are (tp, ta)[0, used), sorted here (ascending): found by its parts, its
 * anchors merged, or made (appended to gp/ga, goff); its number, or -1 (no memory). */
static i32 group_of_parts(i32 *tp, i32 *ta, Py_ssize_t used, i32 *slots, Py_ssize_t gslots, i32 **gp, i32 **ga,
                          Py_ssize_t *gcap, Py_ssize_t *gused, i32 *goff, Py_ssize_t *ng, const i32 *idom,
                          shared_memo *depth) {
    for (Py_ssize_t a = 1; a < used; a++) {  /* an insertion sort (few) */
        i32 kp = tp[a], ka = ta[a];
        Py_ssize_t b = a;
        for (; b > 0 && tp[b - 1] > kp; b--) {
            tp[b] = tp[b - 1];
            ta[b] = ta[b - 1];
        }
        tp[b] = kp;
        ta[b] = ka;
    }
    uint64_t h = 1469598103934665603ULL;
    for (Py_ssize_t s = 0; s < used; s++)
        h = (h ^ (uint64_t)(uint32_t)tp[s]) * 1099511628211ULL;
    Py_ssize_t slot = (Py_ssize_t)(h & (uint64_t)(gslots - 1));
    while (slots[slot] >= 0) {
        i32 x = slots[slot];
        if (goff[x + 1] - goff[x] == used && memcmp(*gp + goff[x], tp, (size_t)used * 4) == 0) {
            for (Py_ssize_t s = 0; s < used; s++)
                (*ga)[goff[x] + s] = common_under(idom, depth, (*ga)[goff[x] + s], ta[s]);
            return x;
        }
        slot = (slot + 1) & (gslots - 1);
    }
    if (grow_pair(gp, ga, gcap, *gused, used))
        return -1;
    i32 g = (i32)(*ng)++;
    slots[slot] = g;
    goff[g] = (i32)*gused;
    memcpy(*gp + *gused, tp, (size_t)used * 4);
    memcpy(*ga + *gused, ta, (size_t)used * 4);
    *gused += used;
    goff[g + 1] = (i32)*gused;
    return g;
}

/* shared(state, v, kids)
 *   -> (group of each kid, group offsets, parts, anchors, items, bytes, objects, type, first):
 * what v's parts hold together (owners.py ``_shared``). A kid of v (its child in the dominator
 * tree) that v does not refer to itself, no root, is held by two or more of v's parts (v's
 * children on its referrers' dominator paths); a part itself so held stands for its own parts.
 * Kids held by the same parts are one group: its parts ascending, each with the nearest common
 * dominator of the referrers under it (what names it), its kids' count (those held by another
 * of its kids not counted: a session's name is no item beside the session), retained bytes, dominated
 * objects, the type holding most of those bytes and its biggest kid. -1: a kid in no group. */
static PyObject *shared(PyObject *self, PyObject *args) {
    Py_ssize_t v, nk;
    PyObject *state_o, *kids_o;
    if (!PyArg_ParseTuple(args, "OnO", &state_o, &v, &kids_o))
        return NULL;
    shared_memo *st = PyCapsule_GetPointer(state_o, SHARED_STATE);
    if (st == NULL)
        return NULL;
    Py_ssize_t n = st->n;
    if (v < 0 || v >= n || !PyBytes_Check(kids_o) || st->gen == INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "bad arguments");
        return NULL;
    }
    nk = PyBytes_Size(kids_o) / 4;
    const i32 *idom = st->idom, *src = st->src, *poff = st->poff, *pids = st->pids, *types = st->types;
    const int64_t *ret = st->ret, *cnt = st->cnt;
    const i32 *kids = (const i32 *)PyBytes_AsString(kids_o);
    if (!all_within(kids, nk, 0, n, "kid"))
        return NULL;
    st->gen++;
    shared_memo *depth = st;  /* (common_under's memo) */
    i32 *part = st->part, *row_of = st->row;
    const unsigned char *is_root = st->is_root;
    i32 *roff = malloc((size_t)(nk + 1) * 4), *gid = malloc((size_t)(nk ? nk : 1) * 4);
    i32 *seen = calloc((size_t)(nk ? nk : 1), 4);  /* rows expanded for kid k: k + 1 */
    unsigned char *within = calloc((size_t)(nk ? nk : 1), 1);
    i32 *rp = NULL, *ra = NULL, *gp = NULL, *ga = NULL, *tmp_p = NULL, *tmp_a = NULL, *slots = NULL;
    i32 *nxt_p = NULL, *nxt_a = NULL, *up = NULL;
    unsigned char *open_ = NULL;
    Py_ssize_t rcap = 0, rused = 0, gcap = 0, gused = 0, tcap = 0, ncap = 0;
    i32 *goff = NULL, *gtype = NULL, *gfirst = NULL;
    int64_t *gitems = NULL, *gall = NULL, *gbytes = NULL, *gobjects = NULL;
    typed_share *shares = NULL;
    Py_ssize_t ng = 0, gslots = 0, nshares = 0;
    int failed = !roff || !gid || !seen || !within;
    if (failed)
        goto done;
    Py_BEGIN_ALLOW_THREADS
    memo_touch(st, (i32)v);
    st->depth[v] = 0;
    /* 1. each kid's parts, as its referrers give them (those that are kids held together
     * themselves, ``kin``: max_kin at most, counted against no bound) */
    for (Py_ssize_t k = 0; k < nk && !failed; k++) {
        i32 c = kids[k];
        roff[k] = (i32)rused;
        if (is_root[c] || idom[c] != v)
            continue;
        Py_ssize_t start = rused, kin = 0;
        int keep = 1;
        for (i32 j = poff[c]; j < poff[c + 1] && keep && !failed; j++) {
            i32 p = src[pids[j]];
            if (p == v) {  /* one of v's own parts */
                keep = 0;
                break;
            }
            i32 at = p;
            while (at >= 0 && at != v) {
                memo_touch(st, at);
                if (part[at] != -2 || idom[at] == v)
                    break;
                at = idom[at];
            }
            i32 q = at < 0 || at == v ? -1 : part[at] != -2 ? part[at] : at;
            for (i32 y = p; y >= 0 && y != at; y = idom[y])
                part[y] = q;  /* (each touched on the way up) */
            if (at >= 0 && part[at] == -2)
                part[at] = q;
            if (q < 0 || (kin >= st->max_kin && j - poff[c] >= st->max_referrers)) {
                keep = 0;
                break;
            }
            if (q != c && !holds_itself(st, (i32)v, q)) {
                int known = 0;
                for (Py_ssize_t s2 = start; s2 < rused && !known; s2++)
                    known = rp[s2] == q;
                if (!known) {
                    if (kin >= st->max_kin)
                        continue;
                    kin++;
                }
            }
            failed = add_part(&rp, &ra, &rcap, start, &rused, q, p, idom, depth) != 0;
            if (rused - start - kin > st->max_parts)
                keep = 0;
        }
        if (!keep || rused - start < 2) {
            rused = start;
        }
        else {
            memo_touch(st, c);
            row_of[c] = (i32)k;
        }
    }
    if (!failed)
        roff[nk] = (i32)rused;
    /* kids held by one another are one structure (a chain: a document's elements, each held by
     * its siblings, that two roots reach into): joined here, their parts those of the whole
     * where SHARED_RESOLVE_DEPTH levels do not resolve one of them (2b) */
    up = failed ? NULL : malloc((size_t)(nk ? nk : 1) * 4);
    open_ = failed ? NULL : calloc((size_t)(nk ? nk : 1), 1);
    failed = failed || !up || !open_;
    for (Py_ssize_t k = 0; k < nk && !failed; k++)
        up[k] = (i32)k;
    for (Py_ssize_t k = 0; k < nk && !failed; k++)
        for (i32 r = roff[k]; r < roff[k + 1]; r++) {
            memo_touch(st, rp[r]);
            i32 row = row_of[rp[r]];
            if (row >= 0 && row != (i32)k) {
                i32 ra_ = chain_find(up, (i32)k), rb_ = chain_find(up, row);
                if (ra_ != rb_)
                    up[ra_ > rb_ ? ra_ : rb_] = ra_ < rb_ ? ra_ : rb_;
            }
        }
    /* 2. parts that are shared kids themselves stand for their own parts; 3. kids grouped by
     * their parts (open addressing on the sorted parts) */
    gslots = 1024;
    while (gslots < 4 * (nk + 1))
        gslots *= 2;
    slots = failed ? NULL : malloc((size_t)gslots * 4);
    goff = failed ? NULL : malloc((size_t)(2 * nk + 2) * 4);
    failed = failed || !slots || !goff;
    if (!failed) {
        memset(slots, 0xff, (size_t)gslots * 4);
        goff[0] = 0;
    }
    for (Py_ssize_t k = 0; k < nk && !failed; k++) {
        gid[k] = -1;
        if (roff[k + 1] == roff[k])
            continue;
        Py_ssize_t used = 0;
        for (i32 r = roff[k]; r < roff[k + 1] && !failed; r++)
            failed = add_part(&tmp_p, &tmp_a, &tcap, 0, &used, rp[r], ra[r], idom, depth) != 0;
        /* level by level into the other pair: a shared part's own parts in its place (the
         * kid itself, or a part met again through a cycle, left out) */
        for (int level = 0; level < st->resolve_depth && !failed; level++) {
            int changed = 0;
            Py_ssize_t next = 0;
            for (Py_ssize_t s = 0; s < used && !failed; s++) {
                i32 q = tmp_p[s];
                memo_touch(st, q);
                i32 row = row_of[q];
                if (row < 0) {
                    failed = add_part(&nxt_p, &nxt_a, &ncap, 0, &next, q, tmp_a[s], idom, depth) != 0;
                    continue;
                }
                changed = 1;
                if (row == (i32)k || seen[row] == (i32)k + 1)  /* met again through a cycle */
                    continue;
                seen[row] = (i32)k + 1;
                for (i32 r = roff[row]; r < roff[row + 1] && !failed; r++)
                    failed = add_part(&nxt_p, &nxt_a, &ncap, 0, &next, rp[r], ra[r], idom, depth) != 0;
            }
            if (plain_parts(st, nxt_p, next) > st->max_parts) {
                used = 0;  /* (left out, as above) */
                break;
            }
            if (!changed)
                break;
            if (level == 0) {
                /* held by another kid held together and by fewer than two parts besides: a part
                 * of that one (a session's name), no item of its own */
                Py_ssize_t direct = 0;
                for (Py_ssize_t s = 0; s < used; s++)
                    direct += st->stamp[tmp_p[s]] != st->gen || row_of[tmp_p[s]] < 0;
                within[k] = direct < 2;
            }
            i32 *swap = tmp_p; tmp_p = nxt_p; nxt_p = swap;
            swap = tmp_a; tmp_a = nxt_a; nxt_a = swap;
            Py_ssize_t cap_swap = tcap; tcap = ncap; ncap = cap_swap;
            used = next;
        }
        for (Py_ssize_t s = 0; s < used && !failed; s++) {
            memo_touch(st, tmp_p[s]);
            i32 row = row_of[tmp_p[s]];
            if (row >= 0 && row != (i32)k && seen[row] != (i32)k + 1) {
                open_[k] = 1;  /* a kid left unresolved: a chain (2b) */
                break;
            }
        }
        if (failed || used < 2 || used > st->max_parts)  /* (kids unresolved among them: 2b) */
            continue;
        i32 g = group_of_parts(tmp_p, tmp_a, used, slots, gslots, &gp, &ga, &gcap, &gused, goff, &ng, idom, depth);
        if (g < 0) {
            failed = 1;
            break;
        }
        gid[k] = g;
    }
    /* 2b. the chains: each kid of one in the group of the chain's parts (the parts of its kids'
     * rows that are no kids held together), where there are two to SHARED_MAX_PARTS of them */
    if (!failed) {
        for (Py_ssize_t k = 0; k < nk; k++)
            if (open_[k])
                open_[chain_find(up, (i32)k)] |= 2;
        /* each chain's kids (each with a row: only those are joined) as a list from its head
         * (``seen``, done with, holds the links): one pass, not one over every kid per chain */
        memset(seen, 0, (size_t)(nk ? nk : 1) * 4);
        for (Py_ssize_t k = nk - 1; k >= 0; k--) {
            i32 h = chain_find(up, (i32)k);
            if (roff[k + 1] == roff[k] || !(open_[h] & 2) || h == (i32)k)
                continue;
            seen[k] = seen[h] > 0 ? seen[h] : -1;  /* (seen[x] - 1: the next; -1: none) */
            seen[h] = (i32)k + 1;
        }
        for (Py_ssize_t h = 0; h < nk && !failed; h++) {
            if (!(open_[h] & 2) || chain_find(up, (i32)h) != (i32)h)
                continue;
            Py_ssize_t used = 0;
            for (i32 k = (i32)h; k >= 0 && !failed && used <= st->max_parts; k = seen[k] > 0 ? seen[k] - 1 : -1) {
                for (i32 r = roff[k]; r < roff[k + 1] && !failed; r++) {
                    memo_touch(st, rp[r]);
                    if (row_of[rp[r]] < 0)
                        failed = add_part(&tmp_p, &tmp_a, &tcap, 0, &used, rp[r], ra[r], idom, depth) != 0;
                }
            }
            i32 g = -1;
            if (!failed && used >= 2 && used <= st->max_parts) {
                g = group_of_parts(tmp_p, tmp_a, used, slots, gslots, &gp, &ga, &gcap, &gused, goff, &ng, idom,
                                   depth);
                failed = g < 0;
            }
            for (i32 k = (i32)h; k >= 0 && !failed && g >= 0; k = seen[k] > 0 ? seen[k] - 1 : -1) {
                gid[k] = g;  /* (else each as its levels gave) */
                Py_ssize_t plain = 0;
                for (i32 r = roff[k]; r < roff[k + 1]; r++)
                    plain += row_of[rp[r]] < 0;
                within[k] = plain < 2;
            }
        }
    }
    /* 4. each group's count, bytes, objects, biggest kid, and the type holding most bytes */
    gitems = failed ? NULL : calloc((size_t)(ng ? ng : 1), 8);
    gall = failed ? NULL : calloc((size_t)(ng ? ng : 1), 8);
    gbytes = failed ? NULL : calloc((size_t)(ng ? ng : 1), 8);
    gobjects = failed ? NULL : calloc((size_t)(ng ? ng : 1), 8);
    gtype = failed ? NULL : malloc((size_t)(ng ? ng : 1) * 4);
    gfirst = failed ? NULL : malloc((size_t)(ng ? ng : 1) * 4);
    shares = failed ? NULL : malloc((size_t)(nk ? nk : 1) * sizeof(typed_share));
    failed = failed || !gitems || !gall || !gbytes || !gobjects || !gtype || !gfirst || !shares;
    if (!failed) {
        memset(gfirst, 0xff, (size_t)(ng ? ng : 1) * 4);
        for (Py_ssize_t k = 0; k < nk; k++) {
            i32 g = gid[k];
            if (g < 0)
                continue;
            i32 c = kids[k];
            gitems[g] += within[k] ? 0 : 1;
            gall[g]++;
            gbytes[g] += ret[c];
            gobjects[g] += cnt[c];
            if (gfirst[g] < 0 || ret[c] > ret[gfirst[g]])
                gfirst[g] = c;  /* its biggest */
            shares[nshares].group = g;
            shares[nshares].type = types[c];
            shares[nshares].bytes = ret[c];
            nshares++;
        }
        /* the kids within another of the group are no items of their own, but where they
         * outnumber the rest they are the items (owners.py _shared_groups_python); all within
         * one another (a cycle): all */
        for (Py_ssize_t g = 0; g < ng; g++)
            if (gall[g] - gitems[g] > gitems[g])
                gitems[g] = gall[g] - gitems[g];
        qsort(shares, (size_t)nshares, sizeof(typed_share), typed_share_cmp);
        int64_t best = -1;
        for (Py_ssize_t a = 0; a < nshares;) {
            Py_ssize_t b = a;
            int64_t sum = 0;
            while (b < nshares && shares[b].group == shares[a].group && shares[b].type == shares[a].type)
                sum += shares[b++].bytes;
            if (a == 0 || shares[a].group != shares[a - 1].group)
                best = -1;
            if (sum > best) {
                best = sum;
                gtype[shares[a].group] = shares[a].type;
            }
            a = b;
        }
    }
    Py_END_ALLOW_THREADS
done:;
    PyObject *out = NULL;
    if (failed)
        PyErr_NoMemory();
    else
        out = Py_BuildValue("(y#y#y#y#y#y#y#y#y#)",
                            (const char *)gid, nk * 4, (const char *)goff, (ng + 1) * 4,
                            (const char *)(gp ? gp : gid), gused * 4, (const char *)(ga ? ga : gid), gused * 4,
                            (const char *)gitems, ng * 8, (const char *)gbytes, ng * 8,
                            (const char *)gobjects, ng * 8, (const char *)gtype, ng * 4, (const char *)gfirst, ng * 4);
    free(roff); free(gid); free(seen); free(within); free(rp); free(ra); free(gp);
    free(ga); free(tmp_p); free(tmp_a); free(nxt_p); free(nxt_a); free(slots); free(goff); free(gitems); free(gall); free(gbytes); free(gobjects);
    free(gtype); free(gfirst); free(shares); free(up); free(open_);
    return out;
}

static PyMethodDef methods[] = {
    {"records_new", records_new, METH_NOARGS, "records_new() -> records: a graph's frames read as they come"},
    {"records_feed", records_feed, METH_VARARGS, "records_feed(records, piece) -> None: frames taken in"},
    {"records_finish", records_finish, METH_VARARGS,
     "records_finish(records, r, roots) -> (cut, by_address, n, ids, sizes, types, lengths, e, src, dst, lab, roots, m)"},
    {"soft", soft, METH_VARARGS, "soft(n, m, src, dst, lab, soft_roots) -> (src, dst, lab) without soft roots' edges into the rest"},
    {"csr", csr, METH_VARARGS, "csr(n, m, keys) -> (offsets, edge ids): edges grouped by key"},
    {"shared_state", shared_state, METH_VARARGS,
     "shared_state(n, m, idom, src, pred_off, pred_ids, roots, retained, counts, types, max_parts, resolve_depth,"
     " max_kin, max_referrers)"
     " -> the memo shared() keeps"},
    {"shared", shared, METH_VARARGS,
     "shared(state, v, kids) -> groups: what v's parts "
     "hold together"},
    {"paths", paths, METH_VARARGS, "paths(...) -> (via int32 bytes, root_of int32 bytes): cheapest paths from roots"},
    {"tree", tree, METH_VARARGS, "tree(n, idom, retained) -> (offsets, children, dominated counts)"},
    {"dominators", dominators, METH_VARARGS,
     "dominators(n, m, src, dst, sizes) -> (idom int32 bytes, retained int64 bytes)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_dominators", NULL, -1, methods};

PyMODINIT_FUNC PyInit__dominators(void) { return PyModule_Create(&module); }
