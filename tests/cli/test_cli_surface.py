"""The CLI as a user meets it: help text, options reaching the core, exit codes, piped output.

The core functions are replaced by recorders (no targets needed): these tests hold that what is
typed on the command line arrives in the core, and how the answer is said.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from leakhound.cli import app
from leakhound.commands.common import SETTINGS, Reporter
from leakhound.core.capture import FOLLOW_PROGRESS
from leakhound.errors import FleetError, TargetNotFound
from leakhound.model import PatchOutcome
from leakhound.model.names import Method, Owners, PatchAction
from leakhound.render import console as render_console
from leakhound.render.patch import render_outcomes
from tests.factories import make_snapshot

COMMANDS = ["inspect", "watch", "diff", "show", "stacks", "export", "patch", "simulate", "demo", "confirm"]


def _invoke(args: list[str], **env: str) -> Any:
    # The runner fixes the help's terminal width itself (80 unless told).
    columns = int(env["COLUMNS"]) if env.get("COLUMNS", "").isdigit() else None
    return CliRunner().invoke(app, args, env=env, terminal_width=columns)


class _Recorder:
    """Stands in for a core function: records its arguments, then returns or raises."""

    def __init__(self, answer: Any = None) -> None:
        self.calls: list[dict[str, Any]] = []
        self.answer = answer

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append({"args": args, **kwargs})
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


# -- help ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("columns", [80, 120])
@pytest.mark.parametrize("command", COMMANDS)
def test_help_fits_the_width_with_plain_metavars(command: str, columns: int) -> None:
    result = _invoke([command, "--help"], COLUMNS=str(columns))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= columns, result.output
    # Type labels and cut-off text were what --help showed before.
    for noise in ("<int", "<float", "<bool>", "<str>", "<list[", "<path>", "range>", "…"):
        assert noise not in result.output, (noise, result.output)


@pytest.mark.parametrize("columns", [80, 120])
def test_help_paragraphs_are_reflowed_not_ragged(columns: int) -> None:
    # A paragraph line that ends while the next word would still fit is a hard line break.
    result = _invoke(["patch", "--help"], COLUMNS=str(columns))
    description = result.output.split("\n\n", 1)[1].split("Arguments:")[0]
    for paragraph in description.strip().split("\n\n"):
        lines = paragraph.splitlines()
        for line, after in zip(lines, lines[1:], strict=False):
            next_word = after.split()[0]
            assert len(line) + 1 + len(next_word) > columns - 2, (line, after)


def test_max_pause_help_is_short_everywhere() -> None:
    for command in ("inspect", "watch", "export"):
        out = _invoke([command, "--help"], COLUMNS="120").output
        block = out[out.index("--max-pause"):].split("\n  -")[0]
        assert len(block.splitlines()) <= 3, block


def test_fixes_are_named_by_one_option() -> None:
    for command in ("patch", "simulate"):
        out = _invoke([command, "--help"], COLUMNS="80").output
        assert "--fix " in out and "--fixes" not in out
    assert "steps, registry, intercepts, trim" in _invoke(["simulate", "--help"], COLUMNS="80").output


def test_shell_completion_is_offered() -> None:
    assert "--install-completion" in _invoke(["--help"]).output


# -- global options ------------------------------------------------------------------------------


def test_verbose_is_taken_after_the_subcommand(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: dict[str, Any] = {}

    def run(**kwargs: Any) -> None:
        seen.update(kwargs, verbose=SETTINGS["verbose"])

    monkeypatch.setattr("leakhound.commands.diff.run", run)
    monkeypatch.setitem(SETTINGS, "verbose", False)
    result = _invoke(["diff", "a.json", "b.json", "-v", "--top", "3"])
    assert result.exit_code == 0, result.output
    assert seen["verbose"] is True and seen["top"] == 3 and seen["before"] == Path("a.json")


# -- options reach the core ----------------------------------------------------------------------


def test_inspect_options_reach_the_capture(monkeypatch: pytest.MonkeyPatch) -> None:
    capture = _Recorder(TargetNotFound("no process with pid 4242"))
    monkeypatch.setattr("leakhound.commands.inspect.capture", capture)
    result = _invoke(["inspect", "4242", "-m", "gdb", "-n", "7", "-t", "9", "--max-pause", "0",
                      "--owners", "census", "--why", "builtins.dict"])
    assert result.exit_code == 3
    (call,) = capture.calls
    assert call["args"] == (4242,)
    assert (call["request"].method, call["top"], call["request"].timeout, call["max_pause_ms"]) == \
        (Method.GDB, 7, 9.0, 0.0)
    assert (call["owners"], call["why"]) == (Owners.CENSUS, "builtins.dict")


def test_without_timeout_the_census_commands_follow_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    """No --timeout: no fixed wall clock reaches the core (attach/deadline.py FOLLOW_PROGRESS)."""
    capture, watch, export = _Recorder(TargetNotFound("gone")), _Recorder(TargetNotFound("gone")), _Recorder()
    monkeypatch.setattr("leakhound.commands.inspect.capture", capture)
    monkeypatch.setattr("leakhound.commands.watch.watch_processes", watch)
    monkeypatch.setattr("leakhound.commands.export.export_processes", export)
    _invoke(["inspect", "4242"])
    _invoke(["watch", "11", "-d", "1"])
    _invoke(["export", "21", "--listen", "127.0.0.1:0"])
    assert [r.calls[0]["request"].timeout for r in (capture, watch, export)] == \
        [FOLLOW_PROGRESS] * 3


def test_the_timeout_help_says_the_deadline_it_uses() -> None:
    """The numbers in --timeout's help are attach/deadline.py's (written out: commands import no attach)."""
    from leakhound.attach import deadline  # noqa: PLC0415

    text = " ".join(_invoke(["inspect", "--help"], COLUMNS="400", NO_COLOR="1").output.split())
    assert (f"no progress for {deadline.STALL_SECONDS:.0f} s ({deadline.STALL_ENV})" in text
            and f"{deadline.CEILING_BASE:.0f} s + {deadline.CEILING_PER_GIB:.0f} s a GiB" in text), text


def test_watch_options_reach_the_core(monkeypatch: pytest.MonkeyPatch) -> None:
    watch = _Recorder(TargetNotFound("gone"))
    monkeypatch.setattr("leakhound.commands.watch.watch_processes", watch)
    result = _invoke(["watch", "11", "12", "--match", "worker", "-i", "2", "-d", "30", "--full-every", "60",
                      "--attach-every", "5", "-m", "ptrace", "-t", "8", "--max-pause", "20"])
    assert result.exit_code == 3
    (call,) = watch.calls
    assert call["pids"] == (11, 12) and call["match"] == "worker" and call["request"].method is Method.PTRACE
    assert (call["interval"], call["duration"], call["full_every"], call["attach_every"]) == (2.0, 30.0, 60.0, 5.0)
    assert (call["request"].timeout, call["max_pause_ms"]) == (8.0, 20.0)


def test_export_options_reach_the_core(monkeypatch: pytest.MonkeyPatch) -> None:
    export = _Recorder()
    monkeypatch.setattr("leakhound.commands.export.export_processes", export)
    result = _invoke(["export", "21", "--listen", "127.0.0.1:0", "-i", "30", "-n", "4", "-m", "agent",
                      "--max-pause", "10"])
    assert result.exit_code == 0, result.output
    (call,) = export.calls
    assert (call["pids"], call["listen"], call["interval"], call["top"]) == ((21,), "127.0.0.1:0", 30.0, 4)
    assert (call["request"].method, call["max_pause_ms"], call["allow_remote"]) == (Method.AGENT, 10.0, False)


def test_stacks_options_reach_py_spy(monkeypatch: pytest.MonkeyPatch) -> None:
    dump = _Recorder(())
    monkeypatch.setattr("leakhound.commands.stacks.dump_stacks", dump)
    result = _invoke(["stacks", "31", "--locals", "--native", "-t", "5"])
    assert result.exit_code == 0, result.output
    assert dump.calls == [{"args": (31,), "timeout": 5.0, "with_locals": True, "native": True}]


def test_simulate_fix_reaches_the_fleet(monkeypatch: pytest.MonkeyPatch) -> None:
    fleet = _Recorder(FleetError("stop here"))
    monkeypatch.setattr("leakhound.commands.simulate.start_fleet", fleet)
    result = _invoke(["simulate", "--fix", "trim,steps", "--workers", "2", "--rollouts", "forever"])
    assert result.exit_code == FleetError.EXIT_CODE
    (call,) = fleet.calls
    assert call["fixes"] == "steps,trim" and call["workers"] == 2 and call["rollouts"] is None


def test_confirm_workload_reaches_the_core(monkeypatch: pytest.MonkeyPatch) -> None:
    confirm = _Recorder(FleetError("stop here"))
    monkeypatch.setattr("leakhound.core.confirm.run_confirm", confirm)
    result = _invoke(["confirm", "--rollouts", "3", "--turns", "5", "--concurrency", "2", "--image-kb", "8"])
    assert result.exit_code == FleetError.EXIT_CODE
    workload = confirm.calls[0]["workload"]
    assert (workload.rollouts, workload.turns, workload.concurrency, workload.image_kb) == (3, 5, 2, 8)


# -- patch: safe defaults, exit codes ------------------------------------------------------------


def _outcome(fix: str, status: str, pid: int = 41) -> PatchOutcome:
    return PatchOutcome(fix=fix, pid=pid, status=status, metric="", reason="not recognised" if status == "refused"
                        else "")


def test_patch_a_live_worker_needs_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    patch = _Recorder(())
    monkeypatch.setattr("leakhound.commands.patch.patch_process", patch)
    result = _invoke(["patch", "41"])
    assert result.exit_code == 2 and "--fix" in result.output and patch.calls == []


def test_patch_options_reach_the_core(monkeypatch: pytest.MonkeyPatch) -> None:
    patch = _Recorder((_outcome("trim", "applied"),))
    monkeypatch.setattr("leakhound.commands.patch.patch_process", patch)
    result = _invoke(["patch", "41", "--fix", "trim,steps", "--trim-every", "5", "-m", "gdb", "-t", "9"])
    assert result.exit_code == 0, result.output
    (call,) = patch.calls
    assert call["args"] == (41,) and call["fixes"] == ["steps", "trim"] and call["action"] is PatchAction.APPLY
    assert (call["trim_every"], call["request"].method, call["request"].timeout) == (5.0, Method.GDB, 9.0)


def test_patch_status_takes_every_fix_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    patch = _Recorder((_outcome("trim", "not-applied"),))
    monkeypatch.setattr("leakhound.commands.patch.patch_process", patch)
    assert _invoke(["patch", "41", "--status"]).exit_code == 0
    assert patch.calls[0]["fixes"] == ["steps", "registry", "intercepts", "trim"]
    assert patch.calls[0]["action"] == "status"


def test_patch_partly_refused_exits_16(monkeypatch: pytest.MonkeyPatch) -> None:
    outcomes = (_outcome("steps", "refused"), _outcome("trim", "applied"))
    monkeypatch.setattr("leakhound.commands.patch.patch_process", _Recorder(outcomes))
    result = _invoke(["patch", "41", "--fix", "steps,trim", "--json"])
    assert result.exit_code == 16, result.output
    assert "refused: steps" in result.output and "applied: trim" in result.output
    doc = json.loads(result.output[result.output.index("{"):result.output.rindex("}") + 1])
    assert [o["status"] for o in doc["outcomes"]] == ["refused", "applied"]


def test_patch_without_a_pid_says_first_it_starts_a_simulated_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_worker(*_: Any, **__: Any) -> Any:
        raise FleetError("not started in this test")

    monkeypatch.setattr("leakhound.commands.patch.leaking_simulated_worker", no_worker)
    result = _invoke(["patch", "--json"])
    assert result.output.splitlines()[0].startswith("leakhound: no PID given: starting a simulated")


# -- output --------------------------------------------------------------------------------------


def _folded(text: str, column: int | None = None) -> str:
    """The text's lines joined without their indentation (with ``column``: that cell of each
    table row): what a long path or name rich folded onto several lines reads as, whole."""
    if column is None:
        return "".join(line.strip() for line in text.splitlines())
    return "".join(line.split("│")[column].strip() for line in text.splitlines() if line.count("│") > column)


def test_piped_output_is_80_columns_folded_not_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    target = "leakhound.simulate.runtime.Runtime.submit_model_request"
    out = io.StringIO()
    render_outcomes([PatchOutcome(fix="steps", pid=7, status="applied", metric="", functions=(target,),
                                  effect="stored response per new step 606,056 -> 1,110 bytes (-99.8%)")], file=out)
    text = out.getvalue()
    assert "…" not in text and target in _folded(text).replace(" ", "")
    assert max(len(line) for line in text.splitlines()) <= 80
    assert not [line for line in text.splitlines() if line != line.rstrip()]


def test_piped_confirm_tables_keep_their_numbers_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    from leakhound.render.patch import render_confirm, render_confirm_workload

    monkeypatch.delenv("COLUMNS", raising=False)
    mib = 1 << 20
    rows = [{"fixes": fixes, "peak_rss_bytes": peak * mib, "resting_rss_bytes": rest * mib,
             "registry_retained_bytes": mib, "intercept_peak_body_bytes": 100 * mib, "step_redundant_bytes": 20 * mib,
             "applied": ["steps"], "refused": []}
            for fixes, peak, rest in (("none", 900, 800), ("steps,registry,intercepts,trim", 400, 300))]
    for render in (render_confirm, render_confirm_workload):
        out = io.StringIO()
        render(rows, file=out)
        text = out.getvalue()
        assert "…" not in text and "-56%" in text and "400 MiB" in text
        assert max(len(line) for line in text.splitlines()) <= 80


def test_width_option_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(render_console, "_width", None)
    assert render_console.console(io.StringIO()).width == render_console.PIPED_WIDTH == 80
    monkeypatch.setenv("COLUMNS", "80")
    assert render_console.console(io.StringIO()).width == 80
    render_console.set_width(100)
    assert render_console.console(io.StringIO()).width == 100


def test_diff_piped_keeps_long_owner_paths_whole(tmp_path: Path) -> None:
    from dataclasses import replace

    from leakhound.model import Owner, snapshot_to_json

    path = "__main__.WORKER.runtime." + "nested_attribute_name." * 5 + "trajectories"
    before = make_snapshot(owners=(Owner(path, "dict", 10, 1_000_000, 100),))
    after = replace(before, taken_at=before.taken_at + 60, owners=(Owner(path, "dict", 20, 9_000_000, 900),))
    (tmp_path / "a.json").write_text(snapshot_to_json(before))
    (tmp_path / "b.json").write_text(snapshot_to_json(after))
    result = CliRunner().invoke(app, ["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json")],
                                env={"COLUMNS": ""})
    assert result.exit_code == 0, result.output
    assert path in _folded(result.output, column=0)
    assert max(len(line) for line in result.output.splitlines()) <= 80


def test_progress_off_a_terminal_is_one_line_per_phase() -> None:
    out = io.StringIO()
    reporter = Reporter(file=out)
    for phase, done in (("roots", 0), ("roots", 0), ("walk", 1000), ("walk", 250_000), ("unreached", 9)):
        reporter.progress(phase, done)
    reporter.done()
    assert out.getvalue().splitlines() == ["leakhound: roots", "leakhound: walk", "leakhound: unreached"]


def test_a_phase_that_comes_round_again_is_not_said_twice() -> None:
    # Under a pause budget the census sizes the heap with one walk of the roots, then walks
    # them again: "roots" and "walk" were each printed twice.
    out = io.StringIO()
    reporter = Reporter(file=out)
    for phase in ("roots", "walk", "roots", "walk", "graph", "arena"):
        reporter.progress(phase, 0)
    reporter.done()
    reporter.progress("roots", 0)  # the next piece of work says its phases anew
    assert out.getvalue().splitlines() == [
        "leakhound: roots", "leakhound: walk", "leakhound: graph", "leakhound: arena", "leakhound: roots"]


def test_commands_import_no_attach() -> None:
    for module in Path(__file__).resolve().parents[2].joinpath("leakhound", "commands").glob("*.py"):
        assert not re.search(r"^\s*(from|import) leakhound\.attach", module.read_text(), re.M), module


def test_an_error_quoting_the_target_reaches_the_terminal_with_its_escapes_shown(
        capsys: pytest.CaptureFixture[str]) -> None:
    """An error may quote what the target wrote (a payload's error text, a thread's name):
    a terminal escape in it (an OSC sequence that retitles the terminal, colours) is printed
    escaped, never as one; newlines and tabs stay."""
    from leakhound.cli import fail
    from leakhound.errors import RemoteError

    exit_ = fail(RemoteError("payload failed: \x1b]0;owned\x07\x1b[31mred\nnext\tline", hint="see \x9b2J"))
    err = capsys.readouterr().err
    assert exit_.exit_code == RemoteError.EXIT_CODE
    assert "\x1b" not in err and "\x07" not in err and "\x9b" not in err
    assert "\\x1b]0;owned\\x07\\x1b[31mred\nnext\tline" in err and "hint: see \\x9b2J" in err
