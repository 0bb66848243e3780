/*
 * The allocator's statistics and the bootstrap's pages, read and unmapped in C where the extension loads
 * (arena.py and boot.py fall back to ctypes where it does not). Importing ctypes was ~0.3 MiB
 * of the target's memory at every first inspection (its modules, _ctypes and libffi), for
 * four calls into libc and one into the interpreter.
 *
 * Every function is looked up in the process at the call (dlsym): a libc without mallinfo2
 * (glibc < 2.33, musl) or an interpreter that does not export _PyObject_DebugMallocStats
 * answers None, as the ctypes path does, and the extension still loads.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1  /* open_memstream, RTLD_DEFAULT */
#endif
#include "_walk.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#pragma GCC visibility push(hidden)

/* glibc's struct mallinfo2 (2.33+): ten size_t fields. */
struct lh_mallinfo2 {
    size_t arena, ordblks, smblks, hblks, hblkhd, usmblks, fsmblks, uordblks, fordblks, keepcost;
};
typedef struct lh_mallinfo2 (*mallinfo2_fn)(void);
typedef int (*malloc_info_fn)(int, FILE *);
typedef int (*debug_stats_fn)(FILE *);

PyDoc_STRVAR(libc_mallinfo2_doc,
"mallinfo2() -> tuple of 10 int | None\n\n"
"glibc's mallinfo2(), its fields in order (arena, ordblks, smblks, hblks, hblkhd, usmblks,\n"
"fsmblks, uordblks, fordblks, keepcost); None where the libc has none.");

static PyObject *
libc_mallinfo2(PyObject *self, PyObject *unused)
{
    mallinfo2_fn fn = (mallinfo2_fn)dlsym(RTLD_DEFAULT, "mallinfo2");
    if (fn == NULL)
        Py_RETURN_NONE;
    struct lh_mallinfo2 m = fn();
    return Py_BuildValue("(nnnnnnnnnn)", (Py_ssize_t)m.arena, (Py_ssize_t)m.ordblks, (Py_ssize_t)m.smblks,
                         (Py_ssize_t)m.hblks, (Py_ssize_t)m.hblkhd, (Py_ssize_t)m.usmblks, (Py_ssize_t)m.fsmblks,
                         (Py_ssize_t)m.uordblks, (Py_ssize_t)m.fordblks, (Py_ssize_t)m.keepcost);
}

/* What ``write`` printed into an open_memstream buffer, as str (UTF-8, errors replaced); None
 * when the stream cannot be made. */
static PyObject *
captured(int (*write)(void *, FILE *), void *fn)
{
    char *buf = NULL;
    size_t size = 0;
    FILE *stream = open_memstream(&buf, &size);
    if (stream == NULL)
        Py_RETURN_NONE;
    write(fn, stream);
    fclose(stream);
    PyObject *text = PyUnicode_DecodeUTF8(buf != NULL ? buf : "", (Py_ssize_t)size, "replace");
    free(buf);
    return text;
}

static int
write_malloc_info(void *fn, FILE *stream)
{
    return ((malloc_info_fn)fn)(0, stream);
}

static int
write_debug_stats(void *fn, FILE *stream)
{
    return ((debug_stats_fn)fn)(stream);
}

PyDoc_STRVAR(libc_malloc_info_doc,
"malloc_info() -> str | None\n\n"
"glibc's malloc_info(0, ...) XML, written into memory (nothing reaches the target's\n"
"stderr); None where the libc has none.");

static PyObject *
libc_malloc_info(PyObject *self, PyObject *unused)
{
    void *fn = dlsym(RTLD_DEFAULT, "malloc_info");
    if (fn == NULL)
        Py_RETURN_NONE;
    return captured(write_malloc_info, fn);
}

PyDoc_STRVAR(libc_pymalloc_stats_doc,
"pymalloc_stats() -> str | None\n\n"
"CPython's _PyObject_DebugMallocStats() text, written into memory; None where the\n"
"interpreter does not export it.");

static PyObject *
libc_pymalloc_stats(PyObject *self, PyObject *unused)
{
    void *fn = dlsym(RTLD_DEFAULT, "_PyObject_DebugMallocStats");
    if (fn == NULL)
        Py_RETURN_NONE;
    return captured(write_debug_stats, fn);
}

PyDoc_STRVAR(libc_unmap_doc,
"unmap(address, size) -> bool\n\n"
"munmap(address, size): a page the ptrace method mapped for the bootstrap, listed by it\n"
"(boot.py); whether it was unmapped.");

static PyObject *
libc_unmap(PyObject *self, PyObject *args)
{
    unsigned long long address, size;
    if (!PyArg_ParseTuple(args, "KK", &address, &size))
        return NULL;
    if (size == 0)
        Py_RETURN_FALSE;
    return PyBool_FromLong(munmap((void *)(uintptr_t)address, (size_t)size) == 0);
}

PyDoc_STRVAR(libc_word_at_doc,
"word_at(address) -> int\n\n"
"The machine word (size_t) at ``address``: an instance's managed __dict__ pointer, three\n"
"words before it (objects.py); the caller names only such addresses.");

static PyObject *
libc_word_at(PyObject *self, PyObject *arg)
{
    size_t address = PyLong_AsSize_t(arg);
    if (address == (size_t)-1 && PyErr_Occurred())
        return NULL;
    return PyLong_FromSize_t(*(const size_t *)(uintptr_t)address);
}

PyMethodDef libc_methods[] = {
    {"word_at", libc_word_at, METH_O, libc_word_at_doc},
    {"mallinfo2", libc_mallinfo2, METH_NOARGS, libc_mallinfo2_doc},
    {"malloc_info", libc_malloc_info, METH_NOARGS, libc_malloc_info_doc},
    {"pymalloc_stats", libc_pymalloc_stats, METH_NOARGS, libc_pymalloc_stats_doc},
    {"unmap", libc_unmap, METH_VARARGS, libc_unmap_doc},
    {NULL, NULL, 0, NULL},
};

#pragma GCC visibility pop
