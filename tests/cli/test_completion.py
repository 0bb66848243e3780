"""Shell completion of --fix values and PIDs, and the typo'd --fix that says what was meant."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from leakhound.cli import app
from leakhound.commands import options
from leakhound.model.names import FIX_NAMES

runner = CliRunner()


def _complete(words: str, shell: str = "bash") -> str:
    """What the installed completion script gets back for the command line ``words`` (the
    last word being completed; a trailing space completes a new one)."""
    if shell == "bash":
        env = {"_LEAKHOUND_COMPLETE": "complete_bash", "COMP_WORDS": words,
               "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1))}
    else:
        env = {"_LEAKHOUND_COMPLETE": "complete_zsh", "_TYPER_COMPLETE_ARGS": words}
    result = runner.invoke(app, [], env=env, prog_name="leakhound")
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize(
    "words, expected",
    [
        ("leakhound patch --fix ", ["all", *FIX_NAMES]),
        ("leakhound patch 42 --fix reg", ["registry"]),
        ("leakhound patch -f steps,", [f"steps,{name}" for name in FIX_NAMES if name != "steps"]),
        ("leakhound simulate --fix int", ["intercepts"]),
        ("leakhound patch --fix zzz", []),
    ],
)
def test_fix_values_complete(words: str, expected: list[str]) -> None:
    assert _complete(words).split() == expected


def test_zsh_shows_what_each_fix_does_on_one_line() -> None:
    out = _complete("leakhound patch --fix ", shell="zsh")
    assert '"registry":"Runtime.cleanup_group evicts finished rollouts from Runtime' in out
    # One line per fix (a description past 80 columns was broken onto a second line).
    assert len(out.strip().splitlines()) == 1 + len(FIX_NAMES)


def test_pids_complete_with_their_titles(monkeypatch: pytest.MonkeyPatch) -> None:
    import leakhound.core.targets as targets

    monkeypatch.setattr(targets, "python_processes", lambda: [
        (4242, "Verifiers::EnvWorker0"), (4243, "Verifiers::EnvServer"), (5150, "python  worker.py\n--port 1")])
    assert _complete("leakhound inspect 42").split() == ["4242", "4243"]
    assert _complete("leakhound watch 1 ").split() == ["4242", "4243", "5150"]
    zsh = _complete("leakhound stacks 5", shell="zsh")
    assert '"5150":"python worker.py --port 1"' in zsh  # whitespace of a command line made one space
    assert options.complete_pids("4") == [("4242", "Verifiers::EnvWorker0"), ("4243", "Verifiers::EnvServer")]


@pytest.mark.parametrize(
    "typed, meant",
    [("regsitry", "registry"), ("steps,trm", "trim"), ("intercept", "intercepts"), ("alll", "all")],
)
def test_a_typo_in_fix_says_what_was_meant(typed: str, meant: str) -> None:
    result = runner.invoke(app, ["patch", "1", "--fix", typed])
    assert result.exit_code == 2, result.output  # a usage error, as every bad option
    assert f"did you mean {meant}?" in result.output
    assert "choose from all, steps, registry, intercepts, trim" in result.output
    assert "Traceback" not in result.output


def test_a_fix_nothing_like_any_says_only_the_choices() -> None:
    result = runner.invoke(app, ["patch", "1", "--fix", "everything-at-once"])
    assert result.exit_code == 2
    assert "did you mean" not in result.output
    assert "unknown fix everything-at-once (choose from all, steps, registry, intercepts, trim)" in result.output
