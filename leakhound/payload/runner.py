"""Entry points of the in-target payload: one request in, one JSON result out.

Runs inside the target with the standard library only. Two ways in:

* ``run_from_dir(dir)``: the debugger path. The bootstrap (``boot.py``) runs at a safe point
  on the main thread and only starts a short-lived daemon thread, which loads this package
  and calls this: it reads ``request.json`` from the private directory, writes
  ``progress.json`` while it works and ``result.json`` (by atomic rename) when done
  (transport.py).
* ``handle(request, progress, cancelled)``: the in-process agent path (``agent_server.py``),
  called on the agent's own thread.

A snapshot that asks for the object graph with ``early_graph`` hands the graph over as soon
as it is walked (on the debugger path ``graph.json`` and ``graph.bin`` through
``transport.DirectoryExchange``; on the agent's socket a line through
``agent_server.SocketExchange``), then counts the census, the
arena and the probes while the CLI computes the dominator tree in its own process; the CLI
then posts the paths it wants named (``names.request.json``, or a reply line) and the labels
come back in the result (``names``): one attach, the two processes working at once.

Only the fixed operations in ``OPERATIONS`` are accepted; a request never carries code.

Every request ends by itself: it carries ``timeout`` (the CLI's, minus a margin), and the work
checks that deadline and the CLI's explicit cancel (a ``cancel`` file in the private
directory, the directory gone, or a ``cancel`` line / a closed connection on the agent socket)
at every step of the census and between phases. A cancelled request answers
``{"ok": false, "kind": "Cancelled", "reason": "deadline" | "cancel", "phase": ...}`` and
releases the lock (``_busy``), so nothing keeps running unobserved. A patch lands all its
fixes in one step after its last cancellation point: cancelled means nothing landed.
"""

import os
import sys
import threading
import time

# The modules a request may need are imported here, at load, but for the fixes (patches: with
# the ``inspect`` module it imports, ~1 MiB of a target's memory that no inspection needs),
# imported by the first ``patch`` request, and watch's cheap samples (sampling), by the first
# ``sample`` request. On the debugger path the package is loaded from
# the request's private directory, which is removed once it is answered: the next request
# of the same payload version points the loaded package at its own directory (boot.py) before
# it reuses it. (A payload kept for the fixes it applied, under another version, has them.)
from . import arena, census, graph, pacing, probes, sites, sizes, transport, wire
from .graph_wire import BINARY_FILE
from .wire import PAYLOAD_VERSION

_busy = threading.Lock()


def _is_stdlib(name):
    top = name.split(".", 1)[0]
    names = getattr(sys, "stdlib_module_names", None)
    if names is None:
        return top in sys.builtin_module_names
    return top in names or top.startswith("_") and top[1:] in names


class Cancelled(Exception):
    """The request's deadline passed or the CLI cancelled it; raised between steps only."""

    def __init__(self, reason, phase):
        Exception.__init__(self, "request cancelled (%s) during %s" % (reason, phase))
        self.reason = reason
        self.phase = phase


def _own_thread():
    """This request's thread's ``threading.Thread`` (boot.py started it), as a 1-tuple, or ():
    left out of the walks. Its ``_invoke_excepthook`` closure holds the ``sys.excepthook`` of
    the moment it started: a chain of hooks, each wrapping the one it replaced, was named
    ``threading._active[]._invoke_excepthook.__closure__[]`` through it."""
    thread = threading._active.get(threading.get_ident())  # type: ignore[attr-defined]
    return (thread,) if thread is not None else ()


def _statm_fd():
    try:
        return os.open("/proc/self/statm", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return -1


def resident_bytes(fd):
    """The process's RSS, from an open /proc/self/statm (re-read from its start); 0 if unreadable."""
    try:
        return int(os.pread(fd, 128, 0).split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
# The RSS before the payload was loaded (boot.py sets it, the loading being part of what a
# request costs the target); taken by the next request, which measures its cost from it.
_rss_at_boot = 0


def set_rss_at_boot(rss):
    """The RSS before boot.py loaded the payload, for the next request to measure from."""
    global _rss_at_boot
    _rss_at_boot = rss


class _MemoryBudget(object):
    """What the request has cost the target so far, measured as it runs: the process's RSS
    (/proc/self/statm) over what it was as the request began (before the payload was loaded,
    on its first load); ``limit`` (``max_extra_bytes``) is what it may reach. The RSS is the
    target's as a whole: its own growth meanwhile counts too, which errs on the safe side."""

    def __init__(self, limit, baseline=0):
        self.limit = limit
        # Files the request writes for the CLI (graph.bin), counted while their pages exist:
        # the CLI gives them back as it reads (attach/channel.py _Tail), which may lag.
        self.files = []
        self.fd = _statm_fd()
        now = resident_bytes(self.fd) if self.fd >= 0 else 0
        self.baseline = baseline if 0 < baseline <= now else now
        # what loading the payload added (kept for the next request): not the target's growth
        self.loaded = now - self.baseline
        self.peak = now - self.baseline

    def cost(self):
        if self.fd < 0:
            return 0
        cost = resident_bytes(self.fd) - self.baseline
        for path in self.files:
            try:
                cost += os.lstat(path).st_blocks * 512
            except OSError:
                pass
        if cost > self.peak:
            self.peak = cost
        return cost

    def left(self):
        """Bytes the request may still take, or None without a budget."""
        if self.limit is None:
            return None
        return self.limit - self.cost()

    def close(self):
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class _Stop(object):
    """The request's cancellation point: its own deadline, the CLI's explicit cancel, and its
    memory budget (``memory``, a ``_MemoryBudget``: reason "memory" once the request's cost
    in the target passes it).

    ``check(phase)`` raises ``Cancelled``; calling the object answers True once cancelled
    (what the census takes as ``cancelled=``). The explicit channel is polled at most every
    ``every`` seconds, the RSS every ``MEMORY_EVERY``: a poll is a system call, which hands the
    GIL to the main thread.
    """

    # A walk can grow the target by ~80 MB/s (the object graph's tables on a 4 GB heap: 47 MiB
    # in 0.6 s): at 0.1 s between looks a 16 MiB budget was passed by 3.6 MiB on a 1 GB heap.
    MEMORY_EVERY = 0.03

    def __init__(self, timeout, explicit=None, every=0.1, memory=None, beat=None):
        self.deadline = time.monotonic() + timeout
        self.explicit = explicit
        # Called with the explicit poll: the request is at a cancellation point, which is
        # its progress for the CLI however long a phase goes without counting anything
        # (attach/deadline.py gives up a request that shows none for its stall window).
        self.beat = beat
        self.every = every
        self.polled = 0.0
        self.reason = None
        self.phase = "start"
        self.memory = memory
        self.memory_polled = 0.0

    def over_memory(self):
        return self.memory is not None and self.memory.limit is not None and self.memory.left() < 0

    def memory_left(self):
        """The bytes the request may still take in the target, or None: no budget."""
        return self.memory.left() if self.memory is not None else None

    def __call__(self):
        if self.reason is not None:
            return True
        now = time.monotonic()
        if now > self.deadline:
            self.reason = "deadline"
        elif (self.memory is not None and self.memory.limit is not None
              and now - self.memory_polled >= self.MEMORY_EVERY):
            self.memory_polled = now
            if self.over_memory():
                self.reason = "memory"
        if self.reason is None and now - self.polled >= self.every:
            self.polled = now
            if self.explicit is not None:
                try:
                    if self.explicit():
                        self.reason = wire.CANCEL
                except Exception:
                    pass
            if self.beat is not None and self.reason is None:
                self.beat()
        return self.reason is not None

    def check(self, phase):
        self.phase = phase
        if self():
            raise Cancelled(self.reason, phase)


# The longest deadline a request may carry (the ptrace janitor's bound too): a longer one is
# cut to it, never taken for a missing one (60 s).
MAX_REQUEST_TIMEOUT = 86400.0


def _request_timeout(request):
    """The request's own deadline in seconds (the CLI's hard limit less a margin), which holds
    whatever happens to the CLI; 60 s when it carries none."""
    timeout = request.get("timeout")
    if type(timeout) not in (int, float) or not timeout > 0:
        return 60.0
    return min(float(timeout), MAX_REQUEST_TIMEOUT)


def _max_extra_bytes(request):
    """The request's memory budget in the target (``max_extra_bytes``), or None: no cap."""
    value = request.get("max_extra_bytes")
    return value if type(value) is int and value >= 0 else None


def _int(value, default, low, high):
    if type(value) is not int:
        return default
    return max(low, min(high, value))


def _census(**kwargs):
    """A Census that stops when ``cancelled()`` says so (census.CensusCancelled), where the
    census takes that hook; otherwise its own deadline and the checks between phases."""
    try:
        return census.Census(**kwargs)
    except TypeError:
        if "cancelled" not in kwargs:
            raise
        kwargs.pop("cancelled")
        return census.Census(**kwargs)


# What the last census in this process counted: sizes the graph's table, and says when a
# graph walked before the census (early_graph) would be over its node budget.
_last_census = {"objects": 0, "seconds": 0.0}


def _snapshot(request, progress, stop, exchange=None):
    top_types = _int(request.get("top_types"), 50, 1, 10000)
    top_owners = _int(request.get("top_owners"), 50, 1, 10000)
    max_pause = request.get("max_pause_ms")
    max_pause = float(max_pause) if type(max_pause) in (int, float) and 0 < max_pause <= 60000 else None
    stop.check("census")
    phases = {}
    mark = [time.perf_counter(), time.thread_time()]

    def phase(name):
        # [wall s, CPU s of the payload's thread] since the previous mark
        now, cpu = time.perf_counter(), time.thread_time()
        phases[name] = [round(now - mark[0], 4), round(cpu - mark[1], 4)]
        mark[:] = [now, cpu]

    def census_run(owners, exclude, reached=None):
        walk = _census(
            timeout=max(1.0, stop.deadline - time.monotonic()),  # the request's time left
            progress=progress,
            is_stdlib=_is_stdlib,
            exclude=tuple(exclude) + _own_thread(),
            compiled=request.get("walker") != "python",
            max_pause_ms=max_pause,
            cancelled=stop,
            owners=owners,
            memory_left=stop.memory_left,
            **({"reached": reached} if reached is not None else {}),
        )
        started_at = time.time()  # when the named roots' walk began: the snapshot's time (diff rates)
        try:
            walk.run()
        except _CENSUS_STOPPED:
            stop.reason = stop.reason or "deadline"
            raise Cancelled(stop.reason, "census") from None
        # (after the graph: every type, for _with_graph_tallies to add the graph's to)
        heap = walk.result(top_types=top_types if reached is None else 1 << 30, top_owners=top_owners)
        heap["started_at"] = started_at
        _last_census["objects"] = heap.get("objects", 0)
        _last_census["seconds"] = float(heap.get("census_seconds") or 0.0)
        return heap

    # With the object graph asked for, its dominator tree names the owners: the census counts
    # the heap without them (one walk from every root: on the busy real worker a third of
    # the census's CPU), and walks the first reachers if the graph is skipped (too big, out of
    # time) only for a CLI that shows them then (``census_owners``).
    want_graph = bool(request.get("graph"))
    # False: the CLI names no owner when the graph is skipped (``<not attributed: ...>``), so
    # the census does not walk the first reachers for it then.
    census_owners = request.get("census_owners") is not False
    in_flight = set()  # type: set
    registered = None
    if want_graph and exchange is not None and request.get("early_graph"):
        return _snapshot_graph_first(request, progress, stop, exchange, census_run, phase, phases, max_pause,
                                     census_owners)
    # Allocation sites (a watch's tracker) are read as the graph's walk ends: it noted which
    # node each surviving sample is part of.
    want_sites = bool(request.get("sites"))
    heap = census_run(not want_graph, (request,))
    phase("census")
    out_graph = None
    if want_graph:
        heap["graph_started_at"] = time.time()  # dominator owners are counted from here
        # The rollouts in flight as the graph's walk begins: one finished by the probes' time
        # is still its task's in the graph (the probes then count it in flight).
        in_flight, registered = probes.in_flight_before(), probes.registered_before()
        if want_sites:
            sites.noting(True)
        out_graph = _graph(request, progress, stop, heap, spool_dir=getattr(exchange, "spool_dir", None))
        phase("graph")
        if out_graph.get("skipped"):
            if census_owners:
                counted = heap
                heap = census_run(True, (request, out_graph, counted))
                del counted
                phase("census (owners)")
            heap.pop("graph_started_at", None)
    sites_found = sites.read_and_stop() if want_sites else None
    allocators, found = _arena_and_probes(request, progress, stop, phase, max_pause, in_flight, registered)
    stop.check("result")
    # phases: where the request's time went (docs/performance.md), [wall s, CPU s]
    out = wire.snapshot_answer(heap, allocators, found, phases, graph=out_graph)
    if sites_found is not None:
        out["sites"] = sites_found
    return out


def _arena_and_probes(request, progress, stop, phase, max_pause, in_flight, registered):
    """The arena's numbers and the probes' facts, each its own cancellation point and phase;
    ``in_flight`` and ``registered``: the rollouts as the owners' walk began (probes.py)."""
    stop.check("arena")
    progress("arena", 0)
    allocators = arena.arena_stats()
    phase("arena")
    stop.check("probes")
    progress("probes", 0)
    found = probes.run_all(stop=stop, max_pause_ms=max_pause, compiled=request.get("walker") != "python",
                           in_flight=in_flight, registered=registered)
    phase("probes")
    return allocators, found


# How long the payload waits for the CLI's names after the census and the probes: at least
# NAMES_WAIT_MIN seconds, or NAMES_WAIT_FACTOR times the graph's walk.
NAMES_WAIT_MIN = 10.0
NAMES_WAIT_FACTOR = 4.0


def _snapshot_graph_first(request, progress, stop, exchange, census_run, phase, phases, max_pause,
                          census_owners=True):
    """The snapshot with the graph walked first and handed over at once (``early_graph``):
    the CLI's dominator pass runs while the census, the arena and the probes run here."""
    graph_started_at = time.time()
    in_flight, registered = probes.in_flight_before(), probes.registered_before()
    reached = {}  # type: dict  # what the graph walk reached, as the census bitmap (graph_reached)
    want_sites = bool(request.get("sites"))
    if want_sites:
        sites.noting(True)  # the walk notes which node each surviving sample is part of
    out_graph = _graph(request, progress, stop, census_seconds=_last_census["seconds"], spool_dir=exchange.spool_dir,
                       tallies=True,
                       reached=reached)
    sites_found = sites.read_and_stop() if want_sites else None
    phase("graph")
    skipped = out_graph.get("skipped")
    graph_seconds = float(out_graph.get("graph_seconds") or 0.0)
    tallies = out_graph.pop("_census", None)
    counted = _counted_in_graph(tallies, out_graph, max_pause, graph_started_at, request)
    # gc.get_objects() fits the budget (the graph handed over its bitmap then): the census
    # only splits what the graph did not reach (held from C, cyclic garbage), no walk of
    # its own from the roots (on the busy real worker ~0.3 s of the payload's CPU).
    split_only = counted is None and tallies is not None and not skipped and bool(reached)
    if counted is not None:
        out_graph["counts_heap"] = True  # no census follows: the CLI reads the kernel's numbers now
    stop.check("graph")
    exchange.send(wire.PARTIAL_GRAPH, wire.partial_graph(out_graph))
    out_graph = None  # sent: its arrays are the CLI's now
    phase("graph sent")
    if counted is not None:
        heap = counted
    elif split_only:
        heap = _with_graph_tallies(census_run(False, (request, reached), reached=reached), tallies, graph_seconds,
                                   request)
        phase("census (what the graph did not reach)")
    else:
        heap = census_run(bool(skipped) and census_owners, (request,))
        phase("census (owners)" if skipped and census_owners else "census")
    del reached, tallies
    if not skipped:
        heap["graph_started_at"] = graph_started_at  # dominator owners are counted from here
    allocators, found = _arena_and_probes(request, progress, stop, phase, max_pause, in_flight, registered)
    out = wire.snapshot_answer(heap, allocators, found, phases, graph_sent=True)
    if sites_found is not None:
        out["sites"] = sites_found
    if not skipped:
        # The owners' paths, once the CLI has chosen them: walked again here to name them.
        progress("names", 0)
        # At most a few times the walk's time (the dominator pass takes less than the walk):
        # a CLI that died without a word (SIGKILL on the gdb path, no janitor) leaves the
        # request, and its lock, waiting that long, not until its deadline.
        wait = max(NAMES_WAIT_MIN, NAMES_WAIT_FACTOR * graph_seconds)
        asked = _receive_paths(exchange, stop, wait)
        if asked is not None:
            out["names"] = graph.name_paths(asked)
        phase("names")
    return out


def _receive_paths(exchange, stop, wait):
    """The CLI's paths to name (its REPLY_NAMES), or None: waited for ``wait`` seconds, and
    after that for as long as the CLI's beats say its dominator pass still runs (each new beat
    gives it wire.NAMES_BEAT_GRACE seconds more), never past the request's deadline."""
    until = min(stop.deadline - 1.0, time.monotonic() + wait)
    last = None
    while True:
        doc = exchange.receive(wire.REPLY_NAMES, stop, until)
        if doc is None or "working" not in doc:
            return doc
        beat = doc.get("working")
        if beat != last:
            last = beat
            until = min(stop.deadline - 1.0, max(until, time.monotonic() + wire.NAMES_BEAT_GRACE))
        else:
            time.sleep(0.05)  # the debugger path's file says the same beat until the next one


def _counted_in_graph(tallies, out_graph, max_pause, started_at, request):
    """The census's result from what the graph's walk counted on the way (graph.py
    ``_census``), when a census would add nothing to it: the graph was walked (compiled), and
    the one step that cannot be split (gc.get_objects()) is over the pause budget for the
    census too, so the census would only walk the same roots again to count them (a third
    of the request's time in the target on a 4.8M-object heap). None otherwise; the tallies
    never leave the target either way."""
    unreached = out_graph.get("unreached") or {}
    estimate = unreached.get("estimated_pause_ms")
    if (tallies is None or out_graph.get("skipped") or max_pause is None or not isinstance(estimate, (int, float))
            or graph.census_lists_all(unreached, max_pause)):
        return None
    estimate = float(estimate)
    tracked = tallies["tracked"]
    census.remember_tracked(tracked)
    seconds = float(out_graph.get("graph_seconds") or 0.0)
    _last_census["objects"] = tallies["objects"]
    _last_census["seconds"] = seconds
    heap = {
        "objects": tallies["objects"],
        "bytes": tallies["total_bytes"],
        "gc_tracked": tracked,
        "untracked": max(0, tallies["objects"] - tracked),
        "census_seconds": seconds,
        "walker": out_graph.get("walker", "compiled"),
        "sizes": sizes.SIZE_MODEL,
        "counted_in": wire.COUNTED_IN_GRAPH,  # no census walk ran: the graph's walk counted (HeapStats.counted_in)
        "with_owners": False,
        "unreached": census.unreached_over_budget(tracked, estimate, max_pause),
        "max_step_ms": float(out_graph.get("max_step_ms") or 0.0),
        "max_pause_budget_ms": max_pause,
        "max_hold_ms": round(float(out_graph.get("max_held_ms") or 0.0), 2),
        "yields": out_graph.get("yields", 0),
        "gc_collections": out_graph.get("gc_collections", []),
        "phases": {},
        "payload_peak_bytes": out_graph.get("payload_peak_bytes", 0),
        "native_bytes": tallies["native_bytes"],
        "native_mapped_bytes": tallies.get("native_mapped_bytes", 0),
        "native_sqlite_bytes": tallies.get("native_sqlite_bytes", 0),
        "native_ssl_bytes": tallies.get("native_ssl_bytes", 0),
        "notes": [],
        "types": _top_types(tallies, [], request),
        "owners": [],
        "cyclic_garbage": {"objects": 0, "bytes": 0, "types": []},
        "started_at": started_at,  # (graph_started_at: set by the caller, as for a census)
    }  # type: wire.Heap
    return heap


def _top_types(tallies, more, request):
    """The type table: the graph's tallies by type name, plus ``more`` (a census's rows), the
    biggest ``top_types`` by bytes, then the types of wire.OPAQUE_NATIVE_TYPES there are."""
    counts, sizes, names = tallies["counts"], tallies["bytes"], tallies["names"]
    by_name = {}  # type: dict
    for i in range(len(counts)):
        if counts[i] or sizes[i]:
            row = by_name.setdefault(names[i], [0, 0])
            row[0] += counts[i]
            row[1] += sizes[i]
    for row in more:
        mine = by_name.setdefault(row["type"], [0, 0])
        mine[0] += row["count"]
        mine[1] += row["bytes"]
    order = sorted(by_name.items(), key=lambda item: -item[1][1])[:_int(request.get("top_types"), 50, 1, 10000)]
    # and the types holding memory of a C library's that no size counts, whatever their rank
    listed = {name for name, _row in order}
    order += [(name, by_name[name]) for name in wire.OPAQUE_NATIVE_TYPES if name in by_name and name not in listed]
    return [{"type": name, "count": count, "bytes": size} for name, (count, size) in order]


def _with_graph_tallies(heap, tallies, graph_seconds, request):
    """The census that split only what the graph's walk did not reach (Census(reached=...)),
    with what that walk counted added: the heap's totals and types."""
    heap["types"] = _top_types(tallies, heap.get("types") or [], request)
    heap["objects"] = heap.get("objects", 0) + tallies["objects"]
    heap["bytes"] = heap.get("bytes", 0) + tallies["total_bytes"]
    heap["native_bytes"] = heap.get("native_bytes", 0) + tallies["native_bytes"]
    heap["native_mapped_bytes"] = heap.get("native_mapped_bytes", 0) + tallies.get("native_mapped_bytes", 0)
    heap["native_sqlite_bytes"] = heap.get("native_sqlite_bytes", 0) + tallies.get("native_sqlite_bytes", 0)
    heap["native_ssl_bytes"] = heap.get("native_ssl_bytes", 0) + tallies.get("native_ssl_bytes", 0)
    heap["untracked"] = max(0, heap["objects"] - heap.get("gc_tracked", 0))
    heap["census_seconds"] = float(heap.get("census_seconds") or 0.0) + graph_seconds
    heap["counted_in"] = "graph"  # the census split what no root reaches; the graph counted the rest
    _last_census["objects"] = heap["objects"]
    _last_census["seconds"] = heap["census_seconds"]
    return heap


# The share of the request's remaining time the object graph may take.
GRAPH_SHARE = 0.6
# Under a memory budget, the least left of it worth walking a graph with, and what is kept
# back from the graph's share for what its own count does not see (its tables of types and
# labels, malloc's rounding, the document sent after it): a quarter of the budget, at least
# 6 MiB. Measured on a 100 MB heap, the target's RSS grew 3.4 MiB past what the walk counted
# when it gave up (the agent: its cgroup +15.3 MiB of a 16 MiB budget with 4 MiB kept back).
GRAPH_MIN_BYTES = 2 << 20
GRAPH_RESERVE = 6 << 20
GRAPH_RESERVE_SHARE = 0.25


def _graph(request, progress, stop, heap=None, census_seconds=0.0, spool_dir=None, tallies=False,
           reached=None):
    """The object graph for the dominator tree (graph.py), when it fits ``max_graph_nodes``
    and the request's memory budget; else ``{"skipped": reason}``. ``spool_dir``: where the result is written (the
    debugger path), its records written there as the walk goes. ``tallies``: keep what the
    walk counted on the way (``_census``, for _counted_in_graph); ``reached``: a dict that
    receives what it reached, as the census's bitmap (graph.build)."""
    out = _graph_walked(request, progress, stop, heap, census_seconds, spool_dir, reached)
    if not tallies:
        out.pop("_census", None)
    return out


# The graph's bitmaps: a bit per 16-byte granule of every MiB holding a node (as the census's),
# RSS/128, and what it reaches of the shared leaves; a stack and a few blocks besides.
GRAPH_BITMAP_SHARE = 1.0 / 100
# What the last graph walked in this process found: over the node budget, a request with no
# larger budget is not walked again (the result says why: ``skipped``, ``skipped_code``).
_last_graph = {"over_nodes": 0, "seconds": 0.0}


def _graph_walked(request, progress, stop, heap, census_seconds, spool_dir, reached=None):
    max_nodes = _int(request.get("max_graph_nodes"), 1000000, 1, 100000000)
    # No budget of objects: the walk folds what one collection alone holds into it, so the
    # heap's object count says little of its nodes (a registry of 2.4M sessions, 16.5M
    # objects: a few thousand nodes). The node budget is the walk's own count.
    if _last_graph["over_nodes"] and max_nodes <= _last_graph["over_nodes"]:
        return wire.skipped_graph("the last object graph walked in this process had more than %s nodes: over the "
                                  "graph budget of %s nodes" % (format(_last_graph["over_nodes"], ","),
                                                                format(max_nodes, ",")),
                                  graph.SKIPPED_OVER_NODES, max_nodes)
    if heap is not None and not heap.get("with_owners", True):
        census_seconds = float(heap.get("census_seconds") or 0.0)
    max_pause = request.get("max_pause_ms")
    max_pause = float(max_pause) if type(max_pause) in (int, float) and 0 < max_pause <= 60000 else None
    stop.check("graph")
    # The graph may fail: the request goes on without it (its census, arena and probes; the
    # CLI names no owner then, or the census's first reachers for a CLI of before). It gets
    # part of what is left of the request's time, and running out of it gives it up (the
    # arena, probes and answer still need the rest); only the CLI's cancel or the request's
    # deadline cancel.
    left = stop.deadline - time.monotonic()
    budget = max(1.0, GRAPH_SHARE * left)
    if census_seconds:
        # Skipped, the graph leaves the owners to a census walking them afterwards: it keeps
        # what that needs (about four times the census without owners took, measured).
        budget = max(1.0, min(budget, left - 4.0 * census_seconds - 1.0))
    if _last_graph["seconds"]:
        # The last graph in this process finished in that time: this one gets twice it, if
        # the request has it (the census's reserve above would leave a 47M-object heap's
        # graph, 29 s last time, 1 s of a 60 s request, and its owners to the census).
        budget = max(budget, min(left - 1.0, 2.0 * _last_graph["seconds"]))
    max_bytes = _int(request.get("max_graph_bytes"), 0, 0, 1 << 40)
    cancelled = stop
    headroom_bound = False
    if spool_dir is not None and stop.memory is not None:
        stop.memory.files.append(os.path.join(spool_dir, BINARY_FILE))
    left = stop.memory.left() if stop.memory is not None else None
    if left is not None:
        # Under a memory budget the graph gets what is left of it (skipped when it does not
        # fit), and passing the budget gives it up rather than the request.
        left -= max(GRAPH_RESERVE, int(stop.memory.limit * GRAPH_RESERVE_SHARE))
        if request.get("walker") == "python" or not graph.compiled_available():
            # The Python loop's tables (a dict and a list entry per object) grow by doubling:
            # one step of tens of MB between two looks at the budget (a 100 MB heap: +45 MB
            # before the first check, which the OOM killer did not wait for).
            return wire.skipped_graph("the object graph's Python loop (the compiled walk is not loaded) cannot "
                                      "keep to the request's memory budget in the target (%.0f MiB, from the "
                                      "memory limit's headroom)" % (stop.memory.limit / 1048576.0),
                                      graph.SKIPPED_NO_HEADROOM)
        need = int(resident_bytes(stop.memory.fd) * GRAPH_BITMAP_SHARE) if stop.memory.fd >= 0 else 0
        if need > left > 0:
            # Walked anyway, a 4 GB heap's graph spent its memory budget in its first 0.6 s and,
            # given up, left the census too little of it (exit 19).
            return wire.skipped_graph("the object graph's bitmaps would take ~%.0f MiB in the target, over what "
                                      "the request's memory budget (%.0f MiB, from the memory limit's headroom) "
                                      "leaves for it" % (need / 1048576.0, stop.memory.limit / 1048576.0),
                                      graph.SKIPPED_NO_HEADROOM)
        if left < GRAPH_MIN_BYTES:
            return wire.skipped_graph("the request's memory budget in the target (%.0f MiB, from the memory "
                                      "limit's headroom) had %.1f MiB left for the object graph"
                                      % (stop.memory.limit / 1048576.0, max(0, left) / 1048576.0),
                                      graph.SKIPPED_NO_HEADROOM)
        headroom_bound = not max_bytes or left < max_bytes  # the walk's memory is the headroom's, not its own
        max_bytes = min(max_bytes, left) if max_bytes else left

        def cancelled():
            if stop.over_memory():
                raise graph.GraphOverHeadroom("took the target's RSS past the request's memory budget of %.0f MiB"
                                              % (stop.memory.limit / 1048576.0))
            return stop()

    try:
        out = graph.build(timeout=budget, progress=progress,
                           is_stdlib=_is_stdlib, exclude=(request, heap) + _own_thread(), max_nodes=max_nodes,
                           max_pause_ms=max_pause, cancelled=cancelled, compiled=request.get("walker") != "python",
                           spool_dir=spool_dir, reached=reached, max_bytes=max_bytes, memory_left=stop.memory_left)
        if out.get("skipped_code") == graph.SKIPPED_OVER_NODES:
            _last_graph["over_nodes"] = max(max_nodes, _last_graph["over_nodes"])
        elif out.get("skipped_code") == graph.SKIPPED_OVER_MEMORY_BUDGET and headroom_bound:
            out["skipped_code"] = graph.SKIPPED_NO_HEADROOM
        elif not out.get("skipped"):
            _last_graph["seconds"] = float(out.get("graph_seconds") or 0.0)
        return out
    except graph.GraphTimeout:
        return wire.skipped_graph("the object graph did not finish within %.0f s, its share of the request's "
                                  "time (a longer --timeout gives it more)" % budget, graph.SKIPPED_OUT_OF_TIME)
    except graph.GraphCancelled:
        stop.reason = stop.reason or "deadline"
        raise Cancelled(stop.reason, "graph") from None


def _graph_op(request, progress, stop, exchange=None):
    return {"graph": _graph(request, progress, stop, spool_dir=getattr(exchange, "spool_dir", None)),
            "python_version": wire.python_version()}


# What the census raises when it stops early: its own deadline, and the cancel hook.
_CENSUS_STOPPED = tuple([
    c for c in (getattr(census, "CensusTimeout", None), getattr(census, "CensusCancelled", None)) if c is not None
])


def _ping(request, progress, stop):
    return {"python_version": wire.python_version(), "payload_version": PAYLOAD_VERSION}


def _patch(request, progress, stop):
    from . import patches  # noqa: PLC0415 - see the imports at the top

    return patches.handle(request, stop.check)


def _sample(request, progress, stop):
    from . import sampling  # noqa: PLC0415 - see the imports at the top

    return sampling.sample(request, progress)


def _sites(request, progress, stop):
    action = request.get("action")
    if action == wire.SITES_START:
        return {"sites": sites.start(request), "python_version": wire.python_version()}
    if action == wire.SITES_STOP:
        return {"sites": sites.stop()}
    return {"sites": sites.state()}


def _names(request, progress, stop):

    return graph.name_paths(request)


OPERATIONS = {wire.OP_SNAPSHOT: _snapshot, wire.OP_PING: _ping, wire.OP_PATCH: _patch, wire.OP_SAMPLE: _sample,
              wire.OP_GRAPH: _graph_op, wire.OP_NAMES: _names, wire.OP_SITES: _sites}


def handle(request, progress=None, cancelled=None, exchange=None):
    """Run one request; always returns a JSON-able dict with ``ok``. ``cancelled``: the CLI's
    explicit cancel, a callable polled between steps (the request's deadline is checked too).
    ``exchange``: the channel's exchange (documents before the result: transport.DirectoryExchange,
    agent_server.SocketExchange), if it has one."""
    progress = progress or (lambda phase, done: None)
    if type(request) is not dict or request.get("op") not in OPERATIONS:
        return wire.failed(wire.KIND_BAD_REQUEST, "unknown request")
    if not _busy.acquire(blocking=False):
        return wire.failed(wire.KIND_BUSY, "another leakhound request is running in this process")
    started = time.perf_counter()
    sites.ignore_this_thread()  # the payload's allocations are not the target's sites
    global _rss_at_boot
    memory = _MemoryBudget(_max_extra_bytes(request), _rss_at_boot)
    _rss_at_boot = 0
    progress, beat = _with_beat(progress)
    stop = _Stop(_request_timeout(request), cancelled, memory=memory, beat=beat)
    collections_before = pacing.stats()
    pacing.watch_collections()
    try:
        if exchange is not None and request["op"] == wire.OP_SNAPSHOT:
            out = _snapshot(request, progress, stop, exchange)
        elif exchange is not None and request["op"] == wire.OP_GRAPH:
            out = _graph_op(request, progress, stop, exchange)
        else:
            out = OPERATIONS[request["op"]](request, progress, stop)
        memory.cost()
        return wire.answered(out, time.perf_counter() - started,
                             wire.memory_cost(memory.peak, memory.limit, memory.loaded),
                             _collections_since(collections_before))
    except Cancelled as exc:
        memory.cost()
        return wire.failed(wire.KIND_CANCELLED, str(exc), reason=exc.reason, phase=exc.phase,
                           payload_seconds=time.perf_counter() - started,
                           memory_cost=wire.memory_cost(memory.peak, memory.limit, memory.loaded))
    except Exception as exc:  # remote errors travel back, they never print in the target
        import traceback  # noqa: PLC0415 - only here: ~0.4 MiB of a target that never fails

        return wire.failed(type(exc).__name__, "%s: %s" % (type(exc).__name__, exc),
                           traceback=traceback.format_exc(limit=8))
    finally:
        memory.close()
        pacing.unwatch_collections()
        _busy.release()


# The least time between two beats (the last progress said again, _Stop.beat): each is a
# write to the CLI, which hands the GIL over (see ``transport.throttled``).
BEAT_EVERY = 1.0


def _with_beat(progress):
    """``progress`` remembering what it last said, and the beat that says it again."""
    last = ["start", 0]  # phase, done
    said_at = [time.monotonic()]

    def said(phase, done):
        last[:] = [phase, done]
        said_at[0] = time.monotonic()
        progress(phase, done)

    def beat():
        now = time.monotonic()
        if now - said_at[0] >= BEAT_EVERY:
            said_at[0] = now
            progress(last[0], last[1])

    return said, beat


def _collections_since(before):
    """The target's own collections that ran in the request's thread since ``before``
    (pacing.stats()): per generation, their wall seconds summed and the longest (pacing.py)."""
    now = pacing.stats()
    return {"collections": [a - b for a, b in zip(now["collections"], before["collections"])],  # noqa: B905 - 3.8+
            "seconds": round(now["seconds"] - before["seconds"], 4), "max_ms": now["max_ms"]}


def _after_fork_in_child():
    """A child forked while a request ran has none of its threads: it starts with the request
    lock free (else every later request of the child answered Busy, exit 9, for good), the
    payload's ``gc.callbacks`` entry gone, the fixes' helper threads running again, and no
    allocation tracker (its deadline's timer is the parent's thread)."""
    global _busy
    _busy = threading.Lock()
    pacing.reset_after_fork()
    patches = sys.modules.get(__name__.rpartition(".")[0] + ".patches")
    if patches is not None:  # none applied in a process that never had a patch request
        patches.after_fork_in_child()
    sites.after_fork_in_child()


# Once per loaded payload (boot.py keeps it loaded and reuses it, request after request).
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def run_from_dir(directory):
    """The debugger path (transport.run_from_dir, called by boot.py), answered by ``handle``."""
    transport.run_from_dir(directory, handle, _no_request)


def _no_request():
    global _rss_at_boot
    _rss_at_boot = 0  # no request took it: not a baseline for a later one
