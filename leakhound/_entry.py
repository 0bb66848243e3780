"""The console script's entry point.

Importing the CLI (typer, rich) takes a noticeable moment. A Ctrl-C that lands in it must exit
130 quietly, like one during a command, not print a traceback: while the CLI is imported the
signal is only noted (a KeyboardInterrupt raised inside an import can surface as anything,
e.g. 3.11's "RuntimeError: Error calling __set_name__", or be swallowed by importlib's lock
callback), and acted on once the import is done. Nothing has touched a target yet at that
point, so there is nothing to clean up.

A command that has written everything and cleaned up after itself says so by raising
``commands.common.Finished`` (``inspect``): the interpreter is then not torn down. After a
dominator pass on a big heap (hundreds of MB of graph, every module of typer, pydantic and
rich) the teardown is ~50 ms of an on-call engineer's wait, and nothing of it is needed.
"""

from __future__ import annotations

import os
import signal
import sys
import threading


def main() -> None:
    noted: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: noted.append(signum))
    try:
        from leakhound.cli import main as run
        from leakhound.commands.common import Finished
    finally:
        signal.signal(signal.SIGINT, previous)
    if noted:
        print("leakhound: interrupted", file=sys.stderr)
        sys.exit(130)
    try:
        run()
    except Finished as finished:
        exit_now(finished.code)
        raise


def exit_now(code: object) -> None:
    """os._exit(code), its atexit functions run, its output flushed, unless a thread of ours
    is still running or the output cannot be flushed: then return (a normal exit follows)."""
    if type(code) is not int and code is not None:
        return
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        return
    import atexit  # noqa: PLC0415

    atexit._run_exitfuncs()  # what was registered to run at exit still runs (then not again)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return  # a closed pipe, a closed stream: the normal exit says so
    os._exit(code or 0)
