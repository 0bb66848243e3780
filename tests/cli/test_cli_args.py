"""Argument wiring and error mapping of the CLI (no real targets needed)."""

from __future__ import annotations

import subprocess
import sys

from typer.testing import CliRunner

from leakhound.cli import app

runner = CliRunner()


def _free_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid  # reaped: nothing runs under this pid now (pids are not reused this fast)


def test_help_lists_commands() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "inspect" in result.output


def test_missing_pid_exits_3_with_a_hint() -> None:
    result = runner.invoke(app, ["inspect", str(_free_pid())])
    assert result.exit_code == 3
    assert "no process with pid" in result.output
    assert "hint:" in result.output
    assert "Traceback" not in result.output


def test_unknown_method_is_a_usage_error() -> None:
    result = runner.invoke(app, ["inspect", "1", "--method", "telepathy"])
    assert result.exit_code == 2
    assert "is not one of 'auto', 'agent', 'ptrace', 'gdb', 'remote-exec'" in " ".join(result.output.split())


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.startswith("leakhound ")
