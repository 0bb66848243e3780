"""Options several commands share, and their checks: one spelling, one help text each."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Annotated

import typer

from leakhound.commands.common import Reporter
from leakhound.core.capture import FOLLOW_PROGRESS
from leakhound.core.request import RequestOptions
from leakhound.errors import ReportFileError
from leakhound.model.names import FIX_NAMES, METHOD_NAMES, Method, parse_fixes


def request_options(*, method: Method, timeout: float, reporter: Reporter, force: bool = False) -> RequestOptions:
    """The options of every request a command makes, from its ``--method``, ``--timeout`` and
    ``--force`` (its ``-v`` lines to ``reporter``): built once, passed down."""
    return RequestOptions(method=method, timeout=timeout, log=reporter.log, force=force)


def _match(value: str | None) -> str | None:
    if value is not None:
        try:
            re.compile(value)
        except re.error as exc:
            raise typer.BadParameter(f"not a regular expression: {exc}", param_hint="--match") from None
    return value


def finite(value: float | None) -> float | None:
    """The check every float option runs (``callback=finite``) beside its range: nan compares
    false with any ``min=``/``max=`` and passes it, and an infinite time or pause is no limit."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number")
    return value


def fixes_from(text: str, *, allow_none: bool = False) -> tuple[str, ...]:
    """``--fix`` as the core takes it, or the usage error (exit 2) that names the choices."""
    try:
        return parse_fixes(text, allow_none=allow_none)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--fix") from None


# A completion's description is cut to this: typer lays zsh's out at 80 columns when its output
# is not a terminal (it never is for completion), and a longer one broke onto a second line.
COMPLETION_DESCRIPTION = 60


def _described(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= COMPLETION_DESCRIPTION else text[: COMPLETION_DESCRIPTION - 1] + "…"


def complete_pids(incomplete: str) -> list[tuple[str, str]]:
    """Shell completion of a PID: the Python processes leakhound can read, with their titles."""
    from leakhound.core.targets import python_processes

    return [(str(pid), _described(text)) for pid, text in python_processes() if str(pid).startswith(incomplete)]


def complete_fixes(incomplete: str) -> list[tuple[str, str]]:
    """Shell completion of ``--fix``: the fix names, each after the ones already typed before a
    comma (``steps,reg`` -> ``steps,registry``), with what the fix does."""
    from leakhound.patches import FIXES

    done, comma, part = incomplete.rpartition(",")
    chosen = {name.strip().lower() for name in done.split(",")}
    described = {"all": "every fix", **{name: spec.summary for name, spec in FIXES.items()}}
    return [(f"{done}{comma}{name}", _described(what)) for name, what in described.items()
            if name.startswith(part.strip().lower()) and name not in chosen and not (comma and name == "all")]


def pids_or_match(pids: list[int] | None, match: str | None) -> tuple[int, ...]:
    if not pids and not match:
        raise typer.BadParameter("give at least one PID or --match PATTERN", param_hint="PID")
    return tuple(pids or ())


PidArg = Annotated[int, typer.Argument(metavar="PID", help="Process id of the Python worker.", min=1,
                                        show_default=False, autocompletion=complete_pids)]
PidsArg = Annotated[list[int] | None, typer.Argument(
    metavar="PID", help="Process ids of Python workers.", min=1, show_default=False, autocompletion=complete_pids)]
MatchOpt = Annotated[str | None, typer.Option(
    "--match", metavar="REGEX", callback=_match,
    help="Every Python process whose title or command line matches this regular expression, ignoring case.")]
MethodOpt = Annotated[Method, typer.Option(
    "--method", "-m", metavar="METHOD",
    help=f"How to get into the target: {', '.join(METHOD_NAMES)}.")]
TimeoutOpt = Annotated[float, typer.Option(
    "--timeout", "-t", min=1.0, callback=finite, metavar="SECONDS", help="Give up after this many seconds.")]
# A census's --timeout: a hard limit when given; by default the request's progress decides.
CensusTimeoutOpt = Annotated[float | None, typer.Option(
    "--timeout", "-t", min=1.0, callback=finite, metavar="SECONDS", show_default=False,
    help="Give up after this many seconds, progressing or not. Default: no fixed time; give up when the "
         "worker shows no progress for 45 s (LEAKHOUND_STALL_SECONDS), or at a ceiling of 120 s + 60 s a GiB of "
         "its RSS (docs/inspect.md, 'How long an inspection may take').")]


def wall_clock(timeout: float | None) -> float:
    """A ``CensusTimeoutOpt`` as the core takes it: the seconds given, or ``FOLLOW_PROGRESS``."""
    return FOLLOW_PROGRESS if timeout is None else timeout
JsonOpt = Annotated[bool, typer.Option(
    "--json", help="Print one JSON document (schema in docs/) instead of tables.")]
TopOpt = Annotated[int, typer.Option("--top", "-n", min=1, max=1000, metavar="N", help="Rows per table.")]
MaxPauseOpt = Annotated[float, typer.Option(
    "--max-pause", min=0.0, callback=finite, metavar="MS",
    help="Longest the census may hold the worker in one piece, in ms (0: no limit; "
         "docs/inspect.md, 'Never harming the target').")]
OutputOpt = Annotated[Path | None, typer.Option(
    "--output", "-o", "--save", metavar="FILE", help="Also write the snapshot JSON to FILE.")]
ForceOpt = Annotated[bool, typer.Option(
    "--force", help="Go ahead even when the worker has less headroom under its memory limit (cgroup, "
    "RLIMIT_AS/DATA) than max(16 MiB, 1% of its RSS), which leakhound otherwise refuses (exit 19), and let "
    "the request use the headroom less 4 MiB rather than that amount: the kernel may then kill the worker "
    "(docs/inspect.md, 'Near the memory limit').")]
MaxSizeOpt = Annotated[int, typer.Option(
    "--max-size", min=1, metavar="MIB",
    help="Refuse a snapshot file over this many MiB (reading one takes ~3.6x its size in memory).")]
#: The fixes, one option name wherever they are named.
FIX_HELP = f"all, or a comma list of {', '.join(FIX_NAMES)}."
HtmlOpt = Annotated[Path | None, typer.Option(
    "--html", metavar="FILE",
    help="Also write one self-contained HTML page (no network) for the incident ticket: findings with their "
         "fix commands, the memory ledger, the owners as a zoomable treemap, their retainer paths.")]
SitesRateOpt = Annotated[int, typer.Option(
    "--sites-rate", min=1024, metavar="BYTES",
    help="With --sites: one sample per this many bytes allocated, on average.")]


def check_report_path(path: Path) -> None:
    """``ReportFileError`` unless ``path`` can be written: said before the attach, not after a
    census of minutes (a directory, a directory that does not exist, no permission)."""
    if str(path) == "-":  # standard output carries the tables or --json
        raise ReportFileError("--html writes a file, not standard output: give it a path")
    parent = path.parent
    if path.is_dir():
        raise ReportFileError(f"cannot write the report to {path}: it is a directory")
    if not parent.is_dir():
        raise ReportFileError(f"cannot write the report to {path}: no directory {parent}")
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ReportFileError(f"cannot write the report to {path}: permission denied")
