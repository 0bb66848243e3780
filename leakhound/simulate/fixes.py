"""Which of the four env-worker memory fixes the simulated worker runs natively.

The unfixed code paths mirror verifiers 0.1.14; each fix switches one of them to the
behaviour of the fixed upstream code, so leakhound can compare "leaking" and "fixed" workers
without patching anything.
"""

from __future__ import annotations

from collections.abc import Iterable

#: Keep identity/usage only in each trajectory step's stored ``response`` (plus a small
#: raw-token / is-truncated sidecar on truncated steps).
STEPS = "steps"
#: Evict ``Runtime.trajectories`` entries at the safe point (``cleanup_rollout`` when
#: ungrouped, ``cleanup_group`` when grouped).
REGISTRY = "registry"
#: Discard ``InterceptionServer.intercepts`` entries once their response is delivered.
INTERCEPTS = "intercepts"
#: ``malloc_trim(0)`` from ``EnvWorker.stats_loop`` every stats interval.
TRIM = "trim"
#: The naive port of the registry fix: evict in ``cleanup_rollout`` even for grouped
#: rollouts. A bug reproducer (the group stage then fails with "No live trajectory
#: registered"); never part of ``all``.
REGISTRY_EAGER = "registry_eager"

ALL_FIXES: tuple[str, ...] = (STEPS, REGISTRY, INTERCEPTS, TRIM)
KNOWN_FIXES: tuple[str, ...] = (*ALL_FIXES, REGISTRY_EAGER)

#: The fixes active in this process; set once by the worker entry point.
ACTIVE: frozenset[str] = frozenset()


def parse_fixes(spec: str) -> frozenset[str]:
    """Parse ``none``, ``all`` or a comma-separated list such as ``steps,trim``."""
    text = spec.strip().lower()
    if text in ("", "none"):
        return frozenset()
    if text == "all":
        return frozenset(ALL_FIXES)
    names = {part.strip().replace("-", "_") for part in text.split(",") if part.strip()}
    if "all" in names:
        names.discard("all")
        names.update(ALL_FIXES)
    unknown = sorted(names - set(KNOWN_FIXES))
    if unknown:
        raise ValueError(
            f"unknown fix(es) {', '.join(unknown)}; choose from none, all, "
            + ", ".join(KNOWN_FIXES)
        )
    return frozenset(names)


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
