"""How a request and its answer travel between the CLI and the payload: the debugger path's
private directory (``run_from_dir``: request.json in, progress.json and result.json out, each
written by atomic rename; ``DirectoryExchange``: documents handed over before the result), the
cancel checks of both paths (``directory_cancelled``; ``socket_cancelled`` for the agent's
socket, which agent_server.py serves) and throttled progress. What a request does is
runner.handle's.

Standard library only; runs inside the target.
"""

# mypy: disable-error-code="assignment, var-annotated, arg-type, unused-ignore"
# (payload code, Python 3.8+ without annotations)

import json
import os
import time

from . import wire
from .graph_wire import json_pieces


def write_json(path, doc):
    """``doc`` as JSON into ``path``, by atomic rename (the CLI never reads half a file)."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        # json.dumps, not json.dump: the streaming encoder builds nested closures that
        # reference each other, a reference cycle left for the target's GC on every call.
        # A graph's arrays go piece by piece (graph_wire.json_pieces): short steps.
        if "graph" in doc:
            # (its raw arrays first, into graph.bin beside this file)
            for piece in json_pieces(doc, binary_dir=os.path.dirname(path)):
                fh.write(piece)
        else:
            fh.write(json.dumps(doc))
    os.rename(tmp, path)


def throttled(report, every=0.2):
    """``report(phase, done)`` at most every ``every`` seconds.

    Every report is I/O, which releases the GIL and takes it back: many of them in a row
    starve the target's main thread (each time the GIL changes hands, a thread waiting for it
    starts its 5 ms switch-interval wait over). Measured: the agent's unthrottled progress
    took the 4.8M-object benchmark's worst loop lag from 10 ms to 110-230 ms.
    """
    last = [0.0]

    def progress(phase, done):
        now = time.monotonic()
        if now - last[0] < every:
            return
        last[0] = now
        report(phase, done)

    return progress


def directory_cancelled(directory):
    """The debugger path's cancel: the CLI wrote ``cancel`` or removed the directory."""

    def cancelled():
        return os.path.exists(os.path.join(directory, wire.CANCEL)) or not os.path.isdir(directory)

    return cancelled


def socket_cancelled(conn):
    """The agent path's cancel: a ``cancel`` line from the client, or the connection closed
    (the CLI gave up, or was killed). A client that only shut down its sending side (it sent
    the request and waits for the answer) has not cancelled: a closed connection is told from
    it by POLLHUP, set only once both directions are shut. Never blocks."""
    # Imported here, on the agent's path only (agent_server.py has them loaded): a target
    # inspected through the debugger that never imported socket is not charged its ~0.7 MiB
    # (the module and selectors, with their enums), measured on a bare 3.11 script.
    import select  # noqa: PLC0415
    import socket  # noqa: PLC0415

    def cancelled():
        try:
            poller = select.poll()
            poller.register(conn, select.POLLIN | select.POLLHUP)
            events = poller.poll(0)
            if not events:
                return False
            if events[0][1] & (select.POLLHUP | select.POLLERR | select.POLLNVAL):
                return True
            data = conn.recv(4096, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return False
        except (OSError, ValueError):
            return True
        return wire.CANCEL.encode() in data

    return cancelled


class DirectoryExchange(object):
    """Documents handed over within one request, before its result, on the debugger path:
    ``send(name, doc)`` writes ``<name>.json`` (a graph's arrays into graph.bin beside it);
    ``receive(name, stop, until)`` waits for the CLI's ``<name>.request.json`` (sleeping, 5 ms
    at a time) until it comes, the request is cancelled or ``time.monotonic()`` is ``until``."""

    def __init__(self, directory):
        self.directory = directory
        # the object graph's records go to graph.bin here as the walk goes (graph.build)
        self.spool_dir = directory

    def send(self, name, doc):
        write_json(os.path.join(self.directory, name + ".json"), doc)

    def receive(self, name, stop, until):
        path = os.path.join(self.directory, name + ".request.json")
        while time.monotonic() < until and not stop():
            try:
                with open(path) as fh:
                    doc = json.load(fh)
            except (OSError, ValueError):  # not there yet (the CLI renames it in: never half)
                time.sleep(0.005)
                continue
            return doc if type(doc) is dict else None
        return None


def run_from_dir(directory, handle, unread=None):
    """The debugger path, on the payload's own thread: request.json in, result.json out, the
    result ``handle(request, progress, cancelled, exchange)``'s (runner.handle). ``unread()``:
    called when there is no request to read."""
    cancelled = directory_cancelled(directory)

    written = [0]

    def write_progress(phase, done):
        if cancelled():
            return  # nothing new in a directory the CLI is removing
        written[0] += 1  # a beat that says the same phase again is a new document all the same
        try:
            write_json(os.path.join(directory, "progress.json"), {"phase": phase, "done": done, "seq": written[0]})
        except OSError:
            pass

    progress = throttled(write_progress)

    try:
        with open(os.path.join(directory, "request.json")) as fh:
            request = json.load(fh)
        result = handle(request, progress, cancelled, DirectoryExchange(directory))
    except (OSError, ValueError) as exc:
        if unread is not None:
            unread()
        result = wire.failed(wire.KIND_BAD_REQUEST, "cannot read the request: %s" % exc)
    if not os.path.isdir(directory):
        return  # the CLI gave up and removed the directory; nothing to leave behind
    try:
        write_json(os.path.join(directory, "result.json"), result)
    except OSError:
        pass
