"""intercepts: drop a request's body from ``InterceptionServer.intercepts`` once delivered.

Wraps ``forward_request`` (looked up as a module global by its callers in the same module):
after the original has delivered the response (or the error) to the waiting HTTP handler,
the entry is popped. The handler keeps its own reference to the entry until it has answered,
and ``unregister_rollout`` still sweeps whatever is left (pending requests) at rollout end.
"""

import functools
import sys

from ..sizes import deep_size
from . import _code

FIX = "intercepts"
DESCRIPTION = "forward_request discards the intercepted request body once its response is delivered"
MODULES = ("verifiers.v1.utils.endpoint_utils", "leakhound.simulate.endpoint_utils")
BODY_FIELDS = ("messages", "prompt", "input", "system", "tools")


def recognise():
    for modname in MODULES:
        module = sys.modules.get(modname)
        if module is None:
            continue
        fn = vars(module).get("forward_request")
        if fn is None or getattr(fn, "__leakhound_fix__", None) or not hasattr(fn, "__code__"):
            return None, "%s.forward_request is missing" % modname
        if not _code.is_coroutine(fn):
            return None, "%s.forward_request is not a coroutine function" % modname
        used = _code.names(fn)
        if not {"get_request", "deliver_response"} <= used:
            return None, ("%s.forward_request does not deliver through get_request/deliver_response; "
                          "this fix was written for verifiers 0.1.14" % modname)
        if "intercepts" in used or "discard_intercept" in used:
            return None, "%s.forward_request already discards intercepts (fixed upstream)" % modname
        return [(module, "forward_request", _wrapper)], None
    return None, "no verifiers v1 endpoint_utils module is loaded in this process"


def _body_bytes(intercept):
    seen = set()  # type: set
    return sum(deep_size(intercept.get(field), seen) for field in BODY_FIELDS if intercept.get(field) is not None)


def _wrapper(original, counters):
    @functools.wraps(original)
    async def forward_request(endpoint, runtime, task, state, request_id, *args, **kwargs):
        try:
            return await original(endpoint, runtime, task, state, request_id, *args, **kwargs)
        finally:
            server = getattr(endpoint, "server", None)
            intercepts = getattr(server, "intercepts", None)
            intercept = intercepts.get(request_id) if isinstance(intercepts, dict) else None
            future = intercept.get("response_future") if isinstance(intercept, dict) else None
            if isinstance(intercepts, dict) and intercept is not None and (future is None or future.done()):
                counters["bodies_discarded"] = counters.get("bodies_discarded", 0) + 1
                counters["body_bytes_discarded"] = counters.get("body_bytes_discarded", 0) + _body_bytes(intercept)
                intercepts.pop(request_id, None)

    return forward_request
