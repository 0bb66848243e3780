/*
 * The sampled allocation sites (_sites.c) as the object graph's walk sees them: while
 * ``sites_noting`` is set, every object the walk makes a node of or folds into one is
 * reported with that node, so each surviving sample learns what it became part of.
 */

#ifndef LEAKHOUND_SITES_H
#define LEAKHOUND_SITES_H

#include <stdint.h>

#pragma GCC visibility push(hidden)

extern int sites_noting;
void sites_note_slow(PyObject *op, uintptr_t node);
void sites_note_address(uintptr_t at, uintptr_t node);

/* ``op``, and the buffer it owns (a list's items, a dict's keys...), are part of ``node``. */
static inline void
sites_note(PyObject *op, uintptr_t node)
{
    if (sites_noting)
        sites_note_slow(op, node);
}

/* The object at ``at`` (no longer held: only its address) is part of ``node``. */
static inline void
sites_note_at(uintptr_t at, uintptr_t node)
{
    if (sites_noting)
        sites_note_address(at, node);
}

#pragma GCC visibility pop

#endif
