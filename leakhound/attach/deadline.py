"""When leakhound gives up waiting for a request: a fixed wall clock, or the request's progress.

An explicit ``--timeout`` is a hard wall-clock limit. Without one (``FOLLOW_PROGRESS``) a
request is not cut off at a fixed time: a multi-GB worker's inspection takes minutes (a 6 GB
worker's took 129 s), and it is given up only when
nothing moves for the stall window, or at a ceiling that grows with the target's RSS.
Progress is what the payload says as it works (its progress messages, the graph's records as
they arrive) and leakhound's own work on what it handed over (the dominator pass, during
which the payload waits for it: ``hold``). The payload keeps its own deadline, the hard limit
less a margin, whatever happens to the CLI.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# The ``timeout`` that means "no fixed wall clock: follow the request's progress".
FOLLOW_PROGRESS = math.inf

# Seconds without progress after which a request is given up. The payload reports at least
# every few hundred ms while it walks (throttled to 0.2 s); its longest silent steps are the
# roots' listing and writing the graph's document, seconds on a multi-GB heap.
STALL_SECONDS = 45.0
# Overrides STALL_SECONDS (a positive number of seconds): a tighter window on a fleet whose
# workers must not be held by a stalled request, or a short one in tests.
STALL_ENV = "LEAKHOUND_STALL_SECONDS"

# The ceiling for a request that keeps progressing: CEILING_BASE plus CEILING_PER_GIB for
# each GiB of the target's RSS, at most CEILING_MAX (the payload's own limit). Measured:
# ~20 s a GiB for the first-reacher census of a 6 GB worker on 3.11 (129 s), up to 2-3x that
# on 3.12; the ceiling keeps 3x over the slowest.
CEILING_BASE = 120.0
CEILING_PER_GIB = 60.0
CEILING_MAX = 3600.0


def ceiling_for(rss_bytes: int) -> float:
    """The longest a request that keeps progressing may take in a target of ``rss_bytes``."""
    return min(CEILING_MAX, CEILING_BASE + CEILING_PER_GIB * max(0, rss_bytes) / (1 << 30))


def stall_seconds(environ: dict[str, str] | None = None) -> float:
    """The stall window: ``LEAKHOUND_STALL_SECONDS`` when it is a positive finite number."""
    text = (os.environ if environ is None else environ).get(STALL_ENV, "")
    try:
        value = float(text)
    except ValueError:
        return STALL_SECONDS
    return value if math.isfinite(value) and value > 0 else STALL_SECONDS


def _resident(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class Deadline:
    """A request's deadline as it waits: ``at()`` is the monotonic time it runs out, moved on
    by ``progressed()`` when it follows progress, never past ``limit_at`` (the hard limit).
    Any thread may report progress or hold it."""

    def __init__(self, *, limit: float, stall: float | None, rss_bytes: int = 0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.started_at = clock()
        self.limit = limit
        self.limit_at = self.started_at + limit
        self.stall = stall  # None: the hard limit only
        self.rss_bytes = rss_bytes
        self.last_progress = self.started_at
        self.last_phase = ""
        self._held = 0
        self._lock = threading.Lock()

    @classmethod
    def fixed(cls, seconds: float, *, clock: Callable[[], float] = time.monotonic) -> Deadline:
        """A hard wall-clock limit of ``seconds`` (an explicit ``--timeout``)."""
        return cls(limit=seconds, stall=None, clock=clock)

    @classmethod
    def following_progress(cls, rss_bytes: int, *, stall: float | None = None,
                           clock: Callable[[], float] = time.monotonic) -> Deadline:
        """Given up after ``stall`` seconds without progress (default ``stall_seconds()``) or at
        the ceiling for a target of ``rss_bytes``."""
        return cls(limit=ceiling_for(rss_bytes), stall=stall_seconds() if stall is None else stall,
                   rss_bytes=rss_bytes, clock=clock)

    @classmethod
    def for_request(cls, pid: int, timeout: float) -> Deadline:
        """``timeout`` seconds, or with ``FOLLOW_PROGRESS`` (any non-finite value) the progress
        deadline of ``pid`` by its RSS now."""
        if math.isfinite(timeout):
            return cls.fixed(timeout)
        return cls.following_progress(_resident(pid))

    @property
    def follows_progress(self) -> bool:
        return self.stall is not None

    def progressed(self, phase: str = "") -> None:
        """The request moved on (a message, records, an answer): the stall window starts again
        (or where a known wait ends, ``waits_until``, if that is later)."""
        with self._lock:
            self.last_progress = max(self.last_progress, self.clock())
            if phase:
                self.last_phase = phase

    def waits_until(self, seconds: float) -> None:
        """A wait whose end is known (the main thread's ``time.sleep``): the stall window
        starts when it ends, ``seconds`` from now, whatever progress is said meanwhile (the
        injection's, a hold's end: a 100 s sleep was given up 45 s in, "did not reach a safe
        point", the wait it had announced cut short)."""
        with self._lock:
            self.last_progress = max(self.last_progress, self.clock() + seconds)

    def begin_hold(self) -> None:
        """leakhound itself works on what the request handed over (the payload waits for it
        meanwhile): no stall until ``end_hold``, and the window starts again then."""
        with self._lock:
            self._held += 1

    def end_hold(self) -> None:
        with self._lock:
            self._held -= 1
            self.last_progress = max(self.last_progress, self.clock())

    @contextmanager
    def hold(self) -> Iterator[None]:
        """``begin_hold`` ... ``end_hold`` around a block."""
        self.begin_hold()
        try:
            yield
        finally:
            self.end_hold()

    def at(self) -> float:
        """The monotonic time the wait runs out, as things stand."""
        with self._lock:
            if self.stall is None or self._held:
                return self.limit_at
            return min(self.limit_at, self.last_progress + self.stall)

    def left(self) -> float:
        return self.at() - self.clock()

    def expired(self) -> bool:
        return self.clock() >= self.at()

    def limit_left(self) -> float:
        """Seconds to the hard limit (what a wait that cannot see progress may take at most)."""
        return self.limit_at - self.clock()

    def payload_timeout(self, margin: float = 2.0) -> float:
        """The deadline the payload keeps inside the target: the hard limit less ``margin``, so
        that it gives up a little before the CLI does and can still say why."""
        return max(1.0, self.limit - margin)

    def explain(self, pid: int) -> str:
        """Why the wait for ``pid`` ran out, for AttachTimeout."""
        now = self.clock()
        if self.stall is None:
            return f"no result from process {pid} within {self.limit:.0f}s"
        if now < self.limit_at:
            where = f" (last: {self.last_phase})" if self.last_phase else ""
            return (f"process {pid} made no progress for {now - self.last_progress:.0f}s{where}: the request is "
                    f"given up after {self.stall:.0f}s without progress ({STALL_ENV}) when no --timeout is given")
        return (f"no result from process {pid} within {self.limit:.0f}s, the ceiling for a request that keeps "
                f"progressing in a process of {self.rss_bytes / (1 << 30):.1f} GiB RSS ({CEILING_BASE:.0f} s + "
                f"{CEILING_PER_GIB:.0f} s a GiB, at most {CEILING_MAX:.0f} s); pass a longer --timeout")
