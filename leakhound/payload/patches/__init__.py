"""The built-in live fixes, applied inside the target. One module per fix.

Each fix module defines ``FIX`` (its name), ``DESCRIPTION``, ``recognise()`` (returns
``(plan, None)`` where the plan lists ``(owner, attribute, make_wrapper)`` replacements, or
``(None, reason)`` when the code is missing or not what the fix was written for; the wrapper
factory gets the original and a counters dict), and optionally ``start(entry)`` / ``stop(entry)`` for work
that is not a function swap (the trim cadence). Requests choose among these by name only;
nothing sent to the target is executed.
"""


import time

from .. import arena, probes, wire  # noqa: F401 - wire: its types, in type comments
from . import _state, intercepts, registry, steps, trim

FIXES = {m.FIX: m for m in (steps, registry, intercepts, trim)}
ACTIONS = ("apply", "revert", "status", "dry-run", "measure")


def applied():
    return sorted(_state.peek())


def _describe(plan):
    out = []
    for owner, name, _make in plan:
        if isinstance(owner, type):
            out.append("%s.%s.%s" % (owner.__module__, owner.__qualname__, name))
        else:
            out.append("%s.%s" % (getattr(owner, "__name__", "?"), name))
    return out


def _functions(entry):
    """The patched functions a fix's state entry lists; entries left by an older leakhound
    in a target that still runs its fixes call them ``targets``."""
    return entry.get("functions", entry.get("targets", []))


def _owner_ids(name):
    """The ids of the containers whose contents a fix changes (``Runtime.trajectories``,
    ``InterceptionServer.intercepts``): how the CLI finds the fixed owner among a census's
    owners by identity, not by its path's wording. None for trim (no container)."""
    try:
        runtimes = probes.find_runtimes()
        if name in ("registry", "steps"):
            return [id(probes.own_attr(runtime, "trajectories")) for _mod, runtime in runtimes]
        if name == "intercepts":
            return [id(probes.own_attr(server, "intercepts")) for server in probes.find_servers(runtimes)]
    except Exception:
        pass  # no verifiers runtime to look at: the fix is refused anyway
    return []


def _text(value, limit):
    return value[:limit] if isinstance(value, str) else ""


def _applied_by(request):
    """Who asked, as the CLI said it (numbers and short strings only): recorded with the fix
    so that a later inspection can say when and by whom it was applied."""
    by = request.get("by")
    if type(by) is not dict:
        return {}
    uid = by.get("uid")
    return {"uid": uid if type(uid) is int else -1, "user": _text(by.get("user"), 64),
            "leakhound_version": _text(by.get("leakhound_version"), 40)}


def _when_and_who(entry):
    return {"applied_at": entry.get("applied_at"), "applied_by": dict(entry.get("applied_by") or {})}


def _options(request):
    """Fix options from the request, each checked against its allowed range (never code)."""
    out = {}  # type: dict
    options = request.get("options")
    if type(options) is not dict:
        return out
    every = options.get("trim_every")
    if isinstance(every, (int, float)) and not isinstance(every, bool) and 1 <= every <= 3600:
        out["trim_every"] = float(every)
    return out


def _plan(module, dry_run):
    """What applying ``module`` would do, changing nothing: (result, plan or None)."""
    fixes = _state.peek()
    if module.FIX in fixes:
        return (dict({"fix": module.FIX, "status": "already-applied", "functions": _functions(fixes[module.FIX]),
                      "counters": dict(fixes[module.FIX]["counters"]), "owner_ids": _owner_ids(module.FIX)},
                     **_when_and_who(fixes[module.FIX])), None)
    plan, reason = module.recognise()
    if plan is None:
        return {"fix": module.FIX, "status": "refused", "reason": reason}, None
    functions = _describe(plan)
    if dry_run:
        return ({"fix": module.FIX, "status": "would-apply", "functions": functions,
                 "description": module.DESCRIPTION, "owner_ids": _owner_ids(module.FIX)}, None)
    return ({"fix": module.FIX, "status": "applied", "functions": functions, "description": module.DESCRIPTION,
             "owner_ids": _owner_ids(module.FIX)}, plan)


def _land(module, plan, result, options, by=None):
    """Apply one recognised plan. Reverts its own swaps if any step fails."""
    counters = {}  # type: dict
    swaps = []
    for owner, name, make in plan:
        swap = _state.Swap(owner, name, None)
        swap.new = make(swap.original, counters)
        swap.new.__leakhound_fix__ = module.FIX
        swaps.append(swap)
    entry = {"swaps": swaps, "functions": result["functions"], "counters": counters, "options": options or {},
             "applied_at": time.time(), "applied_by": dict(by or {})}
    start = getattr(module, "start", None)
    if start is not None:
        start(entry)
    try:
        for swap in swaps:
            swap.apply()
    except BaseException:
        for swap in swaps:
            swap.revert()
        stop = getattr(module, "stop", None)
        if stop is not None:
            stop(entry)
        raise
    _state.state()[module.FIX] = entry
    result["counters"] = dict(counters)
    result.update(_when_and_who(entry))


def _apply_all(modules, dry_run, options, check, by=None):
    """Recognise every fix first, then land them all at once, after the last cancellation
    point: a request that fails or is cancelled before that changed nothing, and one that
    fails while landing takes back what it landed (never some fixes and an error)."""
    planned = [(module,) + _plan(module, dry_run) for module in modules]
    check("commit")
    landed = []
    try:
        for module, result, plan in planned:
            if plan is not None:
                _land(module, plan, result, options, by)
                landed.append(module)
    except BaseException:
        for module in reversed(landed):
            _revert(module)
        raise
    return [result for _module, result, _plan in planned]


def _revert(module):
    fixes = _state.peek()
    entry = fixes.get(module.FIX)
    if entry is None:
        return {"fix": module.FIX, "status": "not-applied"}
    stop = getattr(module, "stop", None)
    if stop is not None:
        stop(entry)
    clobbered = [s.name for s in entry["swaps"] if not s.revert()]
    del fixes[module.FIX]
    _state.drop_if_empty()
    out = {"fix": module.FIX, "status": "reverted", "functions": _functions(entry),
           "counters": dict(entry["counters"])}
    if clobbered:
        out["warning"] = "replaced by other code since; left as is: %s" % ", ".join(clobbered)
    return out


def after_fork_in_child():
    """In a child forked from the target: each applied fix's own after-fork step (a helper
    thread started again), where it has one."""
    for name, entry in list(_state.peek().items()):
        module = FIXES.get(name)
        step = getattr(module, "after_fork_in_child", None)
        if step is not None:
            try:
                step(entry)
            except Exception:
                pass  # never raise into the target's fork


def _status(module):
    entry = _state.peek().get(module.FIX)
    if entry is None:
        plan, reason = module.recognise()
        return {"fix": module.FIX, "status": "not-applied",
                "applicable": plan is not None, "reason": reason or ""}
    return dict({"fix": module.FIX, "status": "applied", "functions": _functions(entry),
                 "counters": dict(entry["counters"])}, **_when_and_who(entry))


def _never(phase):
    pass


def handle(request, check=_never):
    """Run one patch request. ``check(phase)`` raises when the request is cancelled; it is
    called before anything changes and never once a fix has landed."""
    action = request.get("action")
    names = request.get("fixes")
    if action not in ACTIONS:
        raise ValueError("unknown patch action")
    if type(names) is not list or not names or any(n not in FIXES for n in names):
        raise ValueError("fixes must be a non-empty list of: " + ", ".join(FIXES))
    out = {}  # type: wire.PatchAnswer
    if action == "apply":
        # Measured in the same request, right before: the worker keeps churning between
        # requests, so a separate "before" would be stale by the time the fix lands.
        out["measure_before"] = _measure()
        registry = out["measure_before"]["verifiers"].get("registry")
        if isinstance(registry, dict):
            # Sizing the registry takes a while on a fat heap; the counts the registry fix is
            # judged by are re-read at the instant before it lands.
            registry.update(probes.registry_counts())
    modules = [FIXES[name] for name in names]
    if action in ("apply", "dry-run"):
        results = _apply_all(modules, action == "dry-run", _options(request), check, _applied_by(request))
    elif action == "revert":
        check("commit")
        results = [_revert(module) for module in modules]
    else:
        results = [_status(module) for module in modules]
    out["results"] = results
    out["applied"] = applied()
    if action in ("measure", "apply", "revert"):
        try:
            check("measure")
        except Exception:
            # Past the commit the answer must reach the CLI: what landed, unmeasured.
            if action == "measure":
                raise
            out["measure_skipped"] = "the request ran out of time after the change landed"
            return out
        out["measure"] = _measure()
    return out


def _measure():
    return {"verifiers": probes.verifiers_probe(), "arena": arena.arena_stats(), "rss_bytes": arena.rss_bytes()}
