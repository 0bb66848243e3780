"""docs/performance.md's tables are written by the benchmark scripts from their results files
(benchmarks/_common.py ``update_doc_table``): the page says what the recorded results say."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
DOC = ROOT / "docs" / "performance.md"


@pytest.fixture(autouse=True)
def _benchmarks_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the scripts import ``_common`` as a sibling


def _table(text: str, name: str) -> str:
    return text.split(f"<!-- table:{name} -->", 1)[1].split(f"<!-- /table:{name} -->", 1)[0]


def test_a_marked_table_is_replaced_and_the_prose_around_it_kept(tmp_path: Path) -> None:
    import _common

    doc = tmp_path / "performance.md"
    doc.write_text("# Page\n\nbefore\n\n<!-- table:x -->\nold table\n<!-- /table:x -->\n\nafter\n")
    results = tmp_path / "x.json"
    results.write_text(json.dumps({"commit": "abc1234 a subject", "machine": "2 cores", "date": "2026-12-02",
                                   "load_average_at_end": "1.0 1.1 1.2", "rows": []}))
    assert _common.update_doc_table("x", results, ("a", "b"), [["1", None]], doc=doc)
    text = doc.read_text()
    assert text.startswith("# Page\n\nbefore\n\n<!-- table:x -->\n") and text.endswith("<!-- /table:x -->\n\nafter\n")
    assert "old table" not in text and "| a | b |\n|---|---|\n| 1 | - |\n" in text
    assert "commit `abc1234`, 2026-12-02, 2 cores, load average at the end 1.0 1.1 1.2" in text
    assert _common.update_doc_table("x", results, ("a",), [["2"]], doc=doc)  # again: still one section
    assert doc.read_text().count("<!-- table:x -->") == 1


def test_a_page_without_the_section_is_left_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import _common

    doc = tmp_path / "performance.md"
    doc.write_text("no markers\n")
    results = tmp_path / "x.json"
    results.write_text("{}")
    assert not _common.update_doc_table("x", results, ("a",), [], doc=doc)
    assert doc.read_text() == "no markers\n" and "no section" in capsys.readouterr().err


@pytest.mark.parametrize(("script", "name", "results"), [
    ("scale", "scale", "scale-1m-50m-pending-leaves.json"),
    ("html_report", "html-report", "html-report-2026-12-02.json"),
])
def test_the_page_holds_the_table_its_script_writes(script: str, name: str, results: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Regenerated from the results file it names, each table is what the page shows."""
    module = __import__(script)
    page = tmp_path / "performance.md"
    monkeypatch.setattr(module.c.update_doc_table, "__kwdefaults__", {"doc": page})
    monkeypatch.setattr(sys, "argv", [f"benchmarks/{script}.py"])
    before = DOC.read_text()
    page.write_text(before.replace(_table(before, name), "\n"))
    module.write_doc(BENCHMARKS / "results" / results)
    assert DOC.read_text() == before  # the real page is not written by the test
    assert _table(page.read_text(), name) == _table(before, name)


def test_the_page_is_one_page() -> None:
    text = DOC.read_text()
    assert len(text.splitlines()) <= 200
    assert "## At scale" in text  # the section other benchmarks' tables are added to
