"""The console script's entry: a Ctrl-C during the CLI's import is no traceback."""

from __future__ import annotations

import builtins
import os
import signal
import subprocess
import sys
from typing import Any

import pytest

from leakhound import _entry, interrupts


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


def test_a_command_that_finishes_exits_at_once_its_output_written() -> None:
    """inspect raises Finished once it has written everything: the exit code and every byte of
    the output arrive, atexit functions run (a benchmark's wrapper reads the CLI's peak RSS in
    one); with a thread of ours still running, the normal exit runs instead (it waits for the
    thread)."""
    code = (
        "import sys, threading, time\n"
        "from leakhound import _entry\n"
        "import atexit; atexit.register(lambda: sys.stdout.write('atexit ran'))\n"
        "if sys.argv[1] == 'thread':\n"
        "    threading.Thread(target=lambda: (time.sleep(0.3), print('thread done'))).start()\n"
        "sys.stdout.write('x' * 200000)\n"
        "_entry.exit_now(3)\n"
        "print('normal exit')\n"
        "sys.exit(4)\n"
    )
    quick = subprocess.run([sys.executable, "-c", code, "quick"], capture_output=True, text=True, timeout=60)
    assert quick.returncode == 3 and quick.stdout == "x" * 200000 + "atexit ran", quick.stderr
    waited = subprocess.run([sys.executable, "-c", code, "thread"], capture_output=True, text=True, timeout=60)
    assert waited.returncode == 4 and waited.stdout.endswith("normal exit\nthread done\natexit ran"), waited.stderr


def test_only_a_finished_command_skips_the_teardown(monkeypatch: pytest.MonkeyPatch) -> None:
    """The entry exits at once for Finished and for nothing else: a usage error or any other
    exit goes the normal way."""
    import importlib

    from leakhound.commands.common import Finished

    cli = importlib.import_module("leakhound.cli")  # the module the entry imports from sys.modules

    seen: list[object] = []
    monkeypatch.setattr(_entry, "exit_now", seen.append)
    for raised, asked in ((Finished(), [0]), (SystemExit(2), [])):
        seen.clear()

        def run(raised: BaseException = raised) -> None:
            raise raised

        monkeypatch.setattr(cli, "main", run)
        with pytest.raises(SystemExit):
            _entry.main()
        assert seen == asked


def test_a_signal_during_a_commands_lazy_import_is_an_interrupt_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Seen in CI: a SIGTERM that landed while `patch --status` imported a module with a
    # dataclass surfaced as 3.11's "RuntimeError: Error calling __set_name__" with a traceback.
    import importlib

    cli = importlib.import_module("leakhound.cli")

    class Named:
        def __set_name__(self, owner: type, name: str) -> None:
            os.kill(os.getpid(), signal.SIGTERM)

    def command() -> None:
        type("Measurement", (), {"arena": Named()})  # as a lazily imported module's class would

    monkeypatch.setattr(cli, "app", command)
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    monkeypatch.setitem(interrupts._state, "received", None)
    try:
        with pytest.raises(SystemExit) as exit_info:
            cli.main()
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    assert exit_info.value.code == 128 + signal.SIGTERM
    err = capsys.readouterr().err
    assert "interrupted by SIGTERM" in err and "Traceback" not in err


def test_an_error_with_no_signal_behind_it_is_not_taken_for_one(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    cli = importlib.import_module("leakhound.cli")

    def command() -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli, "app", command)
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    monkeypatch.setitem(interrupts._state, "received", None)
    try:
        with pytest.raises(RuntimeError, match="a bug"):
            cli.main()
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
