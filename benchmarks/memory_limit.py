"""What an inspection charges a target's memory cgroup, near its limit and without one: the
table in docs/inspect.md ("Near the memory limit").

Each case starts ``fixtures/heap_of_size.py`` in a fresh cgroup v1 memory cgroup (and, for
the tmpfs and noexec cases, in its own mount namespace with that /tmp), sets the limit to its
usage plus the headroom, resets the cgroup's high-water mark, runs one leakhound command and
reads: its exit code, whether the target is alive, the cgroup's peak over the request
(``memory.max_usage_in_bytes``), the target's VmHWM growth. Needs root and cgroup v1 memory.

Usage:

    .venv/bin/python benchmarks/memory_limit.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import _common as c

sys.path.insert(0, str(c.ROOT))

from tests.memory_cgroup import memory_cgroup, v1_memory_available  # noqa: E402
from tests.namespaces import shared_dir, spawn_in_namespaces  # noqa: E402
from tests.utils import spawn_target  # noqa: E402

# (heap MB, headroom MB or None for no limit, /tmp: None on disk, "" tmpfs, "noexec", leakhound arguments)
CASES = [
    (100, None, "", ["inspect"]),
    (300, None, "", ["inspect"]),
    (100, 7, None, ["inspect"]),
    (100, 50, "", ["inspect"]),
    (100, 50, "", ["inspect", "--owners", "dominator"]),
    (300, 20, "", ["inspect"]),
    (100, 50, "noexec", ["inspect"]),
    (100, 50, None, ["watch", "-d", "12", "-i", "3", "--full-every", "6"]),
    (1000, 25, None, ["inspect"]),
    (1000, 100, None, ["inspect", "--force"]),
]
QUICK = 6


def _vm_hwm(pid: int) -> int:
    return c.proc_status(pid).get("VmHWM", 0)


def run_case(heap: int, headroom: int | None, tmp: str | None, args: list[str]) -> list[object]:
    env = {"FIXTURE_HEAP_MB": str(heap)}
    with memory_cgroup() as group, shared_dir() as ready_dir:
        if tmp is None:
            spawned = spawn_target("heap_of_size", Path(ready_dir), env=env, prefix=group.prefix, timeout=120)
        else:
            setup = f"mount -t tmpfs {'-o ' + tmp if tmp else ''} tmpfs /tmp"
            spawned = spawn_in_namespaces("heap_of_size", ready_dir, env=env, prefix=group.prefix, setup=setup,
                                          timeout=120)
        with spawned as child:
            if headroom is not None:
                group.limit_to(group.usage + headroom * 1_000_000)
            group.reset_peak()
            before, hwm = group.usage, _vm_hwm(child.pid)
            done = subprocess.run([str(c.VENV_PYTHON), "-m", "leakhound", args[0], str(child.pid), *args[1:]],
                                  capture_output=True, text=True, timeout=600)
            alive = os.path.exists(f"/proc/{child.pid}") and group.oom_kills() == 0
            where = {None: "disk", "": "tmpfs"}.get(tmp, tmp)
            return [f"{heap} MB", "-" if headroom is None else f"+{headroom} MB", where, " ".join(args),
                    done.returncode, "yes" if alive else "KILLED",
                    c.mib(group.peak - before), c.mib(_vm_hwm(child.pid) - hwm) if alive else "-"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help=f"the first {QUICK} cases only")
    options = parser.parse_args()
    if not v1_memory_available():
        sys.exit("needs root and a cgroup v1 memory hierarchy (/sys/fs/cgroup/memory)")
    c.header("leakhound near the memory limit: what an inspection charges the target's cgroup", sys.argv)
    rows = [run_case(*case) for case in (CASES[:QUICK] if options.quick else CASES)]
    print(c.table(["heap", "headroom", "/tmp", "command", "exit", "alive", "cgroup peak", "VmHWM +"], rows))


if __name__ == "__main__":
    c.main_guard(main)
