"""The README's set-up: exactly two commands for a fresh machine (install and run the demo;
the tests), and the fast tier's own line below them, the same tier CI runs first."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _section(text: str, title: str) -> str:
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _commands(section: str) -> list[str]:
    return [line.strip() for line in section.splitlines() if line.startswith("    ") and line.strip()]


def test_two_set_up_commands_and_the_fast_tier_on_its_own_line() -> None:
    readme = (ROOT / "README.md").read_text()
    assert _commands(_section(readme, "Set up")) == [
        "python3 -m venv .venv && .venv/bin/pip install -q . && .venv/bin/leakhound demo",
        "bash .ci/run",
    ]
    (fast,) = _commands(_section(readme, "Tests"))
    # The marker expression CI's fast tier uses.
    ci = (ROOT / ".ci" / "run").read_text()
    (marker,) = re.findall(r'pytest [^\n]*-m ("not integration")', ci)
    assert f"-m {marker}" in fast
