from __future__ import annotations

import json
from pathlib import Path

import pytest

from leakhound.model import (
    Finding,
    SchemaError,
    snapshot_from_json,
    snapshot_to_json,
)
from tests.factories import make_snapshot


def test_round_trip_is_lossless() -> None:
    snap = make_snapshot(findings=(Finding("cyclic_garbage", "info", 10, 2, "<x>", "", "s", {"a": 1}),))
    assert snapshot_from_json(snapshot_to_json(snap)) == snap


def test_schema_comes_first_in_the_document() -> None:
    assert next(iter(json.loads(snapshot_to_json(make_snapshot())))) == "schema"


@pytest.mark.parametrize(
    "text, message",
    [
        ("{not json", "not JSON"),
        ("[]", "not a JSON object"),
        ('{"schema": "leakhound.snapshot/999"}', "expected 'leakhound.snapshot/2'"),
        ('{"schema": "leakhound.snapshot/1", "pid": 1}', "malformed snapshot"),
    ],
)
def test_bad_documents_raise_schema_error(text: str, message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        snapshot_from_json(text)


def test_the_snapshot_records_which_leakhound_took_it() -> None:
    import leakhound

    snap = make_snapshot(leakhound_version=leakhound.__version__)
    doc = json.loads(snapshot_to_json(snap))
    assert doc["leakhound_version"] == leakhound.__version__
    # A file written before the version was recorded still loads, and says it does not know.
    del doc["leakhound_version"]
    assert snapshot_from_json(json.dumps(doc)).leakhound_version == ""


def test_the_table_header_names_leakhound_and_its_version(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from leakhound.analysis.ledger import ledger
    from leakhound.render import table

    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("NO_COLOR", "1")
    for version, said in (("9.8.7", "leakhound 9.8.7 via gdb"), ("", "leakhound ? via gdb")):
        buf = io.StringIO()
        snap = make_snapshot(leakhound_version=version)
        table.render_snapshot(snap, ledger(snap), file=buf)
        assert said in buf.getvalue().splitlines()[0]


def test_a_file_with_the_old_finding_kinds_reads_as_the_fix_names_and_diffs(tmp_path: Path) -> None:
    """Detectors were renamed after the fix each recommends (step_bloat -> steps); older files
    still load, with today's names, and diff against a new one."""
    from typer.testing import CliRunner

    from leakhound.analysis.detectors import run_detectors
    from leakhound.cli import app
    from leakhound.model.names import FIX_NAMES
    from tests.unit.test_verifiers_detectors import OWNERS, _probe

    new = make_snapshot(probes={"verifiers": _probe()}, owners=OWNERS)
    new = new.with_findings(run_detectors(new))
    kinds = {f.kind for f in new.findings}
    assert {"registry", "intercepts", "steps"} <= kinds <= {*FIX_NAMES, "arena_fragmentation", "cyclic_garbage"}
    doc = json.loads(snapshot_to_json(new))
    renamed = {"registry": "trajectory_registry", "intercepts": "intercept_bodies", "steps": "step_bloat"}
    for finding in doc["findings"]:
        finding["kind"] = renamed.get(finding["kind"], finding["kind"])
    del doc["leakhound_version"]
    old = snapshot_from_json(json.dumps(doc))
    assert [f.kind for f in old.findings] == [f.kind for f in new.findings]
    (tmp_path / "old.json").write_text(json.dumps(doc))
    (tmp_path / "new.json").write_text(snapshot_to_json(new))
    result = CliRunner().invoke(app, ["diff", str(tmp_path / "old.json"), str(tmp_path / "new.json")],
                                env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
