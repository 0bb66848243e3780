"""Frozen dataclasses every command computes from; see ``snapshot.py``."""

from leakhound.model.snapshot import (
    SNAPSHOT_SCHEMA,
    ArenaStats,
    CyclicGarbage,
    Finding,
    HeapStats,
    Owner,
    PatchOutcome,
    ProcessStats,
    RequestCost,
    SchemaError,
    Snapshot,
    TypeStat,
    snapshot_from_dict,
    snapshot_from_json,
    snapshot_to_dict,
    snapshot_to_json,
)

__all__ = [
    "SNAPSHOT_SCHEMA",
    "ArenaStats",
    "CyclicGarbage",
    "Finding",
    "HeapStats",
    "Owner",
    "PatchOutcome",
    "ProcessStats",
    "RequestCost",
    "SchemaError",
    "Snapshot",
    "TypeStat",
    "snapshot_from_dict",
    "snapshot_from_json",
    "snapshot_to_dict",
    "snapshot_to_json",
]
