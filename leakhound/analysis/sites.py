"""Allocation sites per owner: the tracker's surviving samples (``--sites``) attributed to the
dominator owners of the same object graph.

Each sample names the graph node its block became part of (the target's walk noted it: the
object itself, an object folded into a collection, or a container's buffer such as a list's
items). The sample belongs to the owner that dominates that node: its nearest owner up the
dominator tree. A sample in no node (the walk never met its block: freed C memory of an
extension, a frame's stack, a string interned away) or under no owner is counted as not
attributed, never guessed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from leakhound.analysis.dominators import DominatorTree, ObjectGraph
from leakhound.model.snapshot import AllocationSite, SiteFrame, SiteTracking

# Sites kept per owner (and of the not-attributed bytes), the biggest by bytes.
TOP_SITES = 10


@dataclass(frozen=True)
class SitesFound:
    """The tracker's answer as the payload sends it (wire.SitesFound), decoded."""

    # (node address, stack index, estimated bytes, estimated count, samples)
    samples: tuple[tuple[int, int, int, int, int], ...]
    stacks: tuple[tuple[SiteFrame, ...], ...]
    mean_bytes: int
    sampled: int
    allocated_bytes: int
    table_bytes: int
    dropped: int
    expired: bool
    seconds: float = 0.0
    notes: tuple[str, ...] = field(default_factory=tuple)


def owner_of_nodes(tree: DominatorTree, owner_nodes: Mapping[int, str], nodes: Sequence[int]) -> dict[int, str]:
    """node index -> the path of the nearest owner dominating it (itself included); nodes
    under no owner are left out."""
    known: dict[int, str | None] = {}
    idom = tree.idom
    for start in nodes:
        chain = []
        at = start
        found: str | None = None
        while at >= 0:
            if at in known:
                found = known[at]
                break
            if at in owner_nodes:
                found = owner_nodes[at]
                break
            chain.append(at)
            at = int(idom[at])
        for n in chain:
            known[n] = found
        known[start] = found
    return {n: path for n in nodes if (path := known.get(n)) is not None}


def _top(rows: dict[int, list[int]], stacks: tuple[tuple[SiteFrame, ...], ...]) -> tuple[AllocationSite, ...]:
    ordered = sorted(rows.items(), key=lambda item: -item[1][0])[:TOP_SITES]
    return tuple(AllocationSite(stack=stacks[s], bytes=b, count=c, samples=n) for s, (b, c, n) in ordered)


def attribute_sites(
    found: SitesFound, graph: ObjectGraph | None, tree: DominatorTree | None, owner_nodes: Mapping[int, str],
) -> tuple[dict[str, tuple[AllocationSite, ...]], SiteTracking]:
    """Per owner path, its sites (biggest first), and the tracker's totals. ``owner_nodes``:
    node index -> owner path, for the owners the snapshot names; without a graph (its walk
    skipped) every sample is not attributed."""
    wanted = {row[0] for row in found.samples if row[0]}
    index: dict[int, int] = {}
    if graph is not None and tree is not None and wanted:
        for i, address in enumerate(graph.ids):
            if address in wanted:
                index[int(address)] = i
    owner_by_node = owner_of_nodes(tree, owner_nodes, list(index.values())) if tree is not None else {}
    per_owner: dict[str, dict[int, list[int]]] = {}
    loose: dict[int, list[int]] = {}
    attributed = not_attributed = 0
    for address, stack, nbytes, count, samples in found.samples:
        node = index.get(address)
        path = owner_by_node.get(node) if node is not None else None
        if path is None:
            rows = loose
            not_attributed += nbytes
        else:
            rows = per_owner.setdefault(path, {})
            attributed += nbytes
        row = rows.setdefault(stack, [0, 0, 0])
        row[0] += nbytes
        row[1] += count
        row[2] += samples
    notes = list(found.notes)
    if found.expired:
        notes.append("the tracker's own deadline passed before the last census read it: no samples")
    if found.dropped:
        notes.append(f"{found.dropped:,} samples not kept (the tracker's table was full)")
    tracking = SiteTracking(
        mean_bytes=found.mean_bytes, seconds=round(found.seconds, 3), sampled=found.sampled,
        allocated_bytes=found.allocated_bytes, surviving=sum(r[4] for r in found.samples),
        attributed_bytes=attributed, not_attributed_bytes=not_attributed, table_bytes=found.table_bytes,
        dropped=found.dropped, expired=found.expired, not_attributed=_top(loose, found.stacks),
        note="; ".join(notes),
    )
    return {path: _top(rows, found.stacks) for path, rows in per_owner.items()}, tracking
