"""What the stable ABI costs the compiled census walk: in-process, per CPython version.

For each installed CPython (pyenv's 3.10-3.13), a child process builds fixtures/bench_heap.py's
heap (~4.8M objects by default) and walks it with ``_walk.claim`` in 20,000-unit calls, as
the census does, alternating between builds of the walk, best of ``--rounds``:

* ``per-version``: the walk as it was before the abi3 build (git ``b4da3f0~1``), compiled
  with that version's own headers and the full C API (what hatch_build.py built for the
  installing interpreter only);
* ``abi3+private``: leakhound/payload/_*.c as one stable-ABI build (made with THIS
  interpreter's headers, loaded by every version), using the interpreter's private helpers;
* ``abi3``: the same build on the stable ABI only (``_walk.use_private(False)``: what a
  version that does not export those helpers gets).

No attach, no pause budget, the target's own thread: the walk alone. Numbers from one run
of this script (the best of N rounds each); nothing asserts on time. Usage:

    .venv/bin/python benchmarks/census_walk_abi.py [--objects N] [--rounds N] [--versions 3.10,3.12]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import _common as c

PYENV = Path(os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))) / "versions"
BEFORE_ABI3 = "b4da3f0~1"  # the last per-version _walk.c

CHILD = r'''
import array, gc, importlib.machinery, importlib.util, json, os, sys, time
sys.path.insert(0, os.environ["BENCH_FIXTURES"])
import bench_heap

def load(path):
    loader = importlib.machinery.ExtensionFileLoader("_walk", path)
    spec = importlib.util.spec_from_file_location("_walk", path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module

def walk(claim, by_id):
    index, keys, counts, sizes = {}, [], array.array("q"), array.array("q")
    def new_slot(tp):
        key = id(tp) if by_id else tp
        i = index.get(key)
        if i is None:
            i = index[key] = len(keys)
            keys.append(tp); counts.append(0); sizes.append(0)
        return i
    stack = [bench_heap.CACHE, bench_heap.SESSIONS, bench_heap.INDEX]
    pending, regions = [], {}
    objects = nbytes = 0
    started = time.perf_counter()
    while stack or pending:
        o, b = claim(stack, pending, regions, index, new_slot, counts, sizes, 20000)
        objects += o; nbytes += b
    return time.perf_counter() - started, objects

variants = json.loads(os.environ["BENCH_VARIANTS"])
modules = {name: load(path) for name, path in variants.items()}
best = {}
seen = {}
for _ in range(int(os.environ["BENCH_ROUNDS"])):
    for name, module in modules.items():
        if hasattr(module, "use_private"):
            module.use_private(name != "abi3")
        seconds, objects = walk(module.claim, by_id=name != "per-version")
        best[name] = min(best.get(name, seconds), seconds)
        seen[name] = objects
print(json.dumps({"python": sys.version.split()[0], "best": best, "objects": seen,
                  "mode": getattr(modules.get("abi3+private"), "mode", None)}))
'''


def compile_so(sources: list[Path], include: str, out: Path) -> Path:
    subprocess.run(["cc", "-O2", "-fPIC", "-shared", "-fno-strict-aliasing", "-I", include, *map(str, sources),
                    "-o", str(out)], check=True, capture_output=True, timeout=120)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--objects", type=int, default=4_800_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--versions", default="3.10,3.11,3.12,3.13")
    args = parser.parse_args()
    c.header(f"the compiled walk alone, in-process, ~{args.objects:,}-object heap: per-version build vs abi3",
             ["benchmarks/census_walk_abi.py", *sys.argv[1:]])
    work = Path(tempfile.mkdtemp(prefix="leakhound-walk-abi-"))
    old_source = work / "_walk_before_abi3.c"
    old_source.write_text(subprocess.run(["git", "-C", str(c.ROOT), "show", f"{BEFORE_ABI3}:leakhound/payload/_walk.c"],
                                         capture_output=True, text=True, check=True).stdout)
    abi3 = compile_so(sorted((c.ROOT / "leakhound" / "payload").glob("_*.c")), sysconfig.get_paths()["include"],
                      work / "_walk.abi3.so")
    rows = []
    base: float | None = None
    for version in args.versions.split(","):
        pythons = sorted(PYENV.glob(f"{version}.*/bin/python"))
        if not pythons:
            print(f"# no CPython {version} here", file=sys.stderr)
            continue
        python = pythons[-1]
        include = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        old = compile_so([old_source], include, work / f"_walk_{version}.so")
        env = {**os.environ, "BENCH_OBJECTS": str(args.objects), "BENCH_FIXTURES": str(c.FIXTURES),
               "BENCH_ROUNDS": str(args.rounds),
               "BENCH_VARIANTS": json.dumps({"per-version": str(old), "abi3+private": str(abi3), "abi3": str(abi3)})}
        out = subprocess.run([str(python), "-c", CHILD], env=env, capture_output=True, text=True, timeout=3600)
        if out.returncode != 0:
            print(f"# {version} failed: {out.stderr[-1000:]}", file=sys.stderr)
            continue
        doc = json.loads(out.stdout.strip().splitlines()[-1])
        best = doc["best"]
        if version == "3.11":
            base = best["abi3+private"]
        rows.append([doc["python"], c.ms(best["per-version"]), c.ms(best["abi3+private"]), c.ms(best["abi3"]),
                     c.ratio(best["abi3+private"], best["per-version"]), c.ratio(best["abi3"], best["per-version"]),
                     f"{doc['objects']['abi3+private']:,}", best["abi3+private"]])
    for row in rows:
        row[-1] = c.ratio(row[-1], base)
    print(c.table(["Python", "per-version", "abi3+private", "abi3 only", "abi3+private / per-version",
                   "abi3 / per-version", "objects", "abi3+private vs 3.11"], rows,
                  title=f"Best of {args.rounds} walks each, alternating builds, same process per version"))
    return 0


if __name__ == "__main__":
    c.main_guard(main)
