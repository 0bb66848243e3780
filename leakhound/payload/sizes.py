"""Deep sizes of plain data (dicts, lists, tuples, sets, and what they hold), in the target."""

import sys


def deep_size(root, seen=None, limit=5000000):
    """sys.getsizeof over everything ``root`` reaches through containers, each object once.

    ``seen`` (ids) may be shared by the caller so that objects shared between measured parts
    count once. Dict keys are followed too (gc.get_referents skips str keys). Only built-in
    container methods run; ``limit`` bounds the walk.
    """
    seen = set() if seen is None else seen
    total = 0
    stack = [root]
    getsizeof = sys.getsizeof
    steps = 0
    while stack and steps < limit:
        obj = stack.pop()
        oid = id(obj)
        if oid in seen:
            continue
        seen.add(oid)
        total += getsizeof(obj, 0)
        steps += 1
        if isinstance(obj, dict):
            stack.extend(dict.keys(obj))
            stack.extend(dict.values(obj))
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
    return total
