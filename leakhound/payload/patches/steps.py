"""steps: keep identity/usage only in each new trajectory step's stored response.

Wraps ``Runtime.submit_model_request``: once the original has appended its step, the step's
``response`` loses ``message`` (which restates the completion and, in ``message.tokens``, the
prompt ids/mask). A step whose ``tokens.completion_ids`` is empty (truncated by the training
budget) keeps a small sidecar, ``message = {"is_truncated": True, "tokens": {"prompt_ids",
"completion_ids"}}``, because ``renderer_client._step_token_ids`` falls back to it.
"""

import functools

from ..sizes import deep_size
from . import _code

FIX = "steps"
DESCRIPTION = "trajectory steps keep identity/usage only (plus a raw-token sidecar on truncated steps)"
MODULES = ("verifiers.v1.runtime", "leakhound.simulate.runtime")


def recognise():
    modname, runtime = _code.find_class(MODULES, "Runtime")
    if runtime is None:
        return None, "no verifiers v1 Runtime is loaded in this process"
    fn = _code.plain_function(runtime, "submit_model_request")
    if fn is None or not _code.is_coroutine(fn):
        return None, "%s.Runtime.submit_model_request is missing or not a coroutine function" % modname
    used = _code.names(fn)
    if not {"serializable", "response", "trajectory"} <= used:
        return None, ("%s.Runtime.submit_model_request does not store serializable(response) in a "
                      "trajectory step; this fix was written for verifiers 0.1.14" % modname)
    if "message" in _code.constants(fn):
        return None, "%s.Runtime.submit_model_request already drops the response message (fixed upstream)" % modname
    return [(runtime, "submit_model_request", _wrapper)], None


def slim_step(step, counters):
    response = step.get("response") if isinstance(step, dict) else None
    if not isinstance(response, dict):
        return
    message = response.get("message")
    if not isinstance(message, dict):
        return
    raw = message.get("tokens")
    if set(message) <= {"is_truncated", "tokens"} and (
        not isinstance(raw, dict) or set(raw) <= {"prompt_ids", "completion_ids"}
    ):
        return  # already slim (a sidecar)
    before = deep_size(response)
    del response["message"]
    tokens = step.get("tokens")
    # The sidecar exists for renderer_client._step_token_ids, which falls back to it only
    # when the step's own tokens lack completion ids, and can only return ids the raw
    # message has: keep it exactly then (not on every finish_reason="length" step).
    truncated = isinstance(tokens, dict) and not tokens.get("completion_ids")
    if truncated and isinstance(raw, dict) and raw.get("prompt_ids") and raw.get("completion_ids"):
        response["message"] = {
            "is_truncated": True,
            "tokens": {"prompt_ids": raw.get("prompt_ids"), "completion_ids": raw.get("completion_ids")},
        }
        counters["sidecars"] = counters.get("sidecars", 0) + 1
    after = deep_size(response)
    counters["steps_slimmed"] = counters.get("steps_slimmed", 0) + 1
    counters["response_bytes_before"] = counters.get("response_bytes_before", 0) + before
    counters["response_bytes_after"] = counters.get("response_bytes_after", 0) + after


def _wrapper(original, counters):
    @functools.wraps(original)
    async def submit_model_request(self, prompt, task, state, *args, **kwargs):
        trajectory = state.get("trajectory") if isinstance(state, dict) else None
        start = len(trajectory) if isinstance(trajectory, list) else None
        response = await original(self, prompt, task, state, *args, **kwargs)
        if start is not None and isinstance(trajectory, list):
            for step in trajectory[start:]:
                slim_step(step, counters)
        return response

    return submit_model_request
