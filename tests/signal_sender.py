"""Fire signals at a fixtures/signal_counter.py target: ``python -m tests.signal_sender PID COUNTS STOP``.

A separate process (so the inspections in the test's process do not share its GIL). Until the
file STOP exists, repeats one round:

- a burst of real-time signals, SIGRTMIN and SIGRTMIN+1 alternately, ``BURST`` of each,
  sent to the main thread (``tgkill``: the thread leakhound stops) or, every fourth round,
  to the process (``kill``); they queue, so each must be delivered exactly once;
- a burst of SIGUSR2 at the main thread, fire and forget (they may coalesce);
- ``LOCKSTEP`` SIGUSR1 one at a time, each sent only after the target counted the previous
  one, so none can coalesce with another and each must be delivered exactly once. A SIGUSR1
  not counted within 3 s was lost: counted as ``lost`` and not waited for again.

Prints one JSON line: how many of each signal it sent, ``lost``, and the rounds.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import signal
import sys
import time

BURST = 150
LOCKSTEP = 20
_SYS_TGKILL = 234
_libc = ctypes.CDLL(None, use_errno=True)


def main(argv: list[str]) -> int:
    pid, counts_path, stop_path = int(argv[0]), argv[1], argv[2]
    with open(counts_path, "rb") as fh:
        counts = memoryview(mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ)).cast("q")
    rt = (signal.SIGRTMIN, signal.SIGRTMIN + 1)
    sent = {int(s): 0 for s in (signal.SIGUSR1, signal.SIGUSR2, *rt)}
    lost = rounds = 0

    def tgkill(sig: int) -> None:
        if _libc.syscall(_SYS_TGKILL, pid, pid, sig) != 0:
            raise OSError(ctypes.get_errno(), f"tgkill {sig}")
        sent[sig] += 1

    while not os.path.exists(stop_path):
        rounds += 1
        for _ in range(BURST):
            for sig in rt:
                if rounds % 4:
                    tgkill(sig)
                else:
                    os.kill(pid, sig)
                    sent[sig] += 1
        for _ in range(BURST):
            tgkill(signal.SIGUSR2)
        for _ in range(LOCKSTEP):
            expected = counts[signal.SIGUSR1] + 1
            tgkill(signal.SIGUSR1)
            deadline = time.monotonic() + 3.0
            while counts[signal.SIGUSR1] < expected:
                if time.monotonic() > deadline:
                    lost += 1
                    break
                time.sleep(0.0002)
    print(json.dumps({"sent": sent, "lost": lost, "rounds": rounds}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
