"""Owners' names: a path from a root rendered as ``__main__.APP.rows`` or
``task:Task-1/run.self.env.harness.runtime.trajectories``.
"""

from __future__ import annotations

from dataclasses import dataclass

from leakhound.analysis.dominators.graph import CONTAINER_TYPE_NAMES, ObjectGraph
from leakhound.analysis.dominators.passes import Paths

_CONTAINERS = CONTAINER_TYPE_NAMES
_TRANSPARENT_TYPES = frozenset({"coroutine", "generator", "async_generator", "frame"})


def path_edges(graph: ObjectGraph, paths: Paths, node: int) -> list[int]:
    """The edges from a root to ``node``, root first."""
    out: list[int] = []
    seen = set()
    while node >= 0 and paths.via[node] >= 0 and node not in seen:
        seen.add(node)
        e = paths.via[node]
        out.append(e)
        node = graph.src[e]
    out.reverse()
    return out


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def path_ids(graph: ObjectGraph, paths: Paths, node: int) -> list[int]:
    """The target's ids along the path to ``node``, its root first: what ``names`` walks."""
    edges = path_edges(graph, paths, node)
    if not edges:
        return [graph.ids[node]]
    return [graph.ids[graph.src[edges[0]]], *(graph.ids[graph.dst[e]] for e in edges)]


def render_path(graph: ObjectGraph, paths: Paths, node: int, names: list[str] | None = None) -> str:
    """``node``'s preferred path rendered as ``render_edges`` does, from the root it starts at."""
    r = paths.root_of[node]
    if r < 0:
        return f"<unreached: {graph.type_of(node)}>"
    edges = path_edges(graph, paths, node)
    start = graph.src[edges[0]] if edges else node
    if start != graph.roots[r][0]:
        r = paths.root_of[start]
    return render_edges(graph, RetainerPath(r, tuple(edges)), names)


def _step(label: str) -> str:
    """One named step (an attribute, a dict's key, a frame's local by type) as a path shows it."""
    if label.startswith("a"):
        return "." + label[1:]
    if label.startswith("k"):
        return f"[{label[1:]!r}]"
    if label.startswith("t"):
        return ".<" + label[1:] + ">"
    return ""


@dataclass(frozen=True)
class RetainerPath:
    """A path from a root: the root (an index in ``graph.roots``) and the edges from it."""

    root: int
    edges: tuple[int, ...]



def render_edges(graph: ObjectGraph, path: RetainerPath, names: list[str] | None = None) -> str:
    """``__main__.APP.rows``, ``task:Task-1/run.self.env.harness.runtime.trajectories``:
    the root's name, then one step per edge (attributes, frame variables and str keys of
    attribute dicts as ``.name``, other dict keys as ``['key']``, container entries as ``[]``,
    a task's context variable as ``.<contextvar name>``, a coroutine's or frame's local the
    target did not name as ``.<Type>``; a closure's cell is passed through). ``names``: labels
    from the target's ``names`` request, which override the graph's. No line numbers: the name
    is stable across snapshots."""
    if path.root < 0:
        return "<unreached>"
    text = graph.roots[path.root][1]
    group = graph.is_held_group(path.root)
    attribute_dict = False
    for step, e in enumerate(path.edges):
        if step == 0 and group:
            # from a group of the objects of one type held from C: each is named as the group
            continue
        if names is not None and step < len(names) and names[step]:
            label = names[step]
        else:
            label = graph.labels[graph.lab[e]] if graph.lab[e] >= 0 else ""
        src_type = graph.type_of(graph.src[e])
        dst_type = graph.type_of(graph.dst[e])
        entered_attribute_dict = False
        if label.startswith("f"):
            # from an entry folded into its collection (one it alone held): the entry, then
            # what the entry names
            text += "[]" + _step(label[1:])
            attribute_dict = False
            continue
        if label == "d":
            entered_attribute_dict = True
        elif label.startswith("a"):
            text += "." + label[1:]
        elif label.startswith("k"):
            key = label[1:]
            text += "." + key if attribute_dict and key.isidentifier() else f"[{key!r}]"
        elif label.startswith("t"):
            text += ".<" + label[1:] + ">"
        elif label.startswith("c"):
            text += ".<contextvar " + label[1:] + ">"
        elif _short(dst_type) in _TRANSPARENT_TYPES or src_type == "cell":
            pass
        elif src_type in _CONTAINERS:
            text += "[]"
        else:
            text += ".<" + _short(dst_type) + ">"
        attribute_dict = entered_attribute_dict
    return text
