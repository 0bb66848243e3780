"""``verifiers.utils.interception_utils.InterceptionServer`` without the HTTP socket.

The in-sandbox agent's POST is delivered in-process (``InterceptionServer.post``) to
``_handle_request``, which parses the JSON body and files an intercept with the same shape
as upstream: ``intercepts[request_id] = {"request_id", "rollout_id", "protocol", "messages",
"prompt", "input", "system", "model", "tools", "stream", "chunk_queue", "response_future",
"headers"}``. Unfixed, an entry lives until ``unregister_rollout`` at the end of the rollout.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Mapping
from typing import Any, cast

from .types import Response

#: Fields of an intercept that hold the parsed request body.
BODY_FIELDS = ("messages", "prompt", "input", "system", "tools")


class SimRequest:
    """The parts of an ``aiohttp.web.Request`` that ``_handle_request`` reads."""

    def __init__(self, path: str, rollout_id: str, body: str, headers: Mapping[str, str]):
        self.path = path
        self.match_info = {"rollout_id": rollout_id}
        self.headers = dict(headers)
        self._body = body

    async def json(self) -> Any:
        return json.loads(self._body)


class SimResponse:
    def __init__(self, body: str, status: int = 200):
        self.body = body
        self.status = status


def json_response(data: object, status: int = 200) -> SimResponse:
    return SimResponse(json.dumps(data), status=status)


def protocol_from_path(path: str) -> str:
    if path.endswith("/v1/messages"):
        return "anthropic_messages"
    if path.endswith("/v1/responses"):
        return "openai_responses"
    if path.endswith("/v1/completions"):
        return "openai_completions"
    return "openai_chat_completions"


class InterceptionServer:
    """Queues intercepted model requests and answers them once the model has replied."""

    def __init__(self, port: int, secret: str | None = None):
        self.port = port
        self.secret = secret or None
        # Track active rollouts and their request queues
        self.active_rollouts: dict[str, dict[str, Any]] = {}
        # Track individual intercepts (request_id -> intercept data)
        self.intercepts: dict[str, dict[str, Any]] = {}

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    def register_rollout(
        self,
        rollout_id: str,
        state: dict[str, Any] | None = None,
        tool_handler: Any | None = None,
        tool_defs: Any | None = None,
        user_handler: Any | None = None,
        stop_handler: Any | None = None,
    ) -> asyncio.Queue[str]:
        request_queue: asyncio.Queue[str] = asyncio.Queue()
        self.active_rollouts[rollout_id] = {
            "request_id_queue": request_queue,
            "state": state,
            "tool_handler": tool_handler,
            "tool_defs": tool_defs,
            "user_handler": user_handler,
            "stop_handler": stop_handler,
        }
        return request_queue

    def unregister_rollout(self, rollout_id: str) -> None:
        # Cancel any pending intercepts for this rollout
        for request_id in list(self.intercepts.keys()):
            intercept = self.intercepts.get(request_id)
            if intercept and intercept.get("rollout_id") == rollout_id:
                future = intercept.get("response_future")
                if future and not future.done():
                    future.cancel()
                del self.intercepts[request_id]
        if rollout_id in self.active_rollouts:
            del self.active_rollouts[rollout_id]

    async def post(
        self, rollout_id: str, path: str, body: str, headers: Mapping[str, str] | None = None
    ) -> SimResponse:
        """What the agent's HTTP client would do: POST ``body`` and await the answer."""
        request = SimRequest(path, rollout_id, body, headers or {})
        return await self._handle_request(request)

    async def _handle_request(self, request: SimRequest) -> SimResponse:
        rollout_id = request.match_info["rollout_id"]
        context = self.active_rollouts.get(rollout_id)
        if not context:
            return json_response({"error": "Rollout not found"}, status=404)
        try:
            request_body = await request.json()
        except Exception as e:
            return json_response({"error": f"Invalid JSON: {e}"}, status=400)

        is_streaming = bool(request_body.get("stream", False))
        request_id = f"req_{uuid.uuid4().hex[:8]}"
        protocol = protocol_from_path(str(request.path))
        intercept = {
            "request_id": request_id,
            "rollout_id": rollout_id,
            "protocol": protocol,
            "messages": request_body.get("messages"),
            "prompt": request_body.get("prompt"),
            "input": request_body.get("input"),
            "system": request_body.get("system"),
            "model": request_body.get("model"),
            "tools": request_body.get("tools"),
            "stream": is_streaming,
            "chunk_queue": None,
            "response_future": asyncio.get_running_loop().create_future(),
            "headers": {k.lower(): v for k, v in request.headers.items()},
        }
        self.intercepts[request_id] = intercept
        await context["request_id_queue"].put(request_id)
        try:
            response_future = cast("asyncio.Future[Any]", intercept["response_future"])
            response = await response_future
        except asyncio.CancelledError:
            return json_response({"error": "Rollout cancelled"}, status=499)
        except Exception as e:
            return json_response({"error": str(e)}, status=500)
        response_dict = serialize_intercept_response(response, protocol=str(intercept["protocol"]))
        return json_response(response_dict)


def deliver_response(
    intercept: dict[str, Any],
    response: Response | None,
    error: BaseException | None = None,
) -> None:
    future = intercept.get("response_future")
    if future and not future.done():
        if error is not None:
            future.set_exception(error)
        elif response is not None:
            future.set_result(response)


def serialize_intercept_response(response: Response, protocol: str) -> dict[str, Any]:
    """The OpenAI chat-completions body the agent receives."""
    message: dict[str, Any] = {"role": "assistant", "content": response.message.content}
    if response.message.tool_calls:
        message["tool_calls"] = response.message.tool_calls
    usage = response.usage
    return {
        "id": response.id,
        "object": "chat.completion",
        "created": response.created,
        "model": response.model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": response.message.finish_reason}
        ],
        "usage": usage.model_dump() if usage is not None else None,
    }
