"""The rich console every renderer prints through: respects NO_COLOR and a given file."""

from __future__ import annotations

import os
import re
import sys
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from rich.console import Console

# Columns when the output is no terminal and COLUMNS is not set: what a terminal, a ticket or
# a log viewer shows without scrolling sideways. Long owner paths and function names fold onto
# the next line there, whole; `--width` (or COLUMNS) asks for longer lines.
PIPED_WIDTH = 80

_width: int | None = None
_PADDED_LINE_END = re.compile(r" +\n")


def set_width(columns: int | None) -> None:
    """``--width``: every console wraps at ``columns`` (None: decide per output)."""
    global _width
    _width = columns


def _is_terminal(file: TextIO) -> bool:
    isatty = getattr(file, "isatty", None)
    return bool(isatty is not None and isatty())


def output_width(file: TextIO) -> int | None:
    """``--width``; else COLUMNS; else the terminal's (None: rich asks it); else 80."""
    if _width is not None:
        return _width
    if os.environ.get("COLUMNS", "").isdigit():
        return int(os.environ["COLUMNS"])
    return None if _is_terminal(file) else PIPED_WIDTH


class _UnpaddedLines:
    """A text file whose lines lose the spaces rich pads every table row with up to its
    width: invisible on a terminal, but in a file, a pipe or a ticket they are noise that
    diff and grep see (49 such lines in one piped inspect)."""

    def __init__(self, file: TextIO) -> None:
        self._file = file

    def write(self, text: str) -> int:
        # rich writes each print's lines whole, each with its newline, in one call
        return self._file.write(_PADDED_LINE_END.sub("\n", text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)


def escaped(text: str) -> str:
    """``text`` with its control characters escaped (``\\x1b``), newlines and tabs kept: what
    the target named (a class, a thread, a dict key, a payload's error) reaches the on-call
    engineer's terminal as text, never as an escape sequence (an OSC one retitles a terminal
    or writes its clipboard)."""
    if text.isprintable():
        return text
    return "".join(c if c in "\n\t" or c.isprintable() else c.encode("unicode_escape").decode() for c in text)


_console_class: type[Console] | None = None


def _escaping_console() -> type[Console]:
    """rich's Console whose every str (a print's, a table cell's) has its control characters
    escaped before rich reads its markup (rich's own styles are not in the text)."""
    global _console_class
    if _console_class is None:
        from rich.console import Console  # noqa: PLC0415

        class EscapingConsole(Console):
            def render_str(self, text: str, **kwargs: Any) -> Any:
                return super().render_str(escaped(text), **kwargs)

        _console_class = EscapingConsole
    return _console_class


def console(file: TextIO | None = None) -> Console:
    # rich is imported when there is something to print: ``--width`` is set (cli.py) before
    # the attach, and rich's ~20 ms of imports need not come before it.
    out = file or sys.stdout
    return _escaping_console()(
        file=out if _is_terminal(out) else _UnpaddedLines(out),  # type: ignore[arg-type]
        width=output_width(out),
        no_color="NO_COLOR" in os.environ,
        highlight=False,
        soft_wrap=False,
    )
