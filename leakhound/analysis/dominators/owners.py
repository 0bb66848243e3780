"""Owners as accumulation points of the dominator tree (Eclipse MAT's leak suspects), each named
by its preferred path from a root and a few distinct retainer paths; ``--why``'s objects.
"""

from __future__ import annotations

import array
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from leakhound.analysis.dominators import passes
from leakhound.analysis.dominators.graph import ObjectGraph, ints, raw_of
from leakhound.analysis.dominators.naming import (
    _CONTAINERS,
    RetainerPath,
    _short,
    path_edges,
    render_edges,
)
from leakhound.analysis.dominators.passes import (
    DominatorTree,
    Paths,
    _csr_edges,
    dominators,
    preferred_paths,
    subtree_counts,
    tree_csr,
)
from leakhound.model.growth import normalized_path

# Where one child holds this share of its parent's retained bytes, the parent is only a way
# to it: the owner is further down (MAT's "accumulation point").
DESCEND_SHARE = 0.8
# What a link of a chain reaches the next through: an instance's attribute dict, a function's
# __defaults__ tuple or __closure__ tuple and cell
_LINK_HOPS = frozenset({"dict", "tuple", "cell"})
_LEAVES = frozenset({"str", "bytes", "bytearray", "int", "float", "complex", "array.array", "memoryview"})
# Namespaces whose own bytes are a table of names, never what the program keeps (a module's
# dict of 50k globals): not owners for those bytes (``find``).
_NAMESPACE_OBJECTS = frozenset({"dict", "module", "type", "<root>"})
# References looked at to find what a namespace's parts hold together (``_shared``): a bound
# on the work, whatever the namespace (the super-root's children on a big heap).
SHARED_WORK = 2_000_000
# Parts named in a shared owner's path; the rest are counted ("and 3 more").
SHARED_NAMED = 3
# A group of objects held together is an owner only where its bytes are spread: one object of
# it holding this share or more, its big objects are looked at one by one.
SHARED_SPREAD = 0.1
# A part's anchor is the one referrer under it holding this share of what the part holds of
# its group by bytes, where there is one (``_majority_anchors``), looked for among the first
# ANCHOR_SAMPLE of the group's objects (biggest first) of the namespace's first ANCHOR_SCAN
# children.
ANCHOR_MAJORITY = 0.9
ANCHOR_SAMPLE = 1024
ANCHOR_SCAN = 200_000
# How many times over a part that is itself held together stands for its own parts (the C
# pass is given it).
SHARED_RESOLVE_DEPTH = 4
# An object more parts than this hold together (a base class its subclasses in fifty modules
# hold, a function imported everywhere) is the program's fabric, no owner's: left out (the C
# pass is given it; the work per object, sets kept unsorted, grows with the square of its parts).
SHARED_MAX_PARTS = 16
# Of a kid's parts, those that are kids held together themselves (a document's elements, each
# holding it as its owner document) count against no bound of parts: they stand for their own
# parts; this many are looked at (a chain joins through each link's neighbours anyway).
SHARED_MAX_KIN = 64
# A kid with that many such parts and more referrers than this (a document of 100,000 elements
# each naming it its owner) is left out, as one held by too many parts: the work is bounded.
SHARED_MAX_REFERRERS = 4096
# Root kinds whose roots are many alike (tasks running one coroutine, threads running one
# function, modules named alike but for numbers): one owner together (``_alike_roots``).
ALIKE_ROOT_KINDS = ("task", "thread", "module")
_NUMBERS = re.compile(r"\d+")


@dataclass
class SharedGroup:
    """Objects a namespace's parts hold together (``BY_ID`` and ``BY_NAME`` both hold every
    session): dominated by the namespace, by none of the parts. No object of the target: an
    owner of its own, named by the parts (``<shared by m.BY_ID, m.BY_NAME>``), whose bytes are
    what freeing all those parts returns."""

    parts: tuple[int, ...]  # the namespace's children that reach them, biggest first
    # part -> what under it holds them all (the dominator tree's nearest common ancestor of
    # their referrers there: the part itself, or the registry inside it): what names them
    anchors: dict[int, int]
    items: int  # the objects held together (each with what it dominates)
    retained: int
    objects: int  # dominated objects, over all of them
    type: str  # the type of those holding most of the bytes
    first: int  # the biggest of them
    # roots alike (``_alike_roots``): named so, no parts to name it by
    name: str = ""


@dataclass(frozen=True)
class DominatorOwner:
    node: int
    path: str
    type: str
    retained_bytes: int
    retained_objects: int
    items: int
    retainers: tuple[str, ...] = ()
    # the target's ids along the preferred path, the root's first (what ``sample`` re-walks)
    path_ids: tuple[int, ...] = ()
    # the label of each step after the root (``OwnerFinder.steps_of``): what a sample follows
    # where an id no longer leads on
    path_steps: tuple[str, ...] = ()
    # a shared owner's: the ids along the path of its part that counts it, and its type
    # (``OwnerFinder.counter``)
    count_ids: tuple[int, ...] = ()
    count_type: str = ""
    # the head of a chain of links (``OwnerFinder._chain``: a linked list, hooks each wrapping
    # the last): its items its links, which a sample counts by going from link to link
    chain: bool = False
    # its id in the target of the link after its last, which others hold too (0: none)
    chain_end: int = 0



class OwnerFinder:
    """Accumulation points of the dominator tree and their paths from the roots."""

    def __init__(self, graph: ObjectGraph, tree: DominatorTree) -> None:
        self.graph = graph
        self.tree = tree
        self.offsets, self.kids, counts = tree_csr(graph, tree)
        self._paths: Paths | None = None
        self.root_kind = {node: kind for node, _label, kind, _tier in graph.roots}
        self.held_groups = graph.held_groups()
        self.stand_ins = graph.stand_ins()
        self._counts: Sequence[int] | None = counts
        self._pred: tuple[Sequence[int], Sequence[int]] | None = None
        self._out: Sequence[int] | None = None
        self._out_ids: Sequence[int] | None = None
        # a linked list's head (see ``_chain``) -> its links: its items
        self.links: dict[int, int] = {}
        # a linked list's head -> the link after its last, which others hold too (-1: none)
        self.chain_end: dict[int, int] = {}
        # owners no single object is (``_shared``): by a number below -1 in place of a node
        self.shared: dict[int, SharedGroup] = {}
        self.less: dict[int, int] = {}  # a namespace -> the bytes of the shared owners listed from it
        self.shared_work = SHARED_WORK  # left for ``_shared``, over every namespace
        self._shared_state: Any = None  # the C pass's memo, kept from one namespace to the next

    @property
    def paths(self) -> Paths:
        """Every node's preferred path (``settle`` first computes only the ones wanted)."""
        if self._paths is None:
            self._paths = preferred_paths(self.graph)
        return self._paths

    def settle(self, targets: Iterable[int]) -> None:
        """Compute the preferred paths of ``targets`` only (and what lies on them)."""
        self._paths = preferred_paths(self.graph, targets=targets)

    def referrers(self, v: int) -> list[int]:
        offsets, edge_ids = self._preds()
        return [self.graph.src[edge_ids[k]] for k in range(offsets[v], offsets[v + 1])]

    def children(self, v: int) -> Sequence[int]:
        return self.kids[self.offsets[v]:self.offsets[v + 1]]

    def _namespace(self, v: int) -> bool:
        """Nodes whose children are distinct named parts (modules, classes, instances, tasks,
        frames, attribute dicts), not the entries of one collection."""
        if v == 0:
            return True
        if v in self.root_kind:
            if self.root_kind[v] != "held":
                return True
            # a group of the objects of one type held from C is a collection of alike
            # objects, each no part with a name; so is a collection C holds (weakref.finalize's
            # registry: its infos, at the registry's size and type). 400 finalizers
            # of 100 KB on 3.12 were 400 owners, each just over the listing threshold, the
            # registry none.
            return v not in self.held_groups and not self.graph.is_container(v)
        name = self.graph.type_of(v)
        if name == "dict":
            # A module's or class's dict, or an instance's attribute dict (the instance's only
            # reference: 3.11+ keep attributes inline, and then a dict under an instance is an
            # attribute's value, a collection).
            p = self.tree.idom[v]
            if p > 0 and p in self.root_kind:
                return True
            if p <= 0 or self.graph.is_container(p):
                return False
            if self.graph.info.get("dict_labels"):
                # 3.11+: the walk labelled the instance's own __dict__ "d" (an instance whose
                # other attributes are all leaves has one edge, to an attribute's dict too)
                return self._labelled(p, v, "d")
            return self._out_degree(p) == 1
        return not self.graph.is_container(v) and name not in _LEAVES

    def _holds_more(self, v: int, c: int, threshold: int) -> bool:
        """Whether collection ``v`` holds at least ``threshold`` more than its biggest entry
        ``c``: it is the owner of both (a DataFrame's blocks after a concat, 82% floats and
        18% strs, were two owners, the frame none)."""
        if v == 0 or v in self.root_kind or not self.graph.is_container(v) or self._namespace(v):
            return False
        return int(self.tree.retained[v]) - int(self.tree.retained[c]) >= threshold

    def _unnamed_entries(self, v: int, big: list[int]) -> bool:
        """Whether ``big`` (two or more children of ``v`` in the tree) are the entries of a C
        container: all of one type, each held by an edge from ``v`` no name labels (its
        tp_traverse's, not an attribute's). Python 3.13's ``queue.SimpleQueue`` holds its items
        in a ring buffer of its own (3.12's in a list): 400 work items of a
        ``ThreadPoolExecutor``'s queue were 400 owners of 100 KB, the queue none."""
        if len(big) < 2 or v in self.root_kind:
            return False
        g = self.graph
        if any(g.types[c] != g.types[big[0]] for c in big):
            return False
        unnamed = self._unlabelled(v)
        return all(c in unnamed for c in big)

    def _unlabelled(self, v: int) -> set[int]:
        """What ``v`` holds by edges no name labels (its tp_traverse's, not an attribute's)."""
        out, out_ids = self._out_edges()
        g = self.graph
        return {g.dst[e] for e in (out_ids[k] for k in range(out[v], out[v + 1])) if g.lab[e] < 0}

    def _entries_bytes(self, v: int, big: list[int], threshold: int) -> int:
        """What ``v``'s children below ``threshold`` that it holds by edges no name labels
        retain (0 when all its small children together do not reach it)."""
        retained = self.tree.retained
        if int(retained[v]) - sum(int(retained[c]) for c in big) < threshold:
            return 0
        unnamed = self._unlabelled(v)
        taken = set(big)
        return sum(int(retained[c]) for c in self.children(v) if c in unnamed and c not in taken)

    def _out_edges(self) -> tuple[Sequence[int], Sequence[int]]:
        """The graph's edges by source (offsets, edge ids), made on first use."""
        if self._out is None or self._out_ids is None:
            self._out, self._out_ids = _csr_edges(self.graph.nodes, self.graph.src)
        return self._out, self._out_ids

    def _labelled(self, p: int, v: int, text: str) -> bool:
        """Whether an edge from ``p`` to ``v`` carries the label ``text``."""
        out, out_ids = self._out_edges()
        g = self.graph
        for k in range(out[p], out[p + 1]):
            e = out_ids[k]
            if g.dst[e] == v and g.lab[e] >= 0 and g.labels[g.lab[e]] == text:
                return True
        return False

    def _members_type(self, v: int) -> str:
        """The type of the objects a group held from C gathers (the group itself is a list of
        the payload's: ``<held from C: dict>`` is dicts, its ``items`` how many)."""
        out, out_ids = self._out_edges()
        for k in range(out[v], out[v + 1]):
            return self.graph.type_of(self.graph.dst[out_ids[k]])
        return self.graph.type_of(v)

    def _edges_to(self, v: int, c: int, most: int) -> int:
        """How many edges go from ``v`` to ``c`` (counted up to ``most``). The descent takes
        only a child ``v`` holds once: one ``v`` holds through several of its entries (400
        views of one numpy array in a dict, each folded into the dict: the payload makes such
        an edge twice, _graph_walk.c ``seen_n``) or not at all (held by several of its parts)
        is no entry one could drop; the dict is what frees it. It was named ``CACHE[]``."""
        out, out_ids = self._out_edges()
        dst, n = self.graph.dst, 0
        for k in range(out[v], out[v + 1]):
            if dst[out_ids[k]] == c:
                n += 1
                if n >= most:
                    break
        return n

    def _out_degree(self, v: int) -> int:
        out, _out_ids = self._out_edges()
        return out[v + 1] - out[v]

    def find(self, *, top: int = 20, min_bytes: int | None = None) -> list[int]:
        """The accumulation points, biggest first: from each big subtree, descend while one
        child holds most of it; a namespace splits into its big children. What the other big
        children of a node descended through hold is looked at in its own right: a 40 MB leak
        in a 50 MB heap took the search from the super-root straight into it, and the other
        10 MB (a second cache, a module's table) was in no owner the table listed."""
        retained = self.tree.retained
        total = retained[0]
        threshold = min_bytes if min_bytes is not None else max(total // 500, 4096)
        # roots alike (tasks running one coroutine) first: whichever way the search goes from the
        # super-root (straight into a child holding most of the heap), they are one owner
        found, grouped = self._alike_roots(threshold)
        stack = [0]
        while stack:
            v = stack.pop()
            head = False
            while True:
                kids = self.children(v)
                if (kids and retained[kids[0]] >= DESCEND_SHARE * retained[v] and retained[kids[0]] >= threshold
                        and (v == 0 or self._edges_to(v, kids[0], 2) == 1)
                        and not self._holds_more(v, kids[0], threshold)):
                    links = self._chain(v, threshold)
                    if links and retained[links[-1]] < DESCEND_SHARE * retained[v]:
                        head = True  # a linked list: its head holds what its links hold
                        tail, last = self._tail_links(links[-1])
                        self.links[v] = 1 + len(links) + tail
                        self.chain_end[v] = self._link_beyond(last, self._hop_types(v, links[0]))
                        break
                    for link in (v, *links[:-1]):
                        for c in self.children(link)[1:]:  # biggest first (tree_csr)
                            if retained[c] < threshold:
                                break
                            if c not in grouped:
                                stack.append(c)
                    v = links[-1] if links else kids[0]
                    continue
                break
            if head and v != 0:
                found.append(v)
                continue
            big = []
            for c in self.children(v):  # biggest first (tree_csr): the rest are smaller still
                if retained[c] < threshold:
                    break
                big.append(c)
            namespace = v == 0 or (self._namespace(v) and not self._unnamed_entries(v, big))
            shared, taken = self._shared(v, threshold) if namespace else ([], set())
            if taken:
                big = [c for c in big if c not in taken]
            found.extend(shared)
            if v == 0:
                big = [c for c in big if c not in grouped]
            if v != 0 and (not big or not namespace):
                if shared:  # the namespace is then the rest of it (its own small parts)
                    self.less[v] = sum(self.shared[k].retained for k in shared)
                if not shared or self.retained_of(v) >= threshold:
                    found.append(v)
                continue
            if v != 0 and self.graph.type_of(v) not in _NAMESPACE_OBJECTS and (
                    self.graph.sizes[v] >= threshold or self._entries_bytes(v, big, threshold) >= threshold):
                # a namespace that holds much itself (what only it held, folded into it: a
                # bounded lru_cache's results, 180 MB, which only its C list of links holds),
                # or through small referents no name labels (a tensor's autograd graph: a loss
                # summed over 300 steps, 110 MB in 1,172 saved tensors of 128-384 KiB, one of
                # them over the threshold, the tensor none) is an owner too, of that and its
                # small parts; its big parts are their own
                self.less[v] = (sum(int(retained[c]) for c in big)
                                + sum(self.shared[k].retained for k in shared))
                found.append(v)
            stack.extend(big)
        found.sort(key=lambda v: -self.retained_of(v))
        return found[:top]

    def retained_of(self, v: int) -> int:
        """What ``v`` retains as an owner: a shared owner's members, a namespace's own bytes but
        what the shared owners listed from it hold (``less``)."""
        return self.shared[v].retained if v < -1 else int(self.tree.retained[v]) - self.less.get(v, 0)

    def _shared(self, v: int, threshold: int) -> tuple[list[int], set[int]]:
        """What ``v``'s parts hold together, as owners (``SharedGroup``): the groups holding
        ``threshold`` or more, but a big object alone in its group (looked at in its own right,
        named by its own path); and the big children of ``v`` they take. Objects two registries
        both hold are dominated by neither, only by the module both are globals of, which is
        split into its parts: 40 MB of sessions indexed twice were in no owner (or, each over
        the threshold, 450 owners of 88 KiB, none listed)."""
        kids = self.children(v)
        group_of, groups = self._shared_groups(v, kids, threshold)
        retained = self.tree.retained
        # A group where one object holds a tenth or more is few big objects (five env workers
        # two tasks share, each with its registry of trajectories): each is looked at in its
        # own right (the owner is inside), the group keeps only its small ones.
        apart: dict[int, list[int]] = {}
        for k, c in enumerate(kids):  # (biggest first: only the big ones matter here)
            if retained[c] < threshold:
                break
            g = group_of[k]
            if g in groups and retained[groups[g].first] >= SHARED_SPREAD * groups[g].retained:
                apart.setdefault(g, []).append(c)
        for g, big in apart.items():
            group = groups[g]
            group.retained -= sum(int(retained[c]) for c in big)
            group.objects -= sum(self.dominated_objects(c) for c in big)
            group.items = max(1, group.items - len(big))
        keys: dict[int, int] = {}
        for g, group in groups.items():
            if group.retained >= threshold and not (group.items == 1 and g not in apart
                                                    and retained[group.first] >= threshold
                                                    and group.retained - retained[group.first] < threshold):
                key = -2 - len(self.shared)
                self.shared[key] = group
                keys[g] = key
        taken = set()
        for k, c in enumerate(kids):
            if retained[c] < threshold:
                break
            if group_of[k] in keys and group_of[k] not in apart:
                taken.add(c)
        if keys:
            members: dict[int, list[int]] = {g: [] for g in keys}
            open_ = len(members)
            for k, c in enumerate(kids[:ANCHOR_SCAN]):
                listed = members.get(group_of[k])
                if listed is not None and len(listed) < ANCHOR_SAMPLE:
                    listed.append(c)
                    if len(listed) == ANCHOR_SAMPLE:
                        open_ -= 1
                        if not open_:
                            break
            for g, listed in members.items():
                self._majority_anchors(groups[g], listed)
        return list(keys.values()), taken

    def _majority_anchors(self, group: SharedGroup, members: list[int]) -> None:
        """Each part's anchor moved down to the one collection under it that holds most of
        ``members`` (some of the group's, biggest first) by their bytes (ANCHOR_MAJORITY), where
        there is one: the anchor is the nearest common dominator of every referrer under the
        part, and one member held elsewhere in it took the name up to the whole module (400
        ``threading.Timer`` in a list, and the main thread in ``threading._active`` beside
        them, were ``<shared by __main__, threading>``)."""
        if not members:
            return
        retained, inside = self.tree.retained, set(members)
        for q in group.parts:
            a = group.anchors.get(q, q)
            weight: dict[int, int] = {}
            total = 0
            for m in members:
                w = int(retained[m])
                for r in set(self.referrers(m)):
                    if r not in inside and self._dominates(a, r):
                        weight[r] = weight.get(r, 0) + w
                        total += w
            if weight:
                best = max(weight, key=weight.__getitem__)
                # (a collection: the registry inside the part; a running frame under its task
                # names nothing more than the task)
                if best != a and weight[best] >= ANCHOR_MAJORITY * total and self.graph.is_container(best):
                    group.anchors[q] = best

    def _alike_roots(self, threshold: int) -> tuple[list[int], set[int]]:
        """Tasks running the same coroutine (the frames of threads named alike, named by the
        function whose frames hold the most: ``thread:Thread-* (serve)/serve``) as one
        owner where together they retain ``threshold`` or more: ``task:Task-*/waiter``, its
        items the roots; and the big roots it takes. 2,000 tasks stuck awaiting a future that
        never resolves, 20 KB each, were 40 MB in no owner listed (each was its own root:
        freeing one returns its 20 KB, freeing them all the sum, their dominator subtrees being
        apart). As for objects held together (``SHARED_SPREAD``), where one root holds a tenth
        of it or more the big ones are looked at in their own right (the task whose registry
        is the leak), the group keeps the small ones. Modules made per plugin or request
        (``plugin_17`` in sys.modules) are alike by their names with the numbers left out:
        ``plugin_*``."""
        retained = self.tree.retained
        labels = {node: (kind, label) for node, label, kind, _tier in self.graph.roots if kind in ALIKE_ROOT_KINDS}
        alike: dict[tuple[str, str], list[int]] = {}
        for c in self.children(0):  # (biggest first)
            if c not in labels:
                continue
            kind, label = labels[c]
            if kind == "module":
                if _NUMBERS.search(label):
                    alike.setdefault((kind, _NUMBERS.sub("*", label)), []).append(c)
            elif kind == "thread":  # every frame of the threads named alike
                alike.setdefault((kind, normalized_path(label.rpartition("/")[0])), []).append(c)
            else:
                alike.setdefault((kind, label.partition(":")[2].rpartition("/")[2]), []).append(c)
        keys: list[int] = []
        taken: set[int] = set()
        for (kind, code), members in alike.items():
            total = sum(int(retained[c]) for c in members)
            if retained[members[0]] >= SHARED_SPREAD * total:
                members = [c for c in members if retained[c] < threshold]
                total = sum(int(retained[c]) for c in members)
            if len(members) < 2 or total < threshold:
                continue
            taken.update(members)
            if kind == "module":
                name = code
            elif kind == "thread":  # named by the function whose frames hold the most
                by_function: dict[str, int] = {}
                for c in members:
                    function = labels[c][1].rpartition("/")[2]
                    by_function[function] = by_function.get(function, 0) + int(retained[c])
                name = f"{code}/{max(by_function, key=lambda f: (by_function[f], f))}"
            else:
                names = {normalized_path(labels[c][1]) for c in members}
                name = names.pop() if len(names) == 1 else f"{kind}:*/{code}"
            # (its items: the tasks or modules; the threads, by name, not their frames)
            items = len({labels[c][1].rpartition("/")[0] for c in members}) if kind == "thread" else len(members)
            key = -2 - len(self.shared)
            self.shared[key] = SharedGroup(
                parts=(), anchors={}, items=items, retained=total,
                objects=sum(self.dominated_objects(c) for c in members), type=self.graph.type_of(members[0]),
                first=members[0], name=name)
            keys.append(key)
        return keys, taken

    def _shared_groups(self, v: int, kids: Sequence[int], threshold: int,
                       ) -> tuple[Sequence[int], dict[int, SharedGroup]]:
        """Each of ``kids`` (``v``'s children)'s group (-1: none) and the groups holding
        ``threshold`` or more by number (the others are of no use, and at the super-root of
        a big program tens of thousands: a function two modules import is one): a
        kid ``v`` does not refer to itself is held by the parts of ``v`` its referrers lie under
        (``v``'s children on their dominator paths), a part itself so held standing for its own
        parts (a session's name, held by the session and the index of names); kids held by the
        same parts are one group. In C where it is built (one pass); else here, within
        ``shared_work`` references."""
        graph, tree = self.graph, self.tree
        offsets, edge_ids = self._preds()
        compiled = passes.compiled()
        if compiled is not None:
            counts = self._counts if self._counts is not None else subtree_counts(graph, tree, self.children)
            self._counts = counts
            if self._shared_state is None:  # (the columns checked once, not at each namespace)
                self._shared_state = compiled.shared_state(
                    graph.nodes, graph.edges, raw_of(tree.idom), raw_of(graph.src), raw_of(offsets),
                    raw_of(edge_ids), array.array("i", self.root_kind).tobytes(), raw_of(tree.retained),
                    raw_of(counts), raw_of(graph.types), SHARED_MAX_PARTS, SHARED_RESOLVE_DEPTH,
                    SHARED_MAX_KIN, SHARED_MAX_REFERRERS)
            found = compiled.shared(self._shared_state, v, raw_of(array.array("i", kids)))
            gid, goff, gp, ga = (ints(found[k], "i") for k in range(4))
            items, size, objects = (ints(found[k], "q") for k in range(4, 7))
            gtype, first = ints(found[7], "i"), ints(found[8], "i")
            groups = {}
            for g in range(len(items)):
                if size[g] < threshold:
                    continue
                parts = tuple(gp[goff[g]:goff[g + 1]])
                groups[g] = SharedGroup(
                    parts=tuple(sorted(parts, key=lambda q: -tree.retained[q])),
                    anchors=dict(zip(parts, ga[goff[g]:goff[g + 1]], strict=True)), items=items[g],
                    retained=size[g], objects=objects[g], type=graph.type_names[gtype[g]], first=first[g])
            return gid, groups
        group_of, every = self._shared_groups_python(v, kids, offsets, edge_ids)
        return group_of, {g: group for g, group in every.items() if group.retained >= threshold}

    def _shared_groups_python(self, v: int, kids: Sequence[int], offsets: Sequence[int], edge_ids: Sequence[int],
                              ) -> tuple[Sequence[int], dict[int, SharedGroup]]:
        """``_shared_groups`` without the C pass: the same, in at most ``shared_work`` steps."""
        graph, retained, idom, src = self.graph, self.tree.retained, self.tree.idom, self.graph.src
        depth_of: dict[int, int] = {v: 0}
        part_of: dict[int, int] = {}  # a referrer -> v's child it lies under (-1: none)

        def depth(x: int) -> int:
            climbed = []
            while x not in depth_of:
                climbed.append(x)
                x = idom[x]
            d = depth_of[x]
            for y in reversed(climbed):
                d += 1
                depth_of[y] = d
            return d

        def common(a: int, b: int) -> int:
            """The nearest common dominator of ``a`` and ``b`` (both under ``v``)."""
            if a == b:
                return a
            da, db = depth(a), depth(b)
            while da > db:
                a, da = idom[a], da - 1
            while db > da:
                b, db = idom[b], db - 1
            while a != b:
                a, b = idom[a], idom[b]
            return a

        def part(p: int) -> int:
            climbed = []
            while p >= 0 and p != v and p not in part_of and idom[p] != v:
                climbed.append(p)
                p = idom[p]
            found = -1 if p < 0 or p == v else part_of.get(p, p)
            for q in (*climbed, p):
                if q >= 0:
                    part_of[q] = found
            return found

        rows: dict[int, dict[int, int]] = {}  # kid -> its parts -> the common dominator of its referrers there
        out, out_ids = self._out_edges()
        own = {graph.dst[out_ids[k]] for k in range(out[v], out[v + 1])}  # v's parts: what it holds itself
        for c in kids:
            if self.shared_work <= 0:
                break
            if c in self.root_kind or idom[c] != v:
                continue
            held: dict[int, int] = {}
            kin = 0  # parts that are kids held together themselves (SHARED_MAX_KIN at most)
            for k in range(offsets[c], offsets[c + 1]):
                p = src[edge_ids[k]]
                q = part(p) if p != v else -1  # (v itself: one of its own parts)
                if q < 0 or (kin >= SHARED_MAX_KIN and k - offsets[c] >= SHARED_MAX_REFERRERS):
                    held.clear()
                    break
                if q not in held and q != c and q not in own:
                    if kin >= SHARED_MAX_KIN:
                        continue
                    kin += 1
                held[q] = common(held[q], p) if q in held else p
            self.shared_work -= offsets[c + 1] - offsets[c] + 1
            if 2 <= len(held) and len(held) - kin <= SHARED_MAX_PARTS:
                rows[c] = held
        # kids held by one another (a chain: a DOM's siblings, a doubly linked list, held from
        # two roots) are one structure: past SHARED_RESOLVE_DEPTH their parts are those of the
        # whole chain (``_Chains``)
        chain = _Chains(len(kids))
        index_of = {c: k for k, c in enumerate(kids) if c in rows}
        for k, c in enumerate(kids):
            for q in rows.get(c, ()):
                if q in index_of and q != c:
                    chain.join(k, index_of[q])
        final: dict[int, dict[int, int]] = {}
        withins: set[int] = set()
        for k, c in enumerate(kids):
            if c not in rows:
                continue
            held = dict(rows[c])
            # held by another kid held together and by fewer than two parts besides: a part of
            # that one (a session's name), no item of its own
            if any(q in rows for q in held) and sum(q not in rows for q in held) < 2:
                withins.add(k)
            expanded = {c}  # (a part met again through a cycle is left out)
            for _level in range(SHARED_RESOLVE_DEPTH):
                if not any(q in rows for q in held):
                    break
                resolved: dict[int, int] = {}
                for q, at in held.items():
                    if q in rows:
                        if q in expanded:
                            continue
                        expanded.add(q)
                    for q2, at2 in (rows[q].items() if q in rows else ((q, at),)):
                        resolved[q2] = common(resolved[q2], at2) if q2 in resolved else at2
                held = resolved
                if sum(q not in rows for q in held) > SHARED_MAX_PARTS:
                    break
            if (any(q in rows and q not in expanded for q in held)
                    and sum(q not in rows for q in held) <= SHARED_MAX_PARTS):
                chain.unfinished(k)
            final[k] = held
        for members in chain.chained():
            held = {}
            for k in members:
                for q, at in rows[kids[k]].items():
                    if q not in rows:
                        held[q] = common(held[q], at) if q in held else at
            if 2 <= len(held) <= SHARED_MAX_PARTS:  # (else each keeps what its levels gave)
                for k in members:
                    final[k] = held
        group_of = [-1] * len(kids)
        groups: dict[int, SharedGroup] = {}
        by_parts: dict[tuple[int, ...], int] = {}
        by_type: dict[int, dict[str, int]] = {}
        every: dict[int, int] = {}
        for k, c in enumerate(kids):
            if k not in final:
                continue
            held = final[k]
            within = k in withins
            if not 2 <= len(held) <= SHARED_MAX_PARTS:
                continue
            key = tuple(sorted(held))
            g = by_parts.setdefault(key, len(by_parts))
            group = groups.get(g)
            if group is None:
                group = groups[g] = SharedGroup(parts=tuple(sorted(key, key=lambda q: -retained[q])), anchors=held,
                                                items=0, retained=0, objects=0, type="", first=c)
                by_type[g] = {}
            else:
                for q, at in held.items():
                    group.anchors[q] = common(group.anchors[q], at)
            group_of[k] = g
            if retained[c] > retained[group.first]:
                group.first = c
            group.items += 0 if within else 1
            every[g] = every.get(g, 0) + 1
            group.retained += int(retained[c])
            group.objects += self.dominated_objects(c)
            kind = graph.type_of(c)
            by_type[g][kind] = by_type[g].get(kind, 0) + int(retained[c])
        for g, group in groups.items():
            group.type = max(by_type[g].items(), key=lambda kv: kv[1])[0]
            # the objects held by one of the group (a session's name, held by the session and the
            # index of names) are no items of their own, but where they outnumber the rest they are
            # the items (20,000 metric children a program lists, also in their metric's table,
            # the metric a global and the registry's: one item, it was); all within one another
            # (a cycle): all
            group.items = max(group.items, every[g] - group.items)
        return group_of, groups

    def _next_link(self, v: int, kind: str, threshold: int) -> int:
        """The node after ``v`` in a chain of ``kind`` (each link holding the next as most of
        what it retains: a linked list's ``next``, a cons list's tail), through the link's
        attribute dict where it has one, or a function's defaults or closure (a hook wrapping
        the one it replaced: ``sys.excepthook`` re-installed by each plugin reload); -1 where
        the chain ends."""
        retained = self.tree.retained
        for _hop in range(3):
            kids = self.children(v)
            if not kids or retained[kids[0]] < DESCEND_SHARE * retained[v] or retained[kids[0]] < threshold:
                return -1
            c = kids[0]
            name = self.graph.type_of(c)
            if name == kind:
                return c
            if kind in _CONTAINERS or name not in _LINK_HOPS:
                return -1
            v = c  # an instance's __dict__ (3.10's, or one made real): its attribute is the link
        return -1

    def _chain(self, v: int, threshold: int) -> list[int]:
        """Where ``v`` heads a chain of links of its own type (see ``_next_link``): the links
        after it, else []. A chain whose last link still retains most of what its head does is
        only a way to what that link holds (a wrapper's wrapper's cache: descend past it); one
        whose bytes drop link by link is one structure, owned by its head: MAT's descent
        (one child holding most: go down) walked a 100,000-link list to the link where what
        is left fell under the threshold, and the list was in no owner listed."""
        if v == 0 or v in self.root_kind:
            return []
        kind = self.graph.type_of(v)
        if kind in _LEAVES or kind in ("module", "type"):
            return []
        links = []
        at = self._next_link(v, kind, threshold)
        while at >= 0:
            links.append(at)
            at = self._next_link(at, kind, threshold)
        return links

    def _tail_links(self, v: int) -> tuple[int, int]:
        """The links after ``v`` that retain too little for ``_chain`` to follow (the list's
        last few): counted as items all the same; and the last link."""
        kind, n, type_of = self.graph.type_of(v), 0, self.graph.type_of
        while True:
            nxt = next((c for c in self.children(v) if type_of(c) == kind), -1)
            if nxt < 0 and kind not in _CONTAINERS:  # through the link's attribute dict, closure, defaults
                hops = [d for d in self.children(v) if type_of(d) in _LINK_HOPS]
                for _hop in range(2):
                    nxt = next((c for d in hops for c in self.children(d) if type_of(c) == kind), -1)
                    if nxt >= 0:
                        break
                    hops = [c for d in hops for c in self.children(d) if type_of(c) in _LINK_HOPS]
            if nxt < 0:
                return n, v
            v, n = nxt, n + 1

    def _hop_types(self, head: int, first: int) -> list[str]:
        """The types of what is between a chain's head and its first link (its dominators up
        to the head: ``["tuple", "cell"]`` for a closure's, ``[]`` a link held directly)."""
        idom, types = self.tree.idom, list[str]()
        at = int(idom[first])
        while at >= 0 and at != head and len(types) < 3:
            types.append(self.graph.type_of(at))
            at = int(idom[at])
        return types[::-1]

    def _link_beyond(self, last: int, hops: list[str]) -> int:
        """The link a chain's last link holds and does not own (others hold it too: the
        ``sys.excepthook`` a thread kept in its ``_invoke_excepthook`` when it was made, and
        with it the hooks that hook wrapped), reached as each link reaches the next (through
        ``hops``' types): where a sample stops counting the chain's links. -1 where none is."""
        out, out_ids = self._out_edges()
        dst, type_of, kind = self.graph.dst, self.graph.type_of, self.graph.type_of(last)
        frontier = [last]
        for want in [*hops, kind]:
            frontier = [d for u in frontier for d in (dst[out_ids[k]] for k in range(out[u], out[u + 1]))
                        if type_of(d) == want][:64]
        return frontier[0] if frontier else -1

    def dominated_objects(self, v: int) -> int:
        if self._counts is None:
            self._counts = subtree_counts(self.graph, self.tree, self.children)
        return self._counts[v]

    def preferred(self, v: int) -> RetainerPath:
        return RetainerPath(self.paths.root_of[v], tuple(path_edges(self.graph, self.paths, v)))

    def _preds(self) -> tuple[Sequence[int], Sequence[int]]:
        if self._pred is None:
            self._pred = _csr_edges(self.graph.nodes, self.graph.dst)
        return self._pred

    def retainer_paths(self, v: int, *, limit: int = 3) -> list[RetainerPath]:
        """A few distinct paths from roots to ``v``: the preferred one, then one through each
        other referrer outside ``v``'s own dominator subtree, distinct by root."""
        out = [self.preferred(v)]
        first = self.paths.via[v]
        roots_seen = {(self.paths.root_of[v], self.graph.src[first] if first >= 0 else -1)}
        offsets, edge_ids = self._preds()
        for k in range(offsets[v], offsets[v + 1]):
            if len(out) >= limit:
                break
            e = edge_ids[k]
            p = self.graph.src[e]
            r = self.paths.root_of[p]
            if p == 0 or r < 0 or (r, p) in roots_seen or self._dominates(v, p):
                continue
            roots_seen.add((r, p))
            out.append(RetainerPath(r, (*path_edges(self.graph, self.paths, p), e)))
        return out

    def _dominates(self, a: int, b: int) -> bool:
        idom = self.tree.idom
        while b >= 0:
            if b == a:
                return True
            b = idom[b]
        return False

    def ids_of(self, path: RetainerPath) -> list[int]:
        """The target's ids along ``path``, its root first: what the ``names`` request walks."""
        graph = self.graph
        return [graph.ids[graph.roots[path.root][0]], *(graph.ids[graph.dst[e]] for e in path.edges)]

    def steps_of(self, path: RetainerPath, names: list[str] | None = None) -> list[str]:
        """The label of each of ``path``'s edges (the target's ``names`` where it gave one, else
        the graph's; "=" and the type of the object it leads to where neither names it): an
        attribute's ("a" and its name), a str key's ("k" and the key), an instance's dict ("d")
        or a type ("=", the one referent of that type: a C field) is how a sample finds an
        owner rebound since (``sampling.owner_items``)."""
        graph = self.graph
        steps = []
        for k, e in enumerate(path.edges):
            label = (names[k] if names is not None and k < len(names) and names[k]
                     else graph.labels[graph.lab[e]] if graph.lab[e] >= 0 else "")
            steps.append(label or "=" + graph.type_of(graph.dst[e]))
        return steps

    def render(self, path: RetainerPath, names: list[str] | None = None) -> str:
        return render_edges(self.graph, path, names)

    def part_paths(self, v: int) -> list[RetainerPath]:
        """A shared owner's parts' preferred paths (the first ``SHARED_NAMED``)."""
        group = self.shared[v]
        return [self.preferred(group.anchors.get(q, q)) for q in group.parts[:SHARED_NAMED]]

    def counter(self, v: int, paths: Sequence[RetainerPath]) -> tuple[tuple[int, ...], str]:
        """What counts shared owner ``v`` between censuses: of its named parts (``paths``, as
        ``part_paths``), the biggest collection whose length is about its items (a half to
        twice: ``BY_ID`` of the sessions two dicts hold, an LRU's ``map`` of its linked nodes),
        as the ids along its path and its type; ((), "") where none is (a module, a task)."""
        group, g = self.shared.get(v), self.graph
        if group is None or not group.parts or group.items <= 0:
            return (), ""
        best, at, anchor = 0, -1, -1
        for i, q in enumerate(group.parts[:len(paths)]):
            a = group.anchors.get(q, q)
            n = int(g.lengths[a])
            # (a part under a group held from C has no root a sample can find: its list was
            # the payload's; counted by it, the owner was "not found again" in every sample)
            if (g.is_container(a) and not self._namespace(a) and group.items <= 2 * n <= 4 * group.items
                    and n > best and not (paths[i].root >= 0 and g.is_held_group(paths[i].root))):
                best, at, anchor = n, i, a
        if at < 0:
            return (), ""
        return tuple(self.ids_of(paths[at])), g.type_of(anchor)

    def shared_name(self, v: int, part_texts: Sequence[str]) -> str:
        """``<shared by A, B>``: its parts' paths (``part_paths``) in order of their names, so
        that the name stays the same while which part is bigger changes."""
        if self.shared[v].name:
            return self.shared[v].name
        more = len(self.shared[v].parts) - len(part_texts)
        rest = f" and {more} more" if more > 0 else ""
        held = "<held from C: "
        if more <= 0 and all(t.startswith(held) and t.endswith(">") for t in part_texts):
            # what only groups of objects held from C hold together is held from C too
            return f"{held}{', '.join(sorted(t[len(held):-1] for t in part_texts))}>"
        return f"<shared by {', '.join(sorted(part_texts))}{rest}>"

    def owner(self, v: int, path: str, retainers: tuple[str, ...] = ()) -> DominatorOwner:
        if v < -1:
            group = self.shared[v]
            return DominatorOwner(
                node=v,
                path=path,
                type=group.type,
                retained_bytes=group.retained,
                retained_objects=group.objects,
                items=group.items,
            )
        return DominatorOwner(
            node=v,
            path=path,
            type=self._members_type(v) if v in self.held_groups else self.graph.type_of(v),
            retained_bytes=self.retained_of(v),
            retained_objects=self.dominated_objects(v),
            items=self.links.get(v) or self.graph.lengths[v] or len(self.children(v)),
            retainers=retainers,
            chain=v in self.links,
            chain_end=int(self.graph.ids[self.chain_end[v]]) if self.chain_end.get(v, -1) >= 0 else 0,
        )


@dataclass
class DominatorOwners:
    owners: list[DominatorOwner]
    tree: DominatorTree
    analysis_seconds: float
    named: bool
    # ``--why QUERY``: the owners or the biggest objects of a type it names, with their paths
    why: list[DominatorOwner] = field(default_factory=list)


def why_nodes(finder: OwnerFinder, owners: list[int], paths: list[str], query: str,
              of_type: list[int]) -> list[int]:
    """What ``--why QUERY`` asks about: the owner whose path is (or ends with) QUERY, else the
    objects of the type QUERY (``of_type``)."""
    for v, text in zip(owners, paths, strict=True):
        if text == query:
            return [v]
    for v, text in zip(owners, paths, strict=True):
        if text.endswith(query) or query in text:
            return [v]
    return of_type


def why_of_type(finder: OwnerFinder, query: str, *, limit: int = 3) -> list[int]:
    """The objects of the type ``query`` (full or short name) that retain the most."""
    graph = finder.graph
    wanted = {t for t, name in enumerate(graph.type_names) if name == query or _short(name) == query}
    if not wanted:
        return []
    types, retained = graph.types, finder.tree.retained
    matches = [v for v in range(1, graph.nodes) if types[v] in wanted]
    matches.sort(key=lambda v: -retained[v])
    return matches[:limit]


@dataclass
class OwnerPlan:
    """The owners found, before they are named: ``name_paths`` are the target's object ids
    along each path that names them (the root's first). The target can label those paths'
    edges as it walks them again (instance attributes the graph has no label for); the
    labels, or None, finish the owners (``name_owners``)."""

    finder: OwnerFinder
    nodes: list[int]  # the owners
    asked: list[int]  # the owners, then the objects ``--why`` asks about
    plans: list[list[RetainerPath]]  # each asked node's paths, its preferred one first
    analysis_seconds: float
    why: str | None = None  # ``--why``'s query: matched again once the owners are named

    @property
    def paths(self) -> list[RetainerPath]:
        return [p for plan in self.plans for p in plan]

    @property
    def name_paths(self) -> list[list[int]]:
        return [self.finder.ids_of(p) for p in self.paths]

    @property
    def name_types(self) -> list[list[str]]:
        """The type of each step's object along each of ``name_paths`` (after the root): how the
        target names a step whose object was rebound before it named it (graph_wire.name_paths)."""
        g = self.finder.graph
        return [[g.type_of(g.dst[e]) for e in p.edges] for p in self.paths]


def plan_owners(graph: ObjectGraph, *, top: int = 20, retainers: int = 3, compiled: bool = True,
                tree: DominatorTree | None = None, why: str | None = None) -> OwnerPlan:
    """The dominator pass and the owners: accumulation points, each with its preferred path
    and, for the first few, up to ``retainers`` distinct retainer paths."""
    import time  # noqa: PLC0415

    started = time.perf_counter()
    tree = tree or dominators(graph, compiled=compiled)
    finder = OwnerFinder(graph, tree)
    nodes = finder.find(top=top)
    asked = list(nodes)
    of_type = why_of_type(finder, why) if why else []
    # Paths only for what will be named: the owners, the objects asked about, and the
    # referrers their retainer paths go through.
    targets = {v for v in nodes if v >= 0} | set(of_type)
    for v in [*nodes[:5], *of_type]:
        if v >= 0:
            targets.update(finder.referrers(v))
    for v in nodes:
        if v < -1:
            group = finder.shared[v]
            targets.update(group.anchors.get(q, q) for q in group.parts[:SHARED_NAMED])
    finder.settle(targets)
    if why:
        unnamed = [finder.shared_name(v, [render_edges(graph, p) for p in finder.part_paths(v)]) if v < -1
                   else render_edges(graph, finder.preferred(v)) for v in nodes]
        asked += why_nodes(finder, nodes, unnamed, why, of_type)
    plans = [finder.part_paths(v) if v < -1 else
             finder.retainer_paths(v, limit=retainers) if i < 5 and retainers > 1 else [finder.preferred(v)]
             for i, v in enumerate(nodes)]
    plans += [finder.part_paths(v) if v < -1 else finder.retainer_paths(v, limit=max(retainers, 5))
              for v in asked[len(nodes):]]
    return OwnerPlan(finder=finder, nodes=nodes, asked=asked, plans=plans,
                     analysis_seconds=time.perf_counter() - started, why=why)


def name_owners(plan: OwnerPlan, labels: Sequence[Any] | None = None) -> DominatorOwners:
    """The planned owners named: by ``labels`` (the target's, one a path of ``name_paths``,
    each a list of edge labels or None) where they fit, else by the graph's own labels."""
    import time  # noqa: PLC0415

    started = time.perf_counter()
    finder, flat = plan.finder, plan.paths
    named = labels is not None and len(labels) == len(flat) and len(flat) > 0
    given = list(labels) if labels is not None and named else [None] * len(flat)
    texts = [finder.render(p, given[i] if isinstance(given[i], list) else None) for i, p in enumerate(flat)]
    owners = []
    k = 0
    for v, paths in zip(plan.asked, plan.plans, strict=True):
        mine, first = texts[k:k + len(paths)], given[k] if paths else None
        k += len(paths)
        if v < -1:  # no object: named by its parts, no path of ids to walk again
            count_ids, count_type = finder.counter(v, paths)
            owners.append(replace(finder.owner(v, finder.shared_name(v, mine)), count_ids=count_ids,
                                  count_type=count_type))
            continue
        distinct = tuple(dict.fromkeys(mine))
        found = finder.owner(v, mine[0], distinct if len(paths) > 1 else ())
        # (a list of the payload's has no ids to walk again: found by its name)
        stand_in = v in finder.stand_ins
        owners.append(replace(found, path_ids=() if stand_in else tuple(finder.ids_of(paths[0])),
                              path_steps=() if stand_in else tuple(
                                  finder.steps_of(paths[0], first if isinstance(first, list) else None))))
    seconds = plan.analysis_seconds + time.perf_counter() - started
    why = owners[len(plan.nodes):]
    if plan.why and not why:
        # An owner the graph's own labels could not name as asked (a global of a big program,
        # its module's keys past the walk's label budget: ``__main__[].grad_fn`` until the
        # target named it ``__main__.TOTAL.grad_fn``), matched by the name it was given.
        listed = owners[:len(plan.nodes)]
        asked = why_nodes(finder, plan.nodes, [o.path for o in listed], plan.why, [])
        why = [o for o, v in zip(listed, plan.nodes, strict=True) if v in asked]
    return DominatorOwners(owners=owners[:len(plan.nodes)], tree=finder.tree, analysis_seconds=seconds,
                           named=named, why=why)


def find_owners(graph: ObjectGraph, *, top: int = 20, retainers: int = 3, compiled: bool = True,
                tree: DominatorTree | None = None, why: str | None = None,
                labels: Sequence[Any] | None = None) -> DominatorOwners:
    """``plan_owners`` and ``name_owners`` in one step, named by ``labels`` when they are
    known (else by the graph's own labels)."""
    return name_owners(plan_owners(graph, top=top, retainers=retainers, compiled=compiled, tree=tree, why=why),
                       labels)


class _Chains:
    """Kids of a namespace held by one another, as sets (union-find over their indexes), and
    which sets hold a kid whose parts ``SHARED_RESOLVE_DEPTH`` levels did not resolve: a chain
    (a DOM document's elements, each held by its siblings and its parent's list of children)
    that two roots reach into (a global list of documents, a running frame's last element).
    Each element was a kid of the super-root of its own, under the threshold: 10 MB of a
    document in no owner, and a growing one was "no Python owner grows" in ``watch``."""

    def __init__(self, n: int) -> None:
        self.up = list(range(n))
        self.open: set[int] = set()

    def find(self, k: int) -> int:
        up = self.up
        while up[k] != k:
            up[k] = up[up[k]]
            k = up[k]
        return k

    def join(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.up[max(ra, rb)] = min(ra, rb)

    def unfinished(self, k: int) -> None:
        self.open.add(k)

    def chained(self) -> list[list[int]]:
        """The sets holding an unfinished kid, each its members (the kids joined to it)."""
        heads = {self.find(k) for k in self.open}
        sets: dict[int, list[int]] = {}
        for k in range(len(self.up)):
            head = self.find(k)
            if head in heads:
                sets.setdefault(head, []).append(k)
        return list(sets.values())
