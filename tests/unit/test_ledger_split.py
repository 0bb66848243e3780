"""The ledger's 'other' row split (issue 11): native buffers, thread stacks, mapped files."""

from __future__ import annotations

from dataclasses import replace

from leakhound.analysis.ledger import ledger
from tests.factories import MB, make_snapshot


def test_native_buffers_stacks_and_mapped_files_have_their_own_rows() -> None:
    snap = make_snapshot()
    snap = replace(snap, heap=replace(snap.heap, native_bytes=40 * MB),
                   process=replace(snap.process, stack_bytes=2 * MB, file_mapped_bytes=30 * MB))
    rows = {row.name: row.bytes for row in ledger(snap)}
    assert rows["live Python objects"] == 60 * MB  # the census's 100 MB less its native buffers
    assert rows["native buffers"] == 40 * MB
    assert rows["thread stacks"] == 2 * MB
    assert rows["mapped files"] == 30 * MB
    assert sum(v for k, v in rows.items() if not k.startswith("  ")) == 300 * MB
    assert rows["other"] == 300 * MB - 100 * MB - 5 * MB - 150 * MB - 32 * MB


def test_an_older_snapshot_keeps_its_rows() -> None:
    names = [row.name for row in ledger(make_snapshot())]
    assert names == ["live Python objects", "pymalloc free", "glibc free", "  of which trimmable", "other"]
