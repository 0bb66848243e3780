"""The messages between the CLI and the payload: every request, every answer, by name.

Both sides import this module: the payload builds its answers with the functions here, and
the CLI decodes an answer once (``leakhound/core/decode.py``) into the model. It runs inside
the target (standard library only, any CPython 3.8+); the TypedDicts are read by the type
checker only (``TYPE_CHECKING`` is false at run time), so loading the payload adds no
``typing`` to a target's ``sys.modules`` (tests/utils.py ``assert_only_the_payload_stays``).

Every answer carries ``payload_version``. The CLI reads the versions it knows and refuses any
other with one clear error: an agent started by another leakhound is told by its version,
never by which fields its answer has.
"""

import sys

# The shape of the requests and answers below. A change of shape is a new version: the CLI
# then refuses an agent that answers with the old one (PayloadVersionMismatch).
PAYLOAD_VERSION = 2

# Requests: ``{"op": OP_..., ...}`` (OPERATIONS in runner.py runs them).
OP_SNAPSHOT = "snapshot"  # the census, the arena, the probes; with ``graph``, the object graph
OP_PING = "ping"
OP_PATCH = "patch"
OP_SAMPLE = "sample"  # watch: the asked owners' and the types' counts
OP_GRAPH = "graph"  # the object graph alone
OP_NAMES = "names"  # the owners' paths walked again in the target, to name them
OP_SITES = "sites"  # the allocation-site tracker: ``action`` SITES_START, SITES_STOP or SITES_STATE
SITES_START = "start"
SITES_STOP = "stop"
SITES_STATE = "state"
# The tracker's defaults, the CLI's and the payload's: one sample per this many bytes allocated
# on average (pprof's and Chrome's rate; benchmarks/sites_overhead.py measures what it costs),
# and the most samples alive at once (their table: 32 bytes a slot, two slots a sample).
SITES_MEAN_BYTES = 512 * 1024
SITES_MAX_SAMPLES = 16384

# Documents handed over within a snapshot request, before its answer (``early_graph``):
# the graph's records as they are written, the graph, and the CLI's reply naming the paths
# to walk again. ``CANCEL`` cancels a request (a file in the private directory, or a line on
# the agent's socket).
PARTIAL_RECORDS = "records"
PARTIAL_GRAPH = "graph"
REPLY_NAMES = "names"
# The ptrace method's bootstrap pages, listed in ``sys`` under this name by the page's first
# statement (attach/ptrace/stop.py) until the payload's thread unmaps them (boot.py, which
# spells it out: it runs before the payload is imported) or the bootstrap does
# (attach/channel.py) when the payload cannot start.
BOOTSTRAP_PAGES = "_leakhound_pages"
CANCEL = "cancel"

# While its dominator pass runs, the CLI replies ``names_working(beat)`` under REPLY_NAMES every
# NAMES_BEAT_SECONDS (a new ``beat`` each time), then the paths: the payload waits for them as
# long as the beats come, and gives up NAMES_BEAT_GRACE seconds after the last one (a CLI
# killed mid-pass), never past its deadline. A fixed wait gave up at 10 s under load, and the
# owners were named by type.
NAMES_BEAT_SECONDS = 1.0
NAMES_BEAT_GRACE = 5.0


def names_working(beat):
    # type: (int) -> Dict[str, int]
    """The CLI's reply while its dominator pass still runs (``beat``: 1, 2, ...)."""
    return {"working": beat}

# ``kind`` of a failed answer (``ok`` false); any other kind is the exception the payload raised.
KIND_BAD_REQUEST = "BadRequest"
KIND_BUSY = "Busy"
KIND_UNSUPPORTED = "Unsupported"  # boot.py: the interpreter is one the payload cannot read
KIND_CANCELLED = "Cancelled"
KIND_FORBIDDEN = "Forbidden"  # the agent's peer is not allowed (agent.py)
KIND_NO_THREAD = "NoThread"  # boot.py: the interpreter starts no new thread (3.12 at its shutdown)
KIND_BOOT_FAILED = "BootFailed"  # attach/channel.py's bootstrap: an error before the payload ran

# Types whose objects hold a C library's memory that leakhound cannot size (no layout read, no
# count the library keeps): their objects' bytes are what sys.getsizeof says, the library's are
# in the ledger's "other". The type table lists them whatever their rank (runner._top_types), the
# graph keeps each a node (graph.kept_types: ``--why TYPE`` names who holds them), and
# analysis/detectors/native_state.py says what each holds.
# (hashlib's hashers and HMACs, _hashlib.HASH and HMAC, are sized: sizes.py evp_digest_bytes;
# OpenSSL's contexts and connections are where the walk scanned OpenSSL's heap: sizes.scanned_object_sizes,
# ``heap.native_ssl_bytes``.)
OPAQUE_NATIVE_TYPES = ("ssl.SSLContext", "_ssl._SSLContext", "_ssl._SSLSocket", "sqlite3.Connection",
                       "pyexpat.xmlparser")

# ``heap.counted_in``: which walk counted the heap
COUNTED_IN_CENSUS = "census"
COUNTED_IN_GRAPH = "graph"

# The object graph's document (``Graph``); analysis.dominators.decode_graph reads it.
# /2: the arrays travel raw after the JSON (graph_wire.Binary), not as base64 in it.
# /3: ``roots`` is one flat list, four items a root (node, label, kind, tier), not a list per
# root: tens of thousands of tracked lists brought the target's next collection forward.
# /4: the records travel in frames (graph_wire.FRAME_COLUMNS); the compiled walk names nodes
# by address (``node_keys``: "address"), leakhound gives them ids.
GRAPH_FORMAT = "leakhound.graph/5"

TYPE_CHECKING = False  # mypy reads the block below as reachable; the target never runs it
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, TypedDict, Union

    class SnapshotRequest(TypedDict, total=False):
        op: str
        top_types: int
        top_owners: int
        graph: bool  # walk the object graph for the dominator owners
        census_owners: bool  # false: no first reachers when the graph is skipped
        max_graph_nodes: int
        max_graph_bytes: int
        max_pause_ms: float
        walker: str  # "python": the pure-Python loop even where the compiled one loads
        early_graph: bool  # hand the graph over before the answer (attach sets it)
        timeout: float  # the payload's own deadline (attach sets it)
        max_extra_bytes: int  # the request's memory budget in the target (attach sets it)
        sites: bool  # read the allocation-site tracker as the graph's walk ends, then stop it

    class SitesRequest(TypedDict, total=False):
        op: str
        action: str  # SITES_START, SITES_STOP, SITES_STATE
        mean_bytes: int  # one sample per this many bytes allocated, on average
        seconds: float  # the tracker's own deadline
        max_samples: int

    class SitesFound(TypedDict, total=False):
        """The tracker's surviving samples (sites.read_and_stop)."""

        available: bool
        reason: str
        samples: List[List[int]]  # [node address (0: none), stack, bytes, count, samples]
        stacks: List[List[List[object]]]  # [file, line, function] each, innermost first
        tracker: Dict[str, Any]  # _sites.c's state: sampled, dropped, table_bytes, expired...

    class NamesRequest(TypedDict, total=False):
        op: str
        paths: List[List[int]]  # object ids from a root, one list a path

    class SampleRequest(TypedDict, total=False):
        op: str
        owners: List[Dict[str, object]]  # {"ids", "steps", "type", "path"} each
        top_types: int
        allocator: bool  # the allocator's bytes in use too
        registry: bool  # the verifiers registry's counts too
        max_pause_ms: float  # the type counts are skipped when their one listing would be longer

    class PatchRequest(TypedDict, total=False):
        op: str
        action: str
        fixes: List[str]
        options: Dict[str, object]
        by: Dict[str, object]  # who applies it: uid, user, leakhound_version

    class MemoryCost(TypedDict):
        peak_rss_bytes: int
        max_extra_bytes: Optional[int]
        loaded_bytes: int

    class TargetCollections(TypedDict):
        """The target's own collections that ran in the payload's thread (pacing.py)."""

        collections: List[int]  # per generation
        seconds: float
        max_ms: float

    class TypeRow(TypedDict):
        type: str
        count: int
        bytes: int

    class OwnerRow(TypedDict, total=False):
        path: str
        type: str
        items: int
        retained_bytes: int
        retained_objects: int

    class Skipped(TypedDict):
        """A probe that could not run, and why (a result, not a failure)."""

        skipped: str

    class AppliedEntry(TypedDict):
        fix: str
        functions: List[str]
        applied_at: Optional[float]
        applied_by: Dict[str, object]  # uid, user, leakhound_version

    class PatchesProbe(TypedDict):
        """The fixes leakhound applied in the target (probes.patches_probe)."""

        applied: List[AppliedEntry]

    class RegistryCounts(TypedDict):
        entries: int
        finished_entries: int

    class ProbePace(TypedDict):
        max_hold_ms: float
        yields: int

    class VerifiersProbe(TypedDict):
        """The verifiers runtime's facts (probes.verifiers_probe); their fields are the
        detectors' (analysis/detectors)."""

        registry: Dict[str, Any]
        steps: Dict[str, int]
        intercepts: Dict[str, int]
        sizing: List[str]  # which walk sized the registry, then the bodies: "compiled" or "python"
        pace: ProbePace

    # by probe name (probes.PROBES): "patches", "verifiers"
    Probes = Dict[str, Union[PatchesProbe, VerifiersProbe, Skipped]]

    class CyclicGarbage(TypedDict):
        objects: int
        bytes: int
        types: List[TypeRow]

    class Unreached(TypedDict, total=False):
        """What no named root reaches: examined (gc.get_objects() listed), or why not."""

        examined: bool
        reason: str
        estimated_pause_ms: Optional[float]
        ns_per_object: float
        rate: str  # "measured" or "default"
        sized_by: str  # what sized the estimate
        held: int  # the graph's walk: objects it held back as not reached
        garbage_objects: int

    class Heap(TypedDict, total=False):
        """What the census (or the graph's walk, ``counted_in``) counted."""

        objects: int
        bytes: int
        gc_tracked: int
        untracked: int
        census_seconds: float
        walker: str
        sizes: str  # sizes.SIZE_MODEL: the allocators' blocks, or "requested"
        counted_in: str  # COUNTED_IN_...
        with_owners: bool
        unreached: Unreached
        max_step_ms: float
        max_pause_budget_ms: Optional[float]
        max_hold_ms: float
        max_hold_after: str
        max_hold_where: List[str]
        max_gap_ms: float
        max_gap_where: List[str]
        yields: int
        gc_collections: List[int]
        phases: Dict[str, List[float]]  # [wall s, CPU s]
        payload_peak_bytes: int
        native_bytes: int
        native_mapped_bytes: int  # of native_bytes: on a file's or shared memory's pages (in "mapped files" too)
        native_sqlite_bytes: int  # of native_bytes: SQLite's for its connections (in sqlite3_memory_used too)
        native_ssl_bytes: int  # of native_bytes: OpenSSL's for its contexts (sizes.scanned_object_sizes)
        notes: List[str]
        types: List[TypeRow]
        owners: List[OwnerRow]
        cyclic_garbage: CyclicGarbage
        started_at: float  # the target's time.time() as the named roots' walk began
        graph_started_at: float  # likewise, as the graph's walk began (the dominator owners)

    class Graph(TypedDict, total=False):
        """The object graph (graph.py; its arrays decoded by analysis.dominators.decode_graph),
        or why it was not walked (``skipped``)."""

        format: str  # GRAPH_FORMAT
        skipped: str
        skipped_code: str  # graph.SKIPPED_...
        max_nodes: int
        byteorder: str
        nodes: int
        edges: int
        node_keys: str
        type_names: List[str]
        container_types: List[int]
        labels: List[str]
        roots: List[Any]  # node, label, kind, tier: four items a root
        walker: str
        dict_labels: bool
        graph_seconds: float
        max_step_ms: float
        max_held_ms: float
        max_held_where: List[str]
        yields: int
        gc_collections: List[int]
        payload_peak_bytes: int
        counts_heap: bool  # its walk counted the heap: no census follows
        unreached: Unreached
        binary_file: str
        binary_bytes: int
        records_streamed: int  # the CLI's count of the records that came as they were written
        payload_version: int  # handed over before the answer (partial_graph)
        _binary: Any  # the records, written raw after the JSON (graph_wire), never in it
        _census: Any  # the heap's counts the walk made, for the runner; never sent

    class Names(TypedDict):
        labels: List[Optional[List[str]]]  # one a path asked for, an edge's label a step

    class Answer(TypedDict, total=False):
        """What every answer has."""

        ok: bool
        payload_version: int
        python_version: str
        payload_seconds: float
        memory_cost: MemoryCost
        target_gc_in_payload_thread: TargetCollections

    class Failure(Answer, total=False):
        kind: str  # KIND_...
        error: str
        reason: str  # Cancelled: "deadline", "cancel" or "memory"
        phase: str
        traceback: str

    class SnapshotAnswer(Answer, total=False):
        heap: Heap
        arena: Dict[str, Any]  # model.ArenaStats's fields
        probes: Probes
        phases: Dict[str, List[float]]  # the request's, [wall s, CPU s]
        graph: Graph  # in the answer when it was not handed over before it
        graph_sent: bool  # the graph was handed over before the answer (PARTIAL_GRAPH)
        names: Names  # the paths the CLI posted (REPLY_NAMES), named
        sites: SitesFound  # with the request's ``sites``

    class SampleAnswer(Answer, total=False):
        started_at: float
        owners: List[Dict[str, object]]  # {"found", "items"[, "bytes"]} each, in the order asked
        types: Optional[List[TypeRow]]
        types_skipped: Optional[str]  # why there are no type counts (the pause budget)
        allocator_in_use_bytes: Optional[int]
        registry: Optional[RegistryCounts]
        max_step_ms: float
        sample_seconds: float

    class PatchAnswer(Answer, total=False):
        results: List[Dict[str, Any]]  # {"fix", "status", ...} per fix asked, in order
        applied: List[AppliedEntry]
        measure_before: Dict[str, Any]  # patches.Measurement's fields
        measure: Dict[str, Any]
        measure_skipped: str


def free_threaded():
    """Whether this interpreter is a free-threaded build (3.13t: its ``sys.abiflags`` has a "t"):
    no GIL, and its objects' header is not the one the payload reads."""
    return "t" in getattr(sys, "abiflags", "")


def python_version():
    return "%d.%d.%d" % sys.version_info[:3]


def snapshot_answer(heap, arena, probes, phases, graph=None, graph_sent=False, names=None):
    """A snapshot's answer (before ``answered`` adds what every answer has)."""
    out = {"heap": heap, "arena": arena, "probes": probes, "phases": phases,
           "python_version": python_version()}  # type: SnapshotAnswer
    if graph is not None:
        out["graph"] = graph
    if graph_sent:
        out["graph_sent"] = True
    if names is not None:
        out["names"] = names
    return out


def skipped_graph(reason, code, max_nodes=None):
    """The graph's document when it was not walked or not finished: why, in words and as a
    code (graph.SKIPPED_..., the CLI's NotAttributed)."""
    out = {"format": GRAPH_FORMAT, "skipped": reason, "skipped_code": code}  # type: Graph
    if max_nodes is not None:
        out["max_nodes"] = max_nodes
    return out


def partial_graph(graph):
    """The graph handed over before the answer (PARTIAL_GRAPH): with the payload's version,
    so the CLI analyses only a graph of a version it reads."""
    graph["payload_version"] = PAYLOAD_VERSION
    return {"graph": graph}


def memory_cost(peak_rss_bytes, max_extra_bytes, loaded_bytes):
    return {"peak_rss_bytes": peak_rss_bytes, "max_extra_bytes": max_extra_bytes,
            "loaded_bytes": loaded_bytes}  # type: MemoryCost


def answered(out, payload_seconds, cost, target_gc):
    """``out``, an operation's answer, with what every successful answer has."""
    out["ok"] = True
    out["payload_version"] = PAYLOAD_VERSION
    out["payload_seconds"] = payload_seconds
    out["memory_cost"] = cost
    out["target_gc_in_payload_thread"] = target_gc
    return out


def failed(kind, error, **fields):
    """A failed answer: ``kind`` (KIND_... or the exception's name) and what went wrong."""
    out = {"ok": False, "kind": kind, "error": error, "payload_version": PAYLOAD_VERSION}  # type: Failure
    out.update(fields)  # type: ignore[typeddict-item]
    return out
