"""The object graph behind retained sizes (the dominator tree), walked inside the target.

Standard library only. The walk starts from the census's named roots (modules and their
globals, classes and their attributes, asyncio tasks, thread frames) plus, when the pause
budget allows listing every gc-tracked object, the objects held from C; it streams back a
compact graph: node records (address, size, type id, entries) and edges as raw int frames. The dominator
pass runs in leakhound's own process (``leakhound.analysis.dominators``), never here.

What it never does: call ``gc.collect()``, run Python code of the target (only C calls:
``gc.get_referents``, built-in descriptors, C ``__sizeof__``; see ``sizes.object_size``), or
hold the GIL for long. The walk's inner loop runs in C where ``_walk.abi3.so`` loads
(``_graph_walk.c``: ``CompiledGraph``, in calls of ~5k units of work, no table from address
to node: a node is named by its address, and leakhound gives it its id; with a spool, the
records leave the target as the walk goes); this module's Python loop (``Graph``) is its
fallback and the reference the tests compare it with. Between two calls (or every few thousand objects of the
Python loop) run the deadline, the cancel hook and, with a pause budget, the duty cycle.

Shape of the graph:

* node 0 is the super-root; every root is one of its edges, and ``roots`` names them
  (``module``, ``class``, ``task``, ``thread``, ``held``), flat: node, label, kind, tier, the
  next root's node...;
* modules, module dicts, classes and class dicts are walls: children of the super-root only
  (an edge from a function to its globals or from an instance to its class is not streamed:
  it cannot change anyone's dominator, since the super-root reaches the wall directly);
* a leaf (str, int, bytes, float...) whose only reference is the container it is found in
  is folded into that container's size: it has one referrer, so it is dominated by it;
* an edge carries a label (an index in ``labels``) when it has a name: ``a<name>`` an
  attribute or slot, ``k<key>`` a dict's str key, ``d`` an instance's ``__dict__`` (the
  path goes through it silently), ``t<Type>`` a coroutine's or frame's local of that type.
"""

# mypy: disable-error-code="assignment, var-annotated, arg-type, unused-ignore"
# (payload code, Python 3.8+ without annotations: locals are rebound to None to drop references)

import array
import collections
import gc
import os
import sys
import time
import types

# Loaded with this module, so with the payload (runner.py imports graph at load): the roots of
# the walk, and the wire (the names request, the result in JSON pieces) callers reach here.
from . import wire
from .graph_roots import add_roots, add_thread_roots, held_from_c, listing_over_budget_at
from .graph_wire import (
    BINARY_FILE,
    FRAME_LIKE_IDS,
    MAX_LABEL_CHARS,
    Binary,
    LabelTexts,
    binary_pieces,
    frames,
    frames_bytes,
    json_pieces,
    name_paths,
)
from .objects import (
    CAN_READ_MANAGED_DICTS,
    HEAPTYPE,
    INLINE_VALUES_DICTS,
    LEAF_TYPE_IDS,
    MANAGED_DICTS,
    SHARED_LEAF,
    add_made_dict,
    builtin_length,
    dict_columns,
    dict_descriptor,
    dict_via,
    in_mro,
    managed_dict_address,
    safe_referents,
    short_type_name,
    slot_members,
    subclass_tree,
    type_flags,
    type_name,
)
from .pacing import Clock, unsplit_step_fits
from .sizes import (
    DEQUE_BLOCKS_READ,
    NATIVE_BUFFERS,
    STRUCT_SUBCLASSED,
    HiddenNamed,
    SizeCache,
    after_walk_budget,
    class_from,
    for_compiled_walk,
    instance_values_bytes,
    lru_cache_wrapper,
    mapped_native_bytes,
    native_codes,
    native_extra,
    native_types,
    scanned_object_sizes,
    sqlite_native_bytes,
    ssl_native_bytes,
    struct_classes,
)
from .tracked import young_estimate, young_ids, young_limit

try:  # the compiled walk (optional: the Python loop below computes the same graph)
    from . import _walk as _walk_module
except Exception:  # no build, or an interpreter older than 3.10
    _walk_module = None
if not hasattr(_walk_module, "graph_walk"):
    _walk_module = None

__all__ = ["GRAPH_FORMAT", "CompiledGraph", "Graph", "GraphCancelled", "GraphOverHeadroom", "GraphTimeout",
           "GraphTooBig", "binary_pieces", "build", "census_lists_all", "compiled_available", "json_pieces",
           "name_paths"]

GRAPH_FORMAT = wire.GRAPH_FORMAT

# A collection of at most this many entries (not folded itself) folds none of its entries:
# they stay nodes, the owners' search goes down into one that holds most of it (a logger's one
# handler, and its records; a dict of a few named parts and the one that grows).
# As _graph_walk.c's FOLD_MIN_ENTRIES.
_FOLD_MIN_ENTRIES = 16
_BIG_LEAF_BYTES = 256 << 10  # a part of an instance or a namespace this big: a node (_graph_walk.c)
# Leaves pending at once at most (_graph_walk.c's PENDING_LEAVES_MAX): every leaf of a list whose
# twin list (the same ints) comes later in the walk waits, ~55k a list on a 2 GB verifiers worker.
_PENDING_LEAVES = 1 << 18
# The nodes a pending leaf is met from, at most (a fourth makes it a node), and the groups of
# leaves met from the same ones kept at most, forgotten all at once past that (_graph_walk.c's
# PENDING_OWNERS, LEAF_GROUPS_MAX).
_PENDING_OWNERS = 3
_LEAF_GROUPS = 6144
# getrefcount of a referent in the walk loop: its container, our list of referents (or the
# items pair), the loop variable and getrefcount's argument.
_ONLY_ONE_REFERENCE = 4
_ModuleType = type(sys)
# Containers with neither an instance dict nor slots: no attribute names to look up.
_PLAIN_IDS = frozenset(id(tp) for tp in (list, tuple, set, frozenset, bytearray, types.FunctionType,
                                         types.MethodType, types.CodeType, types.CellType))
# (an exact deque too where the compiled walk reads its blocks, as _graph_walk.c is_collection:
# a replay buffer's transitions are its)
_SIZED_IDS = frozenset(id(tp) for tp in (list, tuple, set, frozenset, dict)
                       + ((collections.deque,) if DEQUE_BLOCKS_READ else ()))
_SEQUENCE_BASES = (list, tuple, set, frozenset)
_SINGLETON_IDS = frozenset(id(tp) for tp in (bool, type(None)))
# Labels are mostly dict keys (attribute names come from slots; the owners' paths are named
# by the target afterwards, name_paths): ~150 bytes each in the target with their index and
# their JSON, 3 MiB at most. Dict keys take at most _MAX_KEY_LABELS of them: a heap's unique
# keys (a cache's ids in many small dicts) would fill the table before the attribute names
# and types met later (what back-references are known by: passes.py). 50,000 were ~5 MiB
# more in the target on the 4.8M-object heap, a fifth of what the inspection cost it.
_MAX_LABELS = 20000
_MAX_KEY_LABELS = 15000
# 3.10: a split dict's keys are met in every instance's dict (Graph._resolve)
_SPLIT_KEYS_MET = sys.version_info < (3, 11)
_BIG_DICT = 2048  # _walk.h's BIG_CONTAINER / 2: read in slices there
_CHECK_EVERY = 0x7FF
# Units of work (a container, a referent) per call into the compiled walk: ~1 ms of CPU (the
# census's 20,000 took 3-9 ms here, and up to 80 ms of wall time when the machine preempted
# the payload's thread inside one call, the GIL held: the target's loop waited as long).
_WORK_PER_CALL = 5000
_MISSING = object()
_LEAF_TYPES_FIRST = (str, int, float, bytes, bool, type(None), complex)


class GraphTimeout(Exception):
    pass


class GraphCancelled(Exception):
    pass


class GraphTooBig(Exception):
    """More nodes than the request's ``max_nodes``, or more memory than its ``max_bytes``:
    the walk is given up (the result says why: ``skipped`` and ``skipped_code``)."""


class GraphOverHeadroom(GraphTooBig):
    """The walk took the target's RSS past the request's memory budget (the memory limit's
    headroom), not past the graph's own budget."""


# Why a graph was not walked or not finished (``skipped_code``; the CLI's
# model.names.NotAttributed spells them the same).
SKIPPED_OVER_NODES = "graph_over_nodes"
SKIPPED_OVER_MEMORY_BUDGET = "graph_over_memory_budget"
SKIPPED_NO_HEADROOM = "graph_no_headroom"
SKIPPED_OUT_OF_TIME = "graph_out_of_time"


def _list_values(d):
    return list(dict.values(d))


_CONTAINER_BASES = (dict, list, tuple, set, frozenset)


def _before_entries(referents, first, ordered):
    """What a dict subclass's traverse visits before its entries (``referents``, in its order;
    ``first``: its first (key, value)), as _walk_objects.c referents_before_entries: up to its
    first key or value, or (``ordered``: an OrderedDict, which visits its keys first in its
    own order) the first str, int, bytes or tuple."""
    out = []
    for ref in referents:
        rtp = type(ref)
        if ref is first[0] or ref is first[1] or (ordered and (rtp is str or rtp is int or rtp is bytes
                                                               or rtp is tuple)):
            break
        out.append(ref)
    return out


def _is_ordered_dict(tp):
    ordered = class_from("collections", "OrderedDict")
    return ordered is not None and in_mro(tp, (ordered,))


def _container_subclass(tp):
    """Whether ``tp`` is a subclass (not the class itself) of dict, list, tuple, set,
    frozenset or deque (its MRO compared by identity: objects.in_mro)."""
    bases = _CONTAINER_BASES + (class_from("_collections", "deque"),)
    return not any(tp is base for base in bases) and in_mro(tp, bases)


class Graph(object):
    """One walk of the object graph. Call :meth:`run`, then :meth:`result`."""

    walker = "python"
    walk_began = None  # a list of ours made as the walk begins (run)
    young_at_start = None  # the ids in the young generations then (tracked.young_ids)

    def __init__(self, *, timeout=60.0, progress=None, is_stdlib=None, exclude=(),
                 max_nodes=5000000, max_pause_ms=None, cancelled=None, max_bytes=0, memory_left=None):
        self.max_bytes = max_bytes  # the walk's own memory in the target (0: no limit)
        # () -> the bytes the request may still take in the target (None: no budget), for
        # what is sized after the walk (_size_after_walk)
        self.memory_left = memory_left
        # The duty cycle: at most half the pause budget of running between two yields. Every
        # look at the clock checks (the walk looks every _CHECK_EVERY steps or C call).
        self.clock = Clock(time.monotonic() + timeout, cancelled,
                           max_hold=max_pause_ms / 2000.0 if max_pause_ms else None, check_every=0.0,
                           wrappers=("check", "_duty"),
                           timeout_error=GraphTimeout,
                           timeout_message="the object graph did not finish within its time budget",
                           cancel_error=GraphCancelled, cancel_message="the object graph was cancelled")
        self.progress = progress or (lambda phase, done: None)
        self.is_stdlib = is_stdlib or (lambda name: False)
        self.max_nodes = max_nodes
        self.max_pause_ms = max_pause_ms
        self.max_step = 0.0
        self.seconds = 0.0
        self.index = {}  # id(obj) -> node, or -1 for leakhound's own objects
        self.nodes = [None]  # the objects (keeps ids unique while we run); 0: the super-root
        self.sizes = array.array("q", [0])
        self.types = array.array("i", [0])
        self.ids = array.array("q", [0])  # id() of each node: names a path later (name_paths)
        self.lengths = array.array("i", [0])  # entries of a container (folded leaves included)
        self.type_index = {}  # id(type) -> type id
        self.type_keys = [None]  # the types (keeps their ids unique)
        # never folded: a node each, that ``--why TYPE`` names (their C library's memory is
        # no size's: wire.OPAQUE_NATIVE_TYPES, detectors/native_state.py)
        self.kept_types = kept_types()
        self.kept_type_ids = _kept_type_ids(self.kept_types)
        self.type_names = ["<root>"]
        # the ids of the types that are subclasses of dict, list, tuple, set, frozenset or
        # deque (a ``class Registry(dict)``): collections to the owners' search, no namespaces
        self.container_types = []
        # The leaves' types up front, in both walks: the compiled one counts every shared
        # leaf by type (no node), and would otherwise call _type_id for them mid-walk where
        # the Python loop does not (the names it keeps are references to interned strings:
        # a leaf near a refcount threshold would be folded in one walk, a node in the other).
        for tp in _LEAF_TYPES_FIRST:
            self._type_id(tp)
        # The census's native sizing, node by node (sizes.py): a numpy/torch/Pillow/mmap
        # object's buffers and the references gc does not show (a view's base), a 3.11+
        # instance's attribute values. Without them a dominator owner would miss those bytes.
        # (A walk of every class, tens of thousands in a big program: under the duty cycle.)
        # (and OpenSSL's contexts, sized once the walk is over: _size_after_walk)
        self.native_kinds, self.native_bases = native_types(self._duty, after_walk=True)
        self.native = native_codes(self.native_kinds, self._duty)
        self.native_seen = set()  # buffer addresses counted: a storage shared by views, once
        self.size_of = SizeCache()  # object_size, each type looked up once (sizes.SizeCache)
        self.src = array.array("i")
        self.dst = array.array("i")
        self.lab = array.array("i")
        self.label_index = {}
        self.labels = []
        self.key_labels = 0  # labels of dict keys ("k...") made, at most _MAX_KEY_LABELS
        # node, label, kind, tier of each root, flat: no tracked object per root (a list each,
        # 50k of them on a worker with many classes, counted towards the target's next
        # collection, which then ran in our thread: the real worker's first inspection)
        self.roots = []
        self.walls = set()  # nodes no edge but the super-root's leads to
        # Folding (as _graph_walk.c's STACK_NAMESPACE): an entry of a collection held by it
        # alone is part of it, no node; walked as -(k + 2), ``folds[k]`` folded into node
        # ``fold_owner[k]``. ``namespaces``: dict nodes that name another object's parts.
        self.folds = []
        self.fold_owner = array.array("i")
        self.namespaces = set()
        self.folded_objects = 0
        # Leaves held a few times, not every reference met yet (as _graph_walk.c's PendingLeaf):
        # id -> [[nodes met from], references not met yet, size, type id]; no reference to it.
        self.pending = {}
        # ids of the leaves met when _PENDING_LEAVES were waiting: given to that node at once
        self.given_leaves = set()
        # (sorted nodes, type id) -> the node of the leaves of that type met from those nodes
        self.leaf_groups = {}
        # 3.11+: an instance's materialized __dict__ labelled "d" (as _graph_walk.c)
        self.dict_labels = CAN_READ_MANAGED_DICTS
        self.slot_names = {}  # id(type) -> ((name, descriptor), ...) of its member descriptors
        self.dict_descrs = {}  # id(type) -> its __dict__ descriptor or None
        self.unreached = {"examined": False, "estimated_pause_ms": None, "reason": "", "held": 0,
                          "garbage_objects": 0}  # type: wire.Unreached
        for own in (self, self.__dict__, self.index, self.nodes, self.sizes, self.types, self.ids, self.lengths,
                    self.type_index, self.type_keys, self.type_names, self.src, self.dst, self.lab,
                    self.folds, self.fold_owner, self.namespaces, self.pending, self.given_leaves, self.leaf_groups,
                    self.label_index, self.labels, self.roots, self.walls, self.slot_names, self.dict_descrs,
                    self.unreached, self.native, self.native_kinds, self.native_bases,
                    self.native_seen, self.size_of, self.size_of.known, self.clock, self.clock.__dict__,
                    self.clock.phases):
            self.index[id(own)] = -1
        # the native sizers' tallies (lists of one int) and tables in their bases: ours too
        for own in self.native_bases.values():
            if type(own) in (list, dict):
                self.index[id(own)] = -1
        for obj in exclude:
            self.index[id(obj)] = -1

    # -- building blocks -------------------------------------------------------------------

    def _over_memory(self):
        if self.max_bytes and self._payload_bytes() > self.max_bytes:
            raise GraphTooBig("held %.0f MiB in the target while walked, over its memory budget of %.0f MiB"
                              % (self._payload_bytes() / 1048576.0, self.max_bytes / 1048576.0))

    def _duty(self):
        """The duty cycle alone: yield the GIL once the walk has held it its budget."""
        self.clock.hold(self._before_yield)

    def _before_yield(self):
        pass

    def check(self):
        self._over_memory()
        self.clock.check(self._before_yield)

    def label(self, text):
        i = self.label_index.get(text)
        if i is None:
            if len(self.labels) >= _MAX_LABELS:
                return -1
            if text[:1] == "k":
                if self.key_labels >= _MAX_KEY_LABELS:
                    return -1
                self.key_labels += 1
            i = self.label_index[text] = len(self.labels)
            self.labels.append(text)
        return i

    def _no_edge_to(self, value):
        """Whether no edge will lead to ``value`` from a dict, so its key needs no label (as
        _graph_walk.c's no_edge_to, which the labels' budget is spent in step with): None, a
        bool, a small int (shared leaves), a module that is no node or a wall, a class that is
        no wall (a class root is held by what holds it: an edge)."""
        tp = type(value)
        if value is None or tp is bool or (tp is int and -5 <= value <= 256):
            return True
        if issubclass(tp, type):
            j = self.index.get(id(value))
            return j is None or j not in self.walls
        if tp is not _ModuleType:
            return False
        j = self.index.get(id(value))
        return j is None or j < 0 or j in self.walls

    def _fold_label(self, label):
        """The label of an edge from an entry folded into its collection, to what the entry
        names ``label``: "f" and that label (``__main__.CALLBACKS[].__self__``)."""
        return self.label("f" + self.labels[label]) if 0 <= label < len(self.labels) else -1

    def _label_texts(self):
        return self.labels

    def _labels(self):
        return self.labels

    def _type_id(self, tp):
        t = self.type_index.get(id(tp))
        if t is None:
            t = self.type_index[id(tp)] = len(self.type_keys)
            self.type_keys.append(tp)
            self.type_names.append(type_name(tp))
            if _container_subclass(tp):
                self.container_types.append(t)
        return t

    def node(self, obj, size=None, as_type=None):
        """The node of ``obj``, added (not yet walked) if new, of ``size`` bytes (None: its
        own), of type ``as_type`` (None: its own; a group of the payload's standing for a
        collection of the target's, weakref.finalize's registry: that collection's type);
        -1 for our own objects."""
        i = self.index.get(id(obj))
        if i is not None:
            return i
        i = self.index[id(obj)] = len(self.nodes)
        if i > self.max_nodes:
            raise GraphTooBig("more than %d nodes" % self.max_nodes)
        self.nodes.append(obj)
        self.sizes.append(self.size_of(obj) if size is None else size)
        self.types.append(self._type_id(type(obj) if as_type is None else as_type))
        self.ids.append(id(obj))
        self.lengths.append(0)
        return i

    def root(self, obj, label, kind, tier, wall=False, size=None, as_type=None):
        i = self.node(obj, size, as_type)
        if i <= 0:
            return i
        roots = self.roots
        roots.append(i)
        roots.append(label)
        roots.append(kind)
        roots.append(tier)
        self.edge(0, i, -1)
        if wall:
            self.wall(i)
        return i

    # What graph_roots.py asks of a graph, whichever walks it.

    def wall(self, i):
        self.walls.add(i)

    def push(self, stack, i, obj):
        """Node ``i`` (``obj``) to be walked (a dict root names its parts: nothing is folded
        into it, as the compiled walk's STACK_NAMESPACE)."""
        stack.append(i)
        if type(obj) is dict:
            self.namespaces.add(i)

    def node_count(self):
        return len(self.nodes)

    def own(self, obj):
        """``obj`` is leakhound's: never a node."""
        self.index[id(obj)] = -1

    def known(self, obj):
        return id(obj) in self.index

    def unknown(self, objects):
        """The objects of a list that are no node (nor ours)."""
        index = self.index
        return [o for o in objects if id(o) not in index]

    def tracked_count(self):
        """Nodes of types gc tracks (all but the leaves)."""
        leaf_types = {t for t, tp in enumerate(self.type_keys) if id(tp) in LEAF_TYPE_IDS}
        return sum(1 for t in self.types if t not in leaf_types)

    def _dict_of(self, obj, tp):
        """The instance ``__dict__`` through the built-in descriptor (cached per type)."""
        descr = self.dict_descrs.get(id(tp), _MISSING)
        if descr is _MISSING:
            try:
                descr = dict_descriptor(tp)
            except Exception:
                descr = None
            self.dict_descrs[id(tp)] = descr
        return dict_via(descr, obj, tp)

    def _slots_of(self, tp):
        names = self.slot_names.get(id(tp))
        if names is None:
            try:
                found = slot_members(tp)
            except Exception:
                found = []
            names = self.slot_names[id(tp)] = tuple(found)
        return names

    # -- the walk --------------------------------------------------------------------------

    def run(self):
        started = time.perf_counter()
        # The target's collections while the graph is walked (a full one holds the GIL for
        # as long as the heap is big: the walk must not set one off).
        self.gc_before = [g.get("collections", 0) for g in gc.get_stats()]
        stack = []
        self.own(stack)
        # Listing the young generations below is one step no yield splits (as many objects
        # as the pause budget lets it list: 45 ms for 100k in the busy real worker, whose
        # generation 0 holds up to 150,000): the stretch before it (the tables of classes)
        # ends here, not with it (53 ms in one there). Before the marker: nothing is made
        # between the marker and the listing.
        young = young_limit(self.max_pause_ms)
        if young_estimate() <= young:
            self.clock.yield_now()
        # Tracked objects made after this one were made during the walk (tracked.made_after).
        self.walk_began = []
        self.own(self.walk_began)
        self.young_at_start = young_ids(young)  # (None: too many to keep)
        if self.young_at_start is not None:
            self.own(self.young_at_start)
        add_roots(self, stack)
        self.walk(stack)
        add_thread_roots(self, stack)
        self.walk(stack)
        held_from_c(self, stack)
        self._size_after_walk()
        self._settle()
        self.seconds = time.perf_counter() - started

    def _size_after_walk(self):
        """What the objects sized after the walk hold (OpenSSL's contexts: every one met, at
        once, with the GIL released), added to their nodes and their types' tallies; within
        the walk's deadline and what is left of its memory budget."""
        if not self.native_bases.get("scanned_objects"):
            return
        self.check()
        # (within the walk's own budget too; half the time left at most: a scan cut short sizes
        # nothing, a walk past its deadline is lost whole)
        held = self._payload_bytes()
        left = after_walk_budget(self.memory_left, self.max_bytes - held if self.max_bytes else None)
        sized = scanned_object_sizes(self.native_bases, self.clock.deadline, left)
        self.clock.yielded()  # (the scan ran with the GIL released)
        # (the scan's tables beside the walk's, at once: the payload's peak, result())
        self.after_walk_peak = held + self.native_bases.get("scan_bytes", 0)
        for obj, _owner, size in sized:
            self._add_bytes(obj, size)
        del sized
        self.check()

    def _add_bytes(self, obj, size):
        i = self.index.get(id(obj))
        if i is not None and i > 0:
            self.sizes[i] += size

    def _settle(self):
        """The leaves still pending (a reference never met: held from C or by a frame) given
        to the node they were met from, or to their group's node: a node with the edges met
        only is dominated as the leaf would be."""
        for address, p in sorted(self.pending.items()):  # as _graph_walk.c: by address
            self._resolve(address, p, None)
        self.pending.clear()

    def _resolve(self, address, p, current):
        """Every reference to the leaf ``p`` met (or the walk over): its bytes, when they are
        ``current``'s (the one node it was met from); else given here to that node or to its
        group's node (as _graph_walk.c's pending_resolve), and 0."""
        owners, _left, size, t = p
        if len(owners) == 1:
            # met again (more often than its references: a 3.10 split dict's keys are the
            # class's, one reference for every instance's dict), it is left out (given); only
            # on 3.10, and only a str can be such a key (as _graph_walk.c's pending_resolve)
            if _SPLIT_KEYS_MET and t == self.type_index.get(id(str)):
                self.given_leaves.add(address)
            if owners[0] == current:
                return size
            self.sizes[owners[0]] += size
            return 0
        key = (tuple(sorted(owners)), t)
        j = self.leaf_groups.get(key)
        if j is not None:
            self.sizes[j] += size
            return 0
        j = self.index[address] = len(self.nodes)
        if j > self.max_nodes:
            raise GraphTooBig("more than %d nodes" % self.max_nodes)
        self.nodes.append(None)
        self.sizes.append(size)
        self.types.append(t)
        self.ids.append(address)
        self.lengths.append(0)
        for owner in key[0]:
            self.edge(owner, j, -1)
        if len(self.leaf_groups) >= _LEAF_GROUPS:
            self.leaf_groups.clear()  # full: the groups kept so far forgotten
        self.leaf_groups[key] = j
        return 0

    def edge(self, i, j, label):
        self.src.append(i)
        self.dst.append(j)
        self.lab.append(label)

    def walk(self, stack):
        nodes = self.nodes
        index = self.index
        sizes = self.sizes
        types = self.types
        ids_append = self.ids.append
        lengths = self.lengths
        lengths_append = lengths.append
        sized = _SIZED_IDS
        walls = self.walls
        src_append = self.src.append
        dst_append = self.dst.append
        lab_append = self.lab.append
        leaf_ids = LEAF_TYPE_IDS
        kept_ids = self.kept_type_ids
        only_one = _ONLY_ONE_REFERENCE
        getrefcount = sys.getrefcount
        get_referents = gc.get_referents
        module_type = _ModuleType
        dict_values = _list_values
        type_id = self._type_id
        label_of = self.label
        size_of = self.size_of
        max_nodes = self.max_nodes
        perf_counter = time.perf_counter
        d_label = self.label("d")
        dict_labels = self.dict_labels
        inline_dicts = INLINE_VALUES_DICTS  # (add_made_dict finds none where ctypes cannot read)
        type_labels = {}  # id(type) -> label of "t<Type>"
        frame_like = FRAME_LIKE_IDS
        # (a C object's big str or bytes stays its own: an io.BytesIO's buffer)
        class_statement = (_walk_module.class_statement if _walk_module is not None
                           else lambda cls: bool(type_flags(cls) & HEAPTYPE))
        plain = _PLAIN_IDS
        singleton_ids = _SINGLETON_IDS
        native = self.native
        pending = self.pending
        given = self.given_leaves
        folds = self.folds
        fold_owner = self.fold_owner
        namespaces = self.namespaces
        # an lru_cache's wrapper and links, read from their fields as the compiled walk reads
        # them (_walk_objects.c typed_traverse): the links' keys and results are theirs, the
        # links the cache's (each held by the wrapper's list too), the cache folded into it
        typed = _walk_module.typed_referents if _walk_module is not None else None
        lru_wrapper = lru_cache_wrapper() if typed is not None else None
        lru_link = _walk_module.lru_link_class() if lru_wrapper is not None else None
        steps = 0
        while stack:
            i = stack.pop()
            if i < 0:  # folded into a node: its size and edges are that node's
                obj = folds[-i - 2]
                i = fold_owner[-i - 2]
                folded_here = True
                sizes[i] += size_of(obj)
            else:
                obj = nodes[i]
                folded_here = False
            tp = type(obj)
            collection = id(tp) in sized
            fold_into = i if folded_here or (collection and i not in namespaces) else 0
            fold_any = folded_here or (fold_into and len(obj) > _FOLD_MIN_ENTRIES)
            child_namespace = not collection
            # (an lru_cache's cache is no namespace: its entries, its links, fold into it; its
            # id only: a reference here would keep it from folding)
            lru_cache = id(_walk_module.lru_cache_dict(obj)) if tp is lru_wrapper else 0
            links = None  # (a dict's: an lru cache's links are held by its wrapper's list too)
            t0 = perf_counter()
            names = None
            code = native.get(id(tp), 0) if native else 0
            if issubclass(tp, dict):
                # Two lists, not dict.items(): a pair per entry would be thousands of tracked
                # objects at once, which outlive young collections and count towards the
                # target's next full collection (measured: a 300-500 ms gen-2 pause). One
                # moment's (dict_columns); a dict that never holds still: its values, unlabelled.
                columns = dict_columns(obj)
                keys, refs = columns if columns is not None else ([], dict_values(obj))
                columns = None
                names = {}
                # A big dict's keys label nothing (ids and names of a registry or a cache, a
                # label each; its entries are named by the target afterwards: name_paths). As
                # _graph_walk.c, which reads a big exact dict in slices.
                for k in range(len(keys) if len(keys) <= _BIG_DICT else 0):
                    key = keys[k]
                    if type(key) is str and not self._no_edge_to(refs[k]):
                        names.setdefault(id(refs[k]), label_of("k" + key[:MAX_LABEL_CHARS]))
                entries = len(keys)
                links = lru_link
                first = (keys[0], refs[0]) if keys and refs else None
                refs.extend(keys)
                key = keys = None
                if tp is not dict:
                    # a big one's own referents only, its entries read once (as the C walk's
                    # slices: _walk_objects.c referents_before_entries)
                    own = get_referents(obj)
                    refs.extend(own if entries <= _BIG_DICT or first is None
                                else _before_entries(own, first, _is_ordered_dict(tp)))
                    own = None
                first = None
            elif issubclass(tp, module_type):
                refs = safe_referents(obj)
            else:
                refs = typed(obj) if typed is not None and (tp is lru_wrapper or tp is lru_link) else None
                if refs is None:
                    refs = get_referents(obj)
                    if inline_dicts:
                        add_made_dict(obj, tp, refs, True)  # the dict's entries are read below
                elif lru_link is None:
                    lru_link = _walk_module.lru_link_class()
            hidden_names = None
            if code == NATIVE_BUFFERS:
                extra, hidden = native_extra(obj, self.native_kinds, self.native_bases, self.native_seen)
                sizes[i] += extra
                refs.extend(hidden)
                if type(hidden) is HiddenNamed:
                    labels = hidden.labels
                    hidden_names = {id(hidden[k]): label_of(labels[k]) for k in range(min(len(hidden), len(labels)))}
                    labels = None
                hidden = None
            elif code > NATIVE_BUFFERS:
                sizes[i] += instance_values_bytes(obj)
            if len(refs) > 4096:
                # Only a big container makes one long step (timing every object would count
                # the times this thread was descheduled between two clock reads).
                took = perf_counter() - t0
                if took > self.max_step:
                    self.max_step = took
            if (collection or names is not None) and not folded_here:
                # a dict subclass (an OrderedDict, a defaultdict) too: its entries are its values
                # (a deque its length: 3.12+'s, a heap type, visits its type too)
                n = entries if names is not None else (len(obj) if tp is collections.deque else len(refs))
                lengths[i] = min(n, 0x7FFFFFFF)
            elif not folded_here:
                # a list, tuple or set subclass (mock's _CallList): its length as the built-in
                # has it (no __len__ of the subclass runs), not its referents (_graph_walk.c)
                n = builtin_length(obj, _SEQUENCE_BASES)
                if n is not None:
                    lengths[i] = min(n, 0x7FFFFFFF)
            tag = id(tp) in frame_like
            if names is None and not tag and id(tp) not in plain:
                slots = self._slots_of(tp)
                # Attribute names only from slots here: asking an instance for its __dict__
                # makes one where 3.11+ keep attributes inline (a dict more in the target for
                # every instance). The owners' paths are named afterwards (``name_paths``).
                # A materialized one (3.11+) is read from its managed pointer: labelled "d".
                d = managed_dict_address(obj, tp) if dict_labels else 0
                if d or slots:
                    names = {}
                    if d:
                        names[d] = d_label
                    for name, descr in slots:
                        try:
                            value = descr.__get__(obj, tp)
                        except Exception:
                            continue
                        names.setdefault(id(value), label_of("a" + name))
                    value = None
                d = None
            if hidden_names:
                if names is None:
                    names = hidden_names
                else:
                    for rid, label in hidden_names.items():
                        names.setdefault(rid, label)
            hidden_names = None
            folded = 0
            for ref in refs:
                rtp = type(ref)
                rid = id(rtp)
                if rid in leaf_ids:
                    count = getrefcount(ref)
                    if count <= only_one:
                        size = size_of(ref)
                        if size < _BIG_LEAF_BYTES or folded_here or not (
                                i in namespaces or (not collection and class_statement(tp))):
                            folded += size
                            continue
                        # a big part of an instance or a namespace: a node (_graph_walk.c BIG_LEAF_BYTES)
                        j = index[id(ref)] = len(nodes)
                        if j > max_nodes:
                            raise GraphTooBig("more than %d nodes" % max_nodes)
                        nodes.append(ref)
                        sizes.append(size)
                        types.append(type_id(rtp))
                        ids_append(id(ref))
                        lengths_append(0)  # (its edge below, as any node's)
                    if count > SHARED_LEAF or rid in singleton_ids or (rtp is int and -5 <= ref <= 256):
                        continue  # None, True, small ints, interned names: shared by everyone
                    if id(ref) not in index:
                        # held a few times: its bytes are the node's it is met from, if every
                        # reference to it is (_graph_walk.c's PendingLeaf)
                        p = pending.get(id(ref))
                        if p is not None and (i in p[0] or len(p[0]) < _PENDING_OWNERS):
                            if i not in p[0]:
                                p[0].append(i)  # one more node it is met from
                            p[1] -= 1
                            if p[1] <= 0:
                                del pending[id(ref)]
                                folded += self._resolve(id(ref), p, i)
                            continue
                        if p is not None:  # met from a fourth node: a node
                            del pending[id(ref)]
                            j = index[id(ref)] = len(nodes)
                            if j > max_nodes:
                                raise GraphTooBig("more than %d nodes" % max_nodes)
                            nodes.append(ref)
                            sizes.append(p[2])
                            types.append(p[3])
                            ids_append(id(ref))
                            lengths_append(0)
                            for owner in p[0]:
                                src_append(owner)
                                dst_append(j)
                                lab_append(-1)
                        elif id(ref) in given:
                            continue  # its bytes given already to the node it was first met from
                        elif len(pending) < _PENDING_LEAVES:
                            pending[id(ref)] = [[i], count - only_one, size_of(ref), type_id(rtp)]
                            continue
                        else:
                            # none more can wait: its bytes are this node's (an upper bound on
                            # what freeing it returns; a node each was past any graph budget)
                            given.add(id(ref))
                            folded += size_of(ref)
                            continue
                j = index.get(id(ref))
                if j is None:
                    if issubclass(rtp, type) or rtp is module_type:
                        continue  # classes and modules are roots of their own
                    # (a small collection folds none of its entries: _graph_walk.c FOLD_MIN_ENTRIES)
                    if (fold_into and fold_any and rid not in leaf_ids
                            and getrefcount(ref) - (rtp is links) <= only_one and rid not in kept_ids):
                        index[id(ref)] = -2  # held by this collection alone: part of it, no edge
                        folds.append(ref)
                        fold_owner.append(fold_into)
                        stack.append(-len(folds) - 1)
                        self.folded_objects += 1
                        continue
                    j = index[id(ref)] = len(nodes)
                    if j > max_nodes:
                        raise GraphTooBig("more than %d nodes" % max_nodes)
                    nodes.append(ref)
                    sizes.append(size_of(ref))
                    types.append(type_id(rtp))
                    ids_append(id(ref))
                    lengths_append(0)
                    if rid not in leaf_ids:
                        stack.append(j)
                        if child_namespace and rtp is dict and id(ref) != lru_cache:
                            namespaces.add(j)
                elif j < 0 or (j in walls and (ref is tp or not issubclass(rtp, type))):
                    # (a class, met from what is not its instance, is held by it: an edge; a
                    # class is a root only until something named holds it, then an object like
                    # any other: passes.soften's yielding roots)
                    continue
                if names is not None:
                    label = names.get(id(ref), -1)
                elif tag:
                    label = type_labels.get(rid)
                    if label is None:
                        label = type_labels[rid] = label_of("t" + short_type_name(rtp))
                else:
                    label = -1
                if folded_here and label >= 0:
                    label = self._fold_label(label)
                src_append(i)
                dst_append(j)
                lab_append(label)
            if folded:
                sizes[i] += folded
            ref = refs = names = obj = None
            steps += 1
            if steps & _CHECK_EVERY == 0:
                self.check()
                self.progress("graph", len(nodes))

    def _collections(self):
        stats = gc.get_stats()
        return [stats[k].get("collections", 0) - self.gc_before[k] for k in range(min(len(stats), len(self.gc_before)))]

    def _payload_bytes(self):
        return (
            sys.getsizeof(self.index) + sys.getsizeof(self.nodes)
            + (self.sizes.buffer_info()[1] * 16) + (self.types.buffer_info()[1] * 4)
            + 3 * (self.src.buffer_info()[1] * 4) + sys.getsizeof(self.label_index)
            + len(self.index) * 60  # the int keys and values of the index
        )

    def _binary(self):
        """The records as frames: node ids on the edges, one record a node, in id order."""
        columns = ((0, self.ids), (1, self.sizes), (2, self.types), (3, self.lengths), (4, self.src),
                   (5, self.dst), (6, self.lab))
        nbytes = sum(frames_bytes(arr) for _code, arr in columns)

        def pieces():
            for code, arr in columns:
                for piece in frames(code, arr):
                    yield piece

        return Binary(nbytes, pieces)

    def _release(self):
        """Let the target's objects go: nothing of it stays referenced by the result."""
        self.nodes = None
        self.index = None

    node_keys = "id"  # how roots and edges name a node: its id here, its address in C

    after_walk_peak = 0  # what the walk's and the scan after it held at once (_size_after_walk)

    def result(self):
        n = self.node_count()
        payload_bytes = max(self._payload_bytes(), self.after_walk_peak)
        self._release()
        self.type_keys = None
        binary = self._binary()
        out = {
            "format": GRAPH_FORMAT,
            "byteorder": sys.byteorder,
            "nodes": n,
            "edges": self._edges(),
            "node_keys": self.node_keys,
            "type_names": self.type_names,
            "container_types": self.container_types,
            "labels": self._labels(),
            "roots": self.roots,
            "walker": self.walker,
            "graph_seconds": self.seconds,
            "max_step_ms": self.max_step * 1000.0,
            "max_held_ms": self.clock.max_held * 1000.0,
            "max_held_where": list(self.clock.max_held_where),
            "yields": self.clock.yields,
            "payload_peak_bytes": payload_bytes,
            "unreached": self.unreached.copy(),
            "gc_collections": self._collections(),
            "dict_labels": bool(self.dict_labels),
            # The records themselves: written raw after the JSON (graph_wire), never in it.
            "_binary": binary,
        }  # type: wire.Graph
        census = self._census()
        if census is not None:
            out["_census"] = census  # the runner's, never sent (graph_wire leaves it out)
        self.sizes = self.types = self.ids = self.lengths = self.src = self.dst = self.lab = None
        return out

    def _edges(self):
        return len(self.src)

    def _census(self):
        """What the walk counted on the way, by type (runner._counted_in_graph), or None: the
        Python loop keeps no tallies (the census walks then)."""
        return None


class CompiledGraph(Graph):
    """The same walk with its inner loop in C (``_graph_walk.c``): the records, the bitmaps of
    the addresses that are nodes and the walk's state live in one capsule; no reference to the
    nodes is kept (the stack holds the containers still to walk). A node is named by its
    address (``node_keys``), 0 the super-root. With ``spool`` (an open file descriptor: the
    debugger path's graph.bin), full blocks of records are written there as the walk goes,
    each time it yields the GIL, and freed."""

    walker = "compiled"
    work_per_call = None  # units of work per call (tests: small, to split every container)
    node_keys = "address"
    # Without a duty cycle (no pause budget), the records written out past this many bytes.
    FLUSH_BYTES = 8 << 20
    # With one, at each yield, or once past this many: a 25 ms stretch of a registry's walk
    # made ~1.3 MiB of records (its folded sessions), the biggest part of what the walk held
    # in the target (the GIL is released for the write, as for a yield).
    FLUSH_HELD_BYTES = 128 << 10

    def __init__(self, spool=None, reached=None, **kwargs):
        Graph.__init__(self, **kwargs)
        self.dict_labels = MANAGED_DICTS  # read in C, no ctypes needed
        # A dict that receives what the walk reached, as the census's bitmap (graph_reached),
        # when a census after it lists every tracked object (runner._snapshot_graph_first:
        # the census then splits only what the graph did not reach).
        self.reached = reached
        self.slot_cache = {}  # id(type) -> ((label, member descriptor), ...)
        self.frame_labels = {}  # id(type) -> label of "t<Type>"
        self.spool = spool
        self.store = _walk_module.graph_new(
            self.max_nodes, self.type_index, self._type_id,
            self.slot_cache, self._slot_labels, self.frame_labels, self._frame_label,
            tuple(_FRAME_LIKE_TYPES), for_compiled_walk(self.native, _walk_module, self._duty), self._native_extra,
            GraphTooBig)
        for own in self.index:
            _walk_module.graph_own(self.store, own)
        for own in (self.slot_cache, self.frame_labels):
            _walk_module.graph_own(self.store, id(own))
        if spool is not None:
            _walk_module.graph_spool(self.store, spool[1])
        # The labels are the walk's (its own table, not self.labels): their limits
        _walk_module.graph_label(self.store, None, _MAX_LABELS, _MAX_KEY_LABELS)
        self.index = None
        self.nodes = None
        self.sizes = self.types = self.ids = self.lengths = self.src = self.dst = self.lab = None

    # The helpers the C walk calls (the payload's own code).

    def label(self, text):
        # Every label is the C walk's (_graph_walk.c's label store: UTF-8 texts in one table,
        # no str, int and dict entry each in the target), made or found by its text; its fold
        # labels ("f" + a label) are made there too.
        return _walk_module.graph_label(self.store, text)

    def _label_texts(self):
        return _walk_module.graph_labels(self.store)

    def _labels(self):
        store = self.store
        return LabelTexts(lambda start, stop: _walk_module.graph_labels(store, start, stop),
                          _walk_module.graph_info(store)[7])

    def _slot_labels(self, tp):
        if id(tp) in _PLAIN_IDS:
            found = ()
        else:
            # a list first (tracked.py: a tuple built from a generator is resized as it
            # grows, which fails while another thread's gc.get_objects() list holds it)
            found = tuple([(self.label("a" + name), descr) for name, descr in self._slots_of(tp)])
        self.slot_cache[id(tp)] = found
        return found

    def _frame_label(self, tp):
        label = self.frame_labels[id(tp)] = self.label("t" + short_type_name(tp))
        return label

    def _native_extra(self, obj, elements_read=False):
        extra, hidden = native_extra(obj, self.native_kinds, self.native_bases, self.native_seen, elements_read)
        if type(hidden) is HiddenNamed:
            return extra, list(hidden), list(hidden.labels)  # (the C walk's: the edges' names)
        return extra, list(hidden)

    # The building blocks, on the capsule.

    def node(self, obj, size=None, as_type=None):
        i = _walk_module.graph_find(self.store, id(obj))
        if i is not None:
            return i
        return _walk_module.graph_node(self.store, obj, self.size_of(obj) if size is None else size,
                                       self._type_id(type(obj) if as_type is None else as_type))

    def edge(self, i, j, label):
        _walk_module.graph_edge(self.store, i, j, label)

    def wall(self, i):
        _walk_module.graph_edge(self.store, 0, i, 0, True)

    def push(self, stack, i, obj):
        stack.append(obj)

    def node_count(self):
        return _walk_module.graph_info(self.store)[0]

    def own(self, obj):
        _walk_module.graph_own(self.store, id(obj))

    def known(self, obj):
        return _walk_module.graph_find(self.store, id(obj)) is not None

    def unknown(self, objects):
        return _walk_module.graph_unknown(self.store, objects)

    def tracked_count(self):
        return _walk_module.graph_info(self.store)[2]

    def _settle(self):
        _walk_module.graph_settle(self.store)

    def _add_bytes(self, obj, size):
        _walk_module.graph_add_bytes(self.store, id(obj), self._type_id(type(obj)), size)

    store = None  # the capsule, once Graph.__init__ has run

    def _before_yield(self):
        # The full blocks leave while the GIL is released for the yield anyway.
        if self.store is not None:
            _walk_module.graph_flush(self.store)

    def check(self):
        if self.spool is not None and self.store is not None:
            timed = self.clock.max_hold is not None
            if _walk_module.graph_info(self.store)[5] > (self.FLUSH_HELD_BYTES if timed else self.FLUSH_BYTES):
                _walk_module.graph_flush(self.store)
                if timed:
                    self.clock.yielded()
        Graph.check(self)

    def walk(self, stack):
        walk = _walk_module.graph_walk
        reserve = _walk_module.graph_reserve
        store = self.store
        perf_counter = time.perf_counter
        # A new int, only this frame's: the module's constant, held by the call too, would
        # look referenced twice to the walk, and not be folded into the module's dict.
        per_call = (self.work_per_call or _WORK_PER_CALL) * 1
        while True:
            # Tables the next call could fill grow now, moved with the GIL released: not a
            # hold of the target's (a new stretch begins after it).
            if reserve(store, per_call):
                self.clock.yielded()
            t0 = perf_counter()
            done = walk(store, stack, per_call)
            took = perf_counter() - t0
            if took > self.max_step:
                self.max_step = took
            if not done:
                return
            self.check()
            self.progress("graph", self.node_count())

    def run(self):
        _walk_module.graph_keep_types(self.store, self.kept_types)
        # Past the tracked count where listing every tracked object is over the pause budget
        # (held_from_c skips it, and census_lists_all is false: no graph_reached), the
        # containers folded are not marked: a bit per 16 bytes of the heap, what only that
        # listing reads (a folded container is held once: the walk meets it once).
        _walk_module.graph_fold_marks(self.store, listing_over_budget_at(self.max_pause_ms))
        try:
            Graph.run(self)
            if self.reached is not None and census_lists_all(self.unreached, self.max_pause_ms):
                _walk_module.graph_reached(self.store, self.reached)
        finally:
            # What the walk held at its end (its bitmaps only grow), read before graph_close
            # frees them: the result's payload_peak_bytes is read after.
            self.held_at_end = _walk_module.graph_info(self.store)[3]
            # The helpers (bound methods of this graph) and the walk's table: the arrays stay.
            _walk_module.graph_close(self.store)

    held_at_end = 0

    def _payload_bytes(self):
        return max(self.held_at_end, _walk_module.graph_info(self.store)[3])

    def _binary(self):
        store = self.store
        frame = _walk_module.graph_frame
        spooled, left = _walk_module.graph_info(store)[4:6]

        def pieces():
            k = 0
            while True:
                got = frame(store, k)
                if got is None:
                    return
                yield got
                k += 1

        # the rest in one call, the GIL released
        return Binary(spooled + left, pieces, lambda fd: _walk_module.graph_write(store, fd), self.spool)

    def _edges(self):
        return _walk_module.graph_info(self.store)[1]

    def _census(self):
        counts, sizes, objects, total, native = _walk_module.graph_tallies(self.store)
        return {"counts": array.array("q", counts), "bytes": array.array("q", sizes), "names": self.type_names,
                "objects": objects, "total_bytes": total, "native_bytes": native,
                "native_mapped_bytes": mapped_native_bytes(self.native_bases),
                "native_sqlite_bytes": sqlite_native_bytes(self.native_bases),
                "native_ssl_bytes": ssl_native_bytes(self.native_bases),
                "tracked": _walk_module.graph_info(self.store)[2]}

    def _release(self):
        pass


# _graph_walk.c's GRAPH_KEPT_TYPES: graph_keep_types refuses more (16 were too few for a worker
# with ssl, sqlite3, lxml, zstandard, grpc, pydantic-core and two pybind11 ABIs loaded: every
# inspection failed)
_MAX_KEPT_TYPES = 64


def kept_types():
    """The classes of wire.OPAQUE_NATIVE_TYPES loaded in this process (read from their modules'
    dicts, kept where the class's name is the one listed), and those whose objects are sized
    after the walk from their structs (sizes.struct_classes: the bytes go to their nodes;
    pybind11's bases with their subclasses, _graph_walk.c's graph_kept_type); a tuple of
    _MAX_KEPT_TYPES at most, each once."""
    found = []
    seen = set()
    classes = []
    for name in wire.OPAQUE_NATIVE_TYPES:
        module, _dot, qualname = name.rpartition(".")
        cls = class_from(module, qualname)
        if cls is not None and type_name(cls) == name:
            classes.append(cls)
    for kind, cls, _path in struct_classes():
        # (a kind whose objects are of the C class's Python subclasses: those classes too)
        classes.extend(subclass_tree(cls) if kind in STRUCT_SUBCLASSED else [cls])
    for cls in classes:
        if id(cls) not in seen and len(found) < _MAX_KEPT_TYPES:
            seen.add(id(cls))
            found.append(cls)
    return tuple(found)


def _kept_type_ids(kept):
    """The ids of the classes whose objects the Python loop never folds: ``kept``'s, a kept
    class with a metaclass of its own with its subclasses (pybind11's base)."""
    return frozenset(id(tp) for cls in kept for tp in (subclass_tree(cls) if type(cls) is not type else (cls,)))


_FRAME_LIKE_TYPES = (types.FrameType, types.CoroutineType, types.GeneratorType, types.AsyncGeneratorType)


def compiled_available():
    """Whether the compiled walk (_walk.abi3.so) loaded here: not from a noexec directory."""
    return _walk_module is not None


def census_lists_all(unreached, max_pause_ms):
    """Whether a census after a graph walk (its ``unreached`` fields) lists every tracked
    object: the walk looked at what no root reaches itself, or the listing
    (gc.get_objects()) fits the budget (pacing.unsplit_step_fits). Otherwise
    the census could only walk the same roots again (runner._counted_in_graph)."""
    if unreached.get("examined"):
        return True
    estimate = unreached.get("estimated_pause_ms")
    return max_pause_ms is not None and isinstance(estimate, (int, float)) and unsplit_step_fits(estimate, max_pause_ms)


def build(*, timeout, progress, is_stdlib, exclude, max_nodes, max_pause_ms, cancelled, compiled=True, max_bytes=0,
          spool_dir=None, reached=None, memory_left=None):
    """Walk the graph and return its result dict, or ``{"skipped": reason}`` when it is
    bigger than ``max_nodes`` or its walk would hold more than ``max_bytes`` in the target
    (``skipped_code`` says which). ``compiled``: the C walk where it loads;
    ``spool_dir``: the directory the result will be written to (the debugger path): the C
    walk writes its records to its ``graph.bin`` as it goes; ``reached``: a dict the C walk
    fills with what it reached, as the census's bitmap, when a census after it would list
    every tracked object; ``memory_left``: () -> the bytes the request may still take in the
    target, or None (what is sized after the walk stays within it)."""
    if not (compiled and _walk_module is not None):
        graph = Graph(timeout=timeout, progress=progress, is_stdlib=is_stdlib, exclude=exclude, max_nodes=max_nodes,
                      max_pause_ms=max_pause_ms, cancelled=cancelled, max_bytes=max_bytes, memory_left=memory_left)
        spool = None
    else:
        spool = None
        if spool_dir is not None:
            path = os.path.join(spool_dir, BINARY_FILE)
            spool = (path, os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
        graph = CompiledGraph(timeout=timeout, progress=progress, is_stdlib=is_stdlib, exclude=exclude,
                              max_nodes=max_nodes, max_pause_ms=max_pause_ms, cancelled=cancelled,
                              max_bytes=max_bytes, spool=spool, reached=reached, memory_left=memory_left)
    try:
        graph.run()
        out = graph.result()
        spool = None  # the result's now: closed once the rest is written (graph_wire.json_pieces)
        return out
    except GraphTooBig as exc:
        graph = None
        text = str(exc)
        if isinstance(exc, GraphOverHeadroom):
            code = SKIPPED_NO_HEADROOM
        elif text.startswith("more than"):  # (the C walk's GraphTooBig says only this)
            code = SKIPPED_OVER_NODES
        else:
            code = SKIPPED_OVER_MEMORY_BUDGET
        reason = ("the object graph has more than %s nodes: over the graph budget" % format(max_nodes, ",")
                  if code == SKIPPED_OVER_NODES else "the object graph %s" % text)
        return wire.skipped_graph(reason, code, max_nodes)
    finally:
        if spool is not None:  # no graph to send: nothing left behind
            os.close(spool[1])
            try:
                os.unlink(spool[0])
            except OSError:
                pass
