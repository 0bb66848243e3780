"""Every float option of every command refuses nan, inf and negatives as a usage error (exit 2)."""

from __future__ import annotations

import pytest
import typer.main
from typer import _click as click
from typer.testing import CliRunner

from leakhound.cli import COMMANDS, app

runner = CliRunner()


def _float_options() -> list[tuple[str, str]]:
    group = typer.main.get_command(app)
    ctx = click.Context(group)
    found = []
    for name in COMMANDS:
        command = group.get_command(ctx, name)  # type: ignore[attr-defined]
        found += [(name, param.opts[0]) for param in command.params
                  if isinstance(param.type, click.types.FloatParamType)]
    return found


FLOAT_OPTIONS = _float_options()


def test_the_float_options_are_found() -> None:
    assert {("inspect", "--timeout"), ("inspect", "--max-pause"), ("watch", "--duration"),
            ("export", "--interval"), ("patch", "--trim-every")} <= set(FLOAT_OPTIONS)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1"])
@pytest.mark.parametrize(("command", "option"), FLOAT_OPTIONS)
def test_float_option_rejects_non_finite_and_negative(command: str, option: str, value: str) -> None:
    # PID 1 (never attached to: options are checked first); "--opt=-1" so -1 is not an option.
    result = runner.invoke(app, [command, "1", f"{option}={value}", "--fix", "trim"] if command == "patch"
                           else [command, f"{option}={value}", "1"] if command not in ("simulate", "demo")
                           else [command, f"{option}={value}"])
    assert result.exit_code == 2, result.output
    assert option in result.output
    assert "Traceback" not in result.output
