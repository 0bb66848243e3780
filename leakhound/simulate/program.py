"""The in-sandbox browser agent: a multi-turn program that talks to the intercept endpoint.

Each turn appends a user message carrying a base64 PNG "screenshot", POSTs the JSON of the
whole history to the endpoint (so request bodies grow every turn) and appends the
assistant's reply, the way a computer-use agent drives a model through verifiers'
interception server.
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
from typing import Any

from .endpoint_utils import Endpoint
from .runtime import State, Task
from .types import Messages

SYSTEM_PROMPT = (
    "You are a browser agent. Use the computer tool to act on the page shown in each "
    "screenshot, and answer once the task is complete."
)
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "computer",
            "description": "Mouse and keyboard actions on the browser viewport.",
            "parameters": {
                "type": "object",
                "properties": {
                    "action": {"type": "string"},
                    "coordinate": {"type": "array", "items": {"type": "integer"}},
                    "text": {"type": "string"},
                },
                "required": ["action"],
            },
        },
    }
]


def screenshot_data_url(rng: random.Random, image_kb: int) -> str:
    """A data URL whose base64 text is ``image_kb`` KiB long (incompressible, like a PNG)."""
    raw = rng.randbytes(max(1, image_kb * 1024 * 3 // 4))
    return "data:image/png;base64," + base64.b64encode(raw).decode("ascii")


async def browser_agent(task: Task, state: State, endpoint: Endpoint) -> Messages:
    turns = int(task["turns"])
    image_kb = int(task["image_kb"])
    rng = random.Random(int(task["seed"]))
    rollout_key = str(state["endpoint_rollout_key"])
    path = f"/rollout/{rollout_key}/v1/chat/completions"
    headers = {"Authorization": "Bearer intercepted", "Content-Type": "application/json"}
    messages: Messages = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": str(task["prompt"])},
    ]
    for turn in range(turns):
        observation = (
            f"Step {turn + 1}: the browser shows {rng.choice(PAGES)}. "
            f"Scroll offset {rng.randint(0, 4000)}px. " + rng.choice(HINTS)
        )
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": observation},
                    {
                        "type": "image_url",
                        "image_url": {"url": screenshot_data_url(rng, image_kb)},
                    },
                ],
            }
        )
        if task.get("truncate_last_turn") and turn == turns - 1:
            # The training budget runs out on the final turn: parse_response_tokens then
            # zeroes this step's completion ids (the case the steps fix keeps a sidecar for).
            state["runtime"]["max_seq_len"] = _previous_prompt_tokens(state) + 1
        body = json.dumps(
            {
                "model": state["runtime"].get("model"),
                "messages": messages,
                "tools": TOOLS,
                "stream": False,
            }
        )
        reply = await endpoint.server.post(rollout_key, path, body, headers)
        data = json.loads(reply.body)
        if reply.status != 200:
            raise RuntimeError(f"model endpoint answered {reply.status}: {data.get('error')}")
        messages.append(data["choices"][0]["message"])
        TURNS_DONE[0] += 1
    if task.get("park"):
        # A rollout that stalls mid-flight (a hung tool, a slow sandbox): it keeps its
        # registry entry and its delivered intercepts until it is cancelled.
        PARKED[0] += 1
        try:
            await asyncio.Event().wait()
        finally:
            PARKED[0] -= 1
    return messages[-1:]


#: Rollouts parked right now (``--park``): the worker goes idle with these still in flight.
PARKED = [0]
#: Turns completed by every rollout in this process (the worker staggers its first rollouts by it).
TURNS_DONE = [0]


def _previous_prompt_tokens(state: State) -> int:
    for step in reversed(state.get("trajectory") or []):
        response = step.get("response")
        usage = response.get("usage") if isinstance(response, dict) else None
        if isinstance(usage, dict) and isinstance(usage.get("prompt_tokens"), int):
            return int(usage["prompt_tokens"])
    return 0


PAGES = (
    "a product listing with prices",
    "a login form",
    "a search results page",
    "a checkout summary",
    "a cookie consent banner over an article",
    "a table of flight times",
)
HINTS = (
    "The element you need may be below the fold.",
    "A modal dialog is open.",
    "The page is still loading some images.",
    "Nothing changed since the last action.",
)
