"""Prototype variants of the census's inner walk (ClaimWalk.claim_tree's loop), measured on the
bench heap in-process. Evidence for the suggestions in docs/performance.md; leakhound's
payload is not changed by this script.

* current:  every object reached goes into the ``claimed`` set of ids (as shipped)
* solo:     an untracked object whose only reference is the container being walked
            (refcount: container + referents list + loop variable + getrefcount's argument
            = 4) cannot be reached again, so it is counted without entering the id set
* solo+dict: the same, with ``claimed`` a dict {id: None}: a dict holding only ints and None
            is untracked by the cyclic GC, so collections the census's own allocations
            trigger never traverse it (a set is always tracked)
* solo+dict+leaves: the same, and objects of types that have no referents (str, bytes, int,
            float...) are counted but never pushed on the stack (no pop, no get_referents)
* solo+bitmap+leaves: like solo+dict+leaves, with the ids as a bitmap over address space,
            one bit per 16-byte granule, 8 KiB per MiB of address space touched

Each variant walks the bench heap's three roots (classes are walls, as in the census) in its
own thread while a 5 ms heartbeat thread records its worst lateness; totals must match the
current walk exactly.

Usage:

    .venv/bin/python benchmarks/census_walk_variants.py [--quick] [--objects N]
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import threading
import time
from typing import Any

import _common as c

sys.path.insert(0, str(c.FIXTURES))


# Types whose instances have no referents: pushing them only to pop them and get [] back from
# gc.get_referents is wasted work (they are most of a typical heap).
LEAVES = frozenset({str, bytes, int, float, complex, bool, type(None)})


def walk(roots: list[Any], *, solo: bool, as_dict: bool, leaves: bool = False,
         bitmap: bool = False) -> dict[str, Any]:
    if bitmap:
        return walk_bitmap(roots)
    claimed: Any = {} if as_dict else set()
    types: dict[type, list[int]] = {}
    get_referents = gc.get_referents
    getsizeof = sys.getsizeof
    getrefcount = sys.getrefcount
    is_tracked = gc.is_tracked
    dict_keys = dict.keys
    objects = 0
    nbytes = 0
    skipped = 0
    for root in roots:
        if as_dict:
            claimed[id(root)] = None
        else:
            claimed.add(id(root))
        stack = [root]
        while stack:
            obj = stack.pop()
            referents = get_referents(obj)
            if isinstance(obj, dict):
                referents.extend(dict_keys(obj))
            for ref in referents:
                if type(ref) is type:
                    continue  # classes are walls (as in the census): stay inside the bench heap
                if solo and getrefcount(ref) == 4 and not is_tracked(ref):
                    skipped += 1
                else:
                    rid = id(ref)
                    if rid in claimed:
                        continue
                    if as_dict:
                        claimed[rid] = None
                    else:
                        claimed.add(rid)
                size = getsizeof(ref, 0)
                nbytes += size
                objects += 1
                entry = types.get(type(ref))
                if entry is None:
                    types[type(ref)] = [1, size]
                else:
                    entry[0] += 1
                    entry[1] += size
                if leaves and type(ref) in LEAVES:
                    continue
                stack.append(ref)
    return {"objects": objects, "bytes": nbytes, "ids": len(claimed), "skipped": skipped,
            "id_bytes": sys.getsizeof(claimed) + 32 * len(claimed),
            "gc_tracked": gc.is_tracked(claimed)}


def walk_bitmap(roots: list[Any]) -> dict[str, Any]:
    """solo + leaves, with claimed ids as one bit per 16-byte granule of address space:
    {address >> 20: bytearray(8192)}. Objects are 16-byte aligned and at least 16 bytes, so
    two live objects never share a bit; bytearrays (and a dict of them) are not GC-tracked."""
    pages: dict[int, bytearray] = {}
    types: dict[type, list[int]] = {}
    get_referents = gc.get_referents
    getsizeof = sys.getsizeof
    getrefcount = sys.getrefcount
    is_tracked = gc.is_tracked
    dict_keys = dict.keys
    objects = 0
    nbytes = 0
    skipped = 0
    marked = 0
    for root in roots:
        rid = id(root)
        pages.setdefault(rid >> 20, bytearray(8192))[(rid >> 7) & 0x1FFF] |= 1 << ((rid >> 4) & 7)
        stack = [root]
        while stack:
            obj = stack.pop()
            referents = get_referents(obj)
            if isinstance(obj, dict):
                referents.extend(dict_keys(obj))
            for ref in referents:
                if type(ref) is type:
                    continue
                if getrefcount(ref) == 4 and not is_tracked(ref):
                    skipped += 1
                else:
                    rid = id(ref)
                    bits = pages.get(rid >> 20)
                    if bits is None:
                        bits = pages[rid >> 20] = bytearray(8192)
                    byte = (rid >> 7) & 0x1FFF
                    mask = 1 << ((rid >> 4) & 7)
                    if bits[byte] & mask:
                        continue
                    bits[byte] |= mask
                    marked += 1
                size = getsizeof(ref, 0)
                nbytes += size
                objects += 1
                entry = types.get(type(ref))
                if entry is None:
                    types[type(ref)] = [1, size]
                else:
                    entry[0] += 1
                    entry[1] += size
                if type(ref) in LEAVES:
                    continue
                stack.append(ref)
    return {"objects": objects, "bytes": nbytes, "ids": marked, "skipped": skipped,
            "id_bytes": sys.getsizeof(pages) + len(pages) * sys.getsizeof(bytearray(8192)),
            "gc_tracked": gc.is_tracked(pages)}


def measure(roots: list[Any], **variant: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    lag = {"max": 0.0}
    done = threading.Event()

    def beat() -> None:
        last = time.perf_counter()
        while not done.is_set():
            time.sleep(0.005)
            now = time.perf_counter()
            lag["max"] = max(lag["max"], (now - last - 0.005) * 1000)
            last = now

    def work() -> None:
        out.update(walk(roots, **variant))

    gc.collect()  # the bench process, not a target: start every variant from the same state
    heartbeat = threading.Thread(target=beat, daemon=True)
    heartbeat.start()
    time.sleep(0.05)
    lag["max"] = 0.0
    started = time.perf_counter()
    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    out["seconds"] = time.perf_counter() - started
    done.set()
    heartbeat.join()
    out["lag_ms"] = lag["max"]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small heap (100k objects)")
    parser.add_argument("--objects", type=int, default=None, help="heap size (default 1,000,000)")
    args = parser.parse_args()
    objects = args.objects or (100_000 if args.quick else 1_000_000)
    os.environ["BENCH_OBJECTS"] = str(objects)
    c.header(f"census walk variants on a ~{objects:,}-object heap (in-process)",
             ["benchmarks/census_walk_variants.py", *sys.argv[1:]])
    import bench_heap

    roots = [bench_heap.CACHE, bench_heap.SESSIONS, bench_heap.INDEX]
    variants = {"current": {"solo": False, "as_dict": False},
                "solo": {"solo": True, "as_dict": False},
                "solo+dict": {"solo": True, "as_dict": True},
                "solo+dict+leaves": {"solo": True, "as_dict": True, "leaves": True},
                "solo+bitmap+leaves": {"solo": True, "as_dict": False, "bitmap": True}}
    results = {name: measure(roots, **v) for name, v in variants.items()}
    base = results["current"]
    rows = []
    for name, r in results.items():
        same = r["objects"] == base["objects"] and r["bytes"] == base["bytes"]
        rows.append([name, c.secs(r["seconds"]), f"{r['seconds'] / r['objects'] * 1e9:,.0f} ns",
                     f"{r['ids']:,}", c.mib(r["id_bytes"]), "yes" if r["gc_tracked"] else "no",
                     f"{r['lag_ms']:,.1f} ms", f"{r['objects']:,}", "yes" if same else "NO"])
    print(c.table(["variant", "walk", "per object", "ids kept", "id bookkeeping",
                   "GC-tracked", "worst lag", "objects", "same totals"],
                  rows, title="One walk per variant (walk in a thread, 5 ms heartbeat thread)"))
    return 0


if __name__ == "__main__":
    c.main_guard(main)
