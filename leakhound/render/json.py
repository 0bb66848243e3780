"""JSON renderers: one stable document per command (schemas in docs/)."""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from leakhound.model import Snapshot, snapshot_to_json


def render_snapshot(snapshot: Snapshot, *, file: TextIO | None = None) -> None:
    print(snapshot_to_json(snapshot), file=file or sys.stdout)


def render_document(doc: Any, *, file: TextIO | None = None) -> None:
    print(json.dumps(doc, indent=2), file=file or sys.stdout)


def render_line(doc: Any, *, file: TextIO | None = None) -> None:
    out = file or sys.stdout
    print(json.dumps(doc, separators=(",", ":")), file=out)
    out.flush()
