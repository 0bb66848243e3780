"""``leakhound diff``: what grew between two saved snapshots."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from leakhound.analysis.diff import SnapshotDiff, diff_snapshots, diff_to_dict
from leakhound.commands.options import JsonOpt, MaxSizeOpt, TopOpt
from leakhound.errors import SnapshotFileError
from leakhound.model import SchemaError, Snapshot, snapshot_from_dict
from leakhound.model.snapshot import json_document
from leakhound.render import json_doc as json_render

#: Files over this are refused unless ``--max-size`` says more: reading a snapshot takes about
#: 3.6 times its size in memory (a 258 MiB file: 0.95 GB peak, ~7 s; docs/inspect.md).
MAX_SNAPSHOT_MIB = 256


@contextlib.contextmanager
def without_collector() -> Iterator[None]:
    """A snapshot decodes to trees of containers, no cycles: while millions are made the
    cyclic collector would scan them again and again for nothing (a third of a load)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def load_snapshot(path: Path, *, max_mib: int = MAX_SNAPSHOT_MIB) -> Snapshot:
    try:
        with without_collector():
            return snapshot_from_dict(_document(path, max_mib=max_mib), owned=True)
    except SchemaError as exc:
        raise SnapshotFileError(f"{path} is not a leakhound snapshot: {exc}") from None


def _document(path: Path, *, max_mib: int) -> Any:
    """The file decoded; its text is let go on return, before the snapshot is built."""
    limit = max_mib << 20
    try:
        with path.open("rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise SnapshotFileError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise SnapshotFileError(
            f"{path} is over {max_mib} MiB, the size limit for a snapshot file",
            hint=f"Reading it takes about 3.6 times its size in memory; pass --max-size MIB "
                 f"(more than {max_mib}) to read it anyway.")
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise SnapshotFileError(f"{path} is not a leakhound snapshot: not text") from None
    del data
    return json_document(text)


def run(*, before: Path, after: Path, top: int, as_json: bool, max_mib: int = MAX_SNAPSHOT_MIB) -> SnapshotDiff:
    with without_collector():
        diff = diff_snapshots(load_snapshot(before, max_mib=max_mib), load_snapshot(after, max_mib=max_mib))
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
    max_size: MaxSizeOpt = MAX_SNAPSHOT_MIB,
) -> None:
    """What grew between two saved snapshots, and by how much, per owner and per type."""
    run(before=before, after=after, top=top, as_json=as_json, max_mib=max_size)
