"""Retained sizes and owners from the target's object graph: the dominator tree.

The target streams a compact graph (``leakhound/payload/graph.py``); everything here runs
in leakhound's own process. An object's retained size is what freeing it would return: the
sizes of the objects it dominates (every path from the super-root to them passes through
it). The super-root's children are every named root (modules, classes, tasks, thread
frames) and the objects held from C.

Owners are accumulation points, as Eclipse MAT's leak suspects: from each big dominator
subtree, descend while one child holds most of it, down to the object whose entries hold
the bytes; namespaces (modules, classes, instances, tasks, frames) split into their big
children. Each owner is named by a path from a root, preferring the app's own modules and
tasks (root tiers) and avoiding back-references (a bound method's ``__self__``, parent
links, weak-keyed registries) with a higher edge cost.

The dominator pass is ``_dominators.c`` (semi-NCA) where it is built, else the same
algorithm in pure Python (correct, slower).

The rooms: ``graph`` (the decoded graph), ``passes`` (every pass with its C and Python
twins: the dominator tree, softening, preferred paths), ``naming`` (paths rendered as
names), ``owners`` (accumulation points: ``plan_owners`` finds them and the paths the target
may name, ``name_owners`` names them with its labels; ``find_owners`` does both). Nothing
here talks to the target: the caller asks it for the names. Callers import from here.
"""

from leakhound.analysis.dominators import passes
from leakhound.analysis.dominators.graph import GRAPH_FORMAT, GraphError, ObjectGraph, Records, decode_graph
from leakhound.analysis.dominators.naming import RetainerPath, path_edges, path_ids, render_edges, render_path
from leakhound.analysis.dominators.owners import (
    DESCEND_SHARE,
    DominatorOwner,
    DominatorOwners,
    OwnerFinder,
    OwnerPlan,
    find_owners,
    name_owners,
    plan_owners,
    why_nodes,
    why_of_type,
)
from leakhound.analysis.dominators.passes import (
    BACK_REFERENCE_COST,
    TASK_RANK_COST,
    DominatorTree,
    Paths,
    _dominators_python,
    _preferred_paths_python,
    children_of,
    dominators,
    preferred_paths,
    soften,
    subtree_counts,
)

# the compiled passes, None where they are not built (tests switch them off in ``passes``)
_dominators = passes._dominators  # type: ignore[attr-defined]

__all__ = [
    "BACK_REFERENCE_COST", "DESCEND_SHARE", "GRAPH_FORMAT", "TASK_RANK_COST", "DominatorOwner", "DominatorOwners",
    "DominatorTree", "GraphError", "ObjectGraph", "OwnerFinder", "OwnerPlan", "Paths", "Records", "RetainerPath",
    "_dominators", "_dominators_python", "_preferred_paths_python", "children_of", "decode_graph", "dominators",
    "find_owners", "name_owners", "passes", "path_edges", "path_ids", "plan_owners", "preferred_paths",
    "render_edges", "render_path", "soften", "subtree_counts", "why_nodes", "why_of_type",
]
