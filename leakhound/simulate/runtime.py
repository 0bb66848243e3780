"""The slice of ``verifiers.v1.runtime`` that decides what an env worker retains.

Names and data shapes follow verifiers 0.1.14: ``Runtime.trajectories`` maps
``str(state["trajectory_id"])`` to the rollout's live trajectory list, and each step that
``submit_model_request`` appends is a dict with the keys ``prompt``, ``completion``,
``response`` (``serializable(response)``), ``tokens``, ``reward``, ``advantage``,
``is_truncated``, ``trajectory_id`` and ``extras``.

The process-lifetime Runtime is reachable from the module global ``_RUNTIME_REGISTRY``
(``runtime_id -> Runtime``, weak values, exactly as upstream) and strongly from
``EnvWorker.env.harness.runtime``.
"""

from __future__ import annotations

import uuid
import weakref
from collections.abc import Mapping
from typing import Any, cast

from . import fixes
from .client import FakeModelClient
from .types import Message, Messages, Response

_RUNTIME_REGISTRY: weakref.WeakValueDictionary[str, Runtime] = weakref.WeakValueDictionary()

Task = dict[str, Any]
TrajectoryStep = dict[str, Any]


class State(dict[str, Any]):
    """A rollout's state (``verifiers.v1.state.State`` without the write guards)."""

    @classmethod
    def for_task(cls, task: Mapping[str, Any]) -> State:
        return cls(
            {
                "task": dict(task),
                "runtime": {},
                "trajectory": [],
                "trajectory_id": uuid.uuid4().hex,
                "artifacts": {},
                "metrics": {},
                "reward": 0.0,
                "completion": None,
                "is_completed": False,
                "is_truncated": False,
                "stop_condition": None,
                "error": None,
            }
        )

    def _set_completed(self, value: bool = True) -> None:
        self["is_completed"] = value

    def _set_stop_condition(self, condition: str | None) -> None:
        self["stop_condition"] = condition

    def _set_error(self, value: object) -> None:
        self["error"] = value

    def strip_runtime_handles(self) -> None:
        runtime = self.get("runtime")
        if isinstance(runtime, dict):
            runtime.pop("resolved", None)


class Runtime:
    def __init__(self, taskset: object | None = None, harness: object | None = None) -> None:
        self.runtime_id = uuid.uuid4().hex
        _RUNTIME_REGISTRY[self.runtime_id] = self
        self.taskset = taskset
        self.harness = harness
        self.model_clients: dict[str, FakeModelClient] = {}
        self.trajectories: dict[str, list[Mapping[str, object]]] = {}

    def prepare_state(self, task: Task, state: State) -> None:
        state.setdefault("task", dict(task))
        state.setdefault("runtime", {})
        state["runtime"]["runtime_id"] = self.runtime_id
        self.register_trajectory(state)

    def register_trajectory(self, state: State) -> None:
        trajectory = state.get("trajectory")
        if trajectory is None:
            return
        if not isinstance(trajectory, list):
            raise TypeError("state.trajectory must be a list.")
        self.trajectories[str(state["trajectory_id"])] = cast(
            list[Mapping[str, object]], trajectory
        )

    def resolved_handles(self, state: State) -> Mapping[str, object]:
        runtime = state.get("runtime", {})
        if not isinstance(runtime, Mapping):
            return {}
        resolved = runtime.get("resolved") or {}
        if not isinstance(resolved, Mapping):
            raise TypeError("state.runtime.resolved must be a mapping.")
        return cast(Mapping[str, object], resolved)

    def resolved_handle(self, state: State, name: str) -> Mapping[str, object] | None:
        handle = self.resolved_handles(state).get(name)
        if handle is None:
            return None
        if not isinstance(handle, Mapping):
            raise TypeError(f"state.runtime.resolved.{name} must be a mapping.")
        return cast(Mapping[str, object], handle)

    def handle_runtime(self, handle: Mapping[str, object], name: str) -> Runtime:
        runtime_id = handle.get("runtime_id")
        if not isinstance(runtime_id, str) or not runtime_id:
            raise TypeError(f"state.runtime.resolved.{name}.runtime_id must be a string.")
        return load_runtime(runtime_id)

    def resolve_trajectory(self, state: State) -> None:
        handle = self.resolved_handle(state, "trajectory")
        if handle is None:
            state.setdefault("trajectory", [])
            self.register_trajectory(state)
            return
        if handle.get("mode", "append") != "append":
            raise ValueError("state.runtime.resolved.trajectory.mode must be 'append'.")
        trajectory_id = handle.get("trajectory_id")
        if not isinstance(trajectory_id, str) or not trajectory_id:
            raise TypeError("state.runtime.resolved.trajectory.trajectory_id must be a string.")
        runtime = self.handle_runtime(handle, "trajectory")
        trajectory = runtime.trajectories.get(trajectory_id)
        if trajectory is None:
            raise RuntimeError(f"No live trajectory registered for {trajectory_id!r}.")
        state["trajectory"] = trajectory

    def trajectory_handle(self, state: State) -> dict[str, object]:
        """What ``State._runtime_handle("trajectory")`` hands a borrowing child state."""
        return {
            "runtime_id": self.runtime_id,
            "trajectory_id": str(state["trajectory_id"]),
            "start": len(state.get("trajectory") or []),
            "mode": "append",
        }

    def bind_model_client(self, state: State, client: FakeModelClient | None) -> None:
        if client is None:
            return
        key = str(
            state["runtime"].get("client_key")
            or state.get("trajectory_id")
            or f"client_{uuid.uuid4().hex}"
        )
        self.model_clients[key] = client
        state["runtime"]["client_key"] = key
        state["runtime"]["client_type"] = "openai_chat_completions"

    def model_client(self, state: State) -> FakeModelClient:
        key = str(state.get("runtime", {}).get("client_key") or "default")
        client = self.model_clients.get(key)
        if client is None:
            raise RuntimeError("Harness has no model client for intercepted requests.")
        return client

    def model(self, state: State) -> str:
        model = state.get("runtime", {}).get("model")
        if not isinstance(model, str) or not model:
            raise RuntimeError("Harness has no model for intercepted requests.")
        return model

    def sampling_args(self, state: State) -> dict[str, Any]:
        sampling = state.get("runtime", {}).get("sampling_args") or {}
        return dict(cast(Mapping[str, Any], sampling))

    def max_seq_len(self, state: State) -> int | None:
        """The training budget; a prompt longer than this gets its completion zeroed."""
        value = state.get("runtime", {}).get("max_seq_len")
        return value if isinstance(value, int) else None

    async def submit_model_request(
        self,
        prompt: Messages,
        task: Task,
        state: State,
        tool_defs: list[dict[str, Any]] | None = None,
        extras: dict[str, object] | None = None,
    ) -> Response:
        client = self.model_client(state)
        response = await client.get_response(
            prompt=prompt,
            model=self.model(state),
            tools=tool_defs,
            sampling_args=self.sampling_args(state),
            state=state,
        )
        completion = await parse_response_message(response)
        tokens = await parse_response_tokens(response, max_seq_len=self.max_seq_len(state))
        is_truncated = response.message.is_truncated or (
            tokens is not None and bool(tokens.get("is_truncated"))
        )
        response_meta = serializable(response)
        step = {
            "prompt": serializable(prompt),
            "completion": serializable(completion),
            "response": response_meta,
            "tokens": serializable(tokens),
            "reward": None,
            "advantage": None,
            "is_truncated": bool(is_truncated),
            "trajectory_id": str(state["trajectory_id"]),
            "extras": extras or {},
        }
        state["trajectory"].append(step)
        return response

    async def setup_rollout(self, task: Task, state: State) -> State:
        return state

    async def update_rollout(self, task: Task, state: State) -> State:
        return state

    async def score_rollout(self, task: Task, state: State) -> State:
        trajectory = state.get("trajectory") or []
        state["reward"] = 1.0 if trajectory and not trajectory[-1]["is_truncated"] else 0.0
        return state

    async def update_group(self, tasks: list[Task], states: list[State]) -> list[State]:
        """The group judge: borrows each member's trajectory and appends a judge step.

        Borrowing goes through the registry (``resolve_trajectory``), so an entry evicted
        before the group stage fails here with "No live trajectory registered".
        """
        for state in states:
            handle = state["runtime"].get("judge_trajectory_handle")
            if not isinstance(handle, Mapping):
                continue
            judge_state = State(
                {
                    "runtime": {"runtime_id": self.runtime_id, "resolved": {"trajectory": handle}},
                    "trajectory_id": uuid.uuid4().hex,
                }
            )
            self.resolve_trajectory(judge_state)
            judge_state["trajectory"].append(
                {
                    "prompt": [{"role": "user", "content": "Rank this rollout within its group."}],
                    "completion": [{"role": "assistant", "content": "rank: 1"}],
                    "response": None,
                    "tokens": None,
                    "reward": state.get("reward"),
                    "advantage": None,
                    "is_truncated": False,
                    "trajectory_id": str(handle["trajectory_id"]),
                    "extras": {"group_stage": True},
                }
            )
        return states

    async def score_group(self, tasks: list[Task], states: list[State]) -> list[State]:
        await self.update_group(tasks, states)
        rewards = [float(state.get("reward") or 0.0) for state in states]
        mean = sum(rewards) / len(rewards) if rewards else 0.0
        for state, reward in zip(states, rewards, strict=True):
            state["advantage"] = reward - mean
        return states

    async def cleanup_rollout(self, task: Task, state: State) -> None:
        if fixes.enabled(fixes.REGISTRY_EAGER):
            # The naive port of the registry fix (a bug reproducer): grouped rollouts still
            # need the entry for their group stage, which then fails.
            self.trajectories.pop(str(state["trajectory_id"]), None)
        self.model_clients.pop(str(state.get("runtime", {}).get("client_key")), None)

    async def cleanup_group(self, tasks: list[Task], states: list[State]) -> None:
        """Group-scope releases (handlers, objects, sandboxes in upstream); nothing to do here."""
        return None

    async def teardown(self) -> None:
        self.model_clients.clear()
        _RUNTIME_REGISTRY.pop(self.runtime_id, None)


async def parse_response_message(response: Response) -> Messages:
    message = response.message
    completion: Message = {"role": "assistant", "content": message.content}
    if message.tool_calls:
        completion["tool_calls"] = message.tool_calls
    return [completion]


async def parse_response_tokens(
    response: Response, max_seq_len: int | None = None
) -> dict[str, Any] | None:
    """``verifiers.utils.response_utils.parse_response_tokens``: the step's token record."""
    tokens = response.message.tokens
    if tokens is None:
        return None
    prompt_ids = tokens.prompt_ids
    prompt_mask = tokens.prompt_mask
    completion_ids = tokens.completion_ids
    completion_mask = tokens.completion_mask
    completion_logprobs = tokens.completion_logprobs
    overlong_prompt = False
    is_truncated = False
    if max_seq_len is not None:
        prompt_len = len(prompt_ids)
        completion_len = len(completion_ids)
        if prompt_len > max_seq_len:
            overlong_prompt = True
            is_truncated = True
            prompt_ids = prompt_ids[:max_seq_len]
            prompt_mask = prompt_mask[:max_seq_len]
            completion_ids = []
            completion_mask = []
            completion_logprobs = []
        elif prompt_len + completion_len > max_seq_len:
            is_truncated = True
            completion_ids = completion_ids[: max_seq_len - prompt_len]
            completion_mask = completion_mask[: max_seq_len - prompt_len]
            completion_logprobs = completion_logprobs[: max_seq_len - prompt_len]
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "completion_logprobs": completion_logprobs,
        "overlong_prompt": overlong_prompt,
        "is_truncated": is_truncated,
        "routed_experts": tokens.routed_experts,
    }


def serializable(value: object) -> object:
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump):
        return model_dump(exclude_none=True)
    if isinstance(value, list):
        return [serializable(item) for item in value]
    if isinstance(value, tuple):
        return [serializable(item) for item in value]
    if isinstance(value, Mapping):
        return {str(key): serializable(item) for key, item in value.items()}
    return value


def load_runtime(runtime_id: str) -> Runtime:
    runtime = _RUNTIME_REGISTRY.get(runtime_id)
    if runtime is None:
        raise RuntimeError(f"No live v1 runtime registered for id {runtime_id!r}.")
    return runtime
