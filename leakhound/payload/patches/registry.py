"""registry: evict a rollout's entry from ``Runtime.trajectories`` at ``cleanup_group``.

Not at ``cleanup_rollout`` (the original fix): grouped rollouts run their group stage
(score_group / update_group, judges borrowing the trajectory with transcript="append") after
cleanup_rollout, and would fail with "No live trajectory registered". ``cleanup_group`` runs
after the group stage for grouped rollouts, and right after cleanup_rollout for ungrouped
ones (``Harness.run`` calls it with ``[task], [state]``), so it is safe for both.
Entries leaked before the fix was applied stay: only the worker knows which are finished.
"""

import functools

from . import _code

FIX = "registry"
DESCRIPTION = "Runtime.cleanup_group evicts the group's trajectories from Runtime.trajectories"
MODULES = ("verifiers.v1.runtime", "leakhound.simulate.runtime")


def recognise():
    modname, runtime = _code.find_class(MODULES, "Runtime")
    if runtime is None:
        return None, "no verifiers v1 Runtime is loaded in this process"
    register = _code.plain_function(runtime, "register_trajectory")
    cleanup = _code.plain_function(runtime, "cleanup_group")
    if register is None or "trajectories" not in _code.names(register):
        return None, "%s.Runtime.register_trajectory does not fill Runtime.trajectories" % modname
    if cleanup is None or not _code.is_coroutine(cleanup):
        return None, "%s.Runtime.cleanup_group is missing or not a coroutine function" % modname
    if "trajectories" in _code.names(cleanup):
        return None, "%s.Runtime.cleanup_group already touches Runtime.trajectories (fixed upstream)" % modname
    return [(runtime, "cleanup_group", _wrapper)], None


def _wrapper(original, counters):
    @functools.wraps(original)
    async def cleanup_group(self, tasks, states, *args, **kwargs):
        try:
            return await original(self, tasks, states, *args, **kwargs)
        finally:
            registry = self.__dict__.get("trajectories")
            if isinstance(registry, dict):
                for state in states or ():
                    tid = state.get("trajectory_id") if isinstance(state, dict) else None
                    if tid is not None and registry.pop(str(tid), None) is not None:
                        counters["evicted"] = counters.get("evicted", 0) + 1

    return cleanup_group
