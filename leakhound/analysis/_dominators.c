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

static PyMethodDef methods[] = {
    {"dominators", dominators, METH_VARARGS,
     "dominators(n, m, src, dst, sizes) -> (idom int32 bytes, retained int64 bytes)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_dominators", NULL, -1, methods};

PyMODINIT_FUNC PyInit__dominators(void) { return PyModule_Create(&module); }
