"""``leakhound show FILE``: a saved snapshot re-analysed with today's detectors."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from leakhound.cli import app
from leakhound.model import snapshot_to_json
from tests.factories import make_snapshot
from tests.unit.test_verifiers_detectors import OWNERS, _probe


def _saved_without_findings(tmp_path: Path) -> Path:
    """A file as an older leakhound might have left it: no findings, no version recorded."""
    doc = json.loads(snapshot_to_json(make_snapshot(probes={"verifiers": _probe()}, owners=OWNERS)))
    doc["findings"] = []
    del doc["leakhound_version"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(doc))
    return path


def test_show_prints_the_findings_computed_from_the_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["show", str(_saved_without_findings(tmp_path))],
                                env={"COLUMNS": "100", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    assert "leakhound ? via gdb" in result.output  # the file does not say which leakhound took it
    for kind, fix in (("registry", "registry"), ("intercepts", "intercepts"), ("steps", "steps"),
                      ("arena_fragmentation", "trim")):
        assert kind in result.output and f"--fix {fix}" in result.output


def test_show_json_carries_the_new_findings(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["show", str(_saved_without_findings(tmp_path)), "--json"])
    assert result.exit_code == 0, result.output
    kinds = {f["kind"] for f in json.loads(result.output)["findings"]}
    assert {"registry", "intercepts", "steps", "arena_fragmentation"} <= kinds


def test_show_of_a_file_that_is_not_a_snapshot_is_exit_11(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    result = CliRunner().invoke(app, ["show", str(bad)])
    assert result.exit_code == 11, result.output


def test_show_and_diff_refuse_a_file_over_the_size_limit_unless_told(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    big.write_text(snapshot_to_json(make_snapshot(warnings=("x" * 1000,) * 1300)))  # ~1.3 MiB
    assert 1 << 20 < big.stat().st_size < 2 << 20
    for args in (["show", str(big)], ["diff", str(big), str(big)]):
        refused = CliRunner().invoke(app, [*args, "--max-size", "1"])
        assert refused.exit_code == 11, refused.output
        assert "is over 1 MiB, the size limit for a snapshot file" in refused.output
        assert "hint:" in refused.output and "--max-size" in refused.output
        assert "Traceback" not in refused.output
        allowed = CliRunner().invoke(app, [*args, "--max-size", "2"])
        assert allowed.exit_code == 0, allowed.output
