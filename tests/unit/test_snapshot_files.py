"""Snapshot files from anywhere: whatever a file holds, loading it either gives a snapshot every
analysis and renderer can use, or a SchemaError (``diff``: exit 11, one line), never a traceback.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from leakhound.analysis.diff import diff_snapshots, diff_to_dict
from leakhound.cli import app
from leakhound.model import SchemaError, snapshot_from_json, snapshot_to_dict, snapshot_to_json
from leakhound.render.watch import render_diff
from tests.factories import make_snapshot

GOOD = snapshot_to_dict(make_snapshot())

# Any JSON value: the leaves json.loads can produce, nested a few levels.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a document where a value sits."""
    out = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            out.extend(_paths(value, (*prefix, key)))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            out.extend(_paths(value, (*prefix, i)))
    return out


PATHS = _paths(GOOD)[1:]


def _replaced(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    doc = json.loads(json.dumps(doc))
    holder = doc
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = value
    return doc


def _load_and_use(text: str) -> None:
    """What ``diff`` does with a file: load, diff, render as JSON and as tables."""
    try:
        snap = snapshot_from_json(text)
    except SchemaError:
        return
    for before, after in ((make_snapshot(), snap), (snap, snap)):
        diff = diff_snapshots(before, after)
        json.dumps(diff_to_dict(diff), allow_nan=False)
        render_diff(diff, file=io.StringIO())


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(PATHS), value=json_values)
def test_any_field_replaced_by_any_json_is_a_snapshot_or_a_schema_error(path: tuple[Any, ...], value: Any) -> None:
    _load_and_use(json.dumps(_replaced(GOOD, path, value)))


@settings(max_examples=200, deadline=None)
@given(value=json_values)
def test_any_json_document_is_a_snapshot_or_a_schema_error(value: Any) -> None:
    _load_and_use(json.dumps(value))
    _load_and_use(json.dumps({**GOOD, "owners": value}))


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=200))
def test_any_text_is_a_snapshot_or_a_schema_error(text: str) -> None:
    _load_and_use(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # json.loads raises RecursionError past ~1000 levels
        ('{"schema": "leakhound.snapshot/1", "probes": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
        # and ValueError (not JSONDecodeError) on integers of more than 4300 digits
        ('{"schema": "leakhound.snapshot/1", "pid": ' + "1" * 5000 + "}", "more digits"),
        # a string where bytes belong: was a TypeError inside the diff's sort
        (json.dumps(_replaced(GOOD, ("process", "rss_bytes"), "12")), "process.rss_bytes is not an integer"),
        (json.dumps(_replaced(GOOD, ("owners", 0, "retained_bytes"), None)), "owners[0].retained_bytes"),
        # 1e400 is infinity: int() of it was an OverflowError
        (json.dumps(GOOD).replace('"pid": 4242', '"pid": 1e400'), "pid is not an integer"),
        (json.dumps(_replaced(GOOD, ("taken_at",), float("nan"))), "taken_at is not a finite number"),
        # 10**30 bytes overflowed float() in the rates
        (json.dumps(_replaced(GOOD, ("heap", "bytes"), 10**30)), "heap.bytes is not an integer"),
        (json.dumps(_replaced(GOOD, ("types",), "str")), "types is not a list"),
        (json.dumps(_replaced(GOOD, ("warnings",), [["nested"]])), "warnings[0] is not a string"),
        (json.dumps({**GOOD, "extra": 1}), "unexpected field 'extra'"),
        (json.dumps({**GOOD, "schema": ["leakhound.snapshot/1"]}), "schema is a JSON list"),
    ],
    ids=["deep", "digits", "str-bytes", "null-bytes", "inf", "nan", "huge", "types-str", "warnings", "extra",
         "schema-list"],
)
def test_bad_files_are_exit_11_with_the_reason(tmp_path: Path, text: str, message: str) -> None:
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(snapshot_to_json(make_snapshot()))
    bad.write_text(text)
    result = CliRunner().invoke(app, ["diff", str(good), str(bad)])
    assert result.exit_code == 11, result.output
    assert f"leakhound: error: {bad} is not a leakhound snapshot" in result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_names_from_a_file_are_not_markup(tmp_path: Path) -> None:
    # Owner paths are text from the target: "[/bold]" was a rich MarkupError traceback.
    good, odd = tmp_path / "good.json", tmp_path / "odd.json"
    good.write_text(snapshot_to_json(make_snapshot()))
    odd.write_text(json.dumps(_replaced(GOOD, ("owners", 0, "path"), "m.X[/bold][red]")))
    result = CliRunner().invoke(app, ["diff", str(good), str(odd)], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    assert "m.X[/bold][red]" in result.output


def test_saved_snapshots_still_load_exactly() -> None:
    snap = make_snapshot()
    assert snapshot_from_json(snapshot_to_json(snap)) == snap
    # A count written as 3.0 is still a count.
    doc = _replaced(GOOD, ("owners", 0, "items"), 48.0)
    assert snapshot_from_json(json.dumps(doc)).owners[0].items == 48
