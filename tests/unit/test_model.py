from __future__ import annotations

import json

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

    from leakhound.render import table

    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("NO_COLOR", "1")
    for version, said in (("9.8.7", "leakhound 9.8.7 via gdb"), ("", "leakhound ? via gdb")):
        buf = io.StringIO()
        table.render_snapshot(make_snapshot(leakhound_version=version), file=buf)
        assert said in buf.getvalue().splitlines()[0]
