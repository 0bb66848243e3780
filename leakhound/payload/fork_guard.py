"""A child forked while a leakhound thread imports a module can import it itself.

The child inherits the module half run and its import lock held by a thread it does not have:
its own next import of that module waits for good (measured on 3.8-3.13), or finds the half
module (3.13: "cannot access submodule 'util' of module 'importlib'"). Before a fork the
idents of leakhound's threads (named ``leakhound...``) are noted; in the child, a module whose
import lock one of them holds goes back to not imported, and its lock is dropped.

Registered once per process: by boot.py (the debugger methods) before the payload's thread
starts importing, under ``_leakhound_payload.fork_guard``; by the agent as it starts. Standard
library only, and nothing here imports: it runs before the payload is loaded.
"""

import os
import sys
import threading

_idents = set()  # type: set


def before():
    # threading's table of running threads read without its lock (threading.enumerate takes
    # it): a fork from a signal handler that interrupted Thread.start, which holds it, would
    # wait for good. One C call copies the values, under the GIL.
    _idents.clear()
    running = getattr(threading, "_active", None)
    threads = list(running.values()) if isinstance(running, dict) else threading.enumerate()
    _idents.update(t.ident for t in threads if t.name.startswith("leakhound"))


def after_in_child():
    bootstrap = sys.modules.get("_frozen_importlib")
    locks = getattr(bootstrap, "_module_locks", None)
    if not _idents or not isinstance(locks, dict):
        return
    # The names first, then each entry: a tuple per entry made while the dict is read could
    # start a collection whose weakref callbacks take entries out of it.
    for name in list(locks):
        ref = locks.get(name) if type(name) is str else None
        lock = ref() if callable(ref) else None
        if getattr(lock, "owner", None) in _idents:
            module = sys.modules.get(name)
            if getattr(getattr(module, "__spec__", None), "_initializing", False):
                sys.modules.pop(name, None)
            locks.pop(name, None)
    _idents.clear()


def register():
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(before=before, after_in_child=after_in_child)
