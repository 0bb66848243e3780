"""The simulated workload, one dataclass with one set of defaults for every caller: the
worker's own command line (``python -m leakhound.simulate.worker``), the fleet that starts
workers (``simulate``, ``demo``, ``patch`` without a pid, the tests) and ``confirm``'s A/B runs.
Standard library only: the simulated worker imports it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Workload:
    """What one simulated worker does; ``rollouts=None`` churns forever."""

    concurrency: int = 4  # rollouts in flight
    turns: int = 45  # model turns per rollout
    rollouts: int | None = 8  # before going idle
    image_kb: int = 96  # base64 size of each turn's screenshot, KiB
    group_size: int = 1  # rollouts per group (>1: a group stage)
    stats_interval: float = 10.0  # the worker's stats_loop period, s (trim runs on it)
    hold: float = 60.0  # seconds to stay idle after the last rollout
    seed: int = 0
    model_latency_ms: float = 5.0
    #: Prompt tokens one screenshot renders to (None: as many as its KiB).
    image_tokens: int | None = None
    #: The last ``park`` rollouts stall after their last turn and stay in flight.
    park: int = 0

    def worker_args(self) -> list[str]:
        """This workload as the simulated worker's own options (its fixes, id and report
        directory are the fleet's to add)."""
        args = [
            "--concurrency", str(self.concurrency),
            "--turns", str(self.turns),
            "--rollouts", "forever" if self.rollouts is None else str(self.rollouts),
            "--image-kb", str(self.image_kb),
            "--group-size", str(self.group_size),
            "--stats-interval", str(self.stats_interval),
            "--hold", str(self.hold),
            "--seed", str(self.seed),
            "--model-latency-ms", str(self.model_latency_ms),
            "--park", str(self.park),
        ]  # fmt: skip
        if self.image_tokens is not None:
            args += ["--image-tokens", str(self.image_tokens)]
        return args
