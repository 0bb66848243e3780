"""The budgets a look promised to keep in the target, and the ones it broke.

``--max-pause`` promises the worker is never held longer than that in one piece. Two numbers
say how long it was: ``heap.max_pause_ms`` (the longest single step or stop: the attach, one C
call the census cannot split) and ``heap.max_hold_ms`` (the longest the census ran between two
yields of the GIL). Either over the budget is a broken promise, said as a warning in the
header and the JSON, not as an ordinary line of numbers. Pure arithmetic on the snapshot.
"""

from __future__ import annotations

from leakhound.model import OverBudget, Snapshot

PAUSE_OVER_BUDGET = "pause_over_budget"


def over_budget(snapshot: Snapshot) -> tuple[OverBudget, ...]:
    h = snapshot.heap
    budget = h.max_pause_budget_ms
    if not budget:  # --max-pause 0, or a file from before the budget was recorded
        return ()
    if h.max_hold_ms >= h.max_pause_ms:
        measured, how = h.max_hold_ms, "running between two yields of the GIL"
    else:
        measured, how = h.max_pause_ms, "one step it cannot split, or the attach"
        if snapshot.method == "gdb":
            how += "; with gdb an upper bound that includes gdb's start-up"
    # rounded as printed: 50.4 ms is not said to be over a 50 ms budget
    if round(measured) <= round(budget):
        return ()
    text = (f"the worker was held up {measured:.0f} ms at once ({how}), over the {budget:.0f} ms "
            "pause budget (--max-pause)")
    return (OverBudget(PAUSE_OVER_BUDGET, text, round(measured, 2), budget, "ms"),)
