"""The command line: the app, its global options, and the one place errors become exit codes.

Each command lives whole in ``leakhound/commands/<name>.py``: its options (``command``, whose
docstring is its ``--help``) and its ``run``. Errors below this layer are ``LeakhoundError``s;
here they become one line plus a hint on stderr and the documented exit code (docs/errors.md),
never a traceback.
"""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Callable
from typing import Annotated, Any, Optional

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup

from leakhound import __version__
from leakhound.commands.common import SETTINGS
from leakhound.errors import LeakhoundError
from leakhound.render import console as render_console

_VERBOSE = ("-v", "--verbose")
# The commands, in --help's order: leakhound/commands/<name>.py each.
COMMANDS = ("inspect", "watch", "diff", "show", "stacks", "export", "patch", "simulate", "demo", "confirm")


class _Group(TyperGroup):
    """Global flags are taken anywhere on the line: ``leakhound inspect PID -v`` too. A
    command's module is imported when the command is used (or listed by --help): each brings
    its own machinery, and ``leakhound inspect`` started ~0.1 s later importing all of them."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:  # type: ignore[override]
        end = args.index("--") if "--" in args else len(args)
        flags = [a for a in args[:end] if a in _VERBOSE]
        rest = [a for a in args[:end] if a not in _VERBOSE]
        return super().parse_args(ctx, [*flags, *rest, *args[end:]])

    def list_commands(self, ctx: typer.Context) -> list[str]:  # type: ignore[override]
        return list(COMMANDS)

    def get_command(self, ctx: typer.Context, cmd_name: str) -> Any:  # type: ignore[override]
        if cmd_name not in COMMANDS:
            return None
        if cmd_name not in self.commands:
            module = importlib.import_module(f"leakhound.commands.{cmd_name}")
            one = typer.Typer(rich_markup_mode=None, add_completion=False)
            one.command(cmd_name, cls=_Command)(_mapped(module.command))
            self.commands[cmd_name] = typer.main.get_command(one)
        return self.commands[cmd_name]


class _Command(TyperCommand):
    """Help that names arguments as people write them: ``PID``, ``[PID]...``, no type labels."""

    def collect_usage_pieces(self, ctx: typer.Context) -> list[str]:  # type: ignore[override]
        pieces = [self.options_metavar] if self.options_metavar else []
        return pieces + [_argument_name(p) for p in self.get_params(ctx) if isinstance(p, TyperArgument)]

    def format_options(self, ctx: typer.Context, formatter: Any) -> None:  # type: ignore[override]
        arguments = [(_argument_name(p), p.help or "") for p in self.get_params(ctx)
                     if isinstance(p, TyperArgument) and not p.hidden]
        options = [record for p in self.get_params(ctx)
                   if not isinstance(p, TyperArgument) and (record := p.get_help_record(ctx)) is not None]
        for title, rows in (("Arguments", arguments), ("Options", options)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


def _argument_name(param: TyperArgument) -> str:
    name = param.metavar or (param.name or "").upper()
    name = name if param.required else f"[{name}]"
    return f"{name}..." if param.nargs != 1 else name


app = typer.Typer(
    name="leakhound",
    cls=_Group,
    help=(
        "Attach to a live Python worker whose memory keeps climbing: what retains it and why, "
        "live heap vs allocator fragmentation, known leak shapes, and live fixes proven with numbers. "
        "Every word its output uses (retained, owner, pause, held from C, ...) is defined in docs/glossary.md."
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Plain help: paragraphs reflowed to the terminal (up to 120 columns), nothing cut off.
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 120},
)


def _version(value: bool) -> None:
    if value:
        print(f"leakhound {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    verbose: Annotated[bool, typer.Option(
        "--verbose", "-v", help="Print the exact debugger command and its output.")] = False,
    width: Annotated[Optional[int], typer.Option(
        "--width", min=40, metavar="COLUMNS",
        help="Wrap output at COLUMNS (default: the terminal's width; COLUMNS, else 80, when not a terminal).",
    )] = None,
    version: Annotated[Optional[bool], typer.Option(
        "--version", callback=_version, is_eager=True, help="Show the version.")] = None,
) -> None:
    SETTINGS["verbose"] = verbose
    render_console.set_width(width)


def fail(exc: LeakhoundError) -> typer.Exit:
    # (what the target wrote may be quoted: its control characters escaped)
    print(f"leakhound: error: {render_console.escaped(str(exc))}", file=sys.stderr)
    if exc.hint:
        print(f"hint: {render_console.escaped(exc.hint)}", file=sys.stderr)
    return typer.Exit(exc.EXIT_CODE)


def _mapped(command: Callable[..., None]) -> Callable[..., None]:
    """The command with every ``LeakhoundError`` turned into its message and exit code."""

    @functools.wraps(command)
    def mapped(*args: Any, **kwargs: Any) -> None:
        try:
            command(*args, **kwargs)
        except LeakhoundError as exc:
            raise fail(exc) from None

    return mapped



def main() -> None:
    from leakhound import interrupts

    # SIGINT, SIGTERM, SIGHUP unwind like Ctrl-C: the request in the target is cancelled and
    # the private directory removed on the way out; then exit 128 + the signal number.
    interrupts.install()
    try:
        app()
    except KeyboardInterrupt:
        _interrupted(interrupts.received())
    except Exception as exc:
        # A signal that lands while a command imports a module lazily can surface wrapped:
        # 3.11 turns an exception raised in a class's __set_name__ (a dataclass field) into
        # "RuntimeError: Error calling __set_name__", the interrupt its cause. The unwinding
        # ran every ``with`` and ``finally`` all the same: it is the interrupt, not a crash.
        if interrupts.received() is not None and _caused_by_interrupt(exc):
            _interrupted(interrupts.received())
        raise
    except SystemExit as exc:
        # typer turns an interrupt that ended a command into exit 130, whichever the signal.
        if exc.code == 130 and interrupts.received() is not None:
            _interrupted(interrupts.received())
        raise


def _caused_by_interrupt(exc: BaseException) -> bool:
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        if isinstance(link, KeyboardInterrupt):
            return True
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    return False


def _interrupted(signum: int | None) -> None:
    import signal

    signum = signum or signal.SIGINT
    print(f"leakhound: interrupted by {signal.Signals(signum).name}; its request in the target was cancelled "
          "and its files removed", file=sys.stderr)
    sys.exit(128 + signum)


if __name__ == "__main__":
    main()
