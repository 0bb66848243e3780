"""A watch whose first full census takes the whole window (a 2 GB worker under load: ~100 s of a
120 s watch) still has the three points a trend needs: a cheap sample right after that census,
then the final one. No process is attached: the samples are made here."""

from __future__ import annotations

import time
from typing import Any

import pytest

from leakhound.attach.process import Target
from leakhound.core import watch as watch_module
from leakhound.core.request import RequestOptions
from leakhound.core.watch import Watched, watch_processes
from leakhound.model.growth import OwnerSample, Sample
from leakhound.model.names import Method

REGISTRY = "task:Task-1/run.self.env.harness.runtime.trajectories"


def test_a_first_census_longer_than_the_window_is_followed_by_a_cheap_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    taken: list[str] = []

    def add(pid: int, watched: dict[int, Watched], **_: Any) -> None:
        watched[pid] = Watched(target=Target(pid, 0, "/usr/bin/python3", (3, 11), "python", "python"),
                                       request=RequestOptions().via(Method.AGENT))

    def sample_one(w: Watched, *, now: float, final: bool, **_: Any) -> Sample:
        full = w.last_full is None or final
        if w.last_full is None:
            time.sleep(0.6)  # the first census: longer than the whole watch
        entries = 10 + 5 * len(taken)  # the registry keeps growing
        taken.append("full" if full else "cheap")
        sample = Sample(pid=w.target.pid, taken_at=time.time(), rss_bytes=(1 << 30) + entries * (1 << 24),
                        heap_bytes=entries * (1 << 24) if full else None, full=full, owner_model="dominator",
                        owners=(OwnerSample(REGISTRY, "dict", entries, entries * (1 << 24), estimated=not full),))
        if full:
            w.last_full = sample
        return sample

    monkeypatch.setattr(watch_module, "_add", add)
    monkeypatch.setattr(watch_module, "_sample_one", sample_one)
    result = watch_processes(pids=(4242,), interval=0.1, duration=0.3)
    assert taken == ["full", "cheap", "full"]
    (report,) = result.reports
    (owner,) = [o for o in report.owners if o.name == REGISTRY]
    assert owner.verdict == "growing" and owner.points == 3
