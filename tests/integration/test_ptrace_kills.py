"""Killing leakhound at every step of a ptrace injection never harms the target.

The tracer helper's test hook (LEAKHOUND_PTRACE_TEST) sends the CLI a signal right after a
given step of the stop (for SIGKILL, and waits until the CLI is gone before the next step),
so each step is hit exactly, not by chance. After each kill the target (fixtures/
signal_counter.py, an asyncio loop counting its own ticks) must be alive, running, not
traced, with its signal mask as it was, still answering with fresh numbers of its own, and
nothing of the request may be left: no private directory, no bootstrap page.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.utils import Child, spawn_target

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]

LEAKHOUND = str(Path(sys.executable).with_name("leakhound"))
STEPS = ("start", "seized", "saved", "mapped", "written", "called", "restored", "detached", "reported")
PAGE_TEXT = b"try:\n __import__('sys').__dict__.setdefault("


def main_thread_status(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/task/{pid}/status") as fh:
        return dict(line.split(":\t", 1) for line in fh.read().splitlines() if ":\t" in line)


def page_still_ours(pid: int, address: int) -> bool:
    """Whether the bootstrap page is still mapped with our text in it."""
    try:
        with open(f"/proc/{pid}/mem", "rb") as mem:
            mem.seek(address)
            return mem.read(len(PAGE_TEXT)) == PAGE_TEXT
    except OSError:
        return False  # not mapped


def wait_for_helper(log_file: Path, timeout: float = 90.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log_file.read_text() if log_file.exists() else ""
        if "helper: done" in text:
            return text
        time.sleep(0.05)
    raise AssertionError(f"the tracer helper did not finish: {log_file.read_text()}")


def assert_unharmed(child: Child, mask_before: str, ticks_before: int) -> None:
    assert child.proc.poll() is None, "the target died"
    status = main_thread_status(child.pid)
    assert status["State"][0] in "RS", status["State"]  # not stopped (t/T), not a zombie
    assert status["TracerPid"].strip() == "0", status["TracerPid"]
    assert status["SigBlk"] == mask_before, (status["SigBlk"], mask_before)
    report = child.signal_and_report(signal.SIGHUP)  # its own fresh numbers: it computes
    assert report["truth"]["ticks"] > ticks_before


def kill_at(child: Child, tmp_path: Path, step: str, sig: int, args: list[str]) -> str:
    log_file = tmp_path / f"helper-{step}-{sig}.log"
    env = {**os.environ, "LEAKHOUND_PTRACE_TEST": json.dumps(
        {"kill_cli_after": step, "kill_signal": sig, "log_file": str(log_file)})}
    cli = subprocess.run(
        [LEAKHOUND, *args, str(child.pid), "--method", "ptrace"],
        env=env, capture_output=True, text=True, timeout=120,
    )
    log = wait_for_helper(log_file)
    assert f"after step {step}" in log, log
    assert cli.returncode != 0, (step, cli.stdout[-500:])  # it did not live to finish
    return log


def check_nothing_left(child: Child, log: str) -> None:
    private = re.search(r"helper: private dir (\S+)", log)
    assert private and private.group(1) != "None", log
    assert not os.path.exists(private.group(1)), f"private directory left: {private.group(1)}"
    for page in re.findall(r"bootstrap at (0x[0-9a-f]+)", log):
        deadline = time.monotonic() + 10
        while page_still_ours(child.pid, int(page, 16)):
            assert time.monotonic() < deadline, f"bootstrap page {page} left mapped"
            time.sleep(0.05)


@pytest.mark.parametrize(
    ("sig", "steps"),
    [
        (signal.SIGKILL, STEPS),
        (signal.SIGTERM, ("seized", "mapped", "called", "reported")),
        (signal.SIGINT, ("saved", "written", "restored", "reported")),
    ],
    ids=["SIGKILL", "SIGTERM", "SIGINT"],
)
def test_killing_leakhound_at_every_step_leaves_the_target_unharmed(
        tmp_path: Path, sig: int, steps: tuple[str, ...]) -> None:
    with spawn_target("signal_counter", tmp_path) as child:
        mask_before = main_thread_status(child.pid)["SigBlk"]
        for step in steps:
            ticks = child.report(refresh=False)["truth"]["ticks"]
            log = kill_at(child, tmp_path, step, sig, ["inspect"])
            assert_unharmed(child, mask_before, ticks)
            check_nothing_left(child, log)
            stops = re.findall(r"stopped ([\d.]+) ms", log)
            print(f"\n{signal.Signals(sig).name} after {step}: target unharmed; stops (ms) {stops}")
