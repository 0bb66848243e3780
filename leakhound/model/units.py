"""How numbers are said: one plural rule and one byte formatter for every message leakhound writes.

Bytes are counted in binary units everywhere (1 KiB = 1024 bytes, 1 MiB = 1024 KiB), so they are
named KiB, MiB and GiB: a number computed with 1024 is never called MB.
"""

from __future__ import annotations

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
_UNITS = (("B", 1), ("KiB", KiB), ("MiB", MiB), ("GiB", GiB))


def count(n: float, noun: str, plural: str | None = None) -> str:
    """``1 trim``, ``2 trims``, ``1,024 objects``: the number with thousands separators, and
    the noun in the plural unless ``n`` is exactly one (``plural`` where adding an s is wrong)."""
    number = f"{int(n):,}" if float(n).is_integer() else f"{n:,}"
    return f"{number} {noun if n == 1 else (plural or noun + 's')}"


def fmt_bytes(n: float, unit: str | None = None, decimals: int = 1) -> str:
    """``n`` bytes in a binary unit: ``unit`` ("B", "KiB", "MiB", "GiB") when given (a column or a
    rate that should not change unit from row to row), else the largest unit that keeps the
    number at 1 or more (``512 B``, ``1.5 KiB``, ``140.0 MiB``). Whole bytes have no decimals;
    thousands are separated (``1,053 MiB``)."""
    if unit is None:
        unit = "B"
        for name, scale in _UNITS:
            if abs(n) >= scale:
                unit = name
    scale = dict(_UNITS)[unit]
    digits = 0 if unit == "B" else decimals
    return f"{n / scale:,.{digits}f} {unit}"
