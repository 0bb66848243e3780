"""Nothing of an injection stays mapped in the target: not after a TargetBlocked (the main
thread never reached a safe point, the request gave up, the bootstrap stays queued), and
not after successful requests; by either injector (the gdb method maps its page too:
attach/bootstrap_page.py; it used to leave the string it malloc'd, ~600 bytes a request).

The bootstrap page is needed until the queued call runs; it is then unmapped, whether or
not the request's private directory still exists: by the payload's thread once it loaded
(through its extension), by the bootstrap itself (ctypes) when the payload cannot start.
Checked on the target's own /proc/PID/maps and memory.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path

import pytest

from leakhound.attach import run_request
from leakhound.errors import AttachTimeout
from leakhound.model.names import Method
from tests.utils import spawn_target

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]

LIGHT = {"op": "snapshot", "top_types": 5, "top_owners": 5}
# How a bootstrap page starts: the self-unmapping statement (or, before it, the code).
PAGE_STARTS = (b"try:\n __import__('sys').__dict__.setdefault(", b"exec(")


def mappings(pid: int) -> list[tuple[int, int]]:
    """The target's mappings, but for ctypes' own libraries (a bootstrap whose payload cannot
    start imports ctypes to unmap its page)."""
    with open(f"/proc/{pid}/maps") as fh:
        return [
            tuple(int(x, 16) for x in line.split()[0].split("-"))  # type: ignore[misc]
            for line in fh if "_ctypes" not in line and "libffi" not in line
        ]


def holds_bootstrap(pid: int, address: int) -> bool:
    if not any(lo <= address < hi for lo, hi in mappings(pid)):
        return False
    try:
        with open(f"/proc/{pid}/mem", "rb") as mem:
            mem.seek(address)
            head = mem.read(64)
    except OSError:
        return False
    return head.startswith(PAGE_STARTS)


@pytest.mark.parametrize("method", [Method.PTRACE, Method.GDB])
def test_no_page_left_after_target_blocked_or_success(tmp_path: Path, method: Method,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # A bootstrap queued in a main thread that stays blocked: the ptrace stop now runs it
    # inside a read (stop.call_in_wait), so that is switched off here (the helper's test hook)
    # to make the case of the waits it does not run in (a C library's futex wait, a wait that
    # keeps the GIL) from this read.
    monkeypatch.setenv("LEAKHOUND_PTRACE_TEST", json.dumps({"call_in": False}))
    with spawn_target("signal_counter", tmp_path, env={"FIXTURE_MAIN": "blocking"}) as child:
        data_fd = child.report(refresh=False)["data_fd"]
        deadline = time.monotonic() + 5
        while child.report(refresh=False)["truth"]["sleeps"] < 1:  # now blocked in os.read
            assert time.monotonic() < deadline
            time.sleep(0.02)
        time.sleep(0.1)
        before = len(mappings(child.pid))
        pages = []
        said = []
        for _ in range(3):
            lines: list[str] = []
            with pytest.raises(AttachTimeout):
                # gdb reads libpython's symbols first: seconds on a loaded machine
                run_request(child.pid, LIGHT, method=method, timeout=2 if method is Method.PTRACE else 5,
                            log=lines.append)
            pages += [int(p, 16) for p in re.findall(r"bootstrap at (0x[0-9a-f]+)", "\n".join(lines))]
            said.append("\n".join(lines)[-2000:])
        assert len(pages) == 3, said
        # Still queued: the pages must stay until the main thread runs the calls.
        assert all(holds_bootstrap(child.pid, p) for p in pages)
        with open(f"/proc/{child.pid}/fd/{data_fd}", "wb", buffering=0) as pipe:
            pipe.write(b"msg-0")  # the read returns: the queued bootstraps run
        deadline = time.monotonic() + 10
        while any(holds_bootstrap(child.pid, p) for p in pages):
            assert time.monotonic() < deadline, [hex(p) for p in pages if holds_bootstrap(child.pid, p)]
            time.sleep(0.05)
        after_blocked = len(mappings(child.pid))
        # Then successful requests, each page gone once its bootstrap ran.
        for n in range(1, 4):
            lines = []
            while child.report(refresh=False)["truth"]["reads"] < n:
                time.sleep(0.02)
            with open(f"/proc/{child.pid}/fd/{data_fd}", "wb", buffering=0) as pipe:
                pipe.write(b"msg-%d" % n)
            # SIGUSR1: a handler run lets the pending call run. Sent until the request is
            # answered: one sent before the call was queued let the main thread go back to its
            # blocking read first (CI, on a loaded machine: TargetBlocked).
            answered = threading.Event()

            def nudge(pid: int = child.pid, answered: threading.Event = answered) -> None:
                while not answered.wait(0.2):
                    os.kill(pid, 10)

            nudger = threading.Thread(target=nudge, daemon=True)
            os.kill(child.pid, 10)
            nudger.start()
            try:
                remote = run_request(child.pid, LIGHT, method=method, timeout=30, log=lines.append)
            finally:
                answered.set()
                nudger.join()
            assert remote.result["ok"]
            pages += [int(p, 16) for p in re.findall(r"bootstrap at (0x[0-9a-f]+)", "\n".join(lines))]
        time.sleep(0.3)
        left = [hex(p) for p in pages if holds_bootstrap(child.pid, p)]
        assert child.proc.poll() is None
    print(f"\nmappings: {before} before, {after_blocked} after 3 TargetBlocked (bootstraps run), pages {left} left")
    assert left == []
    assert after_blocked <= before
