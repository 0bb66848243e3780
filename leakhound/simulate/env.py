"""``verifiers.v1.env`` and ``verifiers.v1.harness``: rollouts, groups and their cleanup order.

As upstream, ``Harness.run`` always calls ``Runtime.cleanup_rollout``; for an ungrouped
rollout it then calls ``cleanup_group`` itself, while a grouped rollout (``group_key`` in
``state["runtime"]``) waits until ``Environment._run_group_states`` has run the group stage
(``score_group``) for all members.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from .client import FakeModelClient
from .endpoint_utils import Endpoint, run_intercepted_program
from .runtime import Runtime, State, Task

Program = Callable[..., Awaitable[object]]


class Harness:
    def __init__(self, program: Program) -> None:
        self.program = program
        self.taskset: object | None = None
        self.runtime = self.resolve_runtime()
        self.endpoint = Endpoint()

    def resolve_runtime(self) -> Runtime:
        return Runtime(taskset=self.taskset, harness=self)

    async def run(self, task: Task, state: State | None = None) -> State:
        state = State.for_task(task) if state is None else state
        try:
            try:
                state = await self.setup_state(task, state)
                state = await self.run_program(task, state)
                state._set_stop_condition("program_completed")
            except Exception as e:
                state._set_error(repr(e))
                state._set_stop_condition("has_error")
            await self.runtime.update_rollout(task, state)
            if state.get("runtime", {}).get("score_rollout", True):
                await self.runtime.score_rollout(task, state)
            state._set_completed(True)
        finally:
            await self.runtime.cleanup_rollout(task, state)
            if not self.has_group_boundary(state):
                await self.runtime.cleanup_group([task], [state])
                state.strip_runtime_handles()
        return state

    async def setup_state(self, task: Task, state: State) -> State:
        self.runtime.resolve_trajectory(state)
        self.runtime.prepare_state(task, state)
        if self.has_group_boundary(state):
            # A stored child state (the group judge) that appends to this rollout's
            # transcript during the group stage, after cleanup_rollout has run.
            state["runtime"]["judge_trajectory_handle"] = self.runtime.trajectory_handle(state)
        await self.runtime.setup_rollout(task, state)
        return state

    async def run_program(self, task: Task, state: State) -> State:
        completion = await run_intercepted_program(
            self.program, self.endpoint, self.runtime, task, state
        )
        state["completion"] = completion
        return state

    async def score_group(self, tasks: list[Task], states: list[State]) -> list[State]:
        return await self.runtime.score_group(tasks, states)

    async def cleanup_group(self, tasks: list[Task], states: list[State]) -> None:
        await self.runtime.cleanup_group(tasks, states)
        for state in states:
            state.strip_runtime_handles()

    def has_group_boundary(self, state: State) -> bool:
        runtime = state.get("runtime", {})
        return isinstance(runtime, Mapping) and "group_key" in runtime

    async def teardown(self) -> None:
        await self.runtime.teardown()
        await self.endpoint.teardown()


class Environment:
    def __init__(self, harness: Harness, score_rollouts: bool = True) -> None:
        self.harness = harness
        self.score_rollouts = score_rollouts
        # Ground truth for the worker's report (not in upstream): trajectory ids whose
        # request (rollout or group) has not finished yet, and group-stage failures.
        self.inflight_trajectory_ids: set[str] = set()
        self.group_stage_errors = 0
        self.last_group_stage_error: str | None = None

    async def run_rollout(
        self,
        input: Task,
        client: FakeModelClient,
        model: str,
        sampling_args: dict[str, Any] | None = None,
    ) -> State:
        task = dict(input)
        state = State.for_task(task)
        self.apply_controls([state], client, model, sampling_args or {})
        self.inflight_trajectory_ids.add(str(state["trajectory_id"]))
        try:
            return await self.harness.run(task, state)
        finally:
            self.inflight_trajectory_ids.discard(str(state["trajectory_id"]))

    async def run_group(
        self,
        group_inputs: list[Task],
        client: FakeModelClient,
        model: str,
        sampling_args: dict[str, Any] | None = None,
    ) -> list[State]:
        return await self._run_group_states(group_inputs, client, model, sampling_args or {})

    async def _run_group_states(
        self,
        group_inputs: list[Task],
        client: FakeModelClient,
        model: str,
        sampling_args: dict[str, Any],
    ) -> list[State]:
        tasks = [dict(item) for item in group_inputs]
        states = [State.for_task(task) for task in tasks]
        group_key = uuid.uuid4().hex
        for state in states:
            state.setdefault("runtime", {})
            state["runtime"]["group_key"] = group_key
        self.apply_controls(states, client, model, sampling_args)
        ids = [str(state["trajectory_id"]) for state in states]
        self.inflight_trajectory_ids.update(ids)
        try:
            states = list(
                await asyncio.gather(
                    *[self.harness.run(task, state) for task, state in zip(tasks, states, strict=True)]
                )
            )
            try:
                if self.score_rollouts:
                    await self.harness.score_group(tasks, states)
            except Exception as e:
                self.group_stage_errors += 1
                self.last_group_stage_error = str(e)
                raise
            finally:
                await self.harness.cleanup_group(tasks, states)
            for state in states:
                state.strip_runtime_handles()
            return states
        finally:
            self.inflight_trajectory_ids.difference_update(ids)

    def apply_controls(
        self,
        states: list[State],
        client: FakeModelClient,
        model: str,
        sampling_args: Mapping[str, Any],
    ) -> None:
        for state in states:
            state.setdefault("runtime", {})
            self.harness.runtime.bind_model_client(state, client)
            state["runtime"]["model"] = model
            state["runtime"]["sampling_args"] = dict(sampling_args)
            state["runtime"]["score_rollout"] = self.score_rollouts

    async def _teardown(self) -> None:
        await self.harness.teardown()
