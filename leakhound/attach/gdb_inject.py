# Runs inside gdb's embedded Python (not in leakhound's interpreter, not in the target).
# gdb has already attached (-p) and stopped every thread. We queue the bootstrap as a
# CPython "pending call", which the main thread runs at its next bytecode boundary: a safe
# point where it holds the GIL and no C code is half way through. The only inferior calls we
# make here are mmap (a page for the bootstrap string: no allocator lock, nothing of the
# target's heap) and Py_AddPendingCall, so we first make sure no thread is inside the
# pending-call machinery (or fork), whose lock we could otherwise deadlock on; if one is,
# we report "retry" and the CLI attaches again shortly.
# The page's text starts by listing the page for the payload to unmap once it ran
# (attach/bootstrap_page.py): its address is written over the text's placeholder here.
import json
import os
import re
import time

import gdb  # noqa: F401 - provided by gdb

STATUS = os.environ["LEAKHOUND_GDB_STATUS"]
CALLING = os.environ["LEAKHOUND_GDB_CALLING"]
CODE = os.environ["LEAKHOUND_GDB_CODE"].encode()  # the page's text, its address a placeholder
PLACEHOLDER = os.environ["LEAKHOUND_GDB_PLACEHOLDER"].encode()
PAGE_SIZE = int(os.environ["LEAKHOUND_GDB_PAGE_SIZE"])
MMAP = "((unsigned long(*)(unsigned long,unsigned long,int,int,int,long))mmap)"
MUNMAP = "((int(*)(unsigned long,unsigned long))munmap)"
# The pending-call machinery (its lock) and fork (a child must not inherit a half-queued
# call). The allocator's locks no longer matter: nothing here calls malloc.
UNSAFE = ("PendingCall", "pending_call", "fork")
CALLED = ("Py_AddPendingCall", "PyRun_SimpleString", "mmap", "munmap")
# A worker at rest (ptrace/stop.py idle_wait, the same rules): an epoll_wait of CPython's
# select module waiting more than WAKE_AFTER_MS returns 0, "no events"; a futex wait of
# CPython's lock acquisition returns EINTR, as after a signal's handler. Nothing else.
WAKE_AFTER_MS = 200
EINTR = -4
INTERRUPTED = (-512, -513, -514, -516, EINTR)  # -ERESTART*, -EINTR: interrupted by the stop
SYS_EPOLL_WAIT, SYS_EPOLL_PWAIT, SYS_FUTEX = 232, 281, 202
SELECT_MODULE = re.compile(r"/select\.[^/]*\.so$")
LOCK_WAITS = ("PyThread_acquire_lock_timed", "_PySemaphore_Wait")


def python_object():
    """The file gdb looked in for CPython's symbols: libpython, else the executable."""
    names = [objfile.filename for objfile in gdb.objfiles() if objfile.filename]
    shared = [name for name in names if "libpython" in os.path.basename(name)]
    return shared[0] if shared else gdb.current_progspace().filename or "the executable"


def lookup_error(name):
    """gdb's error when it cannot resolve ``name`` in the target, else ""."""
    try:
        gdb.parse_and_eval("(void*)" + name)
    except gdb.error as exc:
        return str(exc)
    return ""


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


def _code_mappings(pid):
    """(start, end, path) of each executable mapping of the target (/proc/PID/maps)."""
    out = []
    with open("/proc/%d/maps" % pid, "rb") as fh:
        text = fh.read(8 << 20).decode("utf-8", "replace")
    for line in text.splitlines():
        fields = line.split(None, 5)
        if len(fields) >= 5 and "x" in fields[1]:
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            out.append((lo, hi, fields[5].strip() if len(fields) > 5 else ""))
    return out


def caller(pid, python):
    """Who made the main thread's system call: "lock", "select" or "" (see WAKE_AFTER_MS):
    the first word on its stack that points into code outside libc, taken as the return
    address (gdb started with --readnever does not unwind libc's frames)."""
    sp = int(gdb.parse_and_eval("$rsp"))
    stack = bytes(gdb.selected_inferior().read_memory(sp, 512))
    code = _code_mappings(pid)
    for i in range(0, len(stack) - 7, 8):
        word = int.from_bytes(stack[i:i + 8], "little")
        path = next((p for lo, hi, p in code if lo <= word < hi), None)
        if path is None or re.search(r"/libc(\.so[.\d]*|-[\d.]+\.so)$", path):
            continue
        if path == python or "libpython" in os.path.basename(path):
            said = gdb.execute("info symbol %#x" % word, to_string=True)
            return "lock" if said.split(" ")[0] in LOCK_WAITS else "select"
        return "select" if SELECT_MODULE.search(path) else ""
    return ""


def idle_wait(pid):
    """End the main thread's wait for the bootstrap if it is one of a worker at rest: set
    what its system call returns, not restarted. Returns why, or ""."""
    frame = gdb.newest_frame()

    def reg(name):
        return int(frame.read_register(name))

    rax, nr = reg("rax"), reg("orig_rax")
    if rax not in INTERRUPTED:
        return ""
    if nr in (SYS_EPOLL_WAIT, SYS_EPOLL_PWAIT):
        timeout = reg("r10") & 0xFFFFFFFF
        timeout = timeout - (1 << 32) if timeout >= 1 << 31 else timeout
        if rax != EINTR or (nr == SYS_EPOLL_PWAIT and reg("r8")) or 0 <= timeout <= WAKE_AFTER_MS:
            return ""
        if caller(pid, python_object()) != "select":
            return ""
        value, why = 0, "epoll_wait for CPython's select module: woken with no events"
    elif nr == SYS_FUTEX and (reg("rsi") & 0x7F) in (0, 9):
        if caller(pid, python_object()) != "lock":
            return ""
        value, why = EINTR, "a lock (a futex) in CPython's lock wait: woken with EINTR"
    else:
        return ""
    gdb.execute("set $rax = %d" % value)
    gdb.execute("set $orig_rax = -1")
    return "the main thread waits in " + why


def main():
    t0 = time.monotonic()
    if gdb.selected_inferior().pid == 0:
        report(ok=False, retry=False, kind="attach", reason="gdb did not attach to the process")
        return
    for library in ("libpython", "libc.so"):
        gdb.execute("sharedlibrary " + library, to_string=True)
    errors = {name: lookup_error(name) for name in CALLED}
    missing = [name for name, error in errors.items() if error]
    if missing:
        # Checked first: nothing to retry, and nothing was written into the target.
        report(ok=False, retry=False, kind="symbols", missing=missing, object=python_object(),
               reason="; ".join(error for error in errors.values() if error))
        return
    busy = unsafe_frames()
    if busy:
        report(ok=False, retry=True, reason="; ".join(busy), check_ms=(time.monotonic() - t0) * 1e3)
        return
    inferior = gdb.selected_inferior()
    for thread in inferior.threads():
        if thread.ptid[1] == inferior.pid:
            thread.switch()
    # From here gdb calls functions in the target: killed now, it would leave a thread in
    # its dummy frame (the target traps on return). The CLI kills a gdb at its timeout only
    # before this file exists (attach/gdb.py run_gdb).
    open(CALLING, "w").close()
    # PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS
    addr = int(gdb.parse_and_eval("%s(0, %d, 3, 0x22, -1, 0)" % (MMAP, PAGE_SIZE)))
    if addr == 0 or addr >= (1 << 64) - 4096:
        report(ok=False, retry=False, reason="mmap in the target failed")
        return
    text = CODE.replace(PLACEHOLDER, b"%#018x" % addr, 1) + b"\0"
    try:
        inferior.write_memory(addr, text)
    except BaseException:
        gdb.parse_and_eval("%s(%d, %d)" % (MUNMAP, addr, PAGE_SIZE))
        raise
    # A call that did not return (an error here) may have queued the page: it stays mapped.
    rc = int(
        gdb.parse_and_eval(
            "(int)Py_AddPendingCall((int(*)(void*))PyRun_SimpleString, (void*)%d)" % addr
        )
    )
    if rc != 0:  # not queued: nothing will run it or unmap it
        gdb.parse_and_eval("%s(%d, %d)" % (MUNMAP, addr, PAGE_SIZE))
    woke = ""
    if rc == 0:
        try:
            woke = idle_wait(inferior.pid)
        except (gdb.error, OSError, ValueError):  # a register or a frame it could not read: left as it was
            woke = ""
    report(ok=rc == 0, retry=rc != 0, reason="" if rc == 0 else "pending-call queue full",
           check_ms=(time.monotonic() - t0) * 1e3, page=addr, woke=woke)


try:
    main()
except Exception as exc:  # gdb.error, MemoryError... always leave a status for the CLI
    report(ok=False, retry=False, reason="%s: %s" % (type(exc).__name__, exc))
