"""Sampled allocation sites in the target: the compiled tracker (``_sites.c``) started, read and
stopped by requests (``OP_SITES``, and a snapshot's ``sites``).

The tracker samples about one allocation per ``mean_bytes`` allocated and keeps the Python
stack of each sampled block until the block is freed. It ends by itself at its deadline: the
hook checks the clock as it samples, and a daemon timer thread started here stops it in a
target that has gone idle, so it is gone however the CLI that started it ends.

A sample of ``size`` bytes stands for ``size / p`` bytes and ``1 / p`` allocations, ``p`` being
its chance to be sampled (1 - exp(-size / mean_bytes)): the estimate pprof and tcmalloc make.
"""

import math
import threading

from . import wire

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any  # noqa: F401 - in a type comment

try:
    from . import _walk as _walk_module_loaded
    _walk_module = _walk_module_loaded  # type: Any
except Exception:  # no build, or an interpreter older than 3.10
    _walk_module = None
if not hasattr(_walk_module, "sites_start"):
    _walk_module = None

# Unless the request says otherwise (docs/watch.md).
DEFAULT_MEAN_BYTES = wire.SITES_MEAN_BYTES
DEFAULT_MAX_SAMPLES = wire.SITES_MAX_SAMPLES
# The timer fires this long after the deadline the hook itself checks.
TIMER_GRACE_SECONDS = 1.0

_timer = [None]  # type: list


def unavailable_reason():
    """Why the tracker cannot run in this interpreter, or None."""
    if _walk_module is None:
        return "the payload's compiled module (_walk) did not load in the target"
    return None


def ignore_this_thread():
    """The calling thread's allocations are not sampled (the payload's own request thread);
    frees are still seen."""
    if _walk_module is not None:
        _walk_module.sites_ignore_thread(True)


def start(request):
    """Hook the allocators for ``seconds``; the tracker's table size and rate."""
    reason = unavailable_reason()
    if reason is not None:
        return {"started": False, "reason": reason}
    mean = request.get("mean_bytes")
    mean = float(mean) if type(mean) in (int, float) and 1 <= mean <= 1 << 40 else float(DEFAULT_MEAN_BYTES)
    seconds = request.get("seconds")
    seconds = float(seconds) if type(seconds) in (int, float) and 0 < seconds <= 86400 else 60.0
    max_samples = request.get("max_samples")
    max_samples = max_samples if type(max_samples) is int and 1 <= max_samples <= 1 << 22 else DEFAULT_MAX_SAMPLES
    _cancel_timer()
    try:
        started = _walk_module.sites_start(mean, seconds, max_samples)
    except RuntimeError as exc:  # a layout or interpreter it does not know: nothing was hooked
        return {"started": False, "reason": str(exc)}
    timer = threading.Timer(seconds + TIMER_GRACE_SECONDS, _expire)
    timer.daemon = True
    timer.name = "leakhound-sites-deadline"
    timer.start()
    _timer[0] = timer
    return {"started": True, "mean_bytes": mean, "seconds": seconds, "max_samples": max_samples,
            "table_bytes": started["table_bytes"]}


def _expire():
    if _walk_module is not None:
        _walk_module.sites_stop()


def _cancel_timer():
    timer = _timer[0]
    _timer[0] = None
    if timer is not None:
        timer.cancel()


def stop():
    """Put the allocators back; the tracker's last state."""
    _cancel_timer()
    if _walk_module is None:
        return {"installed": 0, "tracking": 0}
    return _walk_module.sites_stop()


def after_fork_in_child():
    """A child forked while the tracker runs has its hook but not the deadline's timer thread (nor
    anyone to read its samples): its allocators are put back and its tables freed at once."""
    _timer[0] = None  # the parent's timer; its thread did not come along
    if _walk_module is not None:
        _walk_module.sites_stop()


def state():
    if _walk_module is None:
        return {"installed": 0, "tracking": 0}
    return _walk_module.sites_state()


def noting(on):
    """While on, the compiled graph walk notes which node each sample is part of."""
    if _walk_module is not None:
        _walk_module.sites_noting(bool(on))


def read_and_stop():
    """The surviving samples grouped by (node, stack) with their estimated bytes and counts,
    then the tracker stopped. ``node`` is the address of the graph node the walk found the
    block part of (0: none: not attributed)."""
    if _walk_module is None:
        return {"available": False, "reason": unavailable_reason()}
    _walk_module.sites_noting(False)
    samples, stacks, tracker = _walk_module.sites_read()
    _cancel_timer()
    last = _walk_module.sites_stop()
    tracker["installed"] = last.get("installed", 0)
    tracker["unhook_refused"] = last.get("unhook_refused", 0)
    mean = float(tracker.get("mean_bytes") or DEFAULT_MEAN_BYTES)
    grouped = {}  # type: dict
    for _address, size, stack, node in samples:
        chance = -math.expm1(-size / mean) if size > 0 else 0.0
        if chance <= 0.0:
            continue
        row = grouped.setdefault((node, stack), [0.0, 0.0, 0])
        row[0] += size / chance
        row[1] += 1.0 / chance
        row[2] += 1
    rows = [[node, stack, int(round(b)), int(round(c)), n] for (node, stack), (b, c, n) in grouped.items()]
    return {"available": True, "samples": rows, "stacks": [[list(f) for f in s] for s in stacks],
            "tracker": tracker}
