"""Where gdb cannot call a function in a process (gdb 13.1 on a 6.18 kernel: "Couldn't write
extended state status: Bad address"; its target's interrupted system call then returned -516
to the program, and a ``sleep`` died of it), leakhound refuses the gdb method before gdb
touches the target: a clear error, exit 7, the target never traced and unharmed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.utils import gdb_calls_broken, run_cli, spawn_target

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]


def test_gdb_that_cannot_call_is_refused_and_the_target_left_untouched(tmp_path: Path) -> None:
    why = gdb_calls_broken()
    if why is None:
        pytest.skip("gdb calls functions in a process on this machine: the gdb tests run instead")
    with spawn_target("growing_cache", tmp_path) as child:
        before = child.report()
        result = run_cli("inspect", str(child.pid), "--method", "gdb", "-v")
        after = child.report()
        with open(f"/proc/{child.pid}/status") as fh:
            tracer = next(line.split()[1] for line in fh if line.startswith("TracerPid:"))
        assert child.proc.poll() is None
    assert result.returncode == 7, result.stderr
    assert "Traceback" not in result.stderr
    assert "gdb cannot call functions in a process on this machine" in result.stderr
    assert why.rstrip(".") in result.stderr and f"process {child.pid} was not touched" in result.stderr
    assert "--method ptrace" in result.stderr
    assert tracer == "0"
    assert after["leakhound_modules"] == [] and after["threads"] == before["threads"]
    assert after["ticks"] > before["ticks"]  # its loop kept ticking
    # The default method is not affected: ptrace inspects it.
    (tmp_path / "again").mkdir()
    with spawn_target("growing_cache", tmp_path / "again") as child:
        assert run_cli("inspect", str(child.pid)).returncode == 0
