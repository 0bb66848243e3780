"""Which of the four env-worker memory fixes the simulated worker runs with.

The code paths mirror verifiers 0.1.14 (leaks included). A fix is applied the way
``leakhound patch`` applies it to a live worker: the same in-process patch from
``leakhound.payload.patches``, applied once the worker's loop runs, so ``leakhound confirm``
measures exactly what the live patches do. Only ``registry_eager`` (a bug reproducer) is
native code.
"""

from __future__ import annotations

from collections.abc import Iterable

from leakhound.model.names import FIX_NAMES, Fix
from leakhound.model.names import parse_fixes as _parse

#: Keep identity/usage only in each trajectory step's stored ``response`` (plus a small
#: raw-token / is-truncated sidecar on truncated steps).
STEPS = Fix.STEPS.value
#: Evict ``Runtime.trajectories`` entries at the safe point (``cleanup_rollout`` when
#: ungrouped, ``cleanup_group`` when grouped).
REGISTRY = Fix.REGISTRY.value
#: Discard ``InterceptionServer.intercepts`` entries once their response is delivered.
INTERCEPTS = Fix.INTERCEPTS.value
#: ``malloc_trim(0)`` every stats interval, on the live patch's own thread (off the loop).
TRIM = Fix.TRIM.value
#: The naive port of the registry fix: evict in ``cleanup_rollout`` even for grouped
#: rollouts. A bug reproducer (the group stage then fails with "No live trajectory
#: registered"); never part of ``all``.
REGISTRY_EAGER = "registry_eager"

ALL_FIXES: tuple[str, ...] = FIX_NAMES
KNOWN_FIXES: tuple[str, ...] = (*ALL_FIXES, REGISTRY_EAGER)

#: The fixes active in this process; set once by the worker entry point.
ACTIVE: frozenset[str] = frozenset()


def parse_fixes(spec: str) -> frozenset[str]:
    """``none``, ``all`` or a comma list such as ``steps,trim`` (the one grammar of ``--fix``),
    plus the ``registry_eager`` bug reproducer."""
    return frozenset(_parse(spec, allow_none=True, extra=(REGISTRY_EAGER,)))


def format_fixes(fixes: Iterable[str]) -> str:
    """The inverse of :func:`parse_fixes`, in a stable order."""
    chosen = set(fixes)
    if not chosen:
        return "none"
    ordered = [name for name in KNOWN_FIXES if name in chosen]
    return ",".join(ordered)


def configure(fixes: Iterable[str]) -> None:
    global ACTIVE
    ACTIVE = frozenset(fixes)


def enabled(name: str) -> bool:
    return name in ACTIVE


LIVE_FIXES: tuple[str, ...] = FIX_NAMES


def apply_live_fixes(*, trim_interval: float) -> None:
    """Apply the active fixes with leakhound's own live patches; fail loudly if refused."""
    wanted = [name for name in LIVE_FIXES if name in ACTIVE]
    if not wanted:
        return
    from leakhound.payload import patches  # stdlib-only, like this package
    from leakhound.payload.patches import trim

    trim.INTERVAL = trim_interval
    result = patches.handle({"action": "apply", "fixes": wanted})
    refused = [r for r in result["results"] if r["status"] not in ("applied", "already-applied")]
    if refused:
        raise RuntimeError(f"live fix refused: {refused}")


def live_counters() -> dict[str, dict[str, object]]:
    """What each applied live fix has done so far (e.g. trims run), by fix name."""
    import sys

    state = sys.modules.get("_leakhound_state")
    fixes = getattr(state, "fixes", {}) if state is not None else {}
    return {name: dict(entry["counters"]) for name, entry in fixes.items()}
