"""The docs are read on call, in a terminal or a narrow browser pane: a table cell longer than
a few lines stops being a table. What takes more is said in prose under it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_CELL = 300


def _cells(line: str) -> list[str]:
    """The cells of one table row (``|`` inside backquotes or escaped is not a border)."""
    cells, cell, quoted, escaped = [], [], False, False
    for char in line.strip().strip("|"):
        if char == "|" and not quoted and not escaped:
            cells.append("".join(cell).strip())
            cell = []
        else:
            cell.append(char)
        quoted = quoted != (char == "`") if not escaped else quoted
        escaped = char == "\\" and not escaped
    cells.append("".join(cell).strip())
    return cells


def test_a_cell_is_split_at_its_borders() -> None:
    assert _cells("| a | `x | y` | b\\|c |") == ["a", "`x | y`", "b\\|c"]


def test_no_docs_table_cell_is_over_300_characters() -> None:
    long = [f"{path.relative_to(ROOT)}:{n}: {len(cell)} characters: {cell[:60]}..."
            for path in sorted((ROOT / "docs").glob("**/*.md")) + [ROOT / "README.md"]
            for n, line in enumerate(path.read_text().splitlines(), 1) if re.match(r"\s*\|", line)
            for cell in _cells(line) if len(cell) > MAX_CELL]
    assert not long, "\n".join(long)
