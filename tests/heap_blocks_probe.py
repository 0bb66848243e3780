"""Run by tests/unit/test_heap_blocks.py in each CPython: ``python tests/heap_blocks_probe.py ROOT``.

For each shape it builds objects in this process and prints, as JSON, what the heap itself
says they took (``truth``: fixtures/_target.heap_bytes_in_use before and after, pymalloc's
allocated blocks plus glibc's bytes in use) beside the payload's size of them
(``model``: sizes.object_size, with a 3.11+ instance's values, each object once) and the
sum of sys.getsizeof (``getsizeof``)."""

import gc
import importlib.util
import json
import sys
from collections import deque

sys.path.insert(0, sys.argv[1])
from leakhound.payload import sizes  # noqa: E402

_spec = importlib.util.spec_from_file_location("leakhound_fixture_target", sys.argv[1] + "/fixtures/_target.py")
_target = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_target)


class Point:
    def __init__(self, i):
        self.x = i + 100000
        self.y = None
        self.label = "p"
        self.visible = True


SHAPES = {
    "int": lambda: [100000 + i for i in range(200000)],
    "float": lambda: [i + 0.5 for i in range(200000)],
    "short str": lambda: [f"k{i:06d}" for i in range(200000)],
    "str 84": lambda: ["x" * 30 + f"{i:06d}" for i in range(100000)],
    "tuple": lambda: [(i, None, True) for i in range(100000)],
    "dict": lambda: [{"a": None, "b": True} for i in range(50000)],
    "list": lambda: [[1, 2, 3] * 30 for i in range(20000)],
    "bytes 1k": lambda: [b"%d" % i + b"x" * 1000 for i in range(5000)],
    "bytes 200k": lambda: [b"%d" % i + b"x" * 200000 for i in range(40)],
    "instance": lambda: [Point(i) for i in range(50000)],
    "deque": lambda: [deque(range(i % 700)) for i in range(2000)],
    "bytearray": lambda: [bytearray(b"x" * (i % 3000)) for i in range(20000)],
}


def model(objs):
    total = sizes.object_size(objs)
    seen = set()
    for obj in objs:
        total += sizes.object_size(obj)
        parts = list(obj) if type(obj) in (tuple, list, deque) else []
        if type(obj) is Point:
            parts = [obj.x]
            if sys.version_info >= (3, 11):
                total += sizes.instance_values_bytes(obj)
            else:
                total += sizes.object_size(obj.__dict__)
        for part in parts:  # ints past the small-int cache are objects of the shape's
            if type(part) is int and part > 256 and id(part) not in seen:
                seen.add(id(part))
                total += sizes.object_size(part)
    return total


def main():
    out = {"blocks": sizes.HEAP_BLOCKS}
    for name, build in SHAPES.items():
        gc.collect()
        before = _target.heap_bytes_in_use()
        objs = build()
        after = _target.heap_bytes_in_use()
        naive = sys.getsizeof(objs) + sum(sys.getsizeof(o) for o in objs)
        out[name] = {"truth": after - before, "model": model(objs), "getsizeof": naive}
        del objs
    print(json.dumps(out))


if __name__ == "__main__":
    main()
