"""A child forked from a process with ``trim`` applied on its timer thread runs the fix too
(payload/patches/trim.py): the timer thread, which a fork does not copy, is started again in
the child (os.register_at_fork, runner.py), once."""

from __future__ import annotations

import json
import subprocess
import sys

CHILD_REPORT = """
import json, os, threading
from leakhound.payload import runner

out = runner.handle({"op": "patch", "action": "apply", "fixes": ["trim"]})
assert out.get("ok"), out
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    names = [t.name for t in threading.enumerate()]
    os.write(write, json.dumps({"trim_threads": names.count("leakhound-trim")}).encode())
    os._exit(0)
os.close(write)
child = json.loads(os.read(read, 4096))
os.waitpid(pid, 0)
child["parent_trim_threads"] = [t.name for t in threading.enumerate()].count("leakhound-trim")
out = runner.handle({"op": "patch", "action": "revert", "fixes": ["trim"]})
assert out.get("ok"), out
print(json.dumps(child))
"""


def test_a_forked_child_runs_trims_timer_thread_again() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD_REPORT], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.splitlines()[-1]) == {"trim_threads": 1, "parent_trim_threads": 1}
