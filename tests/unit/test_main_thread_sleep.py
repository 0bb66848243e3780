"""How long a process's main thread still sleeps in time.sleep (attach.process.main_thread_sleep),
read from /proc/PID/syscall and the sleep's timespec in its memory: this machine's CPythons
(clock_nanosleep with TIMER_ABSTIME on 3.11+, pselect6 with no descriptors on 3.10)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from leakhound.attach.process import main_thread_sleep
from tests.pythons import installed_pythons
from tests.utils import wait_until

_PYTHONS = installed_pythons()


@pytest.mark.parametrize("version", sorted({"3.10", "3.11", "3.13"} & set(_PYTHONS)))
def test_the_sleep_left_is_read_from_the_target(version: str) -> None:
    child = subprocess.Popen([_PYTHONS[version], "-c", "import time; time.sleep(30)"])
    try:
        left = wait_until(lambda: main_thread_sleep(child.pid), what="the child asleep")
        assert 20.0 < left <= 30.0, left
    finally:
        child.kill()
        child.wait()


def test_anything_else_is_not_a_sleep() -> None:
    waits = ("import threading; threading.Event().wait()", "import select; select.select([0], [], [], 30)",
             "import sys; sys.stdin.read()")
    children = [subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE) for code in waits]
    try:
        time.sleep(0.5)
        assert [main_thread_sleep(c.pid) for c in children] == [None, None, None]
    finally:
        for c in children:
            c.kill()
            c.wait()
