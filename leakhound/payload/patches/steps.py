"""steps: keep identity/usage only in each new trajectory step's stored response.

Wraps ``Runtime.submit_model_request``: once the original has appended its step, the step's
``response`` loses ``message`` (which restates the completion and, in ``message.tokens``, the
prompt ids/mask). A step whose ``tokens.completion_ids`` is empty (truncated by the training
budget) keeps a small sidecar, ``message = {"is_truncated": True, "tokens": {"prompt_ids",
"completion_ids"}}``, because ``renderer_client._step_token_ids`` falls back to it.

Nothing is measured on the request path: ``deep_size`` of a step's response (token id lists
of thousands of ints) ran twice per model request on the worker's loop. The request only
slims the step and hands a shallow copy of the response as it was to a thread of the fix's
own, which sizes both (yielding the GIL every 1024 objects) for the fix's before/after
numbers; at most ``PENDING_MAX`` wait, the rest are slimmed unmeasured (``steps_measured``
counts the ones measured).
"""

import collections
import functools
import threading
import time

from ..sizes import deep_size
from . import _code

FIX = "steps"
DESCRIPTION = "trajectory steps keep identity/usage only (plus a raw-token sidecar on truncated steps)"
MODULES = ("verifiers.v1.runtime", "leakhound.simulate.runtime")
THREAD_NAME = "leakhound-steps"
PENDING_MAX = 4  # responses as they were, kept until sized: the old message lives that long
JOIN_SECONDS = 5.0


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


def slim_step(step, counters, pending=None):
    """Slim one stored step; ``pending`` gets (counters, the response as it was, the response)
    for the measuring thread."""
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
    as_it_was = dict(response)  # shallow: the measuring thread sizes it later
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
    counters["steps_slimmed"] = counters.get("steps_slimmed", 0) + 1
    if pending is not None:
        pending["queue"].append((counters, as_it_was, response))
        pending["wake"].set()
    else:
        measure_step(counters, as_it_was, response)


def _yield_gil():
    time.sleep(0)


def measure_step(counters, as_it_was, response):
    try:
        before = deep_size(as_it_was, tick=_yield_gil)
        after = deep_size(response, tick=_yield_gil)
    except RuntimeError:
        return  # the worker changed the response while it was being sized: not counted
    counters["steps_measured"] = counters.get("steps_measured", 0) + 1
    counters["response_bytes_before"] = counters.get("response_bytes_before", 0) + before
    counters["response_bytes_after"] = counters.get("response_bytes_after", 0) + after


def _wrapper(original, counters):
    pending = {"queue": collections.deque(maxlen=PENDING_MAX), "wake": threading.Event()}

    @functools.wraps(original)
    async def submit_model_request(self, prompt, task, state, *args, **kwargs):
        trajectory = state.get("trajectory") if isinstance(state, dict) else None
        start = len(trajectory) if isinstance(trajectory, list) else None
        response = await original(self, prompt, task, state, *args, **kwargs)
        if start is not None and isinstance(trajectory, list):
            for step in trajectory[start:]:
                slim_step(step, counters, pending)
        return response

    vars(submit_model_request)["leakhound_pending"] = pending  # found by start()
    return submit_model_request


def start(entry):
    """The measuring thread: sizes what the requests handed over, off the request path."""
    control = {"stopped": False}  # type: dict
    entry["control"] = control
    for swap in entry["swaps"]:
        pending = getattr(swap.new, "leakhound_pending", None)
        if pending is None:
            continue

        def run(pending=pending):
            queue, wake = pending["queue"], pending["wake"]
            while not control["stopped"]:
                wake.wait(1.0)
                wake.clear()
                while queue and not control["stopped"]:
                    measure_step(*queue.popleft())
            queue.clear()

        thread = threading.Thread(target=run, name=THREAD_NAME, daemon=True)
        control.setdefault("threads", []).append((thread, pending["wake"]))
        thread.start()


def stop(entry):
    control = entry.get("control") or {}
    control["stopped"] = True
    for thread, wake in control.get("threads", ()):
        wake.set()
        if thread is not threading.current_thread():
            thread.join(JOIN_SECONDS)
