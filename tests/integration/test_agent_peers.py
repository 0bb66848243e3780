"""Every agent peer is untrusted (docs/security.md). The root CLI against a process of uid
65534 posing as its own agent (fixtures/hostile_agent.py): one clear error and a documented
exit code within its timeout, its peak RSS bounded, nothing sent to a socket that is not the
target's. And the real agent against a slow client: it holds no other client up."""

from __future__ import annotations

import array
import copy
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from leakhound.analysis.dominators.graph import GRAPH_FORMAT
from tests.pythons import installed_pythons
from tests.utils import AS_NOBODY, FIXTURES, NOBODY, ROOT, agent_exchange, spawn_target, wait_for_agent_socket

pytestmark = pytest.mark.integration

SYSTEM_PYTHON = "/usr/bin/python3"  # the venv's interpreter lives under root's 0700 home
LEAKHOUND = [sys.executable, "-m", "leakhound"]
TIMEOUT = 8.0
CANCEL_GRACE = 5.0  # attach/agent.py: a timed-out request waits this long for its cancel's answer
# The CLI's peak RSS (VmHWM): 25 MiB for an error before any line is read; 57 MiB for a line
# cut at 32 MiB; 149 MiB for a 31 MiB string, decoded and then refused.
RSS_BOUND_KIB = 200 * 1024

if shutil.which("setpriv") is None or not os.path.exists(SYSTEM_PYTHON):
    pytest.skip("needs setpriv and the system python", allow_module_level=True)



@dataclass
class Run:
    returncode: int
    stderr: str
    seconds: float
    max_rss_kib: int


# The CLI, its peak RSS written at exit: VmHWM counts its own memory only (ru_maxrss from wait4
# would count the test process's too: the fork before the exec).
_MEASURED = """
import atexit, runpy, sys
out = sys.argv.pop(1)

def peak():
    with open("/proc/self/status") as fh:
        hwm = next(line.split()[1] for line in fh if line.startswith("VmHWM:"))
    with open(out, "w") as fh:
        fh.write(hwm)

atexit.register(peak)
sys.argv[0] = "leakhound"
runpy.run_module("leakhound", run_name="__main__", alter_sys=True)
"""


def _inspect(pid: int, directory: Path, *extra: str) -> Run:
    """``leakhound inspect PID --method agent`` as root, and its peak RSS."""
    hwm = directory / "cli.hwm"
    began = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", _MEASURED, str(hwm), "inspect", str(pid), "--method", "agent",
                           "--timeout", str(TIMEOUT), *extra], capture_output=True, text=True, timeout=120)
    return Run(proc.returncode, proc.stderr, time.monotonic() - began, int(hwm.read_text()))


def _hostile(directory: Path, mode: str, **env: str) -> object:
    return spawn_target("hostile_agent", directory, python=SYSTEM_PYTHON, prefix=AS_NOBODY,
                        env={"HOSTILE_MODE": mode, "TMPDIR": str(directory), **env})


def _one_clear_error(run: Run, code: int) -> None:
    assert "Traceback" not in run.stderr, run.stderr
    assert run.returncode == code, run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("leakhound: error:")]
    assert len(errors) == 1, run.stderr
    assert run.max_rss_kib < RSS_BOUND_KIB, f"peak RSS {run.max_rss_kib} KiB"
    assert run.seconds < TIMEOUT + CANCEL_GRACE + 5.0, f"took {run.seconds:.1f} s"
    print(f"exit {run.returncode} after {run.seconds:.1f} s, peak RSS {run.max_rss_kib / 1024:.0f} MiB")


WRONG_LINES = {
    "garbage": "\x00\udcff not json at all",
    "deep nesting": "[" * 200_000,
    "many containers": '{"progress": [' + "{}," * 2_000_000 + "{}]}",
    "a string of 31 MiB": '{"progress": {"phase": "' + "a" * (31 << 20) + '", "done": 1}}',
    "a list": "[1, 2, 3]",
    "two messages in one": '{"progress": {"phase": "walk", "done": 1}, "result": {"ok": true}}',
    "progress a string": '{"progress": "census"}',
    "progress done a string": '{"progress": {"phase": "walk", "done": "many"}}',
    "progress phase with escapes": '{"progress": {"phase": "\\u001b[2J\\u001b]0;pwned\\u0007", "done": 1}}',
    "result a list": '{"result": []}',
    "result ok a string": '{"result": {"ok": "yes"}}',
    "result error a dict": '{"result": {"ok": false, "error": {"x": 1}}}',
    "graph a list": '{"result": {"ok": true, "graph": [1]}}',
    "binary_bytes a string": '{"result": {"ok": true, "graph": {"binary_bytes": "1000"}}}',
    "binary_bytes negative": '{"result": {"ok": true, "graph": {"binary_bytes": -5}}}',
    "binary_bytes a float": '{"result": {"ok": true, "graph": {"binary_bytes": 1e300}}}',
    "partial doc a string": '{"partial": {"name": "graph", "doc": "x"}}',
    "unknown message": '{"exec": "import os"}',
}


@pytest.mark.parametrize("line", list(WRONG_LINES.values()), ids=list(WRONG_LINES))
def test_a_wrong_line_is_one_clear_error(nobody_dir: Path, line: str) -> None:
    line_file = nobody_dir / "line"
    line_file.write_bytes(line.encode("utf-8", "surrogatepass"))
    with _hostile(nobody_dir, "line", HOSTILE_LINE=str(line_file)) as child:  # type: ignore[attr-defined]
        run = _inspect(child.pid, nobody_dir)
    _one_clear_error(run, 20)
    assert "agent socket of process" in run.stderr


@pytest.fixture(scope="module")
def real_result(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A snapshot result as the real agent sends it (the template the wrong ones are made from)."""
    with spawn_target("growing_cache", tmp_path_factory.mktemp("real"), env={"LEAKHOUND_AGENT": "1"}) as child:
        path = wait_for_agent_socket(child.pid)
        data = agent_exchange(path, b'{"op": "snapshot", "top_types": 5, "top_owners": 5, "timeout": 50}\n', 60)
    line = next(line for line in data.splitlines() if line.startswith(b'{"result"'))
    result: dict[str, Any] = json.loads(line)["result"]
    assert result["ok"] is True
    return result


def _changed(doc: dict[str, Any], where: str, value: Any) -> dict[str, Any]:
    """A deep copy of ``doc`` with ``value`` at ``where`` ("heap.owners.0.path"; DELETE: removed)."""
    doc = copy.deepcopy(doc)
    *path, last = where.split(".")
    holder: Any = doc
    for key in path:
        holder = holder[int(key)] if isinstance(holder, list) else holder[key]
    key: Any = int(last) if isinstance(holder, list) else last
    if value is DELETE:
        del holder[key]
    else:
        holder[key] = value
    return doc


DELETE = object()
WRONG_RESULTS = {
    "no heap": ("heap", DELETE),
    "objects a string": ("heap.objects", "many"),
    "bytes beyond 2**63": ("heap.bytes", 1e300),
    "types an object": ("heap.types", {"dict": 1}),
    "an owner with a field the model lacks": ("heap.owners.0.exec", "os.system"),
    "an owner's retained bytes a string": ("heap.owners.0.retained_bytes", "10 GB"),
    "arena a number": ("arena", 5),
    "a phase's timing a string": ("heap.phases", {"walk": "slow"}),
    "ok a number": ("ok", 1),
    "memory_cost a string": ("memory_cost", "free"),
}


@pytest.mark.parametrize("change", list(WRONG_RESULTS.values()), ids=list(WRONG_RESULTS))
def test_a_result_of_the_wrong_shape_is_one_clear_error(
    nobody_dir: Path, real_result: dict[str, Any], change: tuple[str, Any]
) -> None:
    """Valid JSON, the real agent's answer but for one field: exit 20, never a traceback."""
    line_file = nobody_dir / "line"
    line_file.write_text(json.dumps({"result": _changed(real_result, *change)}))
    with _hostile(nobody_dir, "line", HOSTILE_LINE=str(line_file)) as child:  # type: ignore[attr-defined]
        run = _inspect(child.pid, nobody_dir, "--owners", "census")
    _one_clear_error(run, 20)


@pytest.mark.parametrize("owners", ["census", "dominator"])
def test_an_agent_of_an_older_payload_is_refused_by_its_version(
    nobody_dir: Path, real_result: dict[str, Any], owners: str
) -> None:
    """The real agent's answer as payload version 1 sent it (no ``payload_version``; the early
    graph's ``graph_sent``): refused by its version, exit 20, with what to do."""
    older = {key: value for key, value in real_result.items() if key != "payload_version"}
    older["graph_sent"] = True
    line_file = nobody_dir / "line"
    line_file.write_text(json.dumps({"result": older}))
    with _hostile(nobody_dir, "line", HOSTILE_LINE=str(line_file)) as child:  # type: ignore[attr-defined]
        run = _inspect(child.pid, nobody_dir, "--owners", owners)
    _one_clear_error(run, 20)
    assert "answered with no payload version (version 1 or older)" in run.stderr
    assert "--method ptrace" in run.stderr


def _frame(code: int, typecode: str, items: list[int]) -> bytes:
    """One frame of a graph's records (payload/graph_wire.py FRAME_COLUMNS)."""
    column = array.array(typecode, items)
    return struct.pack("=II", code, len(column)) + column.tobytes()


def _graph_answer(result: dict[str, Any], *, dst: int = 1, types: tuple[int, int] = (0, 0),
                  root: int = 0, graph_format: str = GRAPH_FORMAT) -> bytes:
    """A result with a two-node graph (nodes by id, the Python walk's layout) and its records."""
    records = (_frame(0, "q", [1, 2]) + _frame(1, "q", [10, 20]) + _frame(2, "i", list(types))
               + _frame(3, "i", [0, 0]) + _frame(4, "i", [0]) + _frame(5, "i", [dst]) + _frame(6, "i", [0]))
    graph = {"format": graph_format, "byteorder": sys.byteorder, "nodes": 2, "edges": 1, "node_keys": "id",
             "type_names": ["dict"], "labels": ["x"], "roots": [root, "r", "module", 0],
             "binary_bytes": len(records)}
    return json.dumps({"result": {**result, "graph": graph}}).encode() + b"\n" + records


WRONG_GRAPHS = {
    "an edge to node 1000 of 2": {"dst": 1000},
    "a type beyond the type names": {"types": (0, 99)},
    "a root beyond the nodes": {"root": 77},
    "an unknown format": {"graph_format": "leakhound.graph/99"},
}


@pytest.mark.parametrize("change", list(WRONG_GRAPHS.values()), ids=list(WRONG_GRAPHS))
def test_a_graph_of_the_wrong_shape_is_one_clear_error(
    nobody_dir: Path, real_result: dict[str, Any], change: dict[str, Any]
) -> None:
    """The dominator passes follow the graph's indices: one out of range is exit 20."""
    line_file = nobody_dir / "line"
    line_file.write_bytes(_graph_answer(real_result, **change))
    with _hostile(nobody_dir, "line", HOSTILE_LINE=str(line_file)) as child:  # type: ignore[attr-defined]
        run = _inspect(child.pid, nobody_dir, "--owners", "dominator")
    _one_clear_error(run, 20)
    assert "object graph the target sent" in run.stderr


def test_the_graph_answer_itself_is_read(nobody_dir: Path, real_result: dict[str, Any]) -> None:
    """The control for the graphs above: the same answer, every index in range, succeeds."""
    line_file = nobody_dir / "line"
    line_file.write_bytes(_graph_answer(real_result))
    with _hostile(nobody_dir, "line", HOSTILE_LINE=str(line_file)) as child:  # type: ignore[attr-defined]
        run = _inspect(child.pid, nobody_dir, "--owners", "dominator")
    assert run.returncode == 0, run.stderr


def test_a_line_without_end(nobody_dir: Path) -> None:
    with _hostile(nobody_dir, "endless") as child:  # type: ignore[attr-defined]
        run = _inspect(child.pid, nobody_dir)
    _one_clear_error(run, 20)
    assert "longer than 32 MiB" in run.stderr


def test_a_declared_terabyte_of_graph_records_streamed(nobody_dir: Path) -> None:
    with _hostile(nobody_dir, "binary") as child:  # type: ignore[attr-defined]
        run = _inspect(child.pid, nobody_dir)
    _one_clear_error(run, 20)
    assert "1000000000000 bytes of graph records" in run.stderr


def test_a_byte_every_two_seconds(nobody_dir: Path) -> None:
    """Indistinguishable from an agent whose thread does not get to run: the request's
    deadline, its cancel and CANCEL_GRACE for the answer, then exit 14 (OutcomeUnknown)."""
    with _hostile(nobody_dir, "drip") as child:  # type: ignore[attr-defined]
        run = _inspect(child.pid, nobody_dir)
    _one_clear_error(run, 14)


class _Victim:
    """A socket of another process (root's, here the test's), recording what it is sent."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.got = b""
        self.connections = 0
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        os.chmod(path, 0o666)
        self.server.listen(4)
        self.server.settimeout(0.2)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                continue
            self.connections += 1
            conn.settimeout(2.0)
            try:
                self.got += conn.recv(65536)
            except OSError:
                pass
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.server.close()


def test_a_symlink_in_the_socket_directory_is_not_followed(nobody_dir: Path) -> None:
    victim = _Victim(nobody_dir / "root-daemon.sock")
    try:
        with _hostile(nobody_dir, "symlink", HOSTILE_VICTIM=str(victim.path)) as child:  # type: ignore[attr-defined]
            run = _inspect(child.pid, nobody_dir)
            time.sleep(0.5)
    finally:
        victim.close()
    _one_clear_error(run, 20)
    assert "not a socket" in run.stderr
    assert victim.got == b"" and victim.connections == 0


def test_another_process_at_the_agents_path_is_sent_nothing(nobody_dir: Path) -> None:
    """The socket file replaced by one another process of the user listens on: SO_PEERCRED
    names that process, and leakhound sends it nothing."""
    with _hostile(nobody_dir, "impostor") as child:  # type: ignore[attr-defined]
        run = _inspect(child.pid, nobody_dir)
        time.sleep(0.5)
        got = Path(f"{child.ready_file}.got").read_text()
    _one_clear_error(run, 20)
    assert f"not by process {child.pid}" in run.stderr
    assert got == ""


def _ping(path: str, timeout: float) -> tuple[dict[str, object], float]:
    began = time.monotonic()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(path)
        sock.sendall(b'{"op": "ping"}\n')
        data = b""
        while b'"result"' not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    line = next(line for line in data.splitlines() if b'"result"' in line)
    return json.loads(line)["result"], time.monotonic() - began


PYTHONS = installed_pythons(minimum=(3, 8))
@pytest.mark.parametrize("python", list(PYTHONS.values()), ids=list(PYTHONS))
def test_a_slow_client_does_not_stall_the_real_agent(tmp_path: Path, python: str) -> None:
    """A same-user client sends its request a byte every second: the agent answers another
    client meanwhile at once, and drops the slow one after REQUEST_READ_SECONDS."""
    ready = tmp_path / "socket"
    agent_process = subprocess.Popen([python, str(FIXTURES / "agent_only.py"), str(ROOT), str(ready)],
                                     env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        deadline = time.monotonic() + 30
        while not ready.exists() or not ready.read_text():
            assert agent_process.poll() is None and time.monotonic() < deadline, "the agent never started"
            time.sleep(0.05)
        path = ready.read_text()
        _ping(path, 30.0)  # the payload loaded
        slow = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        slow.connect(path)
        dropped_after = None
        try:
            began = time.monotonic()
            slow.sendall(b"{")
            time.sleep(1.0)
            result, seconds = _ping(path, 10.0)
            assert result.get("ok") is True
            assert seconds < 2.5, f"the second client waited {seconds:.1f} s"  # (held by the slow one: 4.0 s and more)
            slow.settimeout(0.1)
            for byte in b'"op": "ping"':
                slow.sendall(bytes([byte]))
                try:
                    slow.recv(65536)  # its end (or a refusal): the agent let it go
                except TimeoutError:
                    time.sleep(1.0)
                    continue
                dropped_after = time.monotonic() - began
                break
        except (BrokenPipeError, ConnectionResetError):
            dropped_after = time.monotonic() - began
        finally:
            slow.close()
    finally:
        agent_process.kill()
        agent_process.wait()
    assert dropped_after is not None and dropped_after < 8.0, dropped_after


def test_a_stale_socket_is_removed_only_in_a_directory_of_its_owner(nobody_dir: Path) -> None:
    """Root removes the socket files named after the target nobody listens on (a worker killed
    before its atexit): never through a symlinked directory the target's user planted."""
    root_dir = Path(tempfile.mkdtemp(prefix="leakhound-root-"))
    try:
        with spawn_target("growing_cache", nobody_dir, python=SYSTEM_PYTHON, prefix=AS_NOBODY,
                          env={"LEAKHOUND_AGENT": "", "TMPDIR": str(nobody_dir)}) as child:
            roots_socket = root_dir / f"agent-{child.pid}.sock"  # root's, stale: nobody listens
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.bind(str(roots_socket))
            subprocess.run([*AS_NOBODY, "ln", "-s", str(root_dir), str(nobody_dir / f"leakhound-agent-{NOBODY}")],
                           check=True, timeout=10)
            run = _inspect(child.pid, nobody_dir)
            assert roots_socket.exists(), "root's socket was removed through the planted symlink"
    finally:
        shutil.rmtree(root_dir, ignore_errors=True)
    assert run.returncode == 7, run.stderr
    assert "no leakhound agent listening" in run.stderr
