"""The command line. Commands validate, call one core function, pick a renderer.

Errors below this layer are ``LeakhoundError``s; here they become one line plus a hint on
stderr and the documented exit code (docs/errors.md), never a traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from leakhound import __version__
from leakhound.commands.common import Reporter
from leakhound.errors import LeakhoundError

app = typer.Typer(
    name="leakhound",
    help=(
        "Attach to a live Python worker whose memory keeps climbing: what retains it and why, "
        "live heap vs allocator fragmentation, known leak shapes, and live fixes proven with numbers."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

_state = {"verbose": False}


def _version(value: bool) -> None:
    if value:
        print(f"leakhound {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Print the exact debugger command and its output.")
    ] = False,
    version: Annotated[
        Optional[bool], typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = None,
) -> None:
    _state["verbose"] = verbose


def reporter(*, quiet: bool = False) -> Reporter:
    return Reporter(verbose=bool(_state["verbose"]), quiet=quiet)


def fail(exc: LeakhoundError) -> typer.Exit:
    print(f"leakhound: error: {exc}", file=sys.stderr)
    if exc.hint:
        print(f"hint: {exc.hint}", file=sys.stderr)
    return typer.Exit(exc.EXIT_CODE)


MethodOpt = Annotated[
    str,
    typer.Option("--method", "-m", help="How to get into the target: auto, agent, gdb or remote-exec."),
]
TimeoutOpt = Annotated[float, typer.Option("--timeout", "-t", min=1.0, help="Give up after this many seconds.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document (schema in docs/) instead of tables.")]


@app.command()
def inspect(
    pid: Annotated[int, typer.Argument(help="Process id of the Python worker.", min=1)],
    method: MethodOpt = "auto",
    top: Annotated[int, typer.Option("--top", "-n", min=1, max=1000, help="Rows per table.")] = 15,
    timeout: TimeoutOpt = 60.0,
    as_json: JsonOpt = False,
    save: Annotated[Optional[Path], typer.Option("--save", help="Also write the snapshot JSON to this file.")] = None,
) -> None:
    """Which objects retain a live worker's memory, who owns them, and how much of RSS is not
    live objects at all (allocator fragmentation).

    Attaches without stopping the worker for more than an instant: the census runs at a safe
    point, in a short-lived thread, never calls gc.collect(), and leaves nothing behind.
    """
    from leakhound.attach import METHODS
    from leakhound.commands import inspect as command

    if method not in METHODS:
        raise typer.BadParameter(f"choose one of {', '.join(METHODS)}", param_hint="--method")
    try:
        command.run(pid=pid, method=method, top=top, timeout=timeout, as_json=as_json, save=save,
                    reporter=reporter(quiet=as_json and not _state["verbose"]))
    except LeakhoundError as exc:
        raise fail(exc) from None


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        print("leakhound: interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
