"""docs/glossary.md defines every term the output uses, and --help points to it."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from leakhound.analysis.detectors import analyse
from leakhound.analysis.ledger import ledger
from leakhound.cli import app
from leakhound.model import snapshot_from_json
from leakhound.render import table

ROOT = Path(__file__).resolve().parents[2]
GLOSSARY = (ROOT / "docs" / "glossary.md").read_text()
CAPTURES = ROOT / "tests" / "unit" / "captures"
# The terms an on-call engineer had to look up (issue 25), and the ones the report still uses.
TERMS = ("census", "dominator tree", "first reacher", "retained", "USS", "RSS", "VmHWM", "`<held from C: Type>`",
         "`<modules and classes>`", "token sidecar", "GIL", "pause budget", "trimmable", "pymalloc free",
         "glibc free", "counted twice", "at stake", "cyclic garbage", "items", "owner", "walk", "probe",
         "not examined", "plateaued")


def _defined(term: str) -> bool:
    return re.search(r"\*\*" + re.escape(term) + r"\*\*", GLOSSARY, re.IGNORECASE) is not None


@pytest.mark.parametrize("term", TERMS)
def test_the_glossary_defines(term: str) -> None:
    assert _defined(term), term


@pytest.mark.parametrize("args", [["--help"], ["inspect", "--help"]])
def test_help_points_to_the_glossary(args: list[str]) -> None:
    result = CliRunner().invoke(app, args, env={"COLUMNS": "100"})
    assert result.exit_code == 0 and "docs/glossary.md" in " ".join(result.output.split())


def test_every_ledger_row_and_special_owner_of_a_real_report_is_defined(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("NO_COLOR", "1")
    for capture in sorted(CAPTURES.glob("*.json")):
        snap = analyse(snapshot_from_json(capture.read_text()))
        out = io.StringIO()
        table.render_snapshot(snap, ledger(snap), file=out)
        for row in ledger(snap):
            assert _defined(row.name.strip().removeprefix("of which ")), row.name
        for special in set(re.findall(r"<(held from C|modules and classes|unreached|not attributed)", out.getvalue())):
            assert f"`<{special}" in GLOSSARY, special
