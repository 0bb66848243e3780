"""JSON renderers: one stable document per command (schemas in docs/)."""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from leakhound.model import Owner, Snapshot, snapshot_to_json


def render_snapshot(snapshot: Snapshot, *, file: TextIO | None = None) -> None:
    print(snapshot_to_json(snapshot), file=file or sys.stdout)


def render_document(doc: Any, *, file: TextIO | None = None) -> None:
    print(json.dumps(doc, indent=2), file=file or sys.stdout)


def render_line(doc: Any, *, file: TextIO | None = None) -> None:
    out = file or sys.stdout
    print(json.dumps(doc, separators=(",", ":")), file=out)
    out.flush()


def render_why(query: str, found: tuple[Owner, ...], snapshot: Snapshot, *, file: TextIO | None = None) -> None:
    """``inspect --why QUERY --json``: the matches with their retainer paths (docs/inspect.md)."""
    render_document({
        "query": query,
        "owner_model": snapshot.heap.owner_model,
        "matches": [
            {"path": o.path, "type": o.type, "retained_bytes": o.retained_bytes,
             "retainers": list(o.retainers or (o.path,))}
            for o in found
        ],
    }, file=file)
