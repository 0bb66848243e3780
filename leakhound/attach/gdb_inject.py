# Runs inside gdb's embedded Python (not in leakhound's interpreter, not in the target).
# gdb has already attached (-p) and stopped every thread. We queue the bootstrap as a
# CPython "pending call", which the main thread runs at its next bytecode boundary: a safe
# point where it holds the GIL and no C code is half way through. The only inferior calls we
# make here are malloc (for the bootstrap string) and Py_AddPendingCall, so we first make
# sure no thread is inside the allocator or the pending-call machinery, whose locks we could
# otherwise deadlock on; if one is, we report "retry" and the CLI attaches again shortly.
import json
import os
import time

import gdb  # noqa: F401 - provided by gdb

STATUS = os.environ["LEAKHOUND_GDB_STATUS"]
CODE = os.environ["LEAKHOUND_GDB_CODE"].encode()
UNSAFE = (
    "malloc", "free", "calloc", "realloc", "memalign", "_int_", "tcache", "arena_get",
    "sysmalloc", "systrim", "PendingCall", "pending_call", "fork",
)


def report(**doc):
    with open(STATUS, "w") as fh:
        json.dump(doc, fh)


def unsafe_frames():
    found = []
    for thread in gdb.selected_inferior().threads():
        thread.switch()
        frame = gdb.newest_frame()
        depth = 0
        while frame is not None and depth < 8:
            name = frame.name() or ""
            if any(token in name for token in UNSAFE):
                found.append("thread %d in %s" % (thread.num, name))
                break
            try:
                frame = frame.older()
            except gdb.error:
                break
            depth += 1
    return found


def main():
    t0 = time.monotonic()
    if gdb.selected_inferior().pid == 0:
        report(ok=False, retry=False, kind="attach", reason="gdb did not attach to the process")
        return
    for library in ("libpython", "libc.so"):
        gdb.execute("sharedlibrary " + library, to_string=True)
    busy = unsafe_frames()
    if busy:
        report(ok=False, retry=True, reason="; ".join(busy), check_ms=(time.monotonic() - t0) * 1e3)
        return
    inferior = gdb.selected_inferior()
    for thread in inferior.threads():
        if thread.ptid[1] == inferior.pid:
            thread.switch()
    try:
        gdb.parse_and_eval("(void*)Py_AddPendingCall")
        gdb.parse_and_eval("(void*)PyRun_SimpleString")
    except gdb.error as exc:
        report(ok=False, retry=False, kind="symbols", reason=str(exc))
        return
    addr = int(gdb.parse_and_eval("(unsigned long)malloc(%d)" % (len(CODE) + 1)))
    if not addr:
        report(ok=False, retry=False, reason="malloc in the target returned NULL")
        return
    inferior.write_memory(addr, CODE + b"\0")
    rc = int(
        gdb.parse_and_eval(
            "(int)Py_AddPendingCall((int(*)(void*))PyRun_SimpleString, (void*)%d)" % addr
        )
    )
    report(ok=rc == 0, retry=rc != 0, reason="" if rc == 0 else "pending-call queue full",
           check_ms=(time.monotonic() - t0) * 1e3)


try:
    main()
except Exception as exc:  # gdb.error, MemoryError... always leave a status for the CLI
    report(ok=False, retry=False, reason="%s: %s" % (type(exc).__name__, exc))
