"""The opt-in in-process agent, for containers where ptrace is not allowed.

Started at interpreter start-up by ``leakhound_agent.pth`` (no code change in the worker),
only in the process it is meant for, as ``LEAKHOUND_AGENT`` says:

- ``1`` (or ``true``, ``yes``, ``on``): the first Python process that starts with it, and no
  other: that process sets ``LEAKHOUND_AGENT=started:<pid>`` in its own environment, so the
  processes it starts (a launcher's workers, subprocesses, ``multiprocessing`` spawns) do not
  run one too;
- ``argv:REGEX``: every process whose command line (its arguments joined by spaces, from
  /proc/self/cmdline) matches the regular expression, e.g. ``argv:verifiers.*env_worker``
  for each worker of a pool; the environment is left as it is;
- anything else (``0``, empty, ``started:<pid>``): none.

leakhound's own CLI never runs one. A forked child does not inherit it (the thread does not
survive ``fork``; the child closes its copies of the agent's sockets at once, and leaves the
parent's socket file alone when it exits).

It listens on a Unix socket in a 0700 directory,
``$TMPDIR/leakhound-agent-<uid>/agent-<pid>.sock`` (mode 0600; the pid is the one the process
sees for itself), accepts connections only from its own user or root (SO_PEERCRED), reads one
JSON request line of bounded size within ``REQUEST_READ_SECONDS`` (on a short-lived thread per
connection, so a client that sends slowly holds nobody else up), and answers with JSON
lines: ``{"progress": ...}`` while working, then ``{"result": ...}``, one request at a time.
Requests name one of the payload's fixed operations; nothing sent is ever executed. On
start it removes the sockets in its directory that nobody listens on any more (left by
workers killed before their ``atexit`` ran).
"""

import json
import os
import re
import socket
import struct
import sys
import tempfile
import threading
import time

from . import fork_guard, wire

MAX_REQUEST = 64 * 1024
# A client has this long to send its whole request line, and at most MAX_READERS clients
# are being read from at once (more are closed at once): requests are served one at a time,
# so a same-user client sending a byte every few seconds would otherwise hold every other
# client off, for as long as it likes.
REQUEST_READ_SECONDS = 5.0
MAX_READERS = 8
# Requests read and waiting for the one being served (each holds its connection open).
MAX_QUEUED = 16
# The client's answer to a graph handed over early: up to 64 paths of up to 256 ids.
MAX_REPLY = 4 * 1024 * 1024
ENV_VAR = "LEAKHOUND_AGENT"
# sun_path holds 108 bytes with its NUL. A longer existing socket's path is reached through a
# descriptor of its directory, /proc/self/fd/N/NAME, which any length of directory fits.
_SUN_PATH_MAX = 107


# The agent's socket is ``<tmp>/leakhound-agent-<uid>/agent-<pid>.sock``: named here once, for
# the agent that binds it and for the CLI that finds and sweeps it (attach/agent.py).
SOCKET_DIR_PREFIX = "leakhound-agent-"
SOCKET_NAME = re.compile(r"/leakhound-agent-(?P<uid>\d+)/agent-(?P<pid>\d+)\.sock$")


def socket_dir_name(uid):
    # type: (int) -> str
    return SOCKET_DIR_PREFIX + str(uid)


def socket_name(pid):
    # type: (int) -> str
    return "agent-%d.sock" % pid


def is_socket_name(name):
    # type: (str) -> bool
    """Whether ``name`` (a file in an agent's directory) is named like an agent's socket."""
    return name.startswith("agent-") and name.endswith(".sock")


def socket_dir(uid=None, pid=None):
    """The worker's TMPDIR's agent directory, or /tmp's when a socket there would not fit
    in sun_path (a deep TMPDIR): the client finds it in the kernel's list of listening
    sockets either way, which records the path the socket was bound to."""
    uid = os.getuid() if uid is None else uid
    name = socket_dir_name(uid)
    preferred = os.path.join(tempfile.gettempdir(), name)
    longest = os.path.join(preferred, socket_name(pid or 4194304))
    if len(os.fsencode(longest)) <= _SUN_PATH_MAX:
        return preferred
    return os.path.join("/tmp", name)


def socket_path(pid=None, uid=None):
    pid = pid or os.getpid()
    return os.path.join(socket_dir(uid, pid), socket_name(pid))


def _peer_allowed(conn):
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid in (0, os.getuid())


def _read_line(conn, deadline):
    """The first line from ``conn``, read by ``deadline`` (time.monotonic()); None when it
    does not come by then or is longer than MAX_REQUEST."""
    data = b""
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        conn.settimeout(left)
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_REQUEST:
            return None
    return data.split(b"\n", 1)[0]


def _send(conn, doc):
    result = doc.get("result")
    if type(result) is dict and "graph" in result or "partial" in doc:
        from .graph import binary_pieces, json_pieces  # noqa: PLC0415 - a graph's arrays go piece by piece

        for piece in json_pieces(doc):
            conn.sendall(piece.encode())
        conn.sendall(b"\n")
        for piece in binary_pieces(doc):  # the graph's raw arrays, right after its line
            conn.sendall(piece)
        return
    conn.sendall(json.dumps(doc).encode() + b"\n")


class SocketExchange(object):
    """transport.DirectoryExchange's counterpart on the agent's socket: ``send`` is a ``{"partial": {"name", "doc"}}``
    line (a graph's raw arrays right after it), ``receive`` waits for the client's
    ``{"reply": name, "doc": ...}`` line, polling 5 ms at a time, until the request is
    cancelled (``stop``: runner._Stop) or ``time.monotonic()`` is ``until``."""

    # the object graph's records stay in the target until sent (no file beside the socket)
    spool_dir = None

    def __init__(self, conn):
        self.conn = conn
        self.pending = b""

    def send(self, name, doc):
        _send(self.conn, {"partial": {"name": name, "doc": doc}})

    def receive(self, name, stop, until):
        import select  # noqa: PLC0415
        import time  # noqa: PLC0415

        poller = select.poll()
        poller.register(self.conn, select.POLLIN)
        while time.monotonic() < until and not stop():
            while b"\n" in self.pending:
                line, self.pending = self.pending.split(b"\n", 1)
                try:
                    doc = json.loads(line.decode("utf-8"))
                except (ValueError, UnicodeDecodeError):
                    return None
                if type(doc) is dict and doc.get("reply") == name:
                    return doc.get("doc") if type(doc.get("doc")) is dict else None
                return None  # a cancel, or anything else: no answer to wait for
            if not poller.poll(5):
                continue
            try:
                chunk = self.conn.recv(65536)
            except OSError:
                return None
            if not chunk or len(self.pending) + len(chunk) > MAX_REPLY:
                return None
            self.pending += chunk
        return None


def _receive(conn, requests, readers):
    """Check the peer and read its request line (a reader thread per connection), then
    queue it for the serving thread; a peer not allowed, or too slow, is answered here."""
    try:
        if not _peer_allowed(conn):
            _send(conn, {"result": wire.failed(wire.KIND_FORBIDDEN, "peer not allowed")})
            _close(conn)
            return
        line = _read_line(conn, time.monotonic() + REQUEST_READ_SECONDS)
        with _queued:
            queued = len(requests) < MAX_QUEUED
            if queued:
                requests.append((conn, line))
                _queued.notify()
        if not queued:
            _send(conn, {"result": wire.failed(wire.KIND_BUSY,
                                               "%d requests are waiting for the agent already" % MAX_QUEUED)})
            _close(conn)
    except Exception:
        _close(conn)
    finally:
        readers.release()


def _serve_one(conn, line):
    from . import runner, transport  # noqa: PLC0415 - loaded on first request, not at start-up

    conn.settimeout(5.0)
    try:
        try:
            request = json.loads(line.decode("utf-8")) if line else None
        except (ValueError, UnicodeDecodeError, RecursionError):
            request = None
        if type(request) is not dict:
            _send(conn, {"result": wire.failed(wire.KIND_BAD_REQUEST, "malformed request")})
            return

        def send_progress(phase, done):
            try:
                _send(conn, {"progress": {"phase": phase, "done": done}})
            except OSError:
                pass

        # A "cancel" line or the client closing the connection stops the request.
        _send(conn, {"result": runner.handle(request, transport.throttled(send_progress),
                                             transport.socket_cancelled(conn), SocketExchange(conn))})
    except OSError:
        pass
    finally:
        _close(conn)


# The listening socket and every connection accepted and not closed yet (being read, queued
# or served): a child forked from this process closes its copies (_after_fork_in_child).
_sockets = []  # type: list


def _after_fork_in_child():
    """The agent's threads do not survive a fork. The child's copies of its sockets would
    keep a connection open after the parent answered and closed it (the client waiting for
    the end of the answer until its timeout), and the listening socket looking served
    after the parent died: closed."""
    for sock in _sockets:
        try:
            sock.close()
        except OSError:
            pass
    del _sockets[:]


def _close(conn):
    """Close an accepted connection, and stop tracking it."""
    try:
        _sockets.remove(conn)
    except ValueError:  # a forked child's list was emptied
        pass
    conn.close()


_queued = threading.Condition()


def _work(requests):
    """The serving thread: the requests read, one at a time, in the order they came."""
    while True:
        with _queued:
            while not requests:
                _queued.wait()
            conn, line = requests.pop(0)
        _serve_one(conn, line)


def _accept(server, requests):
    readers = threading.BoundedSemaphore(MAX_READERS)
    while True:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        if not readers.acquire(False):
            conn.close()  # MAX_READERS clients are sending their requests already
            continue
        _sockets.append(conn)
        try:
            threading.Thread(target=_receive, args=(conn, requests, readers), name="leakhound-agent-reader",
                             daemon=True).start()
        except RuntimeError:  # no thread to be had: this client waits for none
            readers.release()
            _close(conn)


_started = []  # type: list
STALE_SWEEP_LIMIT = 256


def _listening_paths():
    """Paths of the Unix sockets listening in this network namespace (/proc/net/unix)."""
    paths = set()
    try:
        with open("/proc/net/unix") as fh:
            next(fh, None)
            for line in fh:
                fields = line.split()
                # Flags 0x10000 (__SO_ACCEPTCON): a listening socket.
                if len(fields) >= 8 and int(fields[3], 16) & 0x10000:
                    paths.add(fields[7])
    except (OSError, ValueError):
        pass
    return paths


def connect(sock, path):
    # type: (socket.socket, str) -> None
    """``sock.connect(path)``, through the directory's descriptor when ``path`` is too long
    for sun_path (the CLI's client connects this way too)."""
    _by_directory(socket.socket.connect, sock, path)


def _by_directory(action, sock, path):
    """``action(sock, address)`` for ``path``, through its directory's descriptor if long."""
    if len(os.fsencode(path)) <= _SUN_PATH_MAX:
        return action(sock, path)
    fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        return action(sock, "/proc/self/fd/%d/%s" % (fd, os.path.basename(path)))
    finally:
        os.close(fd)


def refuses_connections(path):
    # type: (str) -> bool
    """Whether the Unix socket at ``path`` refuses a connection: nobody accepts on it, its
    process is gone (killed before its atexit ran). False when it accepts, or is not there
    or not a socket (any other error): only a refused socket is stale."""
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


def _is_stale(path, listening):
    """A socket file nobody accepts on: its process is gone (killed before atexit ran)."""
    return path not in listening and refuses_connections(path)


def remove_stale_sockets(directory, keep=None):
    """Remove the agent sockets in ``directory`` that nobody listens on; returns their names."""
    removed = []  # type: list
    try:
        names = sorted(os.listdir(directory))[:STALE_SWEEP_LIMIT]
    except OSError:
        return removed
    listening = None
    for name in names:
        path = os.path.join(directory, name)
        if not is_socket_name(name) or path == keep:
            continue
        if listening is None:
            listening = _listening_paths()
        try:
            if _is_stale(path, listening):
                os.unlink(path)
                removed.append(name)
        except OSError:
            pass
    return removed


def start():
    """Start the agent once per process; returns the socket path."""
    if _started:
        return _started[0]
    if wire.free_threaded():
        raise RuntimeError("leakhound agent: a free-threaded CPython (%s) is not supported" % wire.python_version())
    path = socket_path()
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    st = os.stat(directory)
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise PermissionError("leakhound agent: %s is not private to this user" % directory)
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
    requests = []  # type: list
    _sockets.append(server)
    os.register_at_fork(after_in_child=_after_fork_in_child)
    fork_guard.register()  # before the agent's threads import anything
    threading.Thread(target=_work, args=(requests,), name="leakhound-agent", daemon=True).start()
    threading.Thread(target=_accept, args=(server, requests), name="leakhound-agent-accept", daemon=True).start()
    _started.append(path)
    owner = os.getpid()
    import atexit  # noqa: PLC0415

    def remove_socket():
        # A child forked from this process exits through here too: the socket is not its own.
        if os.getpid() == owner and os.path.exists(path):
            os.unlink(path)

    atexit.register(remove_socket)
    # Sockets of earlier workers killed before their atexit ran (SIGTERM, SIGKILL, OOM).
    remove_stale_sockets(directory, keep=path)
    return path


TRUE_VALUES = ("1", "true", "yes", "on")


def _cmdline():
    try:
        with open("/proc/self/cmdline", "rb") as fh:
            return [arg.decode("utf-8", "replace") for arg in fh.read().split(b"\0")[:-1]]
    except OSError:
        return list(sys.argv)


# Interpreter options followed by a separate argument.
_OPTIONS_WITH_ARGUMENT = ("-X", "-W", "--check-hash-based-pycs")


def is_leakhound_cli(argv):
    """Whether the command line ``argv`` (the interpreter's own, as in /proc/self/cmdline) runs
    leakhound's command line tool (``leakhound ...`` or ``python -m leakhound``): it never
    runs an agent."""
    args = iter(argv[1:])
    for arg in args:
        if arg == "-m":
            return next(args, "") in ("leakhound", "leakhound.cli", "leakhound.__main__")
        if arg == "-c" or arg == "-":
            return False
        if arg in _OPTIONS_WITH_ARGUMENT:
            next(args, None)
        elif not arg.startswith("-"):
            return os.path.basename(arg) == "leakhound"
    return False


def wanted(value, argv):
    """Whether the agent should start in a process with ``LEAKHOUND_AGENT=value`` and
    command line ``argv``."""
    value = value.strip()
    if is_leakhound_cli(argv):
        return False
    if value.lower() in TRUE_VALUES:
        return True
    if value.startswith("argv:"):
        import re  # noqa: PLC0415 - only where a pattern is given

        try:
            return re.search(value[len("argv:"):], " ".join(argv)) is not None
        except re.error as exc:
            raise ValueError("LEAKHOUND_AGENT=%s is not a valid regular expression: %s" % (value, exc)) from None
    return False


def maybe_start():
    """Called from the .pth hook; never raises into the worker's start-up."""
    value = os.environ.get(ENV_VAR, "")
    try:
        if not wanted(value, _cmdline()):
            return
        if value.strip().lower() in TRUE_VALUES:
            # Claimed by this process: its children inherit "started", not "1".
            os.environ[ENV_VAR] = "started:%d" % os.getpid()
        start()
    except Exception as exc:
        sys.stderr.write("leakhound agent not started: %s\n" % exc)
