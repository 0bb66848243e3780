"""Entry point of the simulated env worker: ``python -m leakhound.simulate.worker``.

A standard-library-only target process for leakhound: a verifiers-v1-shaped env worker whose
memory behaves like the production workers that were OOM-killed (see ``--fix``).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from . import fixes, report
from .env_worker import EnvWorker, WorkerConfig
from .workload import Workload


def parse_args(argv: Sequence[str] | None = None) -> WorkerConfig:
    parser = argparse.ArgumentParser(
        prog="python -m leakhound.simulate.worker",
        description="Simulated verifiers env worker with the four known memory leaks.",
    )
    d = Workload()  # the one set of defaults
    parser.add_argument("--concurrency", type=int, default=d.concurrency, help="rollouts in flight")
    parser.add_argument("--turns", type=int, default=d.turns, help="model turns per rollout")
    parser.add_argument(
        "--rollouts", default=str(d.rollouts), help="rollouts to run before going idle, or 'forever'"
    )
    parser.add_argument(
        "--image-kb", type=int, default=d.image_kb, help="base64 size of each screenshot, KiB"
    )
    parser.add_argument(
        "--image-tokens", type=int, default=d.image_tokens, help="prompt tokens per screenshot"
    )
    parser.add_argument("--group-size", type=int, default=d.group_size, help="rollouts per group (>1: groups)")
    parser.add_argument(
        "--fix", "--fixes", dest="fix",  # --fixes: the old spelling, still read
        default="none",
        help="none | all | comma list of " + ",".join(fixes.KNOWN_FIXES),
    )
    parser.add_argument("--report-dir", type=Path, default=None, help="where <pid>.json goes")
    parser.add_argument(
        "--hold", type=float, default=d.hold, help="seconds to stay idle after the last rollout"
    )
    parser.add_argument("--stats-interval", type=float, default=d.stats_interval, help="stats_loop period, s")
    parser.add_argument("--model-latency-ms", type=float, default=d.model_latency_ms)
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument("--worker-id", type=int, default=0)
    parser.add_argument(
        "--park", type=int, default=d.park,
        help="the last N rollouts stall after their last turn and stay in flight (holding their intercepts)",
    )
    parser.add_argument(
        "--exact-sizes", action="store_true",
        help="ground truth counts the elements of token arrays too (slower reports)",
    )
    args = parser.parse_args(argv)
    report.COUNT_NUMERIC_ELEMENTS = args.exact_sizes
    try:
        active = fixes.parse_fixes(args.fix)
    except ValueError as e:
        parser.error(str(e))
    if args.rollouts.strip().lower() == "forever":
        rollouts: int | None = None
    else:
        try:
            rollouts = int(args.rollouts)
        except ValueError:
            parser.error("--rollouts must be an integer or 'forever'")
    for name in ("concurrency", "turns", "image_kb", "group_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return WorkerConfig(
        concurrency=args.concurrency,
        turns=args.turns,
        rollouts=rollouts,
        image_kb=args.image_kb,
        image_tokens=args.image_tokens,
        group_size=args.group_size,
        stats_interval=args.stats_interval,
        hold=args.hold,
        seed=args.seed,
        report_dir=args.report_dir,
        worker_id=args.worker_id,
        model_latency_ms=args.model_latency_ms,
        fixes=active,
        park=max(0, args.park),
    )


#: Set by ``start_fleet`` to its own pid: the worker dies with that process.
PARENT_ENV = "LEAKHOUND_SIMULATE_PARENT"
PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """SIGKILL this worker when the fleet's parent dies, however it dies (even SIGKILL), so
    that no simulated worker, a GB or more, is ever left running reparented to init.

    The kernel sends the signal when the thread that spawned us exits; a parent gone before
    this call is caught by looking for the pid the fleet passed down (``python`` may be a
    wrapper that forks, so our parent need not be that pid).
    """
    expected = os.environ.pop(PARENT_ENV, "")
    if not expected.isdigit():
        return  # started by hand: lives as long as its shell keeps it
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the fleet's own signal handling still stops us
    if os.getppid() != int(expected):
        try:
            os.kill(int(expected), 0)
        except ProcessLookupError:
            os._exit(1)
        except OSError:
            pass


def main(argv: Sequence[str] | None = None) -> int:
    die_with_parent()
    config = parse_args(argv)
    fixes.configure(config.fixes)
    if config.report_dir is not None:
        config.report_dir.mkdir(parents=True, exist_ok=True)
    EnvWorker.run_worker(config, worker_id=config.worker_id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
