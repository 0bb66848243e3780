"""The private side channel between the CLI and a payload started by a debugger.

A 0700 directory (owned by the target's user) holds a copy of the payload package, the
request, and the files the payload writes back: ``started.json`` when the main thread has run
the bootstrap, ``progress.json`` while it works, ``result.json`` at the end. The directory is
always removed, whatever happens.

The directory is made where the target can open it. A target in another mount namespace (a
container, a sidecar's view, anything with its own /tmp) does not see leakhound's /tmp, so
there it is made inside the target's own filesystem, reached through ``/proc/PID/root``: in
the target's ``$TMPDIR``, ``/tmp``, ``/dev/shm`` or ``/var/tmp``, whichever is writable and
reached without a symlink. The target opens it by path (``target_dir``); leakhound never does:
any process of the target's user may plant links and FIFOs in it once it is handed over, so
every file operation goes through the directory's descriptor (``private_dir``), which also
keeps working if the target (and with it /proc/PID/root) is gone.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import queue
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import leakhound.payload
from leakhound.attach.bootstrap_page import HANDBACK_SIGNAL, handback_handler
from leakhound.attach.deadline import Deadline
from leakhound.attach.payload_bytecode import BOOT_FILENAME, boot_bytecode, foreign_bytecode, payload_bytecode
from leakhound.attach.private_dir import DIR_FLAGS, PrivateDir, UnsafeEntry, open_dir_in_root
from leakhound.attach.process import alive, environ_of, same_filesystem_view
from leakhound.errors import (
    AttachTimeout,
    PermissionDenied,
    PrivateDirTampered,
    TargetBlocked,
    TargetExited,
    TargetFilesystemUnreachable,
)
from leakhound.payload import wire

Progress = Callable[[str, int], None]
# A document the payload hands over before its result: (name, doc, post), where
# post(name, doc) answers it within the same request. On the debugger paths the graph's
# records come first, piece by piece as the target's walk writes them: ("records",
# {"piece": bytes}, post), then ("graph", doc, post) with ``records_streamed`` in doc.
Post = Callable[[str, dict[str, Any]], None]
Partial = Callable[[str, dict[str, Any], Post], None]
PAYLOAD_SOURCE = Path(leakhound.payload.__file__).parent


_VERSION: list[str] = []


def payload_version() -> str:
    """A digest of the payload's sources: a target that has this payload loaded reuses it."""
    if not _VERSION:
        digest = hashlib.sha256()
        # Sources and the compiled walk: a target that loaded another build reloads.
        files = [p for p in PAYLOAD_SOURCE.rglob("*") if p.suffix in (".py", ".c", ".so")]
        for path in sorted(files):
            digest.update(path.relative_to(PAYLOAD_SOURCE).as_posix().encode())
            digest.update(path.read_bytes())
        _VERSION.append(digest.hexdigest()[:16])
    return _VERSION[0]


# Where the directory may go inside a target that has its own filesystem view, in this order
# (after its $TMPDIR): /dev/shm serves read-only root file systems whose /tmp is not a volume.
TARGET_TMP_DIRS = ("/tmp", "/dev/shm", "/var/tmp")

# What the CLI reads back, at most (a bigger file is PrivateDirTampered, never read whole):
# the payload's small documents; its result or early graph as JSON (the graph's arrays are in
# graph.bin; measured: result.json 6-11 KB, graph.json 6 bytes a node, ~30 MB at the
# 5,000,000-node ceiling); graph.bin, by what the request allowed: a node record is 24 bytes
# and an edge record 20 (graph_wire.FRAME_COLUMNS), measured 66 bytes a node (two edges) on
# the fixtures, so 512 allows over 20 edges a node at max_graph_nodes.
SMALL_DOC_BYTES = 1 << 20
RESULT_DOC_BYTES = 256 << 20
GRAPH_BIN_BYTES_PER_NODE = 512
DEFAULT_MAX_GRAPH_NODES = 1_000_000  # the payload's own default (runner._graph)
SMALL_DOCS = frozenset({"started.json", "progress.json"})


def graph_records_allowed(request: dict[str, Any]) -> int:
    """The graph records a request may be answered with (graph.bin here, the raw bytes after
    the agent's graph line): ``GRAPH_BIN_BYTES_PER_NODE`` per node its ``max_graph_nodes``
    allows, or the payload's own default where it sets none (an int, as the payload reads it)."""
    nodes = request.get("max_graph_nodes")
    nodes = nodes if type(nodes) is int and nodes > 0 else DEFAULT_MAX_GRAPH_NODES
    return nodes * GRAPH_BIN_BYTES_PER_NODE


def _make_dir_in_target(pid: int) -> tuple[PrivateDir, str]:
    """Make the private directory inside ``pid``'s filesystem; returns it and the path of its
    parent as the target sees it. Each candidate is resolved under /proc/PID/root without
    following a symlink: a symlinked $TMPDIR (or /tmp) is skipped, never followed."""
    root = f"/proc/{pid}/root"
    try:
        os.stat(root)
    except PermissionError:
        raise PermissionDenied(
            f"process {pid} runs in another mount namespace and {root} is not open to leakhound"
        ) from None
    tmpdir = environ_of(pid).get("TMPDIR", "")
    candidates = ([tmpdir] if tmpdir.startswith("/") else []) + [d for d in TARGET_TMP_DIRS if d != tmpdir]
    tried = []
    for inside in candidates:
        try:
            parent_fd = open_dir_in_root(root, inside)
        except UnsafeEntry as exc:
            tried.append(f"{inside}: {exc.strerror}, skipped")
            continue
        except OSError as exc:
            tried.append(f"{inside}: {exc.strerror or exc}")
            continue
        try:
            private = PrivateDir.make(parent_fd)
        except OSError as exc:
            tried.append(f"{inside}: {exc.strerror or exc}")
            continue
        return private, inside.rstrip("/") or "/"
    raise TargetFilesystemUnreachable(
        f"process {pid} runs in another mount namespace and leakhound could not make its private "
        f"directory there through {root} ({'; '.join(tried)})"
    )


def _tampered(exc: OSError) -> PrivateDirTampered:
    return PrivateDirTampered(
        f"{exc.strerror}: a process of the target's user wrote into leakhound's private directory"
    )


class _Tail:
    """A file another process is still appending to, read piece by piece as it grows (opened
    safely once it is there; ``limit`` bytes at most), each piece's pages given back
    (``FALLOC_FL_PUNCH_HOLE``) once read.

    The payload writes the graph's records (graph.bin) from inside the target: the pages of
    a file are charged to the memory cgroup of the process that writes them, and on a tmpfs
    /tmp they stay charged until the file goes. Punched behind the read position, the file
    holds only what the CLI has not read yet (a few ms of the walk's records): measured on a
    100 MB heap with /tmp on tmpfs, the target's cgroup peak went from +53.7 MB (38 MB of
    records) to +22.6 MB, its VmHWM growth +17 MB (docs/inspect.md, "Near the memory limit")."""

    PIECE = 8 << 20
    # How often the drain looks for more when it has read to the end: the walk writes ~100 MB/s.
    DRAIN_EVERY = 0.002

    def __init__(self, private: PrivateDir, name: str, limit: int) -> None:
        self.private = private
        self.name = name
        self.limit = limit
        self.read = 0
        self._fd = -1
        self._drained: queue.SimpleQueue[bytes] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._drain: threading.Thread | None = None
        self._failed: list[BaseException] = []  # what stopped the drain, raised by ``pieces``

    def start_draining(self) -> None:
        """Read (and punch) on a thread of its own from now on: the CLI's loop, busy decoding
        what came before, fell ~200 ms of the walk behind on a loaded machine (+19 MB of
        graph.bin charged to the target at once); ``pieces`` hands over what it has read."""
        self._drain = threading.Thread(target=self._draining, name="leakhound-graph-drain", daemon=True)
        self._drain.start()

    def _draining(self) -> None:
        try:
            while not self._stop.is_set():
                got = False
                for piece in self._pieces():
                    self._drained.put(piece)
                    got = True
                if not got:
                    self._stop.wait(self.DRAIN_EVERY)
        except BaseException as exc:  # (PrivateDirTampered, OSError: the caller's to raise)
            self._failed.append(exc)

    def pieces(self, *, to_the_end: bool = False) -> Iterator[bytes]:
        """What has been read since the last call; ``to_the_end``: the file is complete, read
        all of it (the drain stopped first)."""
        if self._drain is not None and to_the_end:
            self._stop.set()
            self._drain.join()
            self._drain = None
        while not self._drained.empty():  # (the one consumer: never blocks)
            yield self._drained.get()
        if self._failed:
            raise self._failed[0]
        if self._drain is None:
            yield from self._pieces()

    def _pieces(self) -> Iterator[bytes]:
        if self._fd < 0:
            try:
                # read-write: punching a hole needs it (root, or the target's own user)
                fd = self.private.open_regular(self.name, self.limit, writable=True)
            except UnsafeEntry as exc:
                raise _tampered(exc) from None
            except OSError:
                return
            if fd is None:
                return
            self._fd = fd
        while piece := os.read(self._fd, self.PIECE):
            self.read += len(piece)
            if self.read > self.limit:
                raise PrivateDirTampered(
                    f"{self.name} in leakhound's private directory grew past the {self.limit} bytes the "
                    f"request allows: a process of the target's user wrote into it"
                )
            punch_hole(self._fd, self.read)
            yield piece

    def close(self) -> None:
        if self._drain is not None:
            self._stop.set()
            self._drain.join()
            self._drain = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


_FALLOC_FL_KEEP_SIZE, _FALLOC_FL_PUNCH_HOLE = 0x01, 0x02
_LIBC: list[Any] = []


def punch_hole(fd: int, length: int) -> bool:
    """Give back the pages of the first ``length`` bytes of ``fd``'s file (its size kept);
    False where the file system cannot (the pages then stay until the file is removed)."""
    if not _LIBC:
        import ctypes  # noqa: PLC0415 (only where a graph is read from a file)

        libc = ctypes.CDLL(None, use_errno=True)
        libc.fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
        _LIBC.append(libc.fallocate)
    return bool(_LIBC[0](fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, 0, length) == 0)


class PrivateChannel:
    """The request's private directory, held as a descriptor (private_dir.PrivateDir): made
    root's and 0700, filled with the payload and ``request``, only then handed to ``uid``."""

    def __init__(self, *, uid: int, pid: int | None = None, request: dict[str, Any] | None = None,
                 version: tuple[int, int] | None = None) -> None:
        """``version``: the target's CPython (process.python_version), for the payload's .pyc
        files; None: leakhound's own."""
        if pid is None or same_filesystem_view(pid):
            parent = tempfile.gettempdir()
            self.private = PrivateDir.make(os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
            inside = parent
        else:
            self.private, inside = _make_dir_in_target(pid)
            parent = f"/proc/{pid}/root{inside}"
        self.dir = Path(parent) / self.private.name  # as leakhound would name it: messages only
        self.target_dir = os.path.join(inside, self.private.name)  # as the target opens it
        self.uid = uid
        self.cancel_requested = False
        request = request or {}
        self.request_timeout = _number(request.get("timeout"), 60.0)
        self.graph_bin_limit = graph_records_allowed(request)
        try:
            self._fill(uid, request, version or (sys.version_info[0], sys.version_info[1]))
        except BaseException:
            self.close()
            raise

    def _fill(self, uid: int, request: dict[str, Any], version: tuple[int, int]) -> None:
        owner = uid if os.geteuid() == 0 and uid != 0 else -1
        boot = (PAYLOAD_SOURCE / "boot.py").read_bytes()
        # Compiled .pyc files come along (their source mtimes are kept), so the target does
        # not compile the payload: leakhound's CPython's (compiled here where the install has
        # none that is valid), or the target's compiled by a trusted interpreter of its
        # version where there is one (payload_bytecode).
        foreign = None
        if version != (sys.version_info[0], sys.version_info[1]):
            foreign = foreign_bytecode(version, str(PAYLOAD_SOURCE), boot, skip=("agent.",))
        if foreign is not None:
            files, boot_pyc = foreign
        else:
            files = payload_bytecode(str(PAYLOAD_SOURCE), skip=("agent.",))
            boot_pyc = boot_bytecode(boot)
        self.private.copy_tree(str(PAYLOAD_SOURCE), "payload", uid=owner, skip=("agent.",), files=files)
        payload_fd = os.open("payload", DIR_FLAGS, dir_fd=self.private.fd)
        try:
            self.private.create("VERSION", payload_version().encode(), uid=owner, mode=0o644, dir_fd=payload_fd)
        finally:
            os.close(payload_fd)
        self.private.create("boot.py", boot, uid=owner, mode=0o644)
        self.private.create("boot.pyc", boot_pyc, uid=owner, mode=0o644)
        self.private.create("request.json", json.dumps(request).encode(), uid=owner)
        self.private.hand_over(owner)

    def bootstrap_code(self, pid: int | None = None) -> str:
        """The one statement the debugger hands to PyRun_SimpleString.

        ``pid``: the process it is meant for, as that process sees itself (its innermost pid
        namespace's pid: process.namespace_pid); None runs it in any. A pending call is part
        of the process's memory: a child forked after it was queued and before it ran runs it
        too, at the child's first bytecode, which is inside its at-fork handlers (threading's
        own among them: the payload's thread it started was dropped from ``threading._active``
        and its request lock replaced under it; measured: 16 of 20 inspections of a 3.12 worker
        that forks while another thread holds the import lock). Anywhere but in ``pid`` it only
        takes its page back, through the payload's extension where it is loaded; else the page
        stays listed for the child's own first inspection (no ctypes imported into a child).

        Where the payload cannot start (its directory gone, a bootstrap that fails), it
        unmaps the ptrace method's bootstrap pages listed so far (ptrace/stop.bootstrap_text):
        through the payload's extension where it is loaded, else with ctypes (both ways in one
        place: another process takes the first only). It runs boot.pyc
        (payload_bytecode.boot_bytecode) where its magic number is the target's own
        (leakhound's CPython), else compiles boot.py: the parser's memory was
        ~0.5-1 MiB of the target's RSS at every inspection. It binds nothing in ``__main__``
        and swallows every error, so a late or failed run can never print into the target's
        stderr or change its globals (an error in the process it is meant for is said in
        result.json: ``KIND_BOOT_FAILED``); it closes what it opens (an unclosed file is a
        ResourceWarning in the target's stderr under ``-X dev`` or ``-W default``, an
        exception its unraisable hook sees under ``-W error``).
        """
        inner = (
            "o=1\n"  # o: this is the process the bootstrap is meant for (until told otherwise)
            "try:\n"
            " o=P is None or __import__('os').getpid()==P\n"
            " import marshal as m,sys as s\n"
            " if o:\n"
            "  with open(D+'/boot.pyc','rb') as f:b=f.read()\n"
            "  if b[:4]==getattr(s.modules.get('_frozen_importlib_external'),'MAGIC_NUMBER',0):c=m.loads(b[16:])\n"
            "  else:\n"
            "   with open(D+'/boot.py') as f:c=compile(f.read(),D+'/boot.py','exec')\n"
            "  del b,f\n"
            "  exec(c,{'__name__':'__leakhound_boot__','LH_DIR':D})\n"
            " else:raise ChildProcessError\n"
            "except BaseException as x:\n"
            # A KeyboardInterrupt or SystemExit is never the bootstrap's own: a signal's
            # handler raised it on the main thread while the bootstrap ran there. Handed back
            # (attach/bootstrap_page.py HANDBACK_SIGNAL): a one-shot handler on a spare signal
            # that raises it, and a thread that sends the main thread that signal once it left
            # the bootstrap's frames (a real signal: a blocking call returns EINTR).
            # Any other error of this process's (a module the bootstrap imports gone from a
            # standard library replaced or removed since the worker started) is said in
            # result.json (atomically, never over one there: boot.py's own), in safe characters
            # only (no json module: it may be what failed), instead of no start at all.
            " if o and not isinstance(x,(KeyboardInterrupt,SystemExit,ChildProcessError)):\n"
            "  try:\n"
            "   import os as q\n"
            "   e=(type(x).__name__+': '+str(x))[:400]\n"
            "   e=''.join(c if c.isalnum() or c in ' .:;_-()/,=<>[]\\'' else '?' for c in e)\n"
            "   if not q.path.lexists(D+'/result.json'):\n"
            "    h=q.open(D+'/result.json.boot',q.O_WRONLY|q.O_CREAT|q.O_TRUNC|q.O_NOFOLLOW|q.O_CLOEXEC,0o600)\n"
            f"    d='{{\"ok\": false, \"kind\": \"{wire.KIND_BOOT_FAILED}\", \"error\": \"'\n"
            "    try:q.write(h,(d+e+'\"}').encode())\n"
            "    finally:q.close(h)\n"
            "    q.rename(D+'/result.json.boot',D+'/result.json')\n"
            "  except BaseException:\n"
            "   pass\n"
            " if isinstance(x,(KeyboardInterrupt,SystemExit)):\n"
            "  try:\n"
            "   import _signal as g,_thread as t,sys as s\n"
            f"   if g.getsignal({HANDBACK_SIGNAL})==g.SIG_DFL:\n"
            + handback_handler("x", "    ")
            + "    def k(m=t.get_ident(),g=g,s=s,D=D):\n"
            "     try:\n"
            "      import time\n"
            "      for _ in range(400):\n"
            "       f=s._current_frames().get(m)\n"
            "       n=f.f_code.co_filename if f is not None else ''\n"
            "       f=None\n"
            "       if not(n=='<string>' or n.startswith(D)):break\n"
            "       time.sleep(0.005)\n"
            f"      g.pthread_kill(m,{HANDBACK_SIGNAL})\n"
            "     except BaseException:\n"
            "      pass\n"
            "    t.start_new_thread(k,())\n"
            "  except BaseException:\n"
            "   pass\n"
            " try:\n"
            "  s=__import__('sys')\n"
            "  w=s.modules.get('_leakhound_payload._walk')\n"
            "  if hasattr(w,'unmap'):\n"
            f"   for a,n in s.__dict__.pop({wire.BOOTSTRAP_PAGES!r},()):w.unmap(a,n)\n"
            "  elif o:\n"
            f"   p=s.__dict__.pop({wire.BOOTSTRAP_PAGES!r},())\n"
            "   if p:\n"
            "    import ctypes as t\n"
            "    for a,n in p:t.pythonapi.munmap(t.c_void_p(a),t.c_size_t(n))\n"
            " except BaseException:\n"
            "  pass\n"
        )
        return f"exec({inner!r},{{'D':{self.target_dir!r},'P':{pid!r}}})"

    def post(self, name: str, doc: dict[str, Any]) -> None:
        """Answer a document the payload handed over early (``<name>.request.json``, read by
        transport.DirectoryExchange.receive), from any thread; nothing if the directory is gone."""
        try:
            owner = self.uid if os.geteuid() == 0 and self.uid != 0 else -1
            self.private.replace(name + ".request.json", json.dumps(doc).encode(), uid=owner)
        except OSError:
            pass

    def request_cancel(self) -> None:
        """Tell the payload to stop at its next step (a ``cancel`` file); remembered, so a
        cancel leakhound did not ask for is told apart."""
        self.cancel_requested = True
        try:
            self.private.touch(wire.CANCEL)
        except OSError:
            pass

    def read_json(self, name: str) -> dict[str, Any] | None:
        """The payload's document ``name``, or None while it is not there; PrivateDirTampered
        for anything that is not a plain file of its bound holding a JSON object."""
        limit = SMALL_DOC_BYTES if name in SMALL_DOCS else RESULT_DOC_BYTES
        try:
            data = self.private.read(name, limit)
        except UnsafeEntry as exc:
            raise _tampered(exc) from None
        except OSError:
            return None
        if data is None:
            return None
        try:
            doc = json.loads(data)
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            raise PrivateDirTampered(
                f"{name} in leakhound's private directory is not the payload's JSON document: a process of "
                f"the target's user wrote into the directory"
            )
        return doc

    def _read_graph(self, doc: dict[str, Any]) -> None:
        """A graph's raw arrays, written beside its JSON (payload/graph_wire.py), into ``doc``."""
        graph = doc.get("graph")
        if isinstance(graph, dict) and graph.get("binary_file") == "graph.bin":
            try:
                graph["binary"] = self.private.read("graph.bin", self.graph_bin_limit) or b""
            except UnsafeEntry as exc:
                raise _tampered(exc) from None
            except OSError:
                graph["binary"] = b""

    def wait(
        self,
        *,
        pid: int,
        start_timeout: float,
        deadline: Deadline,
        progress: Progress | None = None,
        blocked_hint: Callable[[], str] | None = None,
        on_partial: Partial | None = None,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Wait for ``started.json`` then ``result.json``; returns (started, result). A graph
        handed over before the result (``graph.json``, runner._snapshot_graph_first) goes to
        ``on_partial("graph", doc, self.post)`` as soon as it is there, its records (graph.bin,
        written as the target walks) before it, to ``on_partial("records", {"piece": ...})``
        as they come: most of their reading is done by the time the walk ends. ``deadline``
        runs out (AttachTimeout) at its hard limit, or when it follows progress and nothing
        new came for its stall window: a new ``progress.json``, graph records, the graph."""
        begin = time.monotonic()
        records = _Tail(self.private, "graph.bin", self.graph_bin_limit)
        if on_partial is not None:
            records.start_draining()
        try:
            return self._wait(pid, start_timeout, deadline, progress, blocked_hint, on_partial, begin, records)
        finally:
            records.close()

    def _wait(
        self,
        pid: int,
        start_timeout: float,
        deadline: Deadline,
        progress: Progress | None,
        blocked_hint: Callable[[], str] | None,
        on_partial: Partial | None,
        begin: float,
        records: _Tail,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        started = None
        last_phase = None
        records_seen = 0
        partial_seen = on_partial is None
        while True:
            now = time.monotonic()
            if started is None:
                started = self.read_json("started.json")
                if started is not None and type(started.get("main_thread_ms", 0.0)) not in (int, float):
                    raise PrivateDirTampered(
                        "started.json in leakhound's private directory is not the payload's: a process of the "
                        "target's user wrote into the directory"
                    )
                if started is not None:
                    deadline.progressed("started")
                if started is None and now - begin > start_timeout:
                    raise self._blocked(pid, now - begin, blocked_hint)
            result = self.read_json("result.json")
            # A graph handed over early: before the result, or in the same turn (written first).
            if not partial_seen and (result is None or result.get("graph_sent")):
                early = self.read_json("graph.json")
                graph = early.get("graph") if early is not None else None
                # graph.bin is complete once graph.json is there (written first): read to its end
                for piece in records.pieces(to_the_end=isinstance(graph, dict)):
                    on_partial("records", {"piece": piece}, self.post)  # type: ignore[misc]
                if records.read != records_seen:
                    records_seen = records.read
                    deadline.progressed("graph records")
                if isinstance(graph, dict):
                    partial_seen = True
                    deadline.progressed("graph")
                    if graph.get("binary_file") == "graph.bin":
                        graph["records_streamed"] = records.read
                    on_partial("graph", graph, self.post)  # type: ignore[misc]
            if result is not None:
                self._read_graph(result)
                return started or {}, result
            if not alive(pid):
                raise TargetExited(f"process {pid} exited while leakhound was inspecting it")
            if started is not None:
                doc = self.read_json("progress.json")
                if doc is not None and doc != last_phase:
                    last_phase = doc
                    phase, done = str(doc.get("phase", "")), _count(doc.get("done"))
                    deadline.progressed(f"{phase} {done:,}" if done else phase)
                    if progress is not None:
                        progress(phase, done)
            if deadline.expired():
                # (a --timeout shorter than the safe point's wait ends here: the payload never
                # having started is what to say)
                if started is None:
                    raise self._blocked(pid, time.monotonic() - begin, blocked_hint)
                raise AttachTimeout(deadline.explain(pid))
            # (a file each turn: a 50 ms turn was ~25 ms late on average for the graph and again
            # for the result, on the path of every inspection; a turn is a few stat() calls)
            time.sleep(0.005 if now - begin < 5 else 0.02)

    @staticmethod
    def _blocked(pid: int, waited: float, blocked_hint: Callable[[], str] | None) -> TargetBlocked:
        where = blocked_hint() if blocked_hint else ""
        if BOOT_FILENAME in where:
            # The main thread is in the bootstrap (starting the payload's thread, or waiting
            # for the GIL in it): it did reach a safe point; a thread that never lets the GIL
            # go (one long C call: numba's nopython code without nogil) keeps the payload from
            # running. Said as such: the safe point was not what to wait for.
            holder = _GIL_HOLDER.search(where)
            who = "another thread" if holder is None else f"thread {holder.group(1)}" + (
                f' ("{holder.group(2)}")' if holder.group(2) else "")
            return TargetBlocked(
                f"process {pid} ran leakhound's bootstrap, but its payload could not start within "
                f"{max(waited, 0.0):.0f}s: {who} holds the GIL; the threads are in:\n{where}",
                hint="A thread that holds the GIL for seconds at a time (a long C call that never lets it go: "
                     "numba's nopython code without nogil=True, a big C extension call) lets no other thread "
                     "run, leakhound's payload included. Let that code release the GIL, or inspect while it "
                     "is not running.")
        return TargetBlocked(
            f"process {pid}'s main thread did not reach a safe point within "
            f"{max(waited, 0.0):.0f}s" + (f"; it is in:\n{where}" if where else "")
        )

    def close(self) -> None:
        if self.private.fd < 0:
            return
        try:
            # Again while it is still there: a payload that was cancelled or has just answered
            # can write one last file into it while it is emptied (the directory was left
            # behind once under load), never for long. Through the descriptors: /proc/PID/root
            # disappears with the target.
            for _ in range(40):
                if self.private.remove():
                    break
                time.sleep(0.05)
        finally:
            self.private.close()

    def __enter__(self) -> PrivateChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# py-spy's line for the thread that holds the GIL: 'Thread 8910 (active+gil): "Thread-1 (hog)"'
_GIL_HOLDER = re.compile(r'^Thread (\d+) \([^)]*\+gil\)(?:: "([^"\n]*)")?', re.M)


def _number(value: Any, default: float) -> float:
    """A finite positive number from the request, else ``default``."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    return number if math.isfinite(number) and number > 0 else default


def _count(value: Any) -> int:
    """``progress.json``'s count of work done, as the payload writes it (an int)."""
    if value is None:
        return 0
    if type(value) is not int:
        raise PrivateDirTampered(
            "progress.json in leakhound's private directory is not the payload's: a process of the "
            "target's user wrote into the directory"
        )
    return value
