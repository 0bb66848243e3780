"""``leakhound simulate``: start simulated verifiers env workers with the four leaks."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer

from leakhound.commands.common import Reporter, new_reporter
from leakhound.commands.options import FIX_HELP, complete_fixes, finite, fixes_from
from leakhound.errors import LeakhoundError
from leakhound.simulate.fleet import start_fleet
from leakhound.simulate.workload import Workload

_DEFAULT = Workload()


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


def command(
    workers: Annotated[int, typer.Option("--workers", min=1, max=64, metavar="N", help="Worker processes.")] = 1,
    concurrency: Annotated[int, typer.Option(
        "--concurrency", min=1, metavar="N", help="Rollouts in flight per worker.")] = _DEFAULT.concurrency,
    turns: Annotated[int, typer.Option(
        "--turns", min=1, metavar="N", help="Model turns per rollout.")] = _DEFAULT.turns,
    rollouts: Annotated[str, typer.Option(
        "--rollouts", metavar="N|forever", help="Rollouts per worker, or 'forever'.")] = str(_DEFAULT.rollouts),
    image_kb: Annotated[int, typer.Option(
        "--image-kb", min=0, metavar="KIB", help="Base64 screenshot size per turn, KiB.")] = _DEFAULT.image_kb,
    group_size: Annotated[int, typer.Option(
        "--group-size", min=1, metavar="N", help="Rollouts per group (>1: group stage).")] = _DEFAULT.group_size,
    fix: Annotated[str, typer.Option(
        "--fix", "-f", metavar="FIX[,FIX]", autocompletion=complete_fixes,
        help=f"The fixes the workers run with: none, {FIX_HELP}")] = "none",
    ready_file: Annotated[Path | None, typer.Option(
        "--ready-file", metavar="FILE", help="Write {pids, report_dir} here when ready.")] = None,
    hold: Annotated[float, typer.Option(
        "--hold", min=0, callback=finite, metavar="SECONDS",
        help="Seconds to stay idle after the last rollout.")] = 600.0,
) -> None:
    """Start simulated verifiers v1 env workers (real subprocesses, real RSS) that reproduce the
    four production leaks: step bloat, the trajectory registry, intercept bodies, and glibc
    fragmentation. Prints the worker pids once their first rollouts have finished."""
    if rollouts != "forever" and not rollouts.isdigit():
        raise typer.BadParameter("a number or 'forever'", param_hint="--rollouts")
    fixes = fixes_from(fix, allow_none=True)
    run(workers=workers, concurrency=concurrency, turns=turns,
        rollouts=None if rollouts == "forever" else int(rollouts), image_kb=image_kb,
        group_size=group_size, fixes=",".join(fixes) or "none", ready_file=ready_file, hold=hold,
        reporter=new_reporter())


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
    try:
        # The workload's fields by name, over Workload()'s defaults.
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
    finally:
        # The workers' reports describe workers that are gone: nothing is left behind in /tmp,
        # not even the empty directory.
        shutil.rmtree(report_dir, ignore_errors=True)
