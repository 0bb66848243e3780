"""How counts are said: one plural rule for every message leakhound writes."""

from __future__ import annotations


def count(n: float, noun: str, plural: str | None = None) -> str:
    """``1 trim``, ``2 trims``, ``1,024 objects``: the number with thousands separators, and
    the noun in the plural unless ``n`` is exactly one (``plural`` where adding an s is wrong)."""
    number = f"{int(n):,}" if float(n).is_integer() else f"{n:,}"
    return f"{number} {noun if n == 1 else (plural or noun + 's')}"
