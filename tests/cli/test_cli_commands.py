"""Argument wiring of every command: usage errors exit 2 with a message, --help works."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from leakhound.cli import app

runner = CliRunner()

COMMANDS = ["inspect", "patch", "confirm", "watch", "diff", "show", "stacks", "export", "simulate", "demo"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command: str) -> None:
    result = runner.invoke(app, [command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


def test_top_level_help_lists_every_command() -> None:
    result = runner.invoke(app, ["--help"])
    for command in COMMANDS:
        assert command in result.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["patch", "--fix", "bogus"], "unknown fix"),
        (["patch", "--revert"], "give a PID or --match"),
        (["patch", "1", "--revert", "--status"], "at most one of"),
        (["patch", "1", "--method", "telepathy"], "is not one of"),
        (["inspect", "1", "--owners", "first"], "is not one of"),
        (["simulate", "--rollouts", "some"], "a number or 'forever'"),
        (["simulate", "--fix", "everything"], "unknown fix"),
        (["watch"], "give at least one PID or --match"),
        (["watch", "--match", "("], "not a regular expression"),
    ],
)
def test_usage_errors_exit_2(args: list[str], message: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_diff_of_a_corrupt_file_exits_11(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    result = runner.invoke(app, ["diff", str(bad), str(bad)])
    assert result.exit_code == 11
    assert "hint:" in result.output
