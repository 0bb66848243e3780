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
from dataclasses import dataclass, replace
from typing import Any

from leakhound.attach import agent, death, finish, gdb, ptrace, remote_exec
from leakhound.attach.base import AttachLog
from leakhound.attach.channel import Partial, PrivateChannel, Progress
from leakhound.attach.deadline import FOLLOW_PROGRESS, Deadline
from leakhound.attach.memory_limit import CostMeter, MemoryCost, memory_room, request_budget
from leakhound.attach.process import Target, main_thread_sleep, namespace_pid, resolve_target
from leakhound.attach.pyspy import py_spy_dump
from leakhound.errors import (
    MemoryBudgetReached,
    MethodUnavailable,
    ProtocolViolation,
    RemoteError,
    RequestCancelled,
    TargetBlocked,
    TargetBusy,
    UnsupportedPython,
)
from leakhound.model.names import METHOD_NAMES, Method
from leakhound.payload import wire

AUTO_ORDER = (Method.AGENT, Method.REMOTE_EXEC, Method.PTRACE, Method.GDB)
# Seconds the main thread may take to reach a bytecode boundary after injection.
SAFE_POINT_TIMEOUT = 10.0


@dataclass(frozen=True)
class RemoteResult:
    target: Target
    method: Method
    result: dict[str, Any]
    attach_stop_ms: float
    main_thread_ms: float
    # what the request cost the target's memory, measured (None: a result made elsewhere)
    cost: MemoryCost | None = None


def _quiet(_: str) -> None:
    pass


def choose_method(target: Target, method: Method) -> Method:
    """``method``, or for ``auto`` the first of ``AUTO_ORDER`` available for ``target``."""
    if method != Method.AUTO:
        return method
    if agent.available(target.pid, target.uid):
        return Method.AGENT
    if remote_exec.available(target):
        return Method.REMOTE_EXEC
    if ptrace.available():
        return Method.PTRACE
    if gdb.gdb_path() is not None:
        return Method.GDB
    raise MethodUnavailable(
        f"no way to attach to process {target.pid}: no agent socket, Python < 3.14, not x86-64, gdb missing"
    )


def run_request(
    pid: int,
    request: dict[str, Any],
    *,
    method: Method = Method.AUTO,
    timeout: float = FOLLOW_PROGRESS,
    progress: Progress | None = None,
    log: AttachLog | None = None,
    target: Target | None = None,
    on_partial: Partial | None = None,
    force: bool = False,
    deadline: Deadline | None = None,
) -> RemoteResult:
    """Send one request to the payload in ``pid`` and return its result (``ok`` is True).

    ``on_partial``: for a snapshot with the object graph, the graph is handed over as soon as
    it is walked (``on_partial("graph", doc, post)``, on this thread, while the target goes on
    counting; files in the private directory on the debugger paths, a line on the agent's
    socket) and ``post("names", {"paths": ...})`` answers it: the labels come back in the
    result (``names``). The result's ``payload_version`` says which payload answered: the
    caller reads the versions it knows and refuses another (core/decode.py).

    The target's memory limit is read first (attach/memory_limit.py): too little headroom is
    refused (``HeadroomTooSmall``) unless ``force``; otherwise the request carries its memory
    budget (``max_extra_bytes``), which the payload keeps to, and what it cost the target's
    cgroup is sampled while it runs (``RemoteResult.cost``).

    ``timeout``: a hard wall-clock limit in seconds, or ``FOLLOW_PROGRESS`` (the default): given
    up when the request stops progressing, or at a ceiling by the target's RSS
    (attach/deadline.py). ``deadline``: one the caller made (to ``hold`` it while it works on
    a partial), in place of ``timeout``."""
    log = log or _quiet
    target = target or resolve_target(pid)
    deadline = deadline or Deadline.for_request(pid, timeout)
    if deadline.follows_progress:
        log(f"deadline: {deadline.stall:.0f}s without progress, at most {deadline.limit:.0f}s")
    room = memory_room(pid)
    budget = request_budget(room, force=force)
    if room.shared_with_leakhound:
        log(f"memory: leakhound itself is charged to the target's limited cgroup {room.shared_with_leakhound}")
    if room.limits:
        tightest = room.tightest
        log(f"memory: {tightest.describe() if tightest else ''}; the request's budget in the target "
            f"{'none' if budget is None else f'{budget / 1048576:.1f} MiB'}")
    chosen = choose_method(target, method)
    log(f"method: {chosen}")
    # The payload gives up a little before we do, so it can still report why.
    request = {**request, "timeout": deadline.payload_timeout()}
    if budget is not None:
        request["max_extra_bytes"] = budget
    meter = CostMeter(room, budget).start()
    try:
        remote = _run(pid, request, method=method, chosen=chosen, deadline=deadline, progress=progress,
                      log=log, target=target, on_partial=on_partial, meter=meter)
    finally:
        meter.stop()
    spent = remote.result.get("memory_cost") or {}
    if not isinstance(spent, dict):  # the result is the target's to write
        raise ProtocolViolation(f"process {pid} answered with a malformed memory_cost ({type(spent).__name__})")
    peak, loaded = spent.get("peak_rss_bytes"), spent.get("loaded_bytes")
    cost = meter.cost(peak if isinstance(peak, int) else None, loaded if isinstance(loaded, int) else 0)
    if meter.tripped and remote.result.get("kind") == wire.KIND_CANCELLED:
        raise MemoryBudgetReached(
            f"process {pid}: its memory cgroup grew {_mib(cost.cgroup_peak_bytes)} during the request, past the "
            f"request's budget of {_mib(budget)} and a margin: leakhound stopped it inside the target during "
            f"{remote.result.get('phase', '?')}; nothing of it is left running"
        )
    return _checked(replace(remote, cost=cost), log)


def _run(
    pid: int,
    request: dict[str, Any],
    *,
    method: Method,
    chosen: Method,
    deadline: Deadline,
    progress: Progress | None,
    log: AttachLog,
    target: Target,
    on_partial: Partial | None,
    meter: CostMeter,
) -> RemoteResult:
    facts = death.read_facts(pid)  # what is gone with the target, should it die
    if on_partial is not None and request.get("op") == wire.OP_SNAPSHOT and request.get("graph"):
        request["early_graph"] = True
    if chosen == Method.AGENT:
        result = finish.wait_agent(pid, facts, lambda: agent.request(
            pid, target.uid, request, deadline=deadline, progress=progress, log=log, on_partial=on_partial))
        return RemoteResult(target, chosen, result, 0.0, 0.0)
    if chosen not in (Method.PTRACE, Method.GDB, Method.REMOTE_EXEC):
        raise MethodUnavailable(f"unknown method {chosen!r}; choose one of {', '.join(METHOD_NAMES)}")
    start_timeout = _safe_point_wait(pid, chosen, deadline, progress, log)
    with PrivateChannel(uid=target.uid, pid=pid, request=request, version=target.version) as channel:
        meter.on_over = channel.request_cancel
        code = channel.bootstrap_code(namespace_pid(pid))
        inject_timeout = min(deadline.left(), 30.0)
        if chosen == Method.PTRACE:
            try:
                injection = finish.held(lambda: ptrace.inject(
                    pid, code, timeout=inject_timeout, log=log, private=channel.private,
                    private_path=str(channel.dir), payload_timeout=channel.request_timeout,
                ))
            except MethodUnavailable as exc:
                gdb_binary = gdb.gdb_path()
                if method != Method.AUTO or gdb_binary is None:
                    raise
                broken = gdb.calls_broken(gdb_binary)
                if broken is not None:  # (ptrace's reason is the one to read)
                    log(f"ptrace declined before stopping the target ({exc}); gdb cannot call functions in a "
                        f"process on this machine ({broken}): not used")
                    raise
                log(f"ptrace declined before stopping the target ({exc}); using gdb")
                chosen = Method.GDB
                injection = finish.held(lambda: gdb.inject(pid, code, timeout=inject_timeout, log=log))
        elif chosen == Method.GDB:
            injection = finish.held(lambda: gdb.inject(pid, code, timeout=inject_timeout, log=log))
        else:
            injection = remote_exec.inject(
                target, code, channel.private, channel.target_dir, timeout=inject_timeout, log=log
            )
        deadline.progressed("injected")
        started, result = finish.wait_debugger(channel, pid, facts, lambda: channel.wait(
            pid=pid,
            start_timeout=min(start_timeout, deadline.left()),
            deadline=deadline,
            progress=progress,
            blocked_hint=lambda: py_spy_dump(pid),
            on_partial=on_partial,
        ))
    return RemoteResult(
        target,
        chosen,
        result,
        injection.attach_stop_ms,
        float(started.get("main_thread_ms", 0.0)),
    )


def _safe_point_wait(pid: int, chosen: Method, deadline: Deadline, progress: Progress | None,
                     log: AttachLog) -> float:
    """How long the bootstrap may take to start once queued: SAFE_POINT_TIMEOUT, or, when the
    main thread sleeps in ``time.sleep`` past that (nothing wakes it for the bootstrap: it
    would end early), until it wakes. A sleep that ends past the request's limit is said at
    once (TargetBlocked), before anything is queued."""
    if chosen not in (Method.PTRACE, Method.GDB):
        return SAFE_POINT_TIMEOUT
    sleeping = main_thread_sleep(pid)
    if sleeping is None or sleeping + 1.0 <= SAFE_POINT_TIMEOUT:
        return SAFE_POINT_TIMEOUT
    if sleeping + 1.0 > deadline.limit_left():
        where = py_spy_dump(pid)
        raise TargetBlocked(
            f"process {pid}'s main thread sleeps in time.sleep for {sleeping:,.0f} s more, past the request's "
            f"time ({deadline.limit_left():,.0f} s left); nothing was injected"
            + (f"; it is in:\n{where}" if where else ""))
    log(f"the main thread sleeps in time.sleep for up to {sleeping:.1f} s more: the payload starts as it wakes")
    if progress is not None:
        progress(f"waiting {sleeping:.0f} s for the main thread's time.sleep", 0)
    deadline.waits_until(sleeping + 1.0)
    return sleeping + SAFE_POINT_TIMEOUT


def _checked(remote: RemoteResult, log: Callable[[str], None]) -> RemoteResult:
    result = remote.result
    if result.get("ok"):
        return remote
    if result.get("traceback"):
        log(str(result["traceback"]))
    if result.get("kind") == wire.KIND_BUSY:
        raise TargetBusy(f"process {remote.target.pid}: {result.get('error')}")
    if result.get("kind") == wire.KIND_NO_THREAD:
        raise TargetBlocked(
            f"process {remote.target.pid}'s main thread ran leakhound's bootstrap, but Python started no "
            f"thread for its payload ({result.get('error')}): the main thread has run its script to the end "
            "and waits for the process's other threads (threading._shutdown), when Python 3.12 starts "
            "no new thread; nothing was left running",
            hint="Start the worker with LEAKHOUND_AGENT=1 and use `--method agent` (its thread starts with the "
                 "worker), or have the main thread wait for its threads with join() instead of ending.")
    if result.get("kind") == wire.KIND_BOOT_FAILED:
        raise RemoteError(
            f"process {remote.target.pid} ran leakhound's bootstrap, but it failed there before the payload "
            f"started ({result.get('error')}); nothing was left running",
            hint="An import error: the worker's Python finds what the bootstrap imports (its standard library, "
                 "its threading module) changed or gone since it started (an upgrade or a deploy replaced or "
                 "removed its install): restart the worker, or start it with LEAKHOUND_AGENT=1 and use "
                 "`--method agent`. Otherwise report it with this message.")
    if result.get("kind") == wire.KIND_UNSUPPORTED:
        raise UnsupportedPython(f"process {remote.target.pid}: {result.get('error')}")
    if result.get("kind") == wire.KIND_CANCELLED and result.get("reason") == "memory":
        cost = remote.cost
        raise MemoryBudgetReached(
            f"process {remote.target.pid}: the request stopped inside the target during {result.get('phase', '?')}: "
            f"its cost there reached its memory budget of {_mib(cost.budget_bytes if cost else None)} "
            f"(the target's RSS +{_mib((result.get('memory_cost') or {}).get('peak_rss_bytes'))}); nothing of it "
            "is left running"
        )
    if result.get("kind") == wire.KIND_CANCELLED:
        raise RequestCancelled(
            f"process {remote.target.pid}: the request did not finish in time and was stopped inside "
            f"the target during {result.get('phase', '?')} ({result.get('reason', '?')}); nothing of it "
            f"is left running"
        )
    raise RemoteError(f"payload failed in process {remote.target.pid}: {result.get('error')}")


def _mib(value: object) -> str:
    return f"{value / 1048576:.1f} MiB" if isinstance(value, int) else "?"
