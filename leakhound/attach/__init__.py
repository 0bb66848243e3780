"""Attach: get one request answered by the payload inside a live target.

This is where attach ends: ``run_request`` returns the payload's JSON result and what the
attach cost; everything after that (building snapshots, findings) is ``leakhound.analysis``.
Methods are tried in ``AUTO_ORDER`` when ``method="auto"``: the agent when the target runs one
(no ptrace, no stop at all), then remote-exec on 3.14+, then the lean ptrace injector (the
target stopped for about a millisecond, by a helper that outlives the CLI), then gdb.
ptrace falls back to gdb only when it declined before stopping anything
(``MethodUnavailable``: not x86-64, symbols it cannot place or find: gdb also reads separate
debug files); any failure after the stop is reported, never retried with another debugger.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from leakhound.attach import agent, death, finish, gdb, ptrace, remote_exec
from leakhound.attach.base import AttachLog
from leakhound.attach.channel import Partial, PrivateChannel, Progress
from leakhound.attach.process import Target, resolve_target
from leakhound.attach.pyspy import py_spy_dump
from leakhound.errors import MethodUnavailable, RemoteError, RequestCancelled, TargetBusy
from leakhound.model.names import METHOD_NAMES

METHODS = METHOD_NAMES
AUTO_ORDER = ("agent", "remote-exec", "ptrace", "gdb")
# Seconds the main thread may take to reach a bytecode boundary after injection.
SAFE_POINT_TIMEOUT = 10.0


@dataclass(frozen=True)
class RemoteResult:
    target: Target
    method: str
    result: dict[str, Any]
    attach_stop_ms: float
    main_thread_ms: float


def _quiet(_: str) -> None:
    pass


def choose_method(target: Target, method: str) -> str:
    if method != "auto":
        return method
    if agent.available(target.pid, target.uid):
        return "agent"
    if remote_exec.available(target):
        return "remote-exec"
    if ptrace.available():
        return "ptrace"
    if gdb.gdb_path() is not None:
        return "gdb"
    raise MethodUnavailable(
        f"no way to attach to process {target.pid}: no agent socket, Python < 3.14, not x86-64, gdb missing"
    )


def run_request(
    pid: int,
    request: dict[str, Any],
    *,
    method: str = "auto",
    timeout: float = 60.0,
    progress: Progress | None = None,
    log: AttachLog | None = None,
    target: Target | None = None,
    on_partial: Partial | None = None,
) -> RemoteResult:
    """Send one request to the payload in ``pid`` and return its result (``ok`` is True).

    ``on_partial``: for a snapshot with the object graph, the graph is handed over as soon as
    it is walked (``on_partial("graph", doc, post)``, on this thread, while the target goes on
    counting; files in the private directory on the debugger paths, a line on the agent's
    socket) and ``post("names", {"paths": ...})`` answers it: the labels come back in the
    result (``names``). A payload from before this answers the old way (the graph in the
    result); the caller tells the two apart by ``graph_sent`` in the result."""
    log = log or _quiet
    target = target or resolve_target(pid)
    chosen = choose_method(target, method)
    log(f"method: {chosen}")
    # The payload gives up a little before we do, so it can still report why.
    request = {**request, "timeout": max(1.0, timeout - 2.0)}
    facts = death.read_facts(pid)  # what is gone with the target, should it die
    if on_partial is not None and request.get("op") == "snapshot" and request.get("graph"):
        request["early_graph"] = True
    if chosen == "agent":
        result = finish.wait_agent(pid, facts, lambda: agent.request(
            pid, target.uid, request, timeout=timeout, progress=progress, log=log, on_partial=on_partial))
        return _checked(RemoteResult(target, chosen, result, 0.0, 0.0), log)
    if chosen not in ("ptrace", "gdb", "remote-exec"):
        raise MethodUnavailable(f"unknown method {chosen!r}; choose one of {', '.join(METHODS)}")
    with PrivateChannel(uid=target.uid, pid=pid, request=request) as channel:
        code = channel.bootstrap_code()
        if chosen == "ptrace":
            try:
                injection = finish.held(lambda: ptrace.inject(
                    pid, code, timeout=min(timeout, 30.0), log=log, private=channel.private,
                    private_path=str(channel.dir), payload_timeout=channel.request_timeout,
                ))
            except MethodUnavailable as exc:
                if method != "auto" or gdb.gdb_path() is None:
                    raise
                log(f"ptrace declined before stopping the target ({exc}); using gdb")
                chosen = "gdb"
                injection = finish.held(lambda: gdb.inject(pid, code, timeout=min(timeout, 30.0), log=log))
        elif chosen == "gdb":
            injection = finish.held(lambda: gdb.inject(pid, code, timeout=min(timeout, 30.0), log=log))
        else:
            injection = remote_exec.inject(
                target, code, channel.private, channel.target_dir, timeout=timeout, log=log
            )
        started, result = finish.wait_debugger(channel, pid, facts, lambda: channel.wait(
            pid=pid,
            start_timeout=min(SAFE_POINT_TIMEOUT, timeout),
            timeout=timeout,
            progress=progress,
            blocked_hint=lambda: py_spy_dump(pid),
            on_partial=on_partial,
        ))
    return _checked(
        RemoteResult(
            target,
            chosen,
            result,
            injection.attach_stop_ms,
            float(started.get("main_thread_ms", 0.0)),
        ),
        log,
    )


def _checked(remote: RemoteResult, log: Callable[[str], None]) -> RemoteResult:
    result = remote.result
    if result.get("ok"):
        return remote
    if result.get("traceback"):
        log(str(result["traceback"]))
    if result.get("kind") == "Busy":
        raise TargetBusy(f"process {remote.target.pid}: {result.get('error')}")
    if result.get("kind") == "Cancelled":
        raise RequestCancelled(
            f"process {remote.target.pid}: the request did not finish in time and was stopped inside "
            f"the target during {result.get('phase', '?')} ({result.get('reason', '?')}); nothing of it "
            f"is left running"
        )
    raise RemoteError(f"payload failed in process {remote.target.pid}: {result.get('error')}")
