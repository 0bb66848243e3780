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


def percent(fraction: float, *, signed: bool = False) -> str:
    """``fraction`` as a whole percentage where that does not lie: a share or change that is
    not zero is never printed as 0%, and one that is not exactly 100% never as 100% (606,056 ->
    1,110 bytes is -99.8%, not -100%; 72 KiB of 150 MiB is 0.05%, not 0%). ``signed``: + too."""
    sign = "-" if fraction < 0 else "+" if signed and fraction > 0 else ""
    size = abs(float(fraction)) * 100
    for decimals in (0, 1, 2):
        text = f"{size:.{decimals}f}"
        if size in (0.0, 100.0) or float(text) not in (0.0, 100.0):
            return f"{sign}{text}%"
    return f"{sign}{'<0.01' if size < 1 else '>99.99' if size < 100 else '>100'}%"


def change(before: float, after: float) -> str:
    """How ``after`` differs from ``before`` as a signed percentage (``percent``'s rules)."""
    if before == 0:
        return "new" if after else "0%"
    return percent((after - before) / before, signed=True)
