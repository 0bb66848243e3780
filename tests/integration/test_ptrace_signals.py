"""The ptrace method against a target that receives signals: none lost, none duplicated.

While the main thread is stopped for the injection, a signal meant for it is reported to
leakhound (signal-delivery-stop); leakhound must hand it back exactly once when it lets go.
The target (fixtures/signal_counter.py) counts each kernel delivery itself.
"""

from __future__ import annotations

import json
import mmap
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from leakhound.attach import ptrace
from leakhound.core.capture import take_snapshot
from leakhound.core.request import RequestOptions
from leakhound.errors import AttachFailed, AttachTimeout, LeakhoundError
from leakhound.model.names import Method
from tests.utils import FIXTURES, ROOT, spawn_target

QUICK = RequestOptions(method=Method.PTRACE, timeout=30)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]

RT = (int(signal.SIGRTMIN), int(signal.SIGRTMIN) + 1)
USR1, USR2 = int(signal.SIGUSR1), int(signal.SIGUSR2)
SLOT_TICKS, SLOT_BOOTSTRAPS = 0, 65
# The documented ways an inspection may fail cleanly (docs/errors.md): busy or refused.
CLEAN_FAILURES = (AttachTimeout, AttachFailed)


class Counts:
    """The target's delivery counters, read from its shared file without signalling it."""

    def __init__(self, path: Path) -> None:
        with open(path, "rb") as fh:
            self._view = memoryview(mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ)).cast("q")

    def __getitem__(self, slot: int) -> int:
        return int(self._view[slot])

    def settle(self, sent: dict[int, int], timeout: float = 10.0) -> dict[int, int]:
        """The delivered counts once they reach ``sent`` or stop changing for 0.5 s."""
        deadline = time.monotonic() + timeout
        last, still_since = None, time.monotonic()
        while time.monotonic() < deadline:
            now = {sig: self[sig] for sig in sent}
            if all(now[sig] >= n for sig, n in sent.items()):
                return now
            if now != last:
                last, still_since = now, time.monotonic()
            elif time.monotonic() - still_since > 0.5:
                return now
            time.sleep(0.02)
        return {sig: self[sig] for sig in sent}


def _start_sender(pid: int, counts: Path, stop: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(FIXTURES / "signal_sender.py"), str(pid), str(counts), str(stop)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )


def _stop_sender(sender: subprocess.Popen[str], stop: Path) -> dict:  # type: ignore[type-arg]
    stop.touch()
    out, _ = sender.communicate(timeout=30)
    assert sender.returncode == 0
    result = json.loads(out)
    result["sent"] = {int(k): v for k, v in result["sent"].items()}
    return result  # type: ignore[no-any-return]


def test_signal_storm_during_150_inspections(tmp_path: Path) -> None:
    with spawn_target("signal_counter", tmp_path) as child:
        counts = Counts(Path(f"{child.ready_file}.counts"))
        stop = tmp_path / "stop"
        take_snapshot(child.pid, request=QUICK, top=5)  # warm-up: loads the payload
        sender = _start_sender(child.pid, Path(f"{child.ready_file}.counts"), stop)
        try:
            forwarded, stops, failures, stalled = 0, [], [], 0
            began = time.monotonic()
            for i in range(150):
                ticks = counts[SLOT_TICKS]
                lines: list[str] = []
                try:
                    snap = take_snapshot(child.pid, top=5,
                                         request=RequestOptions(method=Method.PTRACE, timeout=30, log=lines.append))
                    assert snap.method == "ptrace"
                except LeakhoundError as exc:
                    assert isinstance(exc, CLEAN_FAILURES), f"inspection {i}: {exc!r}"
                    failures.append(f"{type(exc).__name__} (exit {exc.EXIT_CODE}): {exc}")
                log = "\n".join(lines)
                forwarded += sum(len(m.split(",")) for m in re.findall(r"held during the stop: \[([^]]*)\]", log))
                stops += [float(ms) for ms in re.findall(r"stopped ([\d.]+) ms", log)]
                stalled += counts[SLOT_TICKS] == ticks  # no heartbeat during a whole inspection
                assert child.proc.poll() is None, f"target died at inspection {i}"
            elapsed = time.monotonic() - began
        finally:
            result = _stop_sender(sender, stop)
        sent = result["sent"]
        delivered = counts.settle(sent)
        report = child.signal_and_report(signal.SIGHUP)
        assert child.proc.poll() is None
    truth = report["truth"]
    print(f"\n150 inspections in {elapsed:.1f} s, {len(failures)} failed cleanly {failures[:3]}; "
          f"{result['rounds']} rounds of signals, sent {sent}, delivered {delivered}, "
          f"python handler runs {truth['handler_runs']}; {forwarded} signals held during "
          f"{len(stops)} stops and forwarded (stop median {sorted(stops)[len(stops) // 2]:.3f} ms, "
          f"max {max(stops):.3f} ms); loop lag max {report['max_lag_ms']:.1f} ms, "
          f"{stalled} inspections without a heartbeat")
    assert len(failures) <= 3, failures
    assert result["rounds"] >= 10 and forwarded > 0  # the stops did meet signals
    for sig in RT:  # real-time signals queue: each delivered exactly once
        assert delivered[sig] == sent[sig], (sig, delivered[sig], sent[sig])
    # SIGUSR1 went one at a time, each after the previous was counted: exact too.
    assert result["lost"] == 0
    assert delivered[USR1] == sent[USR1]
    # SIGUSR2 in fire-and-forget bursts may coalesce, but never multiply.
    assert 0 < delivered[USR2] <= sent[USR2]
    for sig in (USR1, USR2, *RT):  # Python handler runs: at most one per delivery
        assert 0 < truth["handler_runs"][str(sig)] <= delivered[sig]
    assert truth["ticks"] > 150 and stalled < 150 // 2


def test_blocked_main_thread_sleeps_and_reads_unharmed(tmp_path: Path) -> None:
    # The main thread sits in time.sleep / os.read; each injection interrupts that call, signals
    # interrupt it too. The sleeps must last their full length, the reads return the data in
    # order, every queued bootstrap run exactly once and every signal delivered exactly once.
    with spawn_target("signal_counter", tmp_path, env={"FIXTURE_MAIN": "blocking"}) as child:
        counts = Counts(Path(f"{child.ready_file}.counts"))
        data_fd = child.report(refresh=False)["data_fd"]
        stop = tmp_path / "stop"
        sender = _start_sender(child.pid, Path(f"{child.ready_file}.counts"), stop)
        injected = 0
        try:
            with open(f"/proc/{child.pid}/fd/{data_fd}", "wb", buffering=0) as pipe:
                for n in range(12):
                    # Twice in the sleep, twice in the read (the report says which is done).
                    for _ in range(2):
                        time.sleep(0.05)
                        ptrace.inject(child.pid, "BOOTSTRAPS += 1", timeout=10, log=lambda _: None)
                        injected += 1
                    deadline = time.monotonic() + 5
                    while child.report(refresh=False)["truth"]["sleeps"] <= n:
                        assert time.monotonic() < deadline, "the sleep never ended"
                        time.sleep(0.01)
                    for _ in range(2):
                        ptrace.inject(child.pid, "BOOTSTRAPS += 1", timeout=10, log=lambda _: None)
                        injected += 1
                        time.sleep(0.02)
                    pipe.write(b"msg-%d" % n)
                    while child.report(refresh=False)["truth"]["reads"] <= n:
                        assert time.monotonic() < deadline, "the read never returned"
                        time.sleep(0.01)
        finally:
            result = _stop_sender(sender, stop)
        delivered = counts.settle(result["sent"])
        deadline = time.monotonic() + 5
        while counts[SLOT_BOOTSTRAPS] < injected and time.monotonic() < deadline:
            os.kill(child.pid, signal.SIGUSR2)  # a handler run lets pending calls run
            time.sleep(0.05)
        truth = child.signal_and_report(signal.SIGHUP)["truth"]
        assert child.proc.poll() is None
    print(f"\n{injected} injections into a blocked main thread: {truth['sleeps']} sleeps of "
          f"{truth['sleep_s']} s (shortest {truth['min_sleep_s']:.4f} s), {truth['reads']} reads; "
          f"sent {result['sent']}, delivered {delivered}; bootstraps run {truth['bootstraps']}")
    assert truth["short_sleeps"] == 0 and truth["min_sleep_s"] >= truth["sleep_s"]
    assert truth["bad_reads"] == [] and truth["reads"] == 12
    assert truth["bootstraps"] == injected  # each queued call ran once: none lost, none twice
    assert result["lost"] == 0
    for sig in (USR1, *RT):
        assert delivered[sig] == result["sent"][sig], (sig, delivered, result["sent"])
