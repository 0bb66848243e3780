"""What the safe-point wait says when the payload never started (channel.PrivateChannel._blocked)."""

from __future__ import annotations

from leakhound.attach.channel import PrivateChannel
from leakhound.attach.payload_bytecode import BOOT_FILENAME

# py-spy's dump of a worker whose thread holds the GIL in numba's nopython code (no nogil):
# the main thread ran the bootstrap and waits in it to start the payload's thread
HOGGED = f'''Thread 8904 (idle): "MainThread"
    Thread.start (threading.py:969)
    <module> ({BOOT_FILENAME}:161)
Thread 8910 (active+gil): "Thread-1 (hog)"
Thread 10440 (idle): "leakhound-payload"
    _resident_bytes ({BOOT_FILENAME}:120)
'''
SLEEPING = '''Thread 5855 (idle): "MainThread"
    <module> (t_block_sleep.py:6)
'''


def test_a_thread_that_holds_the_gil_is_named_not_the_main_threads_safe_point() -> None:
    error = PrivateChannel._blocked(8904, 10.2, lambda: HOGGED)
    assert str(error).startswith("process 8904 ran leakhound's bootstrap, but its payload could not start "
                                 'within 10s: thread 8910 ("Thread-1 (hog)") holds the GIL'), str(error)
    assert "nogil" in error.hint and "main thread next executes" not in error.hint


def test_a_main_thread_that_never_ran_the_bootstrap_is_said_as_before() -> None:
    error = PrivateChannel._blocked(5855, 10.0, lambda: SLEEPING)
    assert str(error).startswith("process 5855's main thread did not reach a safe point within 10s; it is in:")
    assert "main thread next executes Python code" in error.hint
    assert str(PrivateChannel._blocked(1, 3.0, None)) == "process 1's main thread did not reach a safe point within 3s"
