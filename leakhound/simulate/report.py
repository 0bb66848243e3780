"""Ground truth the simulated worker computes about itself, written as ``<pid>.json``.

Sizes are ``sys.getsizeof``-based deep sizes (see :func:`deep_size`) with one seen-set per
report section, so an object shared by several steps or intercepts counts once. Nothing
here calls ``gc.collect()``.

Report schema (``schema`` = 1)::

    pid, worker_id, phase ("running" | "idle" | "stopped"), started_at, written_at,
    uptime_s, report_ms, config{...}, fixes[...], runtime_id, paths{...},
    rollouts_started, rollouts_completed, rollouts_failed, rollouts_inflight,
    requests_completed, groups_completed, group_stage_errors, last_error,
    rss_bytes, rss_peak_bytes (VmHWM), python_allocated_blocks (sys.getallocatedblocks()),
    trajectories{entries, finished_entries, inflight_entries, steps, bloated_steps,
                 redundant_bytes, sidecar_steps, sidecar_bytes, truncated_steps,
                 truncated_steps_with_raw_tokens, retained_bytes},
    intercepts{entries, delivered, pending, body_bytes, base64_bytes,
               peak_entries, peak_delivered, peak_body_bytes},
    trim{count, last_at}, stats_ticks, stats_ticks_since_idle, idle_since,
    loop_lag{interval_ms, max_ms, idle_max_ms, samples, bookkeeping_ms}

``loop_lag`` comes from a 20 ms heartbeat task: how late each tick woke, minus the time the
worker spent computing these reports meanwhile; ``idle_max_ms`` covers the idle phase only.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .interception_utils import BODY_FIELDS

SCHEMA = 1
REPORT_KIND = "leakhound-simulate-worker"
SIDECAR_KEYS = frozenset({"is_truncated", "tokens"})
SIDECAR_TOKEN_KEYS = frozenset({"prompt_ids", "completion_ids"})


#: Count the elements of numeric arrays too (``--exact-sizes``): what a heap census sees.
COUNT_NUMERIC_ELEMENTS = False


def deep_size(root: object, seen: set[int], base64_tally: list[int] | None = None) -> int:
    """Deep size of ``root`` in bytes, counting each object once per ``seen``.

    Walks dicts (keys and values), lists, tuples, sets and frozensets and adds
    ``sys.getsizeof`` of every object reached whose ``id`` is not yet in ``seen``. A list
    or tuple whose first element is an int or float is a numeric array (token ids, masks,
    logprobs): only the container counts, because its elements are shared between a
    step's ``tokens`` and its ``response.message.tokens`` and no fix releases them. With
    ``base64_tally``, the sizes of strings starting with ``data:`` are also added to
    ``base64_tally[0]``.
    """
    total = 0
    stack = [root]
    while stack:
        obj = stack.pop()
        key = id(obj)
        if key in seen:
            continue
        seen.add(key)
        size = sys.getsizeof(obj)
        total += size
        if isinstance(obj, str):
            if base64_tally is not None and obj.startswith("data:"):
                base64_tally[0] += size
        elif isinstance(obj, dict):
            for item_key, value in obj.items():
                stack.append(item_key)
                stack.append(value)
        elif isinstance(obj, (list, tuple)):
            if obj and type(obj[0]) in (int, float) and not COUNT_NUMERIC_ELEMENTS:
                continue
            stack.extend(obj)
        elif isinstance(obj, (set, frozenset)):
            stack.extend(obj)
    return total


def step_message(step: Mapping[str, Any]) -> object:
    response = step.get("response")
    if isinstance(response, Mapping):
        return response.get("message")
    return None


def is_sidecar(message: object) -> bool:
    """True for the steps fix's ``{"is_truncated", "tokens": {"prompt_ids", "completion_ids"}}``."""
    if not isinstance(message, Mapping) or not set(message) <= SIDECAR_KEYS:
        return False
    tokens = message.get("tokens")
    return tokens is None or (isinstance(tokens, Mapping) and set(tokens) <= SIDECAR_TOKEN_KEYS)


def has_raw_tokens(message: object) -> bool:
    """Whether the renderer's ``_step_token_ids`` fallback finds raw ids in the message."""
    if not isinstance(message, Mapping):
        return False
    tokens = message.get("tokens")
    return (
        isinstance(tokens, Mapping)
        and bool(tokens.get("prompt_ids"))
        and bool(tokens.get("completion_ids"))
    )


def trajectory_stats(
    trajectories: Mapping[str, list[Mapping[str, object]]], inflight_ids: Iterable[str]
) -> dict[str, int]:
    """Count what ``Runtime.trajectories`` retains.

    ``finished_entries`` are entries whose request (rollout, or whole group) has finished.
    A step is *bloated* when its stored ``response`` still carries a ``message`` that is
    more than the steps fix's sidecar. ``redundant_bytes`` is the deep size of the bloated
    steps' ``response["message"]`` after a first pass has put everything else the
    registry retains into the seen-set, i.e. the bytes reachable only through those
    messages. ``sidecar_bytes`` is measured the same way for sidecar messages;
    ``retained_bytes`` is the deep size of all entries.
    """
    inflight = set(inflight_ids)
    entries = dict(trajectories)
    stats = {
        "entries": len(entries),
        "finished_entries": sum(1 for key in entries if key not in inflight),
        "inflight_entries": sum(1 for key in entries if key in inflight),
        "steps": 0,
        "bloated_steps": 0,
        "redundant_bytes": 0,
        "sidecar_steps": 0,
        "sidecar_bytes": 0,
        "truncated_steps": 0,
        "truncated_steps_with_raw_tokens": 0,
        "retained_bytes": 0,
    }
    bloated: list[object] = []
    sidecars: list[object] = []
    for trajectory in entries.values():
        for step in list(trajectory):
            stats["steps"] += 1
            message = step_message(step)
            if step.get("is_truncated"):
                stats["truncated_steps"] += 1
                if has_raw_tokens(message):
                    stats["truncated_steps_with_raw_tokens"] += 1
            if message is None:
                continue
            (sidecars if is_sidecar(message) else bloated).append(message)
    # First pass: everything except the messages (their ids pre-seeded so the walk stops
    # there); second pass: the messages, counting only what the first pass did not reach.
    message_ids = {id(message) for message in bloated + sidecars}
    seen = set(message_ids)
    kept = deep_size(entries, seen)
    seen -= message_ids
    stats["bloated_steps"] = len(bloated)
    stats["sidecar_steps"] = len(sidecars)
    stats["redundant_bytes"] = sum(deep_size(message, seen) for message in bloated)
    stats["sidecar_bytes"] = sum(deep_size(message, seen) for message in sidecars)
    stats["retained_bytes"] = kept + stats["redundant_bytes"] + stats["sidecar_bytes"]
    return stats


def intercept_stats(intercepts: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """Entries of ``InterceptionServer.intercepts`` and the bytes of their request bodies.

    *delivered* entries have a done ``response_future``; ``body_bytes`` is the deep size of
    the body fields (``messages``, ``prompt``, ``input``, ``system``, ``tools``) and
    ``base64_bytes`` the part of it in ``data:`` URL strings.
    """
    entries = list(intercepts.values())
    delivered = 0
    seen: set[int] = set()
    tally = [0]
    body_bytes = 0
    for intercept in entries:
        future = intercept.get("response_future")
        if future is not None and future.done():
            delivered += 1
        for field in BODY_FIELDS:
            value = intercept.get(field)
            if value is not None:
                body_bytes += deep_size(value, seen, tally)
    return {
        "entries": len(entries),
        "delivered": delivered,
        "pending": len(entries) - delivered,
        "body_bytes": body_bytes,
        "base64_bytes": tally[0],
    }


def rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def rss_peak_bytes() -> int:
    """VmHWM: the peak resident set size of this process."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def write_report(report_dir: Path, report: Mapping[str, Any]) -> Path:
    """Write ``<report_dir>/<pid>.json`` atomically (temp file + rename)."""
    path = report_dir / f"{report['pid']}.json"
    tmp = report_dir / f".{report['pid']}.json.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=1, sort_keys=True)
    os.replace(tmp, path)
    return path


def read_report(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
