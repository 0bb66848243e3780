"""Standard-library stand-ins for the response models in ``verifiers.types``.

Field names and nesting match verifiers 0.1.14 (``Response`` -> ``message: ResponseMessage``
-> ``tokens: ResponseTokens``), plus the per-token ``prompt_attribution`` extra that the
renderer client attaches, so ``serializable(response)`` produces dicts of the same shape.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

#: Chat messages travel as plain OpenAI-style dicts in the simulation.
Message = dict[str, Any]
Messages = list[Message]


def _dump_value(value: object, exclude_none: bool) -> object:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(exclude_none=exclude_none)
    if isinstance(value, list):
        # pydantic's model_dump builds fresh containers but shares the leaf objects.
        return [_dump_value(item, exclude_none) for item in value]
    if isinstance(value, dict):
        return {key: _dump_value(item, exclude_none) for key, item in value.items()}
    return value


class _Model:
    """The slice of pydantic's BaseModel that verifiers' call sites use."""

    def model_dump(self, exclude_none: bool = False) -> dict[str, Any]:
        dumped: dict[str, Any] = {}
        for spec in fields(self):  # type: ignore[arg-type]
            value = getattr(self, spec.name)
            if exclude_none and value is None:
                continue
            dumped[spec.name] = _dump_value(value, exclude_none)
        return dumped

    def get(self, key: str, default: object = None) -> object:
        return getattr(self, key, default)

    def __getitem__(self, key: str) -> object:
        return getattr(self, key)


@dataclass
class Usage(_Model):
    prompt_tokens: int
    reasoning_tokens: int
    completion_tokens: int
    total_tokens: int


@dataclass
class ResponseTokens(_Model):
    prompt_ids: list[int]
    prompt_mask: list[int]
    completion_ids: list[int]
    completion_mask: list[int]
    completion_logprobs: list[float]
    routed_experts: list[list[list[int]]] | None = None
    #: Index of the prompt message each prompt token was rendered from.
    prompt_attribution: list[int] | None = None


@dataclass(kw_only=True)
class ResponseMessage(_Model):
    role: str = "assistant"
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    finish_reason: str | None
    is_truncated: bool | None
    tokens: ResponseTokens | None = None


@dataclass(kw_only=True)
class Response(_Model):
    id: str
    created: int
    model: str
    usage: Usage | None = None
    message: ResponseMessage
