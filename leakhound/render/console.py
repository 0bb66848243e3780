"""The rich console every renderer prints through: respects NO_COLOR and a given file."""

from __future__ import annotations

import os
import sys
from typing import TextIO

from rich.console import Console


def console(file: TextIO | None = None) -> Console:
    out = file or sys.stdout
    return Console(
        file=out,
        no_color="NO_COLOR" in os.environ,
        highlight=False,
        soft_wrap=False,
    )


def human_bytes(n: float) -> str:
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{sign}{n:.0f} {unit}" if unit == "B" else f"{sign}{n:.1f} {unit}"
        n /= 1024
    return f"{sign}{n:.1f} GB"
