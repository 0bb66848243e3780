"""Client for the in-process agent (see leakhound/payload/agent.py)."""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any

from leakhound.attach.base import AttachLog
from leakhound.attach.channel import Progress
from leakhound.attach.process import namespace_pid
from leakhound.errors import AttachTimeout, MethodUnavailable, PermissionDenied, TargetExited


def socket_path(pid: int, uid: int) -> str:
    """The agent's socket as seen from here, through the target's own root (works across
    container mount namespaces when /proc/PID/root is reachable)."""
    inner = os.path.join(
        os.environ.get("LEAKHOUND_AGENT_TMPDIR", "/tmp"),
        f"leakhound-agent-{uid}",
        f"agent-{namespace_pid(pid)}.sock",
    )
    via_root = f"/proc/{pid}/root{inner}"
    return via_root if os.path.exists(via_root) else inner


def available(pid: int, uid: int) -> bool:
    try:
        return os.path.exists(socket_path(pid, uid))
    except OSError:
        return False


def request(
    pid: int,
    uid: int,
    doc: dict[str, Any],
    *,
    timeout: float,
    progress: Progress | None,
    log: AttachLog,
) -> dict[str, Any]:
    path = socket_path(pid, uid)
    log(f"agent socket: {path}")
    if not os.path.exists(path):
        raise MethodUnavailable(f"no leakhound agent in process {pid} (no socket at {path})")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    try:
        try:
            sock.connect(path)
        except PermissionError:
            raise PermissionDenied(f"cannot connect to the agent socket {path}") from None
        except (ConnectionRefusedError, FileNotFoundError):
            raise TargetExited(f"the agent of process {pid} is not listening") from None
        sock.sendall(json.dumps(doc).encode() + b"\n")
        buf = b""
        while True:
            if time.monotonic() > deadline:
                raise AttachTimeout(f"no answer from the agent of process {pid} within {timeout:.0f}s")
            try:
                chunk = sock.recv(1 << 16)
            except TimeoutError:
                raise AttachTimeout(f"no answer from the agent of process {pid} within {timeout:.0f}s") from None
            if not chunk:
                raise TargetExited(f"the agent of process {pid} closed the connection")
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                msg = json.loads(line)
                if "progress" in msg:
                    if progress is not None:
                        progress(str(msg["progress"].get("phase", "")), int(msg["progress"].get("done", 0)))
                    continue
                result = msg.get("result")
                if not isinstance(result, dict):
                    raise TargetExited("the agent sent a malformed answer")
                return result
    finally:
        sock.close()
