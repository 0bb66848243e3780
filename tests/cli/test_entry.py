"""The console script's entry: a Ctrl-C during the CLI's import is no traceback."""

from __future__ import annotations

import builtins
import sys
from typing import Any

import pytest

from leakhound import _entry


def test_a_ctrl_c_while_the_cli_imports_exits_130_quietly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real_import = builtins.__import__

    def interrupted(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "leakhound.cli":
            raise KeyboardInterrupt
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "leakhound.cli", raising=False)
    monkeypatch.setattr(builtins, "__import__", interrupted)
    with pytest.raises(SystemExit) as exit_info:
        _entry.main()
    assert exit_info.value.code == 130
    assert capsys.readouterr().err == "leakhound: interrupted\n"
