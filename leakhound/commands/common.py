"""What every command shares: the global options' values, and progress and -v logging on stderr."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, TextIO

from leakhound.render.console import escaped

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

#: Set by the app's global options (``-v``) before a command runs.
SETTINGS: dict[str, Any] = {"verbose": False}


class Finished(SystemExit):
    """Raised by a command that has written all its output and cleaned up after itself (its
    request in the target over, its files removed): exit 0, and the console script may skip
    tearing the interpreter down (``_entry.py``)."""

    def __init__(self) -> None:
        super().__init__(0)


def new_reporter(*, quiet: bool = False) -> Reporter:
    return Reporter(verbose=bool(SETTINGS["verbose"]), quiet=quiet)


class Reporter:
    """Progress and verbose log lines go to stderr, so stdout stays clean for --json.

    On a terminal progress is one live bar (the phase, objects so far, time); elsewhere (a
    log, a pipe) one line per phase, each said once.
    """

    def __init__(self, *, verbose: bool = False, quiet: bool = False, file: TextIO | None = None) -> None:
        self.verbose = verbose
        self.quiet = quiet
        self.file = file or sys.stderr
        self._tty = hasattr(self.file, "isatty") and self.file.isatty()
        self._phase: str | None = None
        # Phases already said since the work began: the census walks the roots twice under a
        # pause budget (sizing, then the full walk), and each phase is said once.
        self._said: set[str] = set()
        self._bar: Progress | None = None
        self._task: TaskID | None = None

    def log(self, line: str) -> None:
        if self.verbose and line:
            self._say(line)

    def note(self, line: str) -> None:
        if not self.quiet:
            self._say(line)

    def progress(self, phase: str, done: int) -> None:
        if self.quiet:
            return
        if not self._tty:
            if phase not in self._said:
                print(f"leakhound: {escaped(phase)}", file=self.file, flush=True)
                self._said.add(phase)
            self._phase = phase
            return
        if self._bar is None:
            self._start_bar()
        assert self._bar is not None and self._task is not None
        self._phase = phase
        counted = f" {done:,} objects" if done else ""
        self._bar.update(self._task, description=f"leakhound: {phase}{counted}")

    def status(self, line: str) -> None:
        """Where a long wait is: on a terminal the live bar's text, elsewhere one line each."""
        if self.quiet:
            return
        if not self._tty:
            print(f"leakhound: {escaped(line)}", file=self.file, flush=True)
            return
        from rich.markup import escape

        if self._bar is None:
            self._start_bar()
        assert self._bar is not None and self._task is not None
        self._bar.update(self._task, description=f"leakhound: {escape(line)}")

    def done(self) -> None:
        """The work that showed progress is over: the bar goes, the next phase line is said anew."""
        if self._bar is not None:
            self._bar.stop()
        self._bar = self._task = None
        self._phase = None
        self._said.clear()

    def _start_bar(self) -> None:
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        from leakhound.render.console import console

        self._bar = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
            console=console(self.file), transient=True,
        )
        self._task = self._bar.add_task("leakhound", total=None)
        self._bar.start()

    def _say(self, line: str) -> None:
        if self._bar is not None:
            self._bar.console.print(line, markup=False, highlight=False)
        else:
            print(escaped(line), file=self.file)
