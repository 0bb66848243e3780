"""The console script's entry point.

Importing the CLI (typer, rich) takes a noticeable moment. A Ctrl-C that lands in it must exit
130 quietly, like one during a command, not print a traceback: while the CLI is imported the
signal is only noted (a KeyboardInterrupt raised inside an import can surface as anything,
e.g. 3.11's "RuntimeError: Error calling __set_name__", or be swallowed by importlib's lock
callback), and acted on once the import is done. Nothing has touched a target yet at that
point, so there is nothing to clean up.
"""

from __future__ import annotations

import signal
import sys


def main() -> None:
    noted: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: noted.append(signum))
    try:
        from leakhound.cli import main as run
    finally:
        signal.signal(signal.SIGINT, previous)
    if noted:
        print("leakhound: interrupted", file=sys.stderr)
        sys.exit(130)
    run()
