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
    typer.Option("--method", "-m", help="How to get into the target: auto, agent, ptrace, gdb or remote-exec."),
]
TimeoutOpt = Annotated[float, typer.Option("--timeout", "-t", min=1.0, help="Give up after this many seconds.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document (schema in docs/) instead of tables.")]
MaxPauseOpt = Annotated[float, typer.Option(
    "--max-pause", min=0.0, metavar="MS",
    help="Pause budget. The census works in steps of a few ms, except one that cannot be "
         "split: listing every gc-tracked object (~60 ns each: ~70 ms for 1.2M). It is skipped "
         "when it would hold the worker longer than MS; owners are still attributed, but "
         "objects no named root reaches (held from C, cyclic garbage) are then not looked for. "
         "0: no budget, always the full census.")]


@app.command()
def inspect(
    pid: Annotated[int, typer.Argument(help="Process id of the Python worker.", min=1)],
    method: MethodOpt = "auto",
    top: Annotated[int, typer.Option("--top", "-n", min=1, max=1000, help="Rows per table.")] = 15,
    timeout: TimeoutOpt = 60.0,
    as_json: JsonOpt = False,
    save: Annotated[Optional[Path], typer.Option("--save", help="Also write the snapshot JSON to this file.")] = None,
    max_pause: MaxPauseOpt = 50.0,
    owners: Annotated[str, typer.Option(
        "--owners", help="How owners are found: auto (the dominator tree when the object graph fits its budget, "
        "else the first-reacher census), dominator, census.")] = "auto",
    why: Annotated[Optional[str], typer.Option(
        "--why", help="What keeps OWNER (a path from the owners table) or the biggest objects of TYPE alive: "
        "a few distinct paths from roots.", metavar="OWNER_OR_TYPE")] = None,
    heapsnapshot: Annotated[Optional[Path], typer.Option(
        "--heapsnapshot", help="Also write the object graph as a Chrome DevTools .heapsnapshot file.")] = None,
) -> None:
    """Which objects retain a live worker's memory, who owns them, and how much of RSS is not
    live objects at all (allocator fragmentation).

    Attaches without stopping the worker for more than an instant (about 0.3 ms with the
    default ptrace injector): the census runs at a safe point, in a short-lived thread, never
    calls gc.collect(), and leaves nothing behind but its payload module, reused next time.
    """
    from leakhound.attach import METHODS
    from leakhound.commands import inspect as command

    if method not in METHODS:
        raise typer.BadParameter(f"choose one of {', '.join(METHODS)}", param_hint="--method")
    if owners not in command.OWNER_MODELS:
        raise typer.BadParameter(f"choose one of {', '.join(command.OWNER_MODELS)}", param_hint="--owners")
    try:
        command.run(pid=pid, method=method, top=top, timeout=timeout, as_json=as_json, save=save,
                    max_pause_ms=max_pause, reporter=reporter(quiet=as_json and not _state["verbose"]),
                    owner_model=owners, why=why, heapsnapshot_path=heapsnapshot)
    except LeakhoundError as exc:
        raise fail(exc) from None


# -- watch, diff, stacks, export (issue 5) -------------------------------------------------------

PidsArg = Annotated[
    Optional[list[int]], typer.Argument(help="Process ids of Python workers.", min=1, show_default=False)
]
MatchOpt = Annotated[
    Optional[str],
    typer.Option("--match", help="Every Python process whose command line matches this regular expression."),
]


def _pids_or_match(pids: Optional[list[int]], match: Optional[str]) -> tuple[int, ...]:
    if not pids and not match:
        raise typer.BadParameter("give at least one PID or --match PATTERN", param_hint="PID")
    if match is not None:
        import re

        try:
            re.compile(match)
        except re.error as exc:
            raise typer.BadParameter(f"not a regular expression: {exc}", param_hint="--match") from None
    return tuple(pids or ())


def _method_ok(method: str) -> None:
    from leakhound.attach import METHODS

    if method not in METHODS:
        raise typer.BadParameter(f"choose one of {', '.join(METHODS)}", param_hint="--method")


@app.command()
def watch(
    pids: PidsArg = None,
    match: MatchOpt = None,
    interval: Annotated[float, typer.Option("--interval", "-i", min=0.1, help="Seconds between samples.")] = 10.0,
    duration: Annotated[
        Optional[float], typer.Option("--duration", "-d", min=0.0, help="Stop after this many seconds (or Ctrl-C).")
    ] = None,
    full_every: Annotated[
        float,
        typer.Option("--full-every", min=0.0, help="Seconds between full censuses (first and last are always full)."),
    ] = 300.0,
    attach_every: Annotated[
        float,
        typer.Option(
            "--attach-every",
            min=0.0,
            help=(
                "gdb: at most one in-target sample per this many seconds (each gdb attach stops the "
                "worker ~40 ms; RSS is still read every interval). The agent, ptrace and remote-exec "
                "methods are sampled every interval."
            ),
        ),
    ] = 60.0,
    method: MethodOpt = "auto",
    timeout: TimeoutOpt = 60.0,
    max_pause: MaxPauseOpt = 50.0,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON line per sample, then a final report line (docs/watch.md).")
    ] = False,
    plot: Annotated[
        Optional[Path], typer.Option("--plot", help="Also draw RSS vs live heap vs top owners over time (PNG).")
    ] = None,
) -> None:
    """Watch workers over time: which owners keep growing (a leak), which grew and plateaued
    (a bounded cache), which are big but static.

    RSS is read from outside every interval; owner item counts and type counts are sampled in
    the worker (cheaply with the agent, sparingly with gdb); a full census runs first, every
    --full-every seconds, and last. Findings of kind `growth` name the owner and its rate.
    """
    from leakhound.commands import watch as command

    _method_ok(method)
    chosen = _pids_or_match(pids, match)
    try:
        command.run(pids=chosen, match=match, method=method, interval=interval, duration=duration,
                    full_every=full_every, attach_every=attach_every, timeout=timeout,
                    max_pause_ms=max_pause, as_json=as_json, plot=plot,
                    reporter=reporter(quiet=as_json and not _state["verbose"]))
    except LeakhoundError as exc:
        raise fail(exc) from None


@app.command()
def diff(
    before: Annotated[Path, typer.Argument(help="The earlier snapshot (inspect --save or --json).")],
    after: Annotated[Path, typer.Argument(help="The later snapshot.")],
    top: Annotated[int, typer.Option("--top", "-n", min=1, max=1000, help="Rows per table.")] = 15,
    as_json: JsonOpt = False,
) -> None:
    """What grew between two saved snapshots, and by how much, per owner and per type."""
    from leakhound.commands import diff as command

    try:
        command.run(before=before, after=after, top=top, as_json=as_json)
    except LeakhoundError as exc:
        raise fail(exc) from None


@app.command()
def stacks(
    pid: Annotated[int, typer.Argument(help="Process id of the Python worker.", min=1)],
    timeout: TimeoutOpt = 20.0,
    as_json: JsonOpt = False,
) -> None:
    """What the worker's threads are doing right now (py-spy dump; nothing runs inside it)."""
    from leakhound.commands import stacks as command

    try:
        command.run(pid=pid, timeout=timeout, as_json=as_json)
    except LeakhoundError as exc:
        raise fail(exc) from None


@app.command()
def export(
    pids: PidsArg = None,
    match: MatchOpt = None,
    listen: Annotated[str, typer.Option("--listen", help="HOST:PORT to serve /metrics on.")] = "127.0.0.1:9464",
    allow_remote: Annotated[
        bool, typer.Option("--allow-remote", help="Allow a non-loopback --listen address.")
    ] = False,
    interval: Annotated[
        float, typer.Option("--interval", "-i", min=1.0, help="Seconds between censuses of each worker.")
    ] = 120.0,
    method: MethodOpt = "auto",
    timeout: TimeoutOpt = 60.0,
    max_pause: MaxPauseOpt = 50.0,
    top: Annotated[
        int, typer.Option("--top", "-n", min=1, max=100, help="Owners exported per worker (one series each).")
    ] = 10,
) -> None:
    """Serve Prometheus metrics for workers: RSS, live heap, trimmable bytes, top owners,
    growth rates and finding sizes, labelled by pid and worker (its script or module; docs/export.md).
    """
    from leakhound.commands import export as command

    _method_ok(method)
    chosen = _pids_or_match(pids, match)
    try:
        command.run(pids=chosen, match=match, method=method, listen=listen, allow_remote=allow_remote,
                    interval=interval, timeout=timeout, max_pause_ms=max_pause, top=top, reporter=reporter())
    except LeakhoundError as exc:
        raise fail(exc) from None


@app.command()
def patch(
    pids: PidsArg = None,
    fix: Annotated[
        str, typer.Option("--fix", "-f", help="steps, registry, intercepts, trim, or all (comma list).")
    ] = "all",
    match: MatchOpt = None,
    revert: Annotated[bool, typer.Option("--revert", help="Restore the original code exactly.")] = False,
    status: Annotated[
        bool, typer.Option("--status", help="List which fixes are applied, with their counters.")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Check the target's code is recognised; change nothing.")
    ] = False,
    verify: Annotated[
        float, typer.Option("--verify", min=0, help="After applying, watch this many seconds and report before/after.")
    ] = 0.0,
    trim_every: Annotated[
        float, typer.Option("--trim-every", min=1.0, max=3600.0, metavar="S",
                            help="The trim fix's cadence: malloc_trim(0) every S seconds.")
    ] = 10.0,
    method: MethodOpt = "auto",
    timeout: TimeoutOpt = 60.0,
    as_json: JsonOpt = False,
) -> None:
    """Apply a known fix to a live worker as a runtime monkeypatch, and prove with numbers
    measured in the worker that it moves what it should. Without PID or --match, shows the fix
    on a fresh simulated worker.

    Fixes (verifiers v1 env workers): steps (trajectory steps keep identity/usage only),
    registry (evict finished rollouts from Runtime.trajectories at cleanup_group), intercepts
    (drop request bodies once delivered), trim (malloc_trim(0) every 10 s or --trim-every, never
    gc.collect()).
    Code that is missing or not what the fix was written for is refused, and nothing changes.
    """
    from leakhound.commands import patch as command
    from leakhound.patches import parse_fixes

    _method_ok(method)
    if sum((revert, status, dry_run)) > 1:
        raise typer.BadParameter("choose at most one of --revert, --status, --dry-run")
    try:
        fixes = parse_fixes(fix)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--fix") from None
    action = "revert" if revert else "status" if status else "dry-run" if dry_run else "apply"
    if action != "apply" and not pids and not match:
        raise typer.BadParameter("give a PID or --match with --revert, --status or --dry-run", param_hint="PID")
    try:
        command.run(pids=tuple(pids or ()), match=match, fixes=fixes, action=action, verify=verify,
                    method=method, timeout=timeout, as_json=as_json, trim_every=trim_every,
                    reporter=reporter(quiet=as_json and not _state["verbose"]))
    except LeakhoundError as exc:
        raise fail(exc) from None


@app.command()
def simulate(
    workers: Annotated[int, typer.Option("--workers", min=1, max=64, help="Worker processes.")] = 1,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, help="Rollouts in flight per worker.")] = 4,
    turns: Annotated[int, typer.Option("--turns", min=1, help="Model turns per rollout.")] = 45,
    rollouts: Annotated[str, typer.Option("--rollouts", help="Rollouts per worker, or 'forever'.")] = "8",
    image_kb: Annotated[int, typer.Option("--image-kb", min=0, help="Base64 screenshot size per turn, KiB.")] = 96,
    group_size: Annotated[int, typer.Option("--group-size", min=1, help="Rollouts per group (>1: group stage).")] = 1,
    fixes: Annotated[
        str, typer.Option("--fixes", help="none, all, or a comma list of steps,registry,intercepts,trim.")
    ] = "none",
    ready_file: Annotated[
        Optional[Path], typer.Option("--ready-file", help="Write {pids, report_dir} here when ready.")
    ] = None,
    hold: Annotated[float, typer.Option("--hold", min=0, help="Seconds to stay idle after the last rollout.")] = 600.0,
) -> None:
    """Start simulated verifiers v1 env workers (real subprocesses, real RSS) that reproduce the
    four production leaks: step bloat, the trajectory registry, intercept bodies, and glibc
    fragmentation. Prints the worker pids once their first rollouts have finished."""
    from leakhound.commands import simulate as command
    from leakhound.simulate.fixes import parse_fixes as parse_sim_fixes

    if rollouts != "forever" and not rollouts.isdigit():
        raise typer.BadParameter("a number or 'forever'", param_hint="--rollouts")
    try:
        parse_sim_fixes(fixes)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--fixes") from None
    try:
        command.run(workers=workers, concurrency=concurrency, turns=turns,
                    rollouts=None if rollouts == "forever" else int(rollouts), image_kb=image_kb,
                    group_size=group_size, fixes=fixes, ready_file=ready_file, hold=hold, reporter=reporter())
    except LeakhoundError as exc:
        raise fail(exc) from None


@app.command()
def demo(
    method: MethodOpt = "auto",
    verify: Annotated[float, typer.Option("--verify", min=1, help="Seconds to watch the fixes work.")] = 6.0,
) -> None:
    """The whole story on a simulated worker in under a minute: start a leaking verifiers-shaped
    worker, inspect it live, apply the four fixes live with before/after numbers, shut it down."""
    from leakhound.commands import demo as command

    _method_ok(method)
    try:
        command.run(method=method, verify=verify, reporter=reporter())
    except LeakhoundError as exc:
        raise fail(exc) from None


@app.command()
def confirm(
    rollouts: Annotated[int, typer.Option("--rollouts", min=1, help="Rollouts per configuration.")] = 8,
    turns: Annotated[int, typer.Option("--turns", min=1, help="Turns per rollout.")] = 45,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, help="Rollouts in flight.")] = 4,
    image_kb: Annotated[int, typer.Option("--image-kb", min=0, help="Screenshot size per turn, KiB.")] = 96,
    as_json: JsonOpt = False,
) -> None:
    """Run the same churn workload once per configuration (no fixes, each fix alone, all fixes)
    in fresh worker processes, and print peak RSS, resting RSS and what each leak retained,
    against no fixes. Takes a minute or two."""
    from leakhound.commands import confirm as command
    from leakhound.core.confirm import Workload

    try:
        command.run(workload=Workload(rollouts=rollouts, turns=turns, concurrency=concurrency, image_kb=image_kb),
                    as_json=as_json, reporter=reporter())
    except LeakhoundError as exc:
        raise fail(exc) from None


def main() -> None:
    from leakhound import interrupts

    # SIGINT, SIGTERM, SIGHUP unwind like Ctrl-C: the request in the target is cancelled and
    # the private directory removed on the way out; then exit 128 + the signal number.
    interrupts.install()
    try:
        app()
    except KeyboardInterrupt:
        _interrupted(interrupts.received())
    except SystemExit as exc:
        # typer turns an interrupt that ended a command into exit 130, whichever the signal.
        if exc.code == 130 and interrupts.received() is not None:
            _interrupted(interrupts.received())
        raise


def _interrupted(signum: int | None) -> None:
    import signal

    signum = signum or signal.SIGINT
    print(f"leakhound: interrupted by {signal.Signals(signum).name}; its request in the target was cancelled "
          "and its files removed", file=sys.stderr)
    sys.exit(128 + signum)


if __name__ == "__main__":
    main()
