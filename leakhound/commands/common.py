"""What every command shares: progress and -v logging on stderr."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Reporter:
    """Progress and verbose log lines go to stderr, so stdout stays clean for --json."""

    def __init__(self, *, verbose: bool = False, quiet: bool = False, file: TextIO | None = None) -> None:
        self.verbose = verbose
        self.quiet = quiet
        self.file = file or sys.stderr
        self._last = 0.0
        self._shown = False
        self._tty = hasattr(self.file, "isatty") and self.file.isatty()

    def log(self, line: str) -> None:
        if self.verbose and line:
            self._clear()
            print(line, file=self.file)

    def note(self, line: str) -> None:
        if not self.quiet:
            self._clear()
            print(line, file=self.file)

    def progress(self, phase: str, done: int) -> None:
        if self.quiet:
            return
        now = time.monotonic()
        if now - self._last < 0.25:
            return
        self._last = now
        text = f"leakhound: {phase} {done:,} objects" if done else f"leakhound: {phase}"
        if self._tty:
            print(f"\r\033[K{text}", end="", file=self.file, flush=True)
            self._shown = True
        else:
            print(text, file=self.file, flush=True)

    def _clear(self) -> None:
        if self._shown:
            print("\r\033[K", end="", file=self.file, flush=True)
            self._shown = False

    def done(self) -> None:
        self._clear()
