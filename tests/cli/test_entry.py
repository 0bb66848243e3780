"""The console script's entry: a Ctrl-C during the CLI's import is no traceback."""

from __future__ import annotations

import builtins
import os
import signal
import sys
from typing import Any

import pytest

from leakhound import _entry


def test_a_ctrl_c_while_the_cli_imports_exits_130_quietly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A real SIGINT in the middle of the import. Raised there as a KeyboardInterrupt it could
    # surface as anything (3.11 wraps one raised in a __set_name__ in a RuntimeError: seen
    # in CI) or be swallowed by importlib; the entry notes it and exits after the import.
    real_import = builtins.__import__

    class Named:
        def __set_name__(self, owner: type, name: str) -> None:
            os.kill(os.getpid(), signal.SIGINT)

    def interrupted(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "leakhound.cli":
            type("Module", (), {"field": Named()})  # as a module's class statement would
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "leakhound.cli", raising=False)
    monkeypatch.setattr(builtins, "__import__", interrupted)
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(SystemExit) as exit_info:
        _entry.main()
    assert exit_info.value.code == 130
    assert capsys.readouterr().err == "leakhound: interrupted\n"
    assert signal.getsignal(signal.SIGINT) is before
