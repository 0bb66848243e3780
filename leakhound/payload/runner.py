"""Entry points of the in-target payload: one request in, one JSON result out.

Runs inside the target with the standard library only. Two ways in:

* ``run_from_dir(dir)``: the debugger path. The bootstrap (``boot.py``) runs at a safe point
  on the main thread and only starts a short-lived daemon thread, which loads this package
  and calls this: it reads ``request.json`` from the private directory, writes
  ``progress.json`` while it works and ``result.json`` (by atomic rename) when done.
* ``handle(request, progress)``: the in-process agent path (``agent.py``), called on the
  agent's own thread.

Only the fixed operations in ``OPERATIONS`` are accepted; a request never carries code.
"""

import json
import os
import sys
import threading
import time
import traceback

from . import arena, census, patches, probes, sampling

PAYLOAD_VERSION = "1"

_busy = threading.Lock()


def _is_stdlib(name):
    top = name.split(".", 1)[0]
    names = getattr(sys, "stdlib_module_names", None)
    if names is None:
        return top in sys.builtin_module_names
    return top in names or top.startswith("_") and top[1:] in names


def _int(value, default, low, high):
    if type(value) is not int:
        return default
    return max(low, min(high, value))


def _snapshot(request, progress):
    timeout = request.get("timeout")
    timeout = float(timeout) if type(timeout) in (int, float) and 0 < timeout <= 3600 else 60.0
    top_types = _int(request.get("top_types"), 50, 1, 10000)
    top_owners = _int(request.get("top_owners"), 50, 1, 10000)
    max_pause = request.get("max_pause_ms")
    max_pause = float(max_pause) if type(max_pause) in (int, float) and 0 < max_pause <= 60000 else None
    walk = census.Census(
        timeout=timeout,
        progress=progress,
        is_stdlib=_is_stdlib,
        exclude=(request,),
        compiled=request.get("walker") != "python",
        max_pause_ms=max_pause,
    )
    walk.run()
    heap = walk.result(top_types=top_types, top_owners=top_owners)
    del walk
    progress("arena", 0)
    allocators = arena.arena_stats()
    progress("probes", 0)
    found = probes.run_all()
    return {
        "heap": heap,
        "arena": allocators,
        "probes": found,
        "python_version": "%d.%d.%d" % sys.version_info[:3],
    }


def _ping(request, progress):
    return {"python_version": "%d.%d.%d" % sys.version_info[:3], "payload_version": PAYLOAD_VERSION}


def _patch(request, progress):
    return patches.handle(request)


OPERATIONS = {"snapshot": _snapshot, "ping": _ping, "patch": _patch, "sample": sampling.sample}


def handle(request, progress=None):
    """Run one request; always returns a JSON-able dict with ``ok``."""
    progress = progress or (lambda phase, done: None)
    if type(request) is not dict or request.get("op") not in OPERATIONS:
        return {"ok": False, "error": "unknown request", "kind": "BadRequest"}
    if not _busy.acquire(blocking=False):
        return {"ok": False, "error": "another leakhound request is running in this process",
                "kind": "Busy"}
    started = time.perf_counter()
    try:
        out = OPERATIONS[request["op"]](request, progress)
        out["ok"] = True
        out["payload_seconds"] = time.perf_counter() - started
        return out
    except Exception as exc:  # remote errors travel back, they never print in the target
        return {
            "ok": False,
            "error": "%s: %s" % (type(exc).__name__, exc),
            "kind": type(exc).__name__,
            "traceback": traceback.format_exc(limit=8),
        }
    finally:
        _busy.release()


def _write_json(path, doc):
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        # json.dumps, not json.dump: the streaming encoder builds nested closures that
        # reference each other, a reference cycle left for the target's GC on every call.
        fh.write(json.dumps(doc))
    os.rename(tmp, path)


def throttled(report, every=0.2):
    """``report(phase, done)`` at most every ``every`` seconds.

    Every report is I/O, which releases the GIL and takes it back: many of them in a row
    starve the target's main thread (each time the GIL changes hands, a thread waiting for it
    starts its 5 ms switch-interval wait over). Measured: the agent's unthrottled progress
    took the 4.8M-object benchmark's worst loop lag from 10 ms to 110-230 ms.
    """
    last = [0.0]

    def progress(phase, done):
        now = time.monotonic()
        if now - last[0] < every:
            return
        last[0] = now
        report(phase, done)

    return progress


def run_from_dir(directory):
    """The debugger path, on the payload's own thread: request.json in, result.json out."""

    def write_progress(phase, done):
        try:
            _write_json(os.path.join(directory, "progress.json"), {"phase": phase, "done": done})
        except OSError:
            pass

    progress = throttled(write_progress)

    try:
        with open(os.path.join(directory, "request.json")) as fh:
            request = json.load(fh)
        result = handle(request, progress)
    except (OSError, ValueError) as exc:
        result = {"ok": False, "error": "cannot read the request: %s" % exc, "kind": "BadRequest"}
    try:
        _write_json(os.path.join(directory, "result.json"), result)
    except OSError:
        pass  # the CLI gave up and removed the directory; nothing to leave behind
