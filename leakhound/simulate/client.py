"""A fake model client: tokenises the prompt and answers like a VLM inference server.

Stands in for ``verifiers.clients.Client.get_response``. The response travels through a JSON
round trip (as it would over HTTP from the inference server) so every token id and logprob
is a fresh object, the way the real worker receives them.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from collections.abc import Mapping
from typing import Any

from .types import Messages, Response, ResponseMessage, ResponseTokens, Usage

IMAGE_PAD_ID = 151655
ROLE_IDS = {"system": 151644, "user": 151645, "assistant": 151646, "tool": 151647}

_WORDS = (
    "the page shows a search box and a results list so I will click the first result "
    "then scroll down to read the table of prices before comparing the checkout total "
    "with the value in the task description and report the answer once it matches "
    "button link header footer modal cookie banner accept login form field submit "
    "navigate back forward reload tab window element selector coordinates viewport"
).split()


def text_token_ids(text: str) -> list[int]:
    """A deterministic stand-in tokenizer: about one token per four bytes."""
    data = text.encode()[::4]
    return [300 + (byte * 131 + position) % 150000 for position, byte in enumerate(data)]


def tokenize_messages(messages: Messages, image_tokens: int) -> tuple[list[int], list[int]]:
    """Render ``messages`` to prompt ids plus the per-token message attribution."""
    prompt_ids: list[int] = []
    attribution: list[int] = []
    for index, message in enumerate(messages):
        ids = [ROLE_IDS.get(str(message.get("role")), 151648)]
        content = message.get("content")
        if isinstance(content, str):
            ids.extend(text_token_ids(content))
        elif isinstance(content, list):
            for part in content:
                if not isinstance(part, Mapping):
                    continue
                if part.get("type") == "text":
                    ids.extend(text_token_ids(str(part.get("text", ""))))
                elif part.get("type") == "image_url":
                    ids.extend([IMAGE_PAD_ID] * image_tokens)
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            ids.extend(text_token_ids(str(function.get("arguments", ""))))
        prompt_ids.extend(ids)
        attribution.extend([index] * len(ids))
    return prompt_ids, attribution


def make_text(rng: random.Random, approx_chars: int) -> str:
    words: list[str] = []
    size = 0
    while size < approx_chars:
        word = rng.choice(_WORDS)
        words.append(word)
        size += len(word) + 1
    return " ".join(words)


class FakeModelClient:
    """Answers every request with a tool-calling assistant turn and full token data."""

    def __init__(
        self,
        *,
        image_tokens: int,
        latency_s: float = 0.005,
        reply_chars: tuple[int, int] = (400, 900),
        seed: int = 0,
    ) -> None:
        self.image_tokens = image_tokens
        self.latency_s = latency_s
        self.reply_chars = reply_chars
        self.rng = random.Random(seed)

    async def get_response(
        self,
        prompt: Messages,
        model: str,
        tools: list[dict[str, Any]] | None = None,
        sampling_args: Mapping[str, object] | None = None,
        state: Mapping[str, object] | None = None,
    ) -> Response:
        await asyncio.sleep(self.latency_s)
        rng = self.rng
        content = make_text(rng, rng.randint(*self.reply_chars))
        arguments = json.dumps(
            {"action": "left_click", "coordinate": [rng.randint(0, 1280), rng.randint(0, 800)]}
        )
        tool_calls = [
            {
                "id": f"call_{uuid.uuid4().hex[:12]}",
                "type": "function",
                "function": {"name": "computer", "arguments": arguments},
            }
        ]
        prompt_ids, attribution = tokenize_messages(prompt, self.image_tokens)
        completion_ids = text_token_ids(content) + text_token_ids(arguments)
        logprobs = [round(-rng.random() * 2.0, 6) for _ in completion_ids]
        wire = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:16]}",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content, "tool_calls": tool_calls},
                    "finish_reason": "tool_calls",
                }
            ],
            "usage": {
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": len(completion_ids),
                "total_tokens": len(prompt_ids) + len(completion_ids),
            },
            "prompt_token_ids": prompt_ids,
            "prompt_attribution": attribution,
            "completion_token_ids": completion_ids,
            "completion_logprobs": logprobs,
        }
        # The HTTP hop from the inference server: every id and logprob arrives as a new object.
        data = json.loads(json.dumps(wire))
        choice = data["choices"][0]
        usage = data["usage"]
        return Response(
            id=data["id"],
            created=data["created"],
            model=data["model"],
            usage=Usage(
                prompt_tokens=usage["prompt_tokens"],
                reasoning_tokens=0,
                completion_tokens=usage["completion_tokens"],
                total_tokens=usage["total_tokens"],
            ),
            message=ResponseMessage(
                content=choice["message"]["content"],
                tool_calls=choice["message"]["tool_calls"],
                finish_reason=choice["finish_reason"],
                is_truncated=False,
                tokens=ResponseTokens(
                    prompt_ids=data["prompt_token_ids"],
                    prompt_mask=[0] * len(data["prompt_token_ids"]),
                    completion_ids=data["completion_token_ids"],
                    completion_mask=[1] * len(data["completion_token_ids"]),
                    completion_logprobs=data["completion_logprobs"],
                    prompt_attribution=data["prompt_attribution"],
                ),
            ),
        )
