"""``verifiers.v1.utils.endpoint_utils``: the rollout-side model endpoint.

``Endpoint.server`` is the :class:`InterceptionServer` whose ``intercepts`` hold every
request's parsed body; ``forward_request`` hands each queued request to
``Runtime.submit_model_request`` and delivers the answer back to the waiting handler.
"""

from __future__ import annotations

import asyncio
import uuid
import zlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

from .interception_utils import InterceptionServer, deliver_response
from .runtime import Runtime, State, Task
from .types import Message, Messages

__all__ = [
    "Endpoint",
    "InterceptionServer",
    "forward_request",
    "normalize_endpoint_prompt",
    "run_intercepted_program",
]


class Endpoint:
    def __init__(self, port: int | None = None, secret: str | None = None) -> None:
        self.port = 0 if port is None else port
        self.secret = secret
        self.server = InterceptionServer(self.port, secret=self.secret)
        self._rollout_queues: dict[str, asyncio.Queue[str]] = {}

    async def start(self) -> None:
        await self.server.start()

    async def register_rollout(self, state: State) -> str:
        await self.start()
        rollout_key = f"rollout_{uuid.uuid4().hex[:8]}"
        request_queue = self.server.register_rollout(rollout_key, state=state)
        self._rollout_queues[rollout_key] = request_queue
        endpoint_root_url = f"http://127.0.0.1:{self.port}/rollout/{rollout_key}"
        state["endpoint_rollout_key"] = rollout_key
        state["endpoint_root_url"] = endpoint_root_url
        state["endpoint_base_url"] = f"{endpoint_root_url}/v1"
        return str(state["endpoint_base_url"])

    def unregister_rollout(self, rollout_key: str) -> None:
        self._rollout_queues.pop(rollout_key, None)
        self.server.unregister_rollout(rollout_key)

    def rollout_queue(self, rollout_key: str) -> asyncio.Queue[str]:
        return self._rollout_queues[rollout_key]

    def get_request(self, request_id: str) -> dict[str, object]:
        return cast(dict[str, object], self.server.intercepts[request_id])

    async def teardown(self) -> None:
        await self.server.stop()


async def run_intercepted_program(
    program: Callable[..., Awaitable[object]],
    endpoint: Endpoint,
    runtime: Runtime,
    task: Task,
    state: State,
) -> object:
    await endpoint.register_rollout(state)
    execution = asyncio.ensure_future(program(task=task, state=state, endpoint=endpoint))
    rollout_key = str(state["endpoint_rollout_key"])
    queue = endpoint.rollout_queue(rollout_key)
    pending: set[asyncio.Task[None]] = set()
    try:
        while True:
            await raise_finished_forward_errors(pending)
            if execution.done():
                await raise_execution_error(execution)
                if not queue.empty():
                    request_id = queue.get_nowait()
                    pending.add(
                        asyncio.create_task(
                            forward_request(endpoint, runtime, task, state, request_id)
                        )
                    )
                    continue
                if not pending:
                    break
                await asyncio.wait(pending, timeout=1.0, return_when=asyncio.FIRST_COMPLETED)
                continue
            queue_task = asyncio.create_task(queue.get())
            wait_set: set[asyncio.Future[Any]] = {queue_task, execution, *pending}
            try:
                done, _ = await asyncio.wait(
                    wait_set, timeout=1.0, return_when=asyncio.FIRST_COMPLETED
                )
                if queue_task in done:
                    request_id = queue_task.result()
                    pending.add(
                        asyncio.create_task(
                            forward_request(endpoint, runtime, task, state, request_id)
                        )
                    )
                    continue
            finally:
                if not queue_task.done():
                    queue_task.cancel()
                    await asyncio.gather(queue_task, return_exceptions=True)
            if execution.done() and queue.empty() and not pending:
                break
        await raise_finished_forward_errors(pending)
        return await execution
    finally:
        if not execution.done():
            execution.cancel()
            await asyncio.gather(execution, return_exceptions=True)
        await cancel_forwarders(pending)
        endpoint.unregister_rollout(rollout_key)


async def raise_finished_forward_errors(pending: set[asyncio.Task[None]]) -> None:
    finished = {task for task in pending if task.done()}
    for task in finished:
        pending.remove(task)
        await task


async def cancel_forwarders(pending: set[asyncio.Task[None]]) -> None:
    for task in pending:
        if not task.done():
            task.cancel()
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)


async def raise_execution_error(execution: asyncio.Future[object]) -> None:
    if execution.cancelled():
        await execution
    error = execution.exception()
    if error is not None:
        raise error


async def forward_request(
    endpoint: Endpoint,
    runtime: Runtime,
    task: Task,
    state: State,
    request_id: str,
) -> None:
    request = endpoint.get_request(request_id)
    prompt = normalize_endpoint_prompt(request)
    tool_defs = cast("list[dict[str, Any]] | None", request.get("tools"))
    response = None
    error: BaseException | None = None
    try:
        response = await runtime.submit_model_request(
            prompt,
            task,
            state,
            tool_defs=tool_defs,
            extras={
                "endpoint": True,
                "endpoint_request_id": request_id,
                "headers": request.get("headers") or {},
            },
        )
    except BaseException as e:
        error = e
        raise
    finally:
        deliver_response(request, response, error)


def normalize_endpoint_prompt(request: Mapping[str, object]) -> Messages:
    """A normalized copy of the request's messages, images offloaded to references.

    Like the renderer's image offload, this rewrites the copy only: the intercept keeps
    the original base64 data URLs.
    """
    raw_messages = request.get("messages")
    if not isinstance(raw_messages, list):
        raise TypeError("Endpoint messages must be a list.")
    return [normalize_message(message) for message in raw_messages]


def normalize_message(raw: Mapping[str, Any]) -> Message:
    message: Message = {"role": raw.get("role")}
    content = raw.get("content")
    if isinstance(content, list):
        message["content"] = [normalize_content_part(part) for part in content]
    else:
        message["content"] = content
    if raw.get("tool_calls"):
        message["tool_calls"] = raw["tool_calls"]
    if raw.get("tool_call_id"):
        message["tool_call_id"] = raw["tool_call_id"]
    return message


def normalize_content_part(part: Mapping[str, Any]) -> dict[str, Any]:
    if part.get("type") != "image_url":
        return dict(part)
    url = str((part.get("image_url") or {}).get("url", ""))
    if url.startswith("data:"):
        url = f"vf-offload://{zlib.crc32(url.encode()):08x}-{len(url)}"
    return {"type": "image_url", "image_url": {"url": url}}
