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
    ("scale", "scale", "scale-1m-50m-20261206b.json"),
    ("html_report", "html-report", "html-report-2026-12-02.json"),
    ("verifiers_scale", "verifiers-scale", "verifiers-scale-20261205.json"),
    ("verifiers_scale", "verifiers-pause", "verifiers-scale-20261205.json"),
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


def test_every_run_writes_its_results_file_and_the_page_shows_the_newest(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A script's tables go to its results file with the commit and the load; the page's table
    of the other benchmarks names the newest file of each, a full run before a smoke run."""
    import _common

    results = tmp_path / "results"
    page = tmp_path / "performance.md"
    page.write_text("# Page\n\n<!-- table:other-benchmarks -->\n<!-- /table:other-benchmarks -->\n\nafter\n")
    monkeypatch.setattr(_common, "RESULTS", results)
    monkeypatch.setattr(_common, "PERFORMANCE_DOC", page)
    monkeypatch.setattr(_common.update_summary_table, "__kwdefaults__", {"doc": page, "results": results})
    monkeypatch.setattr(_common, "_RUN", {"tables": [], "summary": "", "smoke": False})
    written = []
    for smoke in (False, True):  # the smoke run is newer, and not what the page quotes
        monkeypatch.setattr(sys, "argv", ["benchmarks/ptrace_stop.py", *(["--quick"] if smoke else [])])
        _common._RUN["tables"].clear()
        _common.header("a title", sys.argv)
        _common.table(["injector", "stop median"], [["helper", "0.7 ms" if not smoke else "9.9 ms"]])
        written.append(_common.write_results("ptrace_stop", out=results / f"ptrace-stop-{int(smoke)}.json"))
    full, smoke_run = (json.loads(p.read_text()) for p in written)
    assert (full["smoke"], smoke_run["smoke"]) == (False, True)
    assert full["tables"] == [{"title": "", "headers": ["injector", "stop median"], "rows": [["helper", "0.7 ms"]]}]
    for key in ("commit", "machine", "date", "load_average_at_start", "load_average_at_end"):
        assert full[key], key
    text = page.read_text()
    assert "| `ptrace_stop.py` | `ptrace-stop-0.json` |" in text and "helper: stop median 0.7 ms" in text
    assert "| `attach.py` | no results file yet |" in text and text.endswith("\n\nafter\n")


def test_the_page_holds_the_other_benchmarks_table_their_results_make() -> None:
    import _common

    page = DOC.read_text()
    assert _table(page, "other-benchmarks").split("\n\n", 1)[1].strip() == _common.markdown_table(
        ("script", "results file", "commit, date, load", "what it measured"), _common.summary_rows())
