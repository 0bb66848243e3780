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
