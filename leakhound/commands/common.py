"""What every command shares: progress and -v logging on stderr, a simulated worker to show."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from leakhound.simulate.fleet import Fleet


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


@contextlib.contextmanager
def leaking_simulated_worker(
    report_dir: str, *, until: Callable[[dict[str, Any]], bool]
) -> Iterator[Fleet]:
    """A fresh simulated verifiers worker (4 rollouts x 24 turns x 64 KB screenshots, churning,
    no fixes), yielded once its own report satisfies ``until``; always stopped afterwards.

    Where no debugger-style attach is possible it runs the in-process agent, so commands
    that show it work without ptrace too.
    """
    # Imported here: every command imports this module, few start a simulated worker.
    from leakhound.attach import ptrace
    from leakhound.attach.gdb import gdb_path
    from leakhound.simulate.fleet import start_fleet

    env = {} if ptrace.available() or gdb_path() else {"LEAKHOUND_AGENT": "1"}
    with start_fleet(workers=1, concurrency=4, turns=24, rollouts=None, image_kb=64, group_size=1,
                     fixes="none", hold=0, report_dir=report_dir, stats_interval=2.0, extra_env=env) as fleet:
        fleet.wait_ready(timeout=120)
        fleet.wait_for(until, timeout=120, what="leak enough to show")
        try:
            yield fleet
        finally:
            fleet.stop()
