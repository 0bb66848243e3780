"""Known-shape probes: facts about recognised structures, measured inside the target.

Each probe returns a JSON-able dict, or ``{"skipped": reason}`` when the shape is absent.
Detectors on the CLI side (``leakhound/analysis/detectors``) turn the facts into findings.

The ``verifiers`` probe recognises the v1 env-worker runtime of ``verifiers`` (0.1.14) and
leakhound's own simulated worker, which mirrors its names:

* runtimes: the module global ``_RUNTIME_REGISTRY`` (runtime_id -> Runtime, weak values) in
  ``verifiers.v1.runtime`` / ``leakhound.simulate.runtime``. Workers call ``gc.freeze()``,
  which hides these objects from ``gc.get_objects()``, so we never search for them there.
* ``Runtime.trajectories``: trajectory_id -> the rollout's live trajectory list. An entry is
  *in flight* when a live asyncio task's coroutine holds a rollout state (a dict with that
  ``trajectory_id``, directly or in a list/tuple of states); every other entry belongs to a
  rollout that has finished and is retained only by the registry.
* ``InterceptionServer.intercepts`` (reached as ``runtime.harness.endpoint.server``):
  request_id -> intercept dict holding the parsed request body. Delivered = its
  ``response_future`` is done.
* step bloat: a step's stored ``response`` still carrying ``message`` beyond the minimal
  truncation sidecar (``{"is_truncated", "tokens": {"prompt_ids", "completion_ids"}}``).

Only built-in descriptors, dict/list C methods and ``Future.done()`` are called; no user code.
"""

import gc
import sys
import time

from .census import _instance_dict
from .sizes import deep_size as _deep_size
from .tasks import await_chain, live_tasks

RUNTIME_MODULES = ("verifiers.v1.runtime", "leakhound.simulate.runtime")
BODY_FIELDS = ("messages", "prompt", "input", "system", "tools")
SIDECAR_MESSAGE_KEYS = frozenset(("is_truncated", "tokens"))
SIDECAR_TOKEN_KEYS = frozenset(("prompt_ids", "completion_ids"))
_BASE64_MARK = ";base64,"


def _attr(obj, name):
    """An instance attribute from its ``__dict__`` only (no descriptors, no getattr)."""
    d = _instance_dict(obj)
    return dict.get(d, name) if d is not None else None


def _base64_chars(root, limit=200000):
    total = 0
    stack = [root]
    steps = 0
    while stack and steps < limit:
        obj = stack.pop()
        steps += 1
        if type(obj) is str:
            at = obj.find(_BASE64_MARK)
            if at >= 0:
                total += len(obj) - at - len(_BASE64_MARK)
        elif isinstance(obj, dict):
            stack.extend(dict.values(obj))
        elif isinstance(obj, (list, tuple)):
            stack.extend(obj)
    return total


def _runtimes():
    found = []
    for modname in RUNTIME_MODULES:
        module = sys.modules.get(modname)
        if module is None:
            continue
        registry = _attr(module, "_RUNTIME_REGISTRY")
        data = _attr(registry, "data") if registry is not None else None
        if type(data) is not dict:
            continue
        for ref in gc.get_referents(data):
            try:
                runtime = ref()
            except TypeError:
                continue
            if runtime is not None and type(_attr(runtime, "trajectories")) is dict:
                found.append((modname, runtime))
    return found


def _live_trajectory_ids(samples=3, pause=0.002):
    """trajectory_ids of rollout states that a live asyncio task's coroutines still hold.

    The coroutine chain the main thread is executing at the instant we look shows no locals
    (a running frame's stack is not traversable), so we look a few times, letting the loop
    move on in between, and take the union.
    """
    ids = set()  # type: set
    for i in range(samples):
        if i:
            time.sleep(pause)
        ids |= _live_trajectory_ids_once()
    return ids


def _live_trajectory_ids_once():
    ids = set()  # type: set

    def note_state(value):
        if isinstance(value, dict) and dict.__contains__(value, "trajectory_id"):
            tid = dict.get(value, "trajectory_id")
            if tid is not None:
                ids.add(str(tid))

    for task in live_tasks():
        for coro in await_chain(task):
            for local in gc.get_referents(coro):
                note_state(local)
                if isinstance(local, (list, tuple)) and len(local) < 10000:
                    for item in local:
                        note_state(item)
    return ids


def _message(step):
    """The ``response["message"]`` dict a trajectory step stores, or None."""
    response = dict.get(step, "response") if isinstance(step, dict) else None
    message = dict.get(response, "message") if isinstance(response, dict) else None
    return message if isinstance(message, dict) else None


def _is_bloated(message):
    """More than the steps fix's truncation sidecar."""
    tokens = dict.get(message, "tokens")
    token_keys = set(dict.keys(tokens)) if isinstance(tokens, dict) else set()
    return not (set(dict.keys(message)) <= SIDECAR_MESSAGE_KEYS and token_keys <= SIDECAR_TOKEN_KEYS)


def _servers(runtimes):
    seen = set()
    out = []
    for _mod, runtime in runtimes:
        harness = _attr(runtime, "harness")
        endpoint = _attr(harness, "endpoint") if harness is not None else None
        server = _attr(endpoint, "server") if endpoint is not None else None
        if server is not None and id(server) not in seen and type(_attr(server, "intercepts")) is dict:
            seen.add(id(server))
            out.append(server)
    return out


def verifiers_probe():
    runtimes = _runtimes()
    if not runtimes:
        return {"skipped": "no verifiers v1 runtime in this process (no live Runtime in _RUNTIME_REGISTRY)"}
    # Registry first, live rollouts second: an entry registered in between is not in our
    # copy, and one still running when we look at the tasks is seen as live.
    registries = [list(dict.items(_attr(runtime, "trajectories"))) for _mod, runtime in runtimes]
    live_ids = _live_trajectory_ids()
    registry = {  # type: dict
        "runtimes": len(runtimes),
        "modules": sorted({m for m, _ in runtimes}),
        "entries": 0,
        "finished_entries": 0,
        "inflight_entries": 0,
        "retained_bytes": 0,
        "finished_bytes": 0,
        "finished_steps": 0,
    }
    steps = {"steps": 0, "bloated_steps": 0, "redundant_bytes": 0, "sidecar_steps": 0, "sidecar_bytes": 0}
    # (trajectory list, finished?) once per list: judge states alias their parent's list.
    unique = []
    seen_lists = set()  # type: set
    for items in registries:
        registry["entries"] += len(items)
        for tid, trajectory in items:
            finished = str(tid) not in live_ids
            registry["finished_entries" if finished else "inflight_entries"] += 1
            if isinstance(trajectory, list) and id(trajectory) not in seen_lists:
                seen_lists.add(id(trajectory))
                unique.append((list(trajectory), finished))
    # Bloated messages are what the steps fix drops. Their bytes are those reachable only
    # through them: a first pass sizes everything else (the messages' ids pre-seeded, so
    # the walk stops there), a second pass the messages with what is left unseen.
    messages = []  # (message, finished, bloated)
    for step_list, finished in unique:
        for step in step_list:
            steps["steps"] += 1
            message = _message(step)
            if message is not None:
                messages.append((message, finished, _is_bloated(message)))
    message_ids = {id(m) for m, _f, _b in messages}
    seen = set(message_ids)
    for step_list, finished in unique:
        size = _deep_size(step_list, seen)
        registry["retained_bytes"] += size
        if finished:
            registry["finished_bytes"] += size
            registry["finished_steps"] += len(step_list)
    seen -= message_ids
    for message, finished, bloated in messages:
        size = _deep_size(message, seen)
        registry["retained_bytes"] += size
        if finished:
            registry["finished_bytes"] += size
        if bloated:
            steps["bloated_steps"] += 1
            steps["redundant_bytes"] += size
        else:
            steps["sidecar_steps"] += 1
            steps["sidecar_bytes"] += size
    intercepts = {"servers": 0, "entries": 0, "delivered": 0, "pending": 0, "body_bytes": 0,
                  "delivered_body_bytes": 0, "base64_bytes": 0}
    servers = _servers(runtimes)
    intercepts["servers"] = len(servers)
    body_seen = set()  # type: set
    for server in servers:
        entries = list(dict.values(_attr(server, "intercepts")))
        for intercept in entries:
            if not isinstance(intercept, dict):
                continue
            intercepts["entries"] += 1
            future = dict.get(intercept, "response_future")
            try:
                delivered = bool(future is not None and future.done() and not future.cancelled())
            except Exception:
                delivered = False
            body = 0
            b64 = 0
            for field in BODY_FIELDS:
                value = dict.get(intercept, field)
                if value is not None:
                    body += _deep_size(value, body_seen)
                    b64 += _base64_chars(value)
            intercepts["body_bytes"] += body
            intercepts["base64_bytes"] += b64
            if delivered:
                intercepts["delivered"] += 1
                intercepts["delivered_body_bytes"] += body
            else:
                intercepts["pending"] += 1
    return {"registry": registry, "steps": steps, "intercepts": intercepts}


def registry_counts():
    """Entries and finished entries of the trajectory registries, without sizing anything:
    cheap enough to read at the instant a fix is applied."""
    runtimes = _runtimes()
    registries = [list(dict.keys(_attr(runtime, "trajectories"))) for _mod, runtime in runtimes]
    live_ids = _live_trajectory_ids()
    keys = [str(k) for keys in registries for k in keys]
    return {"entries": len(keys), "finished_entries": sum(1 for k in keys if k not in live_ids)}


PROBES = {"verifiers": verifiers_probe}


def run_all():
    out = {}
    for name, probe in PROBES.items():
        try:
            out[name] = probe()
        except Exception as exc:  # a probe that cannot run is a result, not a failure
            out[name] = {"skipped": "probe failed: %s: %s" % (type(exc).__name__, exc)}
    return out
