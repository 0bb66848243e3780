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
    for (i = 0; i < m; i++) {
        if (src[i] < 0 || src[i] >= n || dst[i] < 0 || dst[i] >= n) {
            PyErr_SetString(PyExc_ValueError, "edge out of range");
            bad = 1;
            goto done;
        }
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
 * paths(n, m, src, dst, types, lab, type_back, label_back, roots, root_dist, blocked, back_cost, targets)
 *   types int32 per node, lab int32 per edge (-1: none), type_back / label_back one byte per
 *   type / label (1: a back-reference), roots int32 per root (node), root_dist
 *   int64 per root, blocked one byte per node (1: never entered by an edge: a root)
 * returns (via int32 per node: the edge it is best reached by, -1 for roots and unreached;
 *          root_of int32 per node: the index of its root, -1 unreached)
 * Dijkstra with a binary heap of (distance, node); an edge costs back_cost when it leaves a
 * back-reference type or carries a back-reference label, else 1. ``targets``: one byte per
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
    long long back_cost;
    PyObject *src_o, *dst_o, *types_o, *lab_o, *tc_o, *lc_o, *roots_o, *rd_o, *blocked_o, *targets_o;
    if (!PyArg_ParseTuple(args, "nnOOOOOOOOOLO", &n, &m, &src_o, &dst_o, &types_o, &lab_o, &tc_o, &lc_o, &roots_o,
                          &rd_o, &blocked_o, &back_cost, &targets_o))
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
    for (i = 0; i < m; i++)
        if (src[i] < 0 || src[i] >= n || dst[i] < 0 || dst[i] >= n || lab[i] >= nlabels) {
            PyErr_SetString(PyExc_ValueError, "edge out of range");
            return NULL;
        }
    for (i = 0; i < n; i++)
        if (types[i] < 0 || types[i] >= ntypes) {
            PyErr_SetString(PyExc_ValueError, "type out of range");
            return NULL;
        }
    for (i = 0; i < nroots; i++)
        if (roots[i] < 0 || roots[i] >= n) {
            PyErr_SetString(PyExc_ValueError, "root out of range");
            return NULL;
        }
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
    for (i = 0; i < m; i++)
        off[src[i] + 1]++;
    for (i = 0; i < n; i++)
        off[i + 1] += off[i];
    memcpy(pos, off, n * 4);
    for (i = 0; i < m; i++)
        ids[pos[src[i]]++] = (i32)i;
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
            int64_t d = x.dist + ((out || (lab[e] >= 0 && lc[lab[e]])) ? back_cost : 1);
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
static const int64_t *sort_key;
static int by_retained(const void *a, const void *b) {
    int64_t x = sort_key[*(const i32 *)a], y = sort_key[*(const i32 *)b];
    return x > y ? -1 : x < y ? 1 : (*(const i32 *)a - *(const i32 *)b);
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
    for (i = 0; i < n; i++)
        if (idom[i] < -1 || idom[i] >= n) {
            PyErr_SetString(PyExc_ValueError, "idom out of range");
            return NULL;
        }
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
    sort_key = ret; /* under the GIL: qsort's comparator needs it */
    for (i = 0; i < n; i++)
        if (off[i + 1] - off[i] > 1)
            qsort(kids + off[i], off[i + 1] - off[i], 4, by_retained);
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
    free(pos); free(order);
    return Py_BuildValue("(NNN)", off_o, kids_o, count_o);
}

/* csr(n, m, keys) -> (offsets int32 n + 1, edge ids int32 m): the edges grouped by key
 * (src: out-edges, dst: in-edges), each group in edge order. */
static PyObject *csr(PyObject *self, PyObject *args) {
    Py_ssize_t n, m, i;
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
    for (i = 0; i < m; i++)
        if (keys[i] < 0 || keys[i] >= n) {
            PyErr_SetString(PyExc_ValueError, "key out of range");
            return NULL;
        }
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
    for (i = 0; i < m; i++)
        off[keys[i] + 1]++;
    for (i = 0; i < n; i++)
        off[i + 1] += off[i];
    memcpy(pos, off, n * 4);
    for (i = 0; i < m; i++)
        ids[pos[keys[i]]++] = (i32)i;
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

/* soft(n, m, src, dst, lab, soft_roots) -> (src, dst, lab): the edges without those from
 * what only soft roots (threads' frames) reach into what the other roots reach. A frame then
 * dominates only what nothing else holds: a function iterating over a registry (a list of its
 * entries in a local) does not take the registry's entries from it. */
static PyObject *soft(PyObject *self, PyObject *args) {
    Py_ssize_t n, m, nsoft, i;
    PyObject *src_o, *dst_o, *lab_o, *soft_o;
    if (!PyArg_ParseTuple(args, "nnOOOO", &n, &m, &src_o, &dst_o, &lab_o, &soft_o))
        return NULL;
    if (n < 1 || n >= INT32_MAX || m < 0 || !PyBytes_Check(soft_o)) {
        PyErr_SetString(PyExc_ValueError, "bad arguments");
        return NULL;
    }
    nsoft = PyBytes_Size(soft_o) / 4;
    const i32 *src = (const i32 *)get_bytes(src_o, 4, m, "src");
    const i32 *dst = src ? (const i32 *)get_bytes(dst_o, 4, m, "dst") : NULL;
    const i32 *lab = dst ? (const i32 *)get_bytes(lab_o, 4, m, "lab") : NULL;
    const i32 *softs = lab ? (const i32 *)get_bytes(soft_o, 4, nsoft, "soft_roots") : NULL;
    if (!softs)
        return NULL;
    for (i = 0; i < m; i++)
        if (src[i] < 0 || src[i] >= n || dst[i] < 0 || dst[i] >= n) {
            PyErr_SetString(PyExc_ValueError, "edge out of range");
            return NULL;
        }
    for (i = 0; i < nsoft; i++)
        if (softs[i] < 0 || softs[i] >= n) {
            PyErr_SetString(PyExc_ValueError, "root out of range");
            return NULL;
        }
    unsigned char *is_soft = calloc(n, 1), *hard = calloc(n, 1);
    i32 *off = calloc(n + 1, 4), *ids = malloc((m ? m : 1) * 4), *pos = malloc(n * 4), *stack = malloc(n * 4);
    if (!is_soft || !hard || !off || !ids || !pos || !stack) {
        free(is_soft); free(hard); free(off); free(ids); free(pos); free(stack);
        return PyErr_NoMemory();
    }
    for (i = 0; i < nsoft; i++)
        is_soft[softs[i]] = 1;
    for (i = 0; i < m; i++)
        off[src[i] + 1]++;
    for (i = 0; i < n; i++)
        off[i + 1] += off[i];
    memcpy(pos, off, n * 4);
    for (i = 0; i < m; i++)
        ids[pos[src[i]]++] = (i32)i;
    /* what the hard roots reach: from node 0, not through its edges to soft roots */
    i32 top = 0;
    hard[0] = 1;
    stack[top++] = 0;
    while (top) {
        i32 v = stack[--top];
        for (i32 k = off[v]; k < off[v + 1]; k++) {
            i32 w = dst[ids[k]];
            if (hard[w] || (v == 0 && is_soft[w]))
                continue;
            hard[w] = 1;
            stack[top++] = w;
        }
    }
    Py_ssize_t kept = 0;
    for (i = 0; i < m; i++)
        if (hard[src[i]] || !hard[dst[i]])
            kept++;
    PyObject *s2 = PyBytes_FromStringAndSize(NULL, kept * 4), *d2 = PyBytes_FromStringAndSize(NULL, kept * 4);
    PyObject *l2 = PyBytes_FromStringAndSize(NULL, kept * 4);
    if (s2 && d2 && l2) {
        i32 *a = (i32 *)PyBytes_AsString(s2), *b = (i32 *)PyBytes_AsString(d2), *c = (i32 *)PyBytes_AsString(l2);
        Py_ssize_t k = 0;
        for (i = 0; i < m; i++)
            if (hard[src[i]] || !hard[dst[i]]) {
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

/* -- node ids for a graph whose nodes are named by address (leakhound.graph/4, the compiled
 * walk): records in the order they came, a node's first one gives it its id, a later one
 * replaces its size, type and entries (a root walked after it was made). */

/* Open addressing, key and id side by side (one cache line a probe), filled at most half;
 * lookups prefetched a few records ahead (the addresses come in no useful order). */
typedef struct {
    uint64_t key;
    i32 id; /* -1: empty */
    i32 unused;
} addr_entry;

typedef struct {
    addr_entry *slots;
    size_t mask;
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

#define ADDR_AHEAD 12

static PyObject *resolve(PyObject *self, PyObject *args) {
    Py_ssize_t k, m, r;
    PyObject *ids_o, *sizes_o, *types_o, *lengths_o, *src_o, *dst_o, *lab_o, *roots_o;
    if (!PyArg_ParseTuple(args, "nOOOOnOOOnO", &k, &ids_o, &sizes_o, &types_o, &lengths_o, &m, &src_o, &dst_o,
                          &lab_o, &r, &roots_o))
        return NULL;
    if (k < 0 || m < 0 || r < 0 || k > INT32_MAX || m > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "resolve: sizes out of range");
        return NULL;
    }
    const uint64_t *ids = (const uint64_t *)get_bytes(ids_o, 8, k, "ids");
    const int64_t *sizes = (const int64_t *)get_bytes(sizes_o, 8, k, "sizes");
    const i32 *types = (const i32 *)get_bytes(types_o, 4, k, "types");
    const i32 *lengths = (const i32 *)get_bytes(lengths_o, 4, k, "lengths");
    const uint64_t *src = (const uint64_t *)get_bytes(src_o, 8, m, "src");
    const uint64_t *dst = (const uint64_t *)get_bytes(dst_o, 8, m, "dst");
    const i32 *lab = (const i32 *)get_bytes(lab_o, 4, m, "lab");
    const uint64_t *roots = (const uint64_t *)get_bytes(roots_o, 8, r, "roots");
    if (!ids || !sizes || !types || !lengths || !src || !dst || !lab || !roots)
        return NULL;
    addr_table t;
    size_t cap = 1024;
    while (cap < (size_t)k * 2)
        cap <<= 1;
    t.mask = cap - 1;
    t.slots = malloc(cap * sizeof(addr_entry));
    int64_t *o_ids = malloc((size_t)(k ? k : 1) * 8), *o_sizes = malloc((size_t)(k ? k : 1) * 8);
    i32 *o_types = malloc((size_t)(k ? k : 1) * 4), *o_lengths = malloc((size_t)(k ? k : 1) * 4);
    i32 *o_src = malloc((size_t)(m ? m : 1) * 4), *o_dst = malloc((size_t)(m ? m : 1) * 4);
    i32 *o_lab = malloc((size_t)(m ? m : 1) * 4), *o_roots = malloc((size_t)(r ? r : 1) * 4);
    PyObject *out = NULL;
    if (!t.slots || !o_ids || !o_sizes || !o_types || !o_lengths || !o_src || !o_dst || !o_lab || !o_roots) {
        PyErr_NoMemory();
        goto done;
    }
    memset(t.slots, 0xFF, cap * sizeof(addr_entry));
    Py_ssize_t n = 0, e = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < k; i++) {
        if (i + ADDR_AHEAD < k)
            __builtin_prefetch(&t.slots[addr_home(&t, ids[i + ADDR_AHEAD])], 1);
        size_t slot = addr_slot(&t, ids[i]);
        i32 id = t.slots[slot].id;
        if (id < 0) {
            id = (i32)n++;
            t.slots[slot].key = ids[i];
            t.slots[slot].id = id;
            o_ids[id] = (int64_t)ids[i];
        }
        o_sizes[id] = sizes[i];
        o_types[id] = types[i];
        o_lengths[id] = lengths[i];
    }
    for (Py_ssize_t i = 0; i < m; i++) {
        if (i + ADDR_AHEAD < m) {
            __builtin_prefetch(&t.slots[addr_home(&t, src[i + ADDR_AHEAD])], 0);
            __builtin_prefetch(&t.slots[addr_home(&t, dst[i + ADDR_AHEAD])], 0);
        }
        i32 a = addr_lookup(&t, src[i]), b = addr_lookup(&t, dst[i]);
        if (a < 0 || b < 0)
            continue; /* an end that never had a record: left out (counted by the caller) */
        o_src[e] = a;
        o_dst[e] = b;
        o_lab[e] = lab[i];
        e++;
    }
    for (Py_ssize_t i = 0; i < r; i++)
        o_roots[i] = addr_lookup(&t, roots[i]);
    Py_END_ALLOW_THREADS
    out = Py_BuildValue("(ny#y#y#y#ny#y#y#y#)", n, (const char *)o_ids, n * 8, (const char *)o_sizes, n * 8,
                        (const char *)o_types, n * 4, (const char *)o_lengths, n * 4, e, (const char *)o_src,
                        e * 4, (const char *)o_dst, e * 4, (const char *)o_lab, e * 4, (const char *)o_roots, r * 4);
done:
    free(t.slots); free(o_ids); free(o_sizes); free(o_types); free(o_lengths);
    free(o_src); free(o_dst); free(o_lab); free(o_roots);
    return out;
}

static PyMethodDef methods[] = {
    {"resolve", resolve, METH_VARARGS,
     "resolve(k, ids, sizes, types, lengths, m, src, dst, lab, r, roots) -> (n, ids, sizes, types, lengths, e, src, "
     "dst, lab, roots): node ids for nodes, edges and roots named by address"},
    {"soft", soft, METH_VARARGS, "soft(n, m, src, dst, lab, soft_roots) -> (src, dst, lab) without soft roots' edges into the rest"},
    {"csr", csr, METH_VARARGS, "csr(n, m, keys) -> (offsets, edge ids): edges grouped by key"},
    {"paths", paths, METH_VARARGS, "paths(...) -> (via int32 bytes, root_of int32 bytes): cheapest paths from roots"},
    {"tree", tree, METH_VARARGS, "tree(n, idom, retained) -> (offsets, children, dominated counts)"},
    {"dominators", dominators, METH_VARARGS,
     "dominators(n, m, src, dst, sizes) -> (idom int32 bytes, retained int64 bytes)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_dominators", NULL, -1, methods};

PyMODINIT_FUNC PyInit__dominators(void) { return PyModule_Create(&module); }
