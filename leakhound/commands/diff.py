"""``leakhound diff``: what grew between two saved snapshots."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from leakhound.analysis.diff import SnapshotDiff, diff_snapshots, diff_to_dict
from leakhound.commands.options import JsonOpt, TopOpt
from leakhound.errors import SnapshotFileError
from leakhound.model import SchemaError, Snapshot, snapshot_from_json
from leakhound.render import json_doc as json_render


def load_snapshot(path: Path) -> Snapshot:
    try:
        text = path.read_text()
    except OSError as exc:
        raise SnapshotFileError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise SnapshotFileError(f"{path} is not a leakhound snapshot: not text") from None
    try:
        return snapshot_from_json(text)
    except SchemaError as exc:
        raise SnapshotFileError(f"{path} is not a leakhound snapshot: {exc}") from None


def run(*, before: Path, after: Path, top: int, as_json: bool) -> SnapshotDiff:
    diff = diff_snapshots(load_snapshot(before), load_snapshot(after))
    if as_json:
        json_render.render_document(diff_to_dict(diff))
    else:
        from leakhound.render.watch import render_diff

        render_diff(diff, top=top)
    return diff


def command(
    before: Annotated[Path, typer.Argument(metavar="BEFORE", help="The earlier snapshot (inspect --save or --json).")],
    after: Annotated[Path, typer.Argument(metavar="AFTER", help="The later snapshot.")],
    top: TopOpt = 15,
    as_json: JsonOpt = False,
) -> None:
    """What grew between two saved snapshots, and by how much, per owner and per type."""
    run(before=before, after=after, top=top, as_json=as_json)
