"""Client for the in-process agent (see leakhound/payload/agent_server.py).

The agent's socket is found where the worker put it, not where it would be here: the kernel
lists the Unix sockets listening in the worker's network namespace (/proc/PID/net/unix, with
the path the worker bound: its own $TMPDIR, inside its own mount namespace) and the sockets
the worker holds open (/proc/PID/fd). A socket the worker does not hold is not its agent:
a file left by a worker killed before its atexit ran, whose pid now belongs to another
process, is stale; it is removed, and ``auto`` uses the next method.
"""

from __future__ import annotations

import glob
import json
import os
import re
import socket
import stat
import struct
import threading
from typing import Any

from leakhound.attach.base import AttachLog
from leakhound.attach.channel import Partial, Progress, graph_records_allowed
from leakhound.attach.deadline import Deadline
from leakhound.attach.process import environ_of, namespace_pid, same_filesystem_view
from leakhound.errors import (
    AttachTimeout,
    MethodUnavailable,
    PermissionDenied,
    ProtocolViolation,
    TargetExited,
    TargetFilesystemUnreachable,
)
from leakhound.payload import wire
from leakhound.payload.agent_server import (
    SOCKET_DIR_PREFIX,
    SOCKET_NAME,
    refuses_connections,
    socket_dir_name,
    socket_name,
)

_SOCKET_FD = re.compile(r"socket:\[(\d+)\]")


def _listening(pid: int) -> dict[int, str]:
    """Inode -> bound path of the Unix sockets listening in ``pid``'s network namespace."""
    found = {}
    try:
        with open(f"/proc/{pid}/net/unix") as fh:
            next(fh, None)
            for line in fh:
                fields = line.split()
                # Flags 0x10000 (__SO_ACCEPTCON): a listening socket.
                if len(fields) >= 8 and int(fields[3], 16) & 0x10000:
                    found[int(fields[6])] = fields[7]
    except (OSError, ValueError):
        pass
    return found


def _held_sockets(pid: int) -> set[int] | None:
    """Inodes of the sockets ``pid`` holds open; None when its descriptors cannot be read."""
    held = set()
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    for name in names:
        try:
            match = _SOCKET_FD.match(os.readlink(f"/proc/{pid}/fd/{name}"))
        except OSError:
            continue
        if match:
            held.add(int(match.group(1)))
    return held


def _from_here(pid: int, inside: str) -> str:
    """A path in ``pid``'s filesystem, as this process reaches it."""
    return inside if same_filesystem_view(pid) else f"/proc/{pid}/root{inside}"


def _listening_inside(pid: int) -> str | None:
    """The path ``pid``'s agent bound its listening socket to, in its own filesystem."""
    nspid = namespace_pid(pid)
    held = _held_sockets(pid)
    for inode, inside in _listening(pid).items():
        match = SOCKET_NAME.search(inside)
        if match is None or int(match.group("pid")) != nspid:
            continue
        if held is not None and inode not in held:
            continue  # another process's (a pid namespace of its own shares this directory)
        return inside
    return None


def find_socket(pid: int) -> str | None:
    """The socket ``pid``'s agent listens on, as a path from here, or None."""
    inside = _listening_inside(pid)
    return None if inside is None else _reachable(pid, inside)


def _reachable(pid: int, inside: str) -> str | None:
    """The agent socket ``inside`` ``pid``'s filesystem as a path from here: through
    /proc/PID/root, else where a volume shared with the worker is mounted at the same path or
    at LEAKHOUND_AGENT_TMPDIR (a sidecar that may not enter the worker's root)."""
    if same_filesystem_view(pid):
        return inside
    tail = os.path.join(*inside.rsplit("/", 2)[-2:])  # the socket's directory and name
    shared = os.environ.get("LEAKHOUND_AGENT_TMPDIR", "")
    candidates = (f"/proc/{pid}/root{inside}", inside, os.path.join(shared, tail) if shared else "")
    return next((path for path in candidates if path and _is_socket(path)), None)


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def _candidate_dirs(pid: int) -> list[str]:
    """Where the agent of ``pid`` would have made its socket directory (tempfile's order)."""
    env = environ_of(pid)
    dirs = [env[key] for key in ("TMPDIR", "TEMP", "TMP") if env.get(key, "").startswith("/")]
    return list(dict.fromkeys([*dirs, "/tmp", "/var/tmp", "/usr/tmp"]))


def remove_stale_sockets(pid: int) -> list[str]:
    """Remove the socket files named after ``pid`` that no agent listens on (its worker was
    killed before its atexit ran); returns them."""
    removed: list[str] = []
    nspid = namespace_pid(pid)
    live = find_socket(pid)
    for inside in _candidate_dirs(pid):
        base = glob.escape(_from_here(pid, inside.rstrip("/")))
        found = glob.glob(f"{base}/{SOCKET_DIR_PREFIX}*/{socket_name(nspid)}")
        removed.extend(path for path in found if path != live and _remove_if_stale(path))
    return removed


def _remove_if_stale(path: str) -> bool:
    """Unlink the socket at ``path`` if nobody listens on it, and it and its directory are
    what an agent makes: a directory (not a symlink) ``leakhound-agent-UID`` owned by UID,
    holding a socket (not a symlink) of UID's. Root does this in directories other users
    control: through the directory's descriptor, never a path they could redirect."""
    directory, name = os.path.split(path)
    try:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        owner = os.fstat(dir_fd).st_uid
        entry = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if os.path.basename(directory) != socket_dir_name(owner) or entry.st_uid != owner \
                or not stat.S_ISSOCK(entry.st_mode) or not refuses_connections(f"/proc/self/fd/{dir_fd}/{name}"):
            return False
        os.unlink(name, dir_fd=dir_fd)
        return True
    except OSError:
        return False
    finally:
        os.close(dir_fd)


def available(pid: int, uid: int) -> bool:
    """Whether ``pid`` runs an agent listening now (reachable from here or not: if not,
    ``request`` says why). A stale socket left under its pid is removed on the way, so the
    next method is used and nothing is left to mislead."""
    del uid  # the socket is found by what the kernel lists, not by a guessed name
    if _listening_inside(pid) is not None:
        return True
    remove_stale_sockets(pid)
    return False


# Seconds a timed-out request gets to confirm its cancel (as on the debugger path).
CANCEL_GRACE = 5.0
# The longest line the agent sends: a graph's JSON is its labels (at most 20,000 of at most
# 80 characters), type names and roots (~50 bytes each: every module and class); a small
# worker's is 270 KB, one with 100,000 classes ~11 MB. Its records come raw after it,
# counted by binary_bytes.
MAX_LINE_BYTES = 32 << 20
# JSON containers one line may open: each costs leakhound ~60 bytes decoded, so 32 MiB of
# ``[{},{},...`` would take ~700 MB; the agent's lines hold a few thousand (the graph's
# roots and labels are flat lists).
MAX_LINE_CONTAINERS = 1_000_000
_PHASE = re.compile(r"[A-Za-z0-9_.:/ -]{0,64}")


def _untrusted(pid: int, what: str) -> ProtocolViolation:
    return ProtocolViolation(f"the agent socket of process {pid} {what}; leakhound stopped reading it")


def graph_bytes_allowed(doc: dict[str, Any]) -> int:
    """How many bytes of graph records the request ``doc`` lets its answer carry: none
    without a graph; twice the walk's memory budget when it sets one (the records are what
    the walk holds); else what the nodes it allows may write (channel.graph_records_allowed)."""
    if doc.get("op") != "graph" and not doc.get("graph"):
        return 0
    budget = doc.get("max_graph_bytes")
    if isinstance(budget, int) and budget > 0:
        return 2 * budget + (1 << 20)
    return graph_records_allowed(doc)


def _connect_to_agent(path: str, pid: int, uid: int, timeout: float) -> socket.socket:
    """A connection to the agent of ``pid`` at ``path``, checked before anything is sent:
    the socket's directory is not a symlink, is the target user's and writable by no one
    else; the socket file is not a symlink; and the process at the other end (SO_PEERCRED:
    who listens) is ``pid`` itself, running as ``uid``. Whatever a process of that user
    puts in the directory, root's client talks to nothing but the target."""
    directory, name = os.path.split(path)
    try:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise TargetExited(f"the agent of process {pid} is not listening") from None
    except PermissionError:
        raise PermissionDenied(f"cannot open the agent socket's directory {directory}") from None
    except OSError as exc:  # ELOOP: the directory is a symlink
        raise _untrusted(pid, f"is in {directory}, which is not a directory ({exc.strerror})") from None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        here = os.fstat(dir_fd)
        if here.st_uid not in (uid, 0) or here.st_mode & 0o022:
            raise _untrusted(pid, f"is in {directory}, owned by uid {here.st_uid} with mode "
                                  f"{stat.S_IMODE(here.st_mode):o}, not private to uid {uid}")
        try:
            entry = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            raise TargetExited(f"the agent of process {pid} is not listening") from None
        if not stat.S_ISSOCK(entry.st_mode):
            raise _untrusted(pid, f"{path} is not a socket (a symlink or another file)")
        sock.settimeout(max(0.1, min(timeout, 10.0)))
        try:
            sock.connect(f"/proc/self/fd/{dir_fd}/{name}")
        except PermissionError:
            raise PermissionDenied(f"cannot connect to the agent socket {path}") from None
        except (ConnectionRefusedError, FileNotFoundError):
            # It stopped listening since it was found: the process is exiting.
            raise TargetExited(f"the agent of process {pid} is not listening") from None
        except OSError as exc:
            raise TargetExited(f"cannot connect to the agent of process {pid}: {exc.strerror}") from None
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        peer_pid, peer_uid, _gid = struct.unpack("3i", creds)
        if peer_pid != pid or peer_uid != uid:
            raise _untrusted(pid, f"{path} is served by pid {peer_pid} (uid {peer_uid}), not by "
                                  f"process {pid} (uid {uid})")
    except BaseException:
        sock.close()
        raise
    finally:
        os.close(dir_fd)
    return sock


class _Lines:
    """Lines from the agent's socket, each at most ``MAX_LINE_BYTES``, and raw bytes after
    them; every read waits at most until the deadline as it stands, and whatever arrives is
    the request's progress."""

    def __init__(self, sock: socket.socket, pid: int) -> None:
        self.sock = sock
        self.pid = pid
        self.buf = bytearray()
        self.scanned = 0  # bytes of buf known to hold no newline

    def recv(self, limit: int, deadline: Deadline) -> bytes | None:
        """Up to ``limit`` bytes, or None when the deadline passes first (it may move on while
        this waits: progress or a hold from another thread)."""
        while True:
            left = deadline.left()
            if left <= 0:
                return None
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(limit)
                break
            except TimeoutError:
                continue
            except OSError as exc:
                raise TargetExited(f"the connection to the agent of process {self.pid} failed: {exc.strerror}") \
                    from None
        if not chunk:
            raise TargetExited(f"the agent of process {self.pid} closed the connection")
        deadline.progressed()
        return chunk

    def line(self, deadline: Deadline) -> bytes | None:
        """The next whole line (without its newline), or None at the deadline."""
        while True:
            end = self.buf.find(b"\n", self.scanned)
            if end >= 0:
                line = bytes(self.buf[:end])
                del self.buf[:end + 1]
                self.scanned = 0
                return line
            self.scanned = len(self.buf)
            if len(self.buf) > MAX_LINE_BYTES:
                raise _untrusted(self.pid, f"sent a line longer than {MAX_LINE_BYTES >> 20} MiB")
            chunk = self.recv(1 << 16, deadline)
            if chunk is None:
                return None
            self.buf += chunk

    def exactly(self, size: int, deadline: Deadline) -> bytes:
        """The next ``size`` bytes, raw."""
        data = bytearray(self.buf[:size])
        del self.buf[:size]
        self.scanned = 0
        while len(data) < size:
            chunk = self.recv(min(1 << 20, size - len(data)), deadline)
            if chunk is None:
                raise AttachTimeout(f"the agent of process {self.pid} did not send its object graph in time")
            data += chunk
        return bytes(data)


def _decode(line: bytes, pid: int) -> tuple[str, Any]:
    """(kind, body) of one line: ``progress``, ``partial`` or ``result``."""
    if line.count(b"{") + line.count(b"[") > MAX_LINE_CONTAINERS:
        raise _untrusted(pid, f"sent a line of over {MAX_LINE_CONTAINERS:,} JSON objects and arrays")
    try:
        msg = json.loads(line)
    except (ValueError, RecursionError):
        raise _untrusted(pid, f"sent a line that is not JSON: {line[:60]!r}") from None
    if not isinstance(msg, dict) or len(msg) != 1:
        raise _untrusted(pid, f"sent {type(msg).__name__} {_short(msg)}, not one message")
    ((kind, body),) = msg.items()
    if kind == "progress":
        if not (isinstance(body, dict) and isinstance(body.get("phase", ""), str)
                and _PHASE.fullmatch(body.get("phase", "")) and _is_count(body.get("done", 0))):
            raise _untrusted(pid, f"sent a malformed progress message {_short(body)}")
    elif kind == "partial":
        if not (isinstance(body, dict) and isinstance(body.get("name"), str) and isinstance(body.get("doc"), dict)
                and isinstance(body["doc"].get("graph", {}), dict)):
            raise _untrusted(pid, f"sent a malformed graph message {_short(body)}")
    elif kind == "result":
        if not isinstance(body, dict) or not isinstance(body.get("ok", False), bool) \
                or not all(isinstance(body.get(key, ""), str) for key in ("kind", "error", "traceback")) \
                or not isinstance(body.get("graph", {}), (dict, type(None))):
            raise _untrusted(pid, f"sent a malformed answer {_short(body)}")
    else:
        raise _untrusted(pid, f"sent a message the agent never sends ({_short(kind)})")
    return kind, body


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _send_cancel(sock: socket.socket) -> bool:
    try:
        sock.settimeout(CANCEL_GRACE)
        sock.sendall(json.dumps({wire.CANCEL: True}).encode() + b"\n")
    except OSError:
        pass
    return True


def _post(sock: socket.socket, lock: threading.Lock, name: str, reply: dict[str, Any]) -> None:
    """Answer a document the agent handed over early (any thread); nothing once it is closed."""
    try:
        with lock:
            sock.sendall(json.dumps({"reply": name, "doc": reply}).encode() + b"\n")
    except OSError:
        pass


def request(
    pid: int,
    uid: int,
    doc: dict[str, Any],
    *,
    deadline: Deadline,
    progress: Progress | None,
    log: AttachLog,
    on_partial: Partial | None = None,
) -> dict[str, Any]:
    """One request to the agent of ``pid``; its result. ``on_partial``: a graph handed over
    before the result (``{"partial": ...}``, its arrays after the line), answered through
    ``post`` by a ``{"reply": ...}`` line (runner._snapshot_graph_first, payload agent's
    SocketExchange).

    Everything read is untrusted (a process of the target's user made the socket): the
    peer is checked before anything is sent (``_connect_to_agent``), lines and graph
    records are bounded (``MAX_LINE_BYTES``, ``graph_bytes_allowed``), every read waits at
    most until ``deadline`` (attach/deadline.py: its hard limit, or its stall window when it
    follows progress; then a cancel and ``CANCEL_GRACE`` for its answer),
    and a message of the wrong shape ends the request with ``ProtocolViolation``."""
    path = find_socket(pid)
    inside = _listening_inside(pid) if path is None else None
    if inside is not None:
        raise TargetFilesystemUnreachable(
            f"process {pid}'s agent listens on {inside} in its own filesystem, which leakhound "
            f"cannot reach from here (not through /proc/{pid}/root, nor at that path)",
            hint="Run leakhound as the worker's user or root in a container that shares its pid "
            "namespace, or mount the directory holding the socket into leakhound's container too "
            "(at the same path, or name it with LEAKHOUND_AGENT_TMPDIR).",
        )
    if path is None:
        removed = remove_stale_sockets(pid)
        stale = f"; removed the stale socket {', '.join(removed)} left by an earlier process" if removed else ""
        raise MethodUnavailable(f"no leakhound agent listening in process {pid}{stale}")
    log(f"agent socket: {path}")
    sock = _connect_to_agent(path, pid, uid, deadline.left())
    try:
        sock.settimeout(max(0.1, deadline.left()))
        try:
            sock.sendall(json.dumps(doc).encode() + b"\n")
        except TimeoutError:
            raise AttachTimeout(f"the agent of process {pid} did not take the request: "
                                f"{deadline.explain(pid)}") from None
        except OSError as exc:
            raise TargetExited(f"the agent of process {pid} closed the connection ({exc.strerror})") from None
        lines = _Lines(sock, pid)
        graph_bytes_left = graph_bytes_allowed(doc)
        lock = threading.Lock()  # a reply posted from another thread and a cancel: whole lines
        cancel_sent = False
        ran_out = ""
        while True:
            line = lines.line(deadline)
            if line is None:
                if cancel_sent:
                    raise AttachTimeout(f"no answer from the agent of process {pid}: {ran_out}")
                # Out of time: tell the request to stop, and wait a little for its answer
                # (Cancelled, or its result if it finished meanwhile).
                ran_out = deadline.explain(pid)
                with lock:
                    cancel_sent = _send_cancel(sock)
                deadline = Deadline.fixed(CANCEL_GRACE)
                continue
            kind, body = _decode(line, pid)
            graph = body.get("doc", {}).get("graph") if kind == "partial" else body.get("graph")
            if kind in ("partial", "result") and isinstance(graph, dict) and "binary_bytes" in graph:
                # The graph's raw arrays follow its line (payload/graph_wire.py).
                size = graph["binary_bytes"]
                if not _is_count(size) or size > graph_bytes_left:
                    raise _untrusted(pid, f"declared {_short(size)} bytes of graph records, over the "
                                          f"{graph_bytes_left:,} this request allows")
                graph_bytes_left -= size
                graph["binary"] = lines.exactly(size, deadline)
            if kind == "progress":
                done = body.get("done", 0)
                deadline.progressed(f"{body.get('phase', '')} {done:,}" if done else body.get("phase", ""))
                if progress is not None:
                    progress(body.get("phase", ""), body.get("done", 0))
            elif kind == "partial":
                if on_partial is not None and isinstance(graph, dict):
                    on_partial(body["name"], graph, lambda name, reply: _post(sock, lock, name, reply))
            else:
                return dict(body)
    finally:
        sock.close()
