"""The console script's entry point.

Importing the CLI (typer, rich) takes a noticeable moment; a Ctrl-C that lands in it exits
130 quietly, like one during a command, instead of printing a KeyboardInterrupt traceback.
Nothing has touched a target yet at that point, so there is nothing to clean up.
"""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from leakhound.cli import main as run
    except KeyboardInterrupt:
        print("leakhound: interrupted", file=sys.stderr)
        sys.exit(130)
    run()
