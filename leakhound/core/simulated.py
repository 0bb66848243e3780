"""A simulated verifiers worker to show a command on when no PID is given (patch, demo)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from leakhound.simulate.fleet import Fleet, start_fleet
from leakhound.simulate.workload import Workload

#: Churning, small enough to leak visibly within seconds.
SHOWCASE = Workload(turns=24, rollouts=None, image_kb=64, hold=0, stats_interval=2.0)


@contextlib.contextmanager
def leaking_simulated_worker(
    report_dir: str, *, until: Callable[[dict[str, Any]], bool]
) -> Iterator[Fleet]:
    """A fresh simulated verifiers worker (``SHOWCASE``: 4 rollouts x 24 turns x 64 KiB screenshots, churning,
    no fixes), yielded once its own report satisfies ``until``; always stopped afterwards.

    Where no debugger-style attach is possible it runs the in-process agent, so commands
    that show it work without ptrace too.
    """
    from leakhound.attach import ptrace
    from leakhound.attach.gdb import gdb_path

    env = {} if ptrace.available() or gdb_path() else {"LEAKHOUND_AGENT": "1"}
    with start_fleet(workers=1, workload=SHOWCASE, fixes="none", report_dir=report_dir, extra_env=env) as fleet:
        fleet.wait_ready(timeout=120)
        fleet.wait_for(until, timeout=120, what="leak enough to show")
        try:
            yield fleet
        finally:
            fleet.stop()
