"""``leakhound simulate``: start simulated verifiers env workers with the four leaks."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from leakhound.commands.common import Reporter
from leakhound.errors import LeakhoundError
from leakhound.simulate.fleet import start_fleet


class ReadyFileError(LeakhoundError):
    EXIT_CODE = 2
    HELP_TEXT = "Pass --ready-file a path in a directory you can write."


def check_ready_file(ready_file: Path) -> None:
    """Fail before any worker starts if the ready file cannot be written where it goes."""
    probe = ready_file.with_name(ready_file.name + ".tmp")
    try:
        if ready_file.is_dir():
            raise IsADirectoryError(21, "Is a directory")
        probe.write_text("", encoding="utf-8")
        probe.unlink()
    except OSError as exc:
        raise ReadyFileError(f"cannot write --ready-file {ready_file}: {exc.strerror or exc}") from None


def run(
    *,
    workers: int,
    concurrency: int,
    turns: int,
    rollouts: int | None,
    image_kb: int,
    group_size: int,
    fixes: str,
    ready_file: Path | None,
    hold: float,
    reporter: Reporter,
) -> None:
    if ready_file is not None:
        check_ready_file(ready_file)
    report_dir = Path(tempfile.mkdtemp(prefix="leakhound-simulate-"))
    with start_fleet(workers=workers, concurrency=concurrency, turns=turns, rollouts=rollouts,
                     image_kb=image_kb, group_size=group_size, fixes=fixes, hold=hold,
                     report_dir=report_dir, ready_file=ready_file) as fleet:
        fleet.wait_ready(timeout=300)
        reporter.note(f"leakhound: simulated workers ready: pids {' '.join(map(str, fleet.pids))}")
        reporter.note(f"leakhound: their own reports: {report_dir}/<pid>.json; Ctrl-C stops them")
        print(" ".join(map(str, fleet.pids)), flush=True)
        try:
            while any(p.poll() is None for p in fleet.processes):
                time.sleep(0.5)
        finally:
            fleet.stop()
