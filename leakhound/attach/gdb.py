"""The gdb method: inject the payload into an unmodified target at a safe point.

gdb attaches, checks no thread is inside the pending-call machinery or fork, maps a
page in the target and writes the bootstrap into it (attach/bootstrap_page.py: the page is
unmapped once the bootstrap ran), queues it with ``Py_AddPendingCall(PyRun_SimpleString,
page)`` and detaches at once; the target's main thread runs the bootstrap at its next
bytecode boundary. The target is stopped only while gdb is
attached (measured and reported as ``attach_stop_ms``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from leakhound.attach.base import AttachLog, Injection
from leakhound.attach.bootstrap_page import PLACEHOLDER, bootstrap_text, page_size_for, placeholder_address
from leakhound.attach.ptrace.tracee import tracer_pid
from leakhound.errors import (
    AttachFailed,
    AttachTimeout,
    MethodUnavailable,
    MissingSymbols,
    PermissionDenied,
    TargetBusy,
    TargetNotFound,
)
from leakhound.model.names import Method

SCRIPT = Path(__file__).with_name("gdb_inject.py")
_RETRIES = 20


def gdb_path() -> str | None:
    return shutil.which("gdb")


_CALLED = re.compile(r"^\$1 = (\d+)$", re.MULTILINE)


@functools.cache
def calls_broken(gdb: str) -> str | None:
    """Why ``gdb`` cannot call a function in a process on this machine, or None when it can.

    Tried once per CLI run, before gdb touches the target, on a process of leakhound's own (its
    interpreter, asleep): ``call (int)getpid()``. Some gdb and kernel pairs cannot put back the
    registers' extended state after a call (gdb 13.1 on a 6.18 kernel: "Couldn't write
    extended state status: Bad address"); gdb then detaches from a thread whose interrupted
    system call returns -516 (ERESTART_RESTARTBLOCK) to the program (measured: a ``sleep``
    died of it; every gdb inspection failed so, its target left that way). Nothing decided
    when gdb cannot attach at all: the inspection says why (ptrace rights, _classify)."""
    child = subprocess.Popen([sys.executable, "-I", "-S", "-c", "import time; time.sleep(60)"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.1)  # its libc loaded: getpid is there to call
        argv = [gdb, "-nx", "-batch", "--readnever", "-iex", "set debuginfod enabled off",
                "-iex", "set auto-load off", "-p", str(child.pid), "-ex", "call (int)getpid()"]
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return "a call in a process of leakhound's own did not finish within 30 s"
    finally:
        child.kill()
        child.wait()
    text = out.stdout + out.stderr
    called = _CALLED.search(text)
    if called is not None and int(called.group(1)) == child.pid:
        return None
    if "ptrace:" in text or "Operation not permitted" in text or "No symbol" in text:
        return None  # not attached, or no call tried: nothing decided here (the target's run says why)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return next((line for line in lines if line.startswith("Couldn't") or "rror" in line), None) or (
        lines[-1] if lines else "no answer")


def command(pid: int, status_path: str) -> list[str]:
    return [
        gdb_path() or "gdb",
        "-nx",
        "-batch",
        # Minimal ELF symbols only: reading libpython's DWARF would keep the target stopped
        # several times longer, and exported names are all the injection needs.
        "--readnever",
        "-iex", "set debuginfod enabled off",
        # Symbols of libc and libpython only (loaded by the script): every other shared
        # library's symbol table would be read while the target is stopped.
        "-iex", "set auto-solib-add off",
        # Nothing of the target's is loaded: no scripts beside its objfiles (<exe>-gdb.py,
        # .debug_gdb_scripts), no .gdbinit (-nx), no libthread_db from its library directory
        # ($pdir): the target's owner controls those files, and gdb runs as root.
        "-iex", "set auto-load off",
        "-iex", "set auto-load safe-path /nonexistent",
        "-iex", "set libthread-db-search-path $sdir",
        "-iex", "set confirm off",
        "-iex", "set pagination off",
        # A signal that reaches the target while gdb runs malloc or Py_AddPendingCall in it
        # must not stop that call half way: gdb would detach with the thread still inside
        # its dummy frame, and the target dies of SIGSEGV on return (seen with a SIGUSR1
        # storm at the first injection). Asynchronous signals go straight to the target's
        # handlers (CPython's only set a flag); a fault inside the call unwinds it.
        "-iex", "handle all nostop noprint pass",
        "-iex", "handle SIGSEGV SIGBUS SIGILL SIGFPE SIGABRT stop print",
        "-iex", "set unwindonsignal on",
        "-iex", "set unwind-on-terminating-exception on",
        "-p", str(pid),
        "-x", str(SCRIPT),
    ]


def _classify(pid: int, output: str) -> None:
    text = output.lower()
    if "operation not permitted" in text or "ptrace" in text and "denied" in text:
        raise PermissionDenied(f"gdb could not attach to process {pid}: ptrace: operation not permitted")
    if "no such process" in text:
        raise TargetNotFound(f"process {pid} exited before gdb could attach")


# How long gdb is let finish past the injection's timeout once its script has begun calling
# into the target (gdb_inject.py writes LEAKHOUND_GDB_CALLING first): the calls take
# milliseconds, but one waits for CPython's pending-calls lock if another thread holds it.
CALL_GRACE = 10.0


def run_gdb(argv: list[str], env: dict[str, str], timeout: float, calling: str,
            log: AttachLog) -> tuple[int | None, str]:
    """Run gdb: (its exit status, its output), or (None, output) when it was stopped at the
    timeout. gdb killed while a function it called runs in the target (mmap,
    Py_AddPendingCall) leaves the thread in gdb's dummy frame: on return it traps and the
    target dies (measured: SIGKILL, SIGTERM or SIGHUP to gdb during a call killed a sleeping
    3.11 target; SIGINT did not: gdb unwinds the call). So gdb runs in a session of its own
    (a Ctrl-C, a hang-up or ``kill -- -PGID`` meant for leakhound never reaches it), and it
    is killed at the timeout only before its script began calling into the target; after,
    it is waited for CALL_GRACE seconds more, and killed then only if still not done.
    Interrupted itself (it defers its signals meanwhile: finish.held), leakhound leaves a gdb
    that is calling to finish on its own."""
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        try:
            out, _ = proc.communicate(timeout=max(0.0, timeout))
            return proc.returncode, out or ""
        except subprocess.TimeoutExpired:
            if os.path.exists(calling):
                log(f"gdb is calling into the target at the timeout: waited for up to {CALL_GRACE:.0f}s more")
                with contextlib.suppress(subprocess.TimeoutExpired):
                    out, _ = proc.communicate(timeout=CALL_GRACE)
                    return proc.returncode, out or ""
        proc.kill()
        out, _ = proc.communicate()
        return None, out or ""
    except BaseException:
        if proc.poll() is None and not os.path.exists(calling):
            proc.kill()
            proc.wait()
        raise


def inject(pid: int, code: str, *, timeout: float, log: AttachLog) -> Injection:
    """Queue ``code`` as a pending call in ``pid``. Retries while a thread of the target is in
    the pending-call machinery or fork."""
    gdb = gdb_path()
    if gdb is None:
        raise MethodUnavailable("gdb is not installed")
    deadline = time.monotonic() + timeout
    broken = calls_broken(gdb)
    if broken is not None:
        raise MethodUnavailable(
            f"gdb cannot call functions in a process on this machine ({broken.rstrip('.')}; tried on a process "
            "of leakhound's own): a call in the target would leave its interrupted system call broken, "
            f"so process {pid} was not touched. Use --method ptrace (x86-64) or the agent"
        )
    with tempfile.TemporaryDirectory(prefix="leakhound-gdb-") as tmp:
        status_path = os.path.join(tmp, "status.json")
        argv = command(pid, status_path)
        size = page_size_for(code)
        text = bootstrap_text(code, PLACEHOLDER, size)[:-1].decode()  # the NUL: gdb's script adds it
        calling = os.path.join(tmp, "calling")
        env = {**os.environ, "LEAKHOUND_GDB_STATUS": status_path, "LEAKHOUND_GDB_CODE": text,
               "LEAKHOUND_GDB_CALLING": calling,
               "LEAKHOUND_GDB_PLACEHOLDER": placeholder_address().decode(), "LEAKHOUND_GDB_PAGE_SIZE": str(size)}
        log(f"$ LEAKHOUND_GDB_CODE=... {shlex.join(argv)}")
        for attempt in range(1, _RETRIES + 1):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            began = time.monotonic()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(calling)  # an earlier attempt's: this one has not called yet
            returncode, output = run_gdb(argv, env, remaining, calling, log)
            if returncode is None:
                raise AttachTimeout(f"gdb did not finish attaching to {pid} within {timeout:.0f}s")
            took = (time.monotonic() - began) * 1000.0
            log(output.strip())
            try:
                with open(status_path) as fh:
                    status = json.load(fh)
                os.unlink(status_path)
            except (OSError, ValueError):
                _classify(pid, output)
                raise AttachFailed(
                    f"gdb could not run its script in process {pid}: "
                    + (output.strip().splitlines() or ["no output"])[-1]
                ) from None
            if status.get("ok"):
                log(f"bootstrap at {int(status.get('page') or 0):#x} ({size} bytes)")
                if status.get("woke"):
                    log(f"gdb: {status['woke']}")
                return Injection(method=Method.GDB, attach_stop_ms=took, attempts=attempt)
            tracer = tracer_pid(pid)
            if status.get("kind") == "attach" and tracer:
                # Someone else (another leakhound, py-spy) is attached for a moment: wait.
                log(f"attempt {attempt}: process {pid} is traced by pid {tracer}; retrying")
                if time.monotonic() + 0.1 > deadline:
                    raise TargetBusy(f"process {pid} is being traced by pid {tracer}")
                time.sleep(0.05 * attempt)
                continue
            _classify(pid, output)  # gdb could not attach at all: say why (ptrace, gone)
            if status.get("kind") == "symbols":
                log(f"gdb: {status.get('reason')}")
                missing = ", ".join(status.get("missing") or ()) or "Py_AddPendingCall, PyRun_SimpleString"
                where = status.get("object") or "its executable or libpython"
                raise MissingSymbols(
                    f"process {pid}'s Python lacks the symbols leakhound calls: {missing} "
                    f"(not among the symbols gdb read from {where})"
                )
            if not status.get("retry"):
                raise AttachFailed(f"injection into {pid} failed: {status.get('reason')}")
            log(f"attempt {attempt}: not at a safe point ({status.get('reason')}); retrying")
            time.sleep(0.02 * attempt)
    raise AttachTimeout(f"process {pid} never reached a point where injection is safe")
