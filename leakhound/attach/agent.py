"""Client for the in-process agent (see leakhound/payload/agent.py).

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
import threading
import time
from typing import Any

from leakhound.attach.base import AttachLog
from leakhound.attach.channel import Partial, Progress
from leakhound.attach.process import environ_of, namespace_pid, same_filesystem_view
from leakhound.errors import (
    AttachTimeout,
    MethodUnavailable,
    PermissionDenied,
    TargetExited,
    TargetFilesystemUnreachable,
)
from leakhound.payload.agent import connect

_AGENT_SOCKET = re.compile(r"/leakhound-agent-\d+/agent-(\d+)\.sock$")
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
        match = _AGENT_SOCKET.search(inside)
        if match is None or int(match.group(1)) != nspid:
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
    tail = os.path.join(*inside.rsplit("/", 2)[-2:])  # leakhound-agent-UID/agent-PID.sock
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


def _refused(path: str) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        connect(probe, path)
    except ConnectionRefusedError:
        return True
    except OSError:
        return False
    finally:
        probe.close()
    return False


def remove_stale_sockets(pid: int) -> list[str]:
    """Remove the socket files named after ``pid`` that no agent listens on (its worker was
    killed before its atexit ran); returns them."""
    removed = []
    nspid = namespace_pid(pid)
    live = find_socket(pid)
    for inside in _candidate_dirs(pid):
        base = glob.escape(_from_here(pid, inside.rstrip("/")))
        for path in glob.glob(f"{base}/leakhound-agent-*/agent-{nspid}.sock"):
            if path == live or not _refused(path):
                continue
            try:
                os.unlink(path)
            except OSError:
                continue
            removed.append(path)
    return removed


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


def _send_cancel(sock: socket.socket) -> bool:
    try:
        sock.settimeout(CANCEL_GRACE)
        sock.sendall(b'{"cancel": true}\n')
    except OSError:
        pass
    return True


def _read_exactly(sock: socket.socket, head: bytes, size: int, deadline: float, pid: int) -> bytes:
    """``size`` bytes: ``head`` (read already) and the rest from ``sock``."""
    return _read_bytes(sock, head, size, deadline, pid)[0]


def _read_bytes(sock: socket.socket, head: bytes, size: int, deadline: float, pid: int) -> tuple[bytes, bytes]:
    """``size`` bytes (``head``, read already, and the rest from ``sock``), and what of
    ``head`` came after them."""
    data = bytearray(head[:size])
    rest = head[size:]
    while len(data) < size:
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            chunk = sock.recv(min(1 << 20, size - len(data)))
        except TimeoutError:
            raise AttachTimeout(f"the agent of process {pid} did not send its object graph in time") from None
        if not chunk:
            raise TargetExited(f"the agent of process {pid} closed the connection")
        data += chunk
    return bytes(data), rest


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
    timeout: float,
    progress: Progress | None,
    log: AttachLog,
    on_partial: Partial | None = None,
) -> dict[str, Any]:
    """One request to the agent of ``pid``; its result. ``on_partial``: a graph handed over
    before the result (``{"partial": ...}``, its arrays after the line), answered through
    ``post`` by a ``{"reply": ...}`` line (runner._snapshot_graph_first, payload agent's
    _SocketExchange)."""
    del uid
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
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    try:
        try:
            connect(sock, path)
        except PermissionError:
            raise PermissionDenied(f"cannot connect to the agent socket {path}") from None
        except (ConnectionRefusedError, FileNotFoundError):
            # It stopped listening since it was found: the process is exiting.
            raise TargetExited(f"the agent of process {pid} is not listening") from None
        sock.sendall(json.dumps(doc).encode() + b"\n")
        lock = threading.Lock()  # a reply posted from another thread and a cancel: whole lines
        buf = b""
        cancel_sent = False
        while True:
            try:
                chunk = sock.recv(1 << 16) if time.monotonic() <= deadline else None
            except TimeoutError:
                chunk = None
            if chunk is None:
                if cancel_sent:
                    raise AttachTimeout(f"no answer from the agent of process {pid} within {timeout:.0f}s")
                # Out of time: tell the request to stop, and wait a little for its answer
                # (Cancelled, or its result if it finished meanwhile).
                with lock:
                    cancel_sent = _send_cancel(sock)
                deadline = time.monotonic() + CANCEL_GRACE
                continue
            if not chunk:
                raise TargetExited(f"the agent of process {pid} closed the connection")
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                msg = json.loads(line)
                partial = msg.get("partial")
                if isinstance(partial, dict):
                    graph = (partial.get("doc") or {}).get("graph")
                    if isinstance(graph, dict) and isinstance(graph.get("binary_bytes"), int):
                        graph["binary"], buf = _read_bytes(sock, buf, graph["binary_bytes"], deadline, pid)
                    if on_partial is not None and isinstance(graph, dict):
                        on_partial(str(partial.get("name")), graph, lambda name, reply: _post(sock, lock, name, reply))
                    continue
                if "progress" in msg:
                    if progress is not None:
                        progress(str(msg["progress"].get("phase", "")), int(msg["progress"].get("done", 0)))
                    continue
                result = msg.get("result")
                if not isinstance(result, dict):
                    raise TargetExited("the agent sent a malformed answer")
                graph = result.get("graph")
                if isinstance(graph, dict) and isinstance(graph.get("binary_bytes"), int):
                    # The graph's raw arrays follow its line (payload/graph_wire.py).
                    graph["binary"] = _read_exactly(sock, buf, graph["binary_bytes"], deadline, pid)
                return result
    finally:
        sock.close()
