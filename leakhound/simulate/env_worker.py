"""``verifiers.serve.server.env_worker.EnvWorker`` for the simulated environment.

Instead of ZMQ requests from a router, the worker feeds itself ``run_rollout`` (or
``run_group`` when ``group_size > 1``) requests so that ``concurrency`` rollouts are in
flight, until ``rollouts`` have completed (or forever). It then idles with its event loop
ticking until ``hold`` seconds pass or SIGTERM arrives. As upstream, the worker object is
held by the ``run_worker`` frame; the long-lived Runtime is
``EnvWorker.env.harness.runtime`` (also ``runtime._RUNTIME_REGISTRY[runtime_id]``).
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import fixes, program, report
from .client import FakeModelClient
from .env import Environment, Harness
from .program import browser_agent
from .runtime import State
from .workload import Workload

MODEL = "sim-vlm-7b"
HEARTBEAT_INTERVAL_S = 0.02


@dataclass(frozen=True)
class WorkerConfig(Workload):
    """The workload (its defaults are ``Workload``'s) and what is this worker's own."""

    report_dir: Path | None = None
    worker_id: int = 0
    fixes: frozenset[str] = field(default_factory=frozenset)

    @property
    def tokens_per_image(self) -> int:
        return self.image_tokens if self.image_tokens is not None else self.image_kb

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["report_dir"] = str(self.report_dir) if self.report_dir else None
        data["fixes"] = sorted(self.fixes)
        data["image_tokens"] = self.tokens_per_image
        return data


@dataclass(frozen=True)
class RunRolloutRequest:
    request_id: str
    input: dict[str, Any]


@dataclass(frozen=True)
class RunGroupRequest:
    request_id: str
    group_inputs: list[dict[str, Any]]


def load_environment() -> Environment:
    return Environment(Harness(program=browser_agent))




class EnvWorker:
    """Executes environment logic."""

    def __init__(self, config: WorkerConfig, *, worker_id: int = 0, worker_name: str = "") -> None:
        self.config = config
        self.worker_id = worker_id
        self.worker_name = worker_name or f"EnvWorker{worker_id}"
        self.env = load_environment()
        self.clients: dict[str, FakeModelClient] = {}
        self.active_tasks: dict[str, asyncio.Task[None]] = {}
        self.shutting_down = False

        # ground truth for the report
        self.started_at = time.time()
        self.phase = "running"
        self.idle_since: float | None = None
        self.rollouts_started = 0
        self.turns_at_start = program.TURNS_DONE[0]
        # Heartbeats while rollouts churn (the first wave all started, more to come), and how
        # many of them saw no delivered intercept in flight: ground truth for the stagger.
        self.churning = False
        self.churn_ticks = 0
        self.churn_ticks_without_delivered = 0
        self.rollouts_completed = 0
        self.rollouts_failed = 0
        self.requests_completed = 0
        self.groups_completed = 0
        self.last_error: str | None = None
        self.stats_ticks = 0
        self.stats_ticks_at_idle = 0
        self.lag_max_s = 0.0
        self.idle_lag_max_s = 0.0
        self.lag_samples = 0
        self._report_dirty = False
        self._last_report_at = 0.0
        self.peak_intercepts = 0
        self.peak_intercepts_delivered = 0
        self._last_body_sample = 0.0
        #: Seconds the loop spent on this ground truth (reports, samples); not counted as lag.
        self.bookkeeping_s = 0.0
        self.peak_intercept_body_bytes = 0

    # -- requests ---------------------------------------------------------------------

    def resolve_client(self) -> FakeModelClient:
        key = "default"
        if key not in self.clients:
            self.clients[key] = FakeModelClient(
                image_tokens=self.config.tokens_per_image,
                latency_s=self.config.model_latency_ms / 1000.0,
                seed=self.config.seed,
            )
        return self.clients[key]

    async def handle_run_rollout(self, request: RunRolloutRequest) -> dict[str, Any]:
        state = await self.env.run_rollout(
            input=request.input, client=self.resolve_client(), model=MODEL
        )
        return {"output": rollout_output(state)}

    async def handle_run_group(self, request: RunGroupRequest) -> dict[str, Any]:
        states = await self.env.run_group(
            group_inputs=request.group_inputs, client=self.resolve_client(), model=MODEL
        )
        self.groups_completed += 1
        return {"outputs": [rollout_output(state) for state in states]}

    async def process_request(self, request: RunRolloutRequest | RunGroupRequest) -> None:
        size = 1 if isinstance(request, RunRolloutRequest) else len(request.group_inputs)
        response: dict[str, Any] | None = None
        try:
            if isinstance(request, RunRolloutRequest):
                response = await self.handle_run_rollout(request)
            else:
                response = await self.handle_run_group(request)
            # Upstream packs the response with msgpack in a worker thread (asyncio.to_thread),
            # so its temporaries land in a second glibc arena.
            payload = await asyncio.to_thread(json.dumps, response)
            del payload
        except asyncio.CancelledError:
            if self.shutting_down:
                return
            raise
        except Exception as e:
            self.rollouts_failed += size
            self.last_error = f"{type(e).__name__}: {e}"
            print(
                f"[{self.worker_name}] error processing request {request.request_id}: "
                f"{self.last_error}",
                file=sys.stderr,
                flush=True,
            )
        finally:
            if not self.shutting_down:
                self.rollouts_completed += size
                self.requests_completed += 1
        response = None
        self.write_report()

    def request_stream(self) -> Iterator[RunRolloutRequest | RunGroupRequest]:
        config = self.config
        group_size = max(1, config.group_size)
        index = 0
        while config.rollouts is None or index < config.rollouts:
            count = group_size if config.rollouts is None else min(
                group_size, config.rollouts - index
            )
            inputs = [self.rollout_input(index + offset) for offset in range(count)]
            request_id = f"req{index:06d}"
            index += count
            if group_size > 1:
                yield RunGroupRequest(request_id=request_id, group_inputs=inputs)
            else:
                yield RunRolloutRequest(request_id=request_id, input=inputs[0])

    def rollout_input(self, index: int) -> dict[str, Any]:
        return {
            "example_id": index // max(1, self.config.group_size),
            "prompt": f"Find the cheapest matching offer for order #{index} and report it.",
            "turns": self.config.turns,
            "image_kb": self.config.image_kb,
            "seed": self.config.seed * 1_000_003 + index,
            # Every other rollout runs out of training budget on its final turn.
            "truncate_last_turn": index % 2 == 1,
            "park": self.config.rollouts is not None and index >= self.config.rollouts - self.config.park,
        }

    # -- loops ------------------------------------------------------------------------

    async def stats_loop(self, interval: float = 10.0) -> None:
        """Periodic worker stats (upstream pushes them to the router)."""
        while True:
            await asyncio.sleep(interval)
            self.stats_ticks += 1
            self.write_report()

    async def heartbeat_loop(self, interval: float = HEARTBEAT_INTERVAL_S) -> None:
        """Tick every ``interval`` and record the worst event-loop lag seen."""
        loop = asyncio.get_running_loop()
        while True:
            start = loop.time()
            bookkeeping_at_start = self.bookkeeping_s
            await asyncio.sleep(interval)
            # Time spent computing this ground truth is not the target's lag.
            own = self.bookkeeping_s - bookkeeping_at_start
            lag = max(0.0, loop.time() - start - interval - own)
            self.lag_samples += 1
            self.lag_max_s = max(self.lag_max_s, lag)
            if self.phase == "idle" and lag > self.idle_lag_max_s:
                self.idle_lag_max_s = lag
                self._report_dirty = True
            self.sample_intercepts(full=loop.time() - self._last_body_sample >= 0.5)
            if self._report_dirty and time.monotonic() - self._last_report_at >= 0.2:
                self.write_report()

    async def serve(self, stop_event: asyncio.Event) -> None:
        # Upstream runs gc.collect() before gc.freeze(); the simulation never collects.
        gc.freeze()
        gc.set_threshold(150_000, 10, 10)
        heartbeat_task = asyncio.create_task(self.heartbeat_loop())
        stats_task = asyncio.create_task(self.stats_loop(self.config.stats_interval))
        stop_task = asyncio.create_task(stop_event.wait())
        max_inflight = max(1, self.config.concurrency // max(1, self.config.group_size))
        requests = self.request_stream()
        exhausted = False
        first_wave = 0
        try:
            while not stop_event.is_set():
                while not exhausted and len(self.active_tasks) < max_inflight:
                    if first_wave < max_inflight and not self.stagger_due(first_wave, max_inflight):
                        break
                    first_wave += 1
                    request = next(requests, None)
                    if request is None:
                        exhausted = True
                        break
                    self.start_request(request)
                self.churning = first_wave >= max_inflight and not exhausted
                if len(self.active_tasks) <= program.PARKED[0] and (exhausted or not self.active_tasks):
                    break
                await asyncio.wait(
                    {stop_task, *self.active_tasks.values()},
                    return_when=asyncio.FIRST_COMPLETED,
                    # A rollout that parks completes nothing: look again (soon while the
                    # first wave is being staggered).
                    timeout=0.2 if first_wave >= max_inflight else 0.02,
                )
            self.churning = False
            if not stop_event.is_set():
                self.go_idle()
                await asyncio.wait({stop_task}, timeout=self.config.hold)
        finally:
            for task in (heartbeat_task, stats_task, stop_task):
                task.cancel()
            await asyncio.gather(heartbeat_task, stats_task, stop_task, return_exceptions=True)

    def stagger_due(self, k: int, in_flight: int) -> bool:
        """Whether the ``k``-th rollout of the first wave may start.

        A production worker's rollouts are at different turns at any moment (they started at
        different times). Started together and all of the same length, they would run in
        lockstep: every rollout ends at once, so the in-flight state (the intercept bodies)
        empties every few seconds and an inspection can land in the gap. Rollout ``k`` of the
        first wave starts once rollout 0 is ``k / in_flight`` of its way through: by then the
        running rollouts, started ``turns / in_flight`` apart, have done
        ``turns / in_flight * k (k + 1) / 2`` turns between them. Later rollouts start as
        earlier ones end, and so keep the spacing.
        """
        if k == 0:
            return True
        per_request = self.config.turns * max(1, self.config.group_size)
        needed = per_request / in_flight * k * (k + 1) / 2
        return program.TURNS_DONE[0] - self.turns_at_start >= needed

    def start_request(self, request: RunRolloutRequest | RunGroupRequest) -> None:
        size = 1 if isinstance(request, RunRolloutRequest) else len(request.group_inputs)
        self.rollouts_started += size
        task = asyncio.create_task(self.process_request(request))
        self.active_tasks[request.request_id] = task

        def cleanup_task(done: asyncio.Task[None], request_id: str = request.request_id) -> None:
            if self.active_tasks.get(request_id) is done:
                self.active_tasks.pop(request_id, None)

        task.add_done_callback(cleanup_task)

    def go_idle(self) -> None:
        self.phase = "idle"
        self.idle_since = time.time()
        self.stats_ticks_at_idle = self.stats_ticks
        self.idle_lag_max_s = 0.0
        self.write_report()

    async def close(self) -> None:
        self.shutting_down = True
        tasks = list(self.active_tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.active_tasks.clear()
        await self.env._teardown()
        self.phase = "stopped"
        self.write_report()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        stop_event = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop_event.set)
        # The fixes are leakhound's own live patches, applied in-process once the loop runs,
        # so a "fixed" worker measures exactly what `leakhound patch` does to a live one.
        fixes.apply_live_fixes(trim_interval=self.config.stats_interval)
        try:
            await self.serve(stop_event=stop_event)
        finally:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)
            await self.close()

    @classmethod
    def run_worker(cls, *args: Any, **kwargs: Any) -> None:
        worker = cls(*args, **kwargs)
        asyncio.run(worker.run())

    # -- ground truth -----------------------------------------------------------------

    def build_report(self) -> dict[str, Any]:
        started = time.perf_counter()
        runtime = self.env.harness.runtime
        server = self.env.harness.endpoint.server
        data: dict[str, Any] = {
            "schema": report.SCHEMA,
            "kind": report.REPORT_KIND,
            "pid": os.getpid(),
            "worker_id": self.worker_id,
            "phase": self.phase,
            "started_at": self.started_at,
            "written_at": time.time(),
            "uptime_s": round(time.time() - self.started_at, 3),
            "config": self.config.as_json(),
            "fixes": sorted(fixes.ACTIVE),
            "runtime_id": runtime.runtime_id,
            "paths": {
                "runtime": f"leakhound.simulate.runtime._RUNTIME_REGISTRY[{runtime.runtime_id!r}]",
                "trajectories": "EnvWorker.env.harness.runtime.trajectories",
                "intercepts": "EnvWorker.env.harness.endpoint.server.intercepts",
            },
            "rollouts_started": self.rollouts_started,
            "rollouts_completed": self.rollouts_completed,
            "rollouts_failed": self.rollouts_failed,
            "rollouts_inflight": self.rollouts_started - self.rollouts_completed,
            "requests_completed": self.requests_completed,
            "groups_completed": self.groups_completed,
            "group_stage_errors": self.env.group_stage_errors,
            "last_group_stage_error": self.env.last_group_stage_error,
            "last_error": self.last_error,
            "rss_bytes": report.rss_bytes(),
            "rss_peak_bytes": report.rss_peak_bytes(),
            "python_allocated_blocks": sys.getallocatedblocks(),
            "trajectories": report.trajectory_stats(
                runtime.trajectories, self.env.inflight_trajectory_ids
            ),
            "intercepts": self.intercept_report(server.intercepts),
            "churn": {
                "ticks": self.churn_ticks,
                "ticks_without_delivered_intercepts": self.churn_ticks_without_delivered,
            },
            "trim": {"count": fixes.live_counters().get("trim", {}).get("trims", 0)},
            "stats_ticks": self.stats_ticks,
            "stats_ticks_since_idle": (
                self.stats_ticks - self.stats_ticks_at_idle if self.idle_since else 0
            ),
            "idle_since": self.idle_since,
            "loop_lag": {
                "interval_ms": HEARTBEAT_INTERVAL_S * 1000.0,
                "max_ms": round(self.lag_max_s * 1000.0, 3),
                "idle_max_ms": round(self.idle_lag_max_s * 1000.0, 3),
                "samples": self.lag_samples,
                "bookkeeping_ms": round(self.bookkeeping_s * 1000.0, 3),
            },
        }
        data["report_ms"] = round((time.perf_counter() - started) * 1000.0, 3)
        return data

    def sample_intercepts(self, full: bool) -> None:
        """Update the intercept high-water marks (unfixed, delivered entries only exist
        while their rollout is in flight, so a report at rest would never show them).

        Counting is cheap and runs every heartbeat; measuring body bytes runs when ``full``.
        """
        started = time.perf_counter()
        intercepts = self.env.harness.endpoint.server.intercepts
        delivered = 0
        for intercept in list(intercepts.values()):
            future = intercept.get("response_future")
            if future is not None and future.done():
                delivered += 1
        self.peak_intercepts = max(self.peak_intercepts, len(intercepts))
        self.peak_intercepts_delivered = max(self.peak_intercepts_delivered, delivered)
        if self.churning:
            self.churn_ticks += 1
            self.churn_ticks_without_delivered += delivered == 0
        if full:
            self._last_body_sample = asyncio.get_running_loop().time()
            body_bytes = report.intercept_stats(intercepts)["body_bytes"]
            self.peak_intercept_body_bytes = max(self.peak_intercept_body_bytes, body_bytes)
        self.bookkeeping_s += time.perf_counter() - started

    def intercept_report(self, intercepts: dict[str, dict[str, Any]]) -> dict[str, Any]:
        stats: dict[str, Any] = dict(report.intercept_stats(intercepts))
        self.peak_intercepts = max(self.peak_intercepts, stats["entries"])
        self.peak_intercepts_delivered = max(self.peak_intercepts_delivered, stats["delivered"])
        self.peak_intercept_body_bytes = max(self.peak_intercept_body_bytes, stats["body_bytes"])
        stats["peak_entries"] = self.peak_intercepts
        stats["peak_delivered"] = self.peak_intercepts_delivered
        stats["peak_body_bytes"] = self.peak_intercept_body_bytes
        return stats

    def write_report(self) -> None:
        self._report_dirty = False
        self._last_report_at = time.monotonic()
        if self.config.report_dir is None:
            return
        started = time.perf_counter()
        report.write_report(self.config.report_dir, self.build_report())
        self.bookkeeping_s += time.perf_counter() - started


def rollout_output(state: State) -> dict[str, Any]:
    """The serialisable rollout result sent back to the orchestrator."""
    return {
        "trajectory_id": state["trajectory_id"],
        "trajectory": state.get("trajectory"),
        "completion": state.get("completion"),
        "reward": state.get("reward"),
        "advantage": state.get("advantage"),
        "stop_condition": state.get("stop_condition"),
        "error": state.get("error"),
    }
