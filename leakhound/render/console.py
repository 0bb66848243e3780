"""The rich console every renderer prints through: respects NO_COLOR and a given file."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.console import Console

# Columns when the output is no terminal and COLUMNS is not set: wide enough that nothing is
# wrapped (a pipe, `kubectl logs`, a file), as the whole line is what grep and people read.
UNWRAPPED = 1000

_width: int | None = None


def set_width(columns: int | None) -> None:
    """``--width``: every console wraps at ``columns`` (None: decide per output)."""
    global _width
    _width = columns


def output_width(file: TextIO) -> int | None:
    """``--width``; else COLUMNS; else the terminal's (None: rich asks it); else unwrapped."""
    if _width is not None:
        return _width
    if os.environ.get("COLUMNS", "").isdigit():
        return int(os.environ["COLUMNS"])
    isatty = getattr(file, "isatty", None)
    return None if isatty is not None and isatty() else UNWRAPPED


def console(file: TextIO | None = None) -> Console:
    # rich is imported when there is something to print: ``--width`` is set (cli.py) before
    # the attach, and rich's ~20 ms of imports need not come before it.
    from rich.console import Console  # noqa: PLC0415

    out = file or sys.stdout
    return Console(
        file=out,
        width=output_width(out),
        no_color="NO_COLOR" in os.environ,
        highlight=False,
        soft_wrap=False,
    )


