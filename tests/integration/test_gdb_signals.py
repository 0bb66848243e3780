"""The gdb method against a target that receives signals while gdb runs calls in it.

gdb calls malloc and Py_AddPendingCall in the stopped main thread. A signal arriving during
such a call used to stop it half way, and gdb detached with the thread in its dummy frame:
the target died of SIGSEGV at the first injection of a signal storm.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from leakhound.core.capture import take_snapshot
from leakhound.core.request import RequestOptions
from leakhound.errors import LeakhoundError
from leakhound.model.names import Method
from tests.integration.test_ptrace_signals import (
    CLEAN_FAILURES,
    RT,
    SLOT_TICKS,
    USR1,
    Counts,
    _start_sender,
    _stop_sender,
)
from tests.utils import spawn_target

QUICK = RequestOptions(method=Method.GDB, timeout=30)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]


@pytest.mark.gdb
def test_signal_storm_during_20_gdb_inspections(tmp_path: Path) -> None:
    with spawn_target("signal_counter", tmp_path) as child:
        counts = Counts(Path(f"{child.ready_file}.counts"))
        stop = tmp_path / "stop"
        take_snapshot(child.pid, request=QUICK, top=5)  # warm-up: loads the payload
        sender = _start_sender(child.pid, Path(f"{child.ready_file}.counts"), stop)
        failures: list[str] = []
        try:
            for i in range(20):
                try:
                    assert take_snapshot(child.pid, request=QUICK, top=5).method == "gdb"
                except LeakhoundError as exc:
                    assert isinstance(exc, CLEAN_FAILURES), f"inspection {i}: {exc!r}"
                    failures.append(repr(exc))
                assert child.proc.poll() is None, f"target died at inspection {i}: {child.proc.returncode}"
        finally:
            result = _stop_sender(sender, stop)
        sent = result["sent"]
        delivered = counts.settle(sent)
        ticks = counts[SLOT_TICKS]
        time.sleep(0.2)
        report = child.signal_and_report(signal.SIGHUP)
        assert child.proc.poll() is None
    assert len(failures) <= 2, failures
    assert report["truth"]["ticks"] >= ticks > 0  # its loop kept ticking
    assert result["lost"] == 0 and delivered[USR1] == sent[USR1]
    for sig in RT:  # queued signals: each delivered exactly once
        assert delivered[sig] == sent[sig], (sig, delivered[sig], sent[sig])

