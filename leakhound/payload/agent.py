"""The opt-in in-process agent, for containers where ptrace is not allowed.

Started at interpreter start-up by ``leakhound_agent.pth`` when the worker's environment has
``LEAKHOUND_AGENT=1`` (no code change in the worker). It listens on a Unix socket in a 0700
directory, ``$TMPDIR/leakhound-agent-<uid>/agent-<pid>.sock`` (mode 0600), accepts connections
only from its own user or root (SO_PEERCRED), reads one JSON request line of bounded size,
and answers with JSON lines: ``{"progress": ...}`` while working, then ``{"result": ...}``.
Requests name one of the payload's fixed operations; nothing sent is ever executed.
"""

import json
import os
import socket
import struct
import sys
import tempfile
import threading

MAX_REQUEST = 64 * 1024
ENV_VAR = "LEAKHOUND_AGENT"


def socket_dir(uid=None):
    uid = os.getuid() if uid is None else uid
    return os.path.join(tempfile.gettempdir(), "leakhound-agent-%d" % uid)


def socket_path(pid=None, uid=None):
    return os.path.join(socket_dir(uid), "agent-%d.sock" % (pid or os.getpid()))


def _peer_allowed(conn):
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid in (0, os.getuid())


def _read_line(conn):
    data = b""
    while b"\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_REQUEST:
            return None
    return data.split(b"\n", 1)[0]


def _send(conn, doc):
    conn.sendall(json.dumps(doc).encode() + b"\n")


def _serve_one(conn):
    from . import runner  # noqa: PLC0415 - loaded on first request, not at start-up

    conn.settimeout(5.0)
    try:
        if not _peer_allowed(conn):
            _send(conn, {"result": {"ok": False, "kind": "Forbidden", "error": "peer not allowed"}})
            return
        line = _read_line(conn)
        try:
            request = json.loads(line.decode("utf-8")) if line else None
        except (ValueError, UnicodeDecodeError):
            request = None
        if type(request) is not dict:
            _send(conn, {"result": {"ok": False, "kind": "BadRequest", "error": "malformed request"}})
            return

        def send_progress(phase, done):
            try:
                _send(conn, {"progress": {"phase": phase, "done": done}})
            except OSError:
                pass

        # A "cancel" line or the client closing the connection stops the request.
        _send(conn, {"result": runner.handle(request, runner.throttled(send_progress),
                                             runner.socket_cancelled(conn))})
    except OSError:
        pass
    finally:
        conn.close()


def _serve(server):
    while True:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        _serve_one(conn)


_started = []  # type: list


def start():
    """Start the agent once per process; returns the socket path."""
    if _started:
        return _started[0]
    directory = socket_dir()
    os.makedirs(directory, mode=0o700, exist_ok=True)
    st = os.stat(directory)
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise PermissionError("leakhound agent: %s is not private to this user" % directory)
    path = socket_path()
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        server.bind(path)
    finally:
        os.umask(old)
    server.listen(4)
    thread = threading.Thread(target=_serve, args=(server,), name="leakhound-agent", daemon=True)
    thread.start()
    _started.append(path)
    import atexit  # noqa: PLC0415

    def remove_socket():
        if os.path.exists(path):
            os.unlink(path)

    atexit.register(remove_socket)
    return path


def maybe_start():
    """Called from the .pth hook; never raises into the worker's start-up."""
    if os.environ.get(ENV_VAR, "") not in ("1", "true", "yes", "on"):
        return
    try:
        start()
    except Exception as exc:
        sys.stderr.write("leakhound agent not started: %s\n" % exc)
