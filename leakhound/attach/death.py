"""What is knowable about a target that died during a request, and whether leakhound was in it.

``read_facts`` runs at the start of every request, while the target is alive (its core size
limit, working directory and name are gone with it). ``explain`` runs once it is gone and says
how it ended, from the best source there is: its exit status when leakhound is its parent
(``waitid`` without reaping it); the zombie's ``/proc/PID/stat`` exit code while its parent
has not reaped it; otherwise the kernel log (segfaults, traps, the OOM killer) when readable.
Whether a core was written comes from the exit status, or else from ``core_pattern``, the
target's core size limit and a core file on disk. What cannot be known is said so.
"""

from __future__ import annotations

import glob
import os
import re
import signal
import time
from dataclasses import dataclass

from leakhound.errors import LeakhoundError, TargetDied
from leakhound.model.growth import TargetEnded
from leakhound.model.names import EndedHow

# Signals a process raises on itself when it crashes (abort() from a fatal error, faults).
CRASH_SIGNALS = frozenset(
    (signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT, signal.SIGTRAP, signal.SIGSYS)
)
# Signals whose default action writes a core (signal(7)).
CORE_SIGNALS = CRASH_SIGNALS | {signal.SIGQUIT, signal.SIGXCPU, signal.SIGXFSZ}
EXITED_ON_ITS_OWN_HINT = (
    "The worker ended itself (a restart, a deploy, its own shutdown); run leakhound again on its successor."
)


def ended_how(err: TargetDied) -> EndedHow:
    if err.oom_killed:
        return EndedHow.OOM_KILLED
    if err.signal is not None:
        return EndedHow.SIGNAL
    if err.exit_status is not None:
        return EndedHow.EXITED
    return EndedHow.UNKNOWN


@dataclass(frozen=True)
class ProcessFacts:
    pid: int
    start_ticks: int | None
    comm: str
    cwd: str | None
    core_limit: int | None  # soft RLIMIT_CORE in bytes; -1 unlimited; None unknown
    is_child: bool
    at: float  # time.time() when read
    at_monotonic: float
    # OOM kills counted when read, by its memory cgroup or else the kernel: (that file, the count).
    oom_kills: tuple[str, int] | None = None


def _stat_fields(pid: int) -> tuple[str, list[str]] | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            text = fh.read()
    except OSError:
        return None
    head, _, rest = text.rpartition(")")
    return head.partition("(")[2], rest.split()


def read_facts(pid: int) -> ProcessFacts:
    stat = _stat_fields(pid)
    comm, fields = stat if stat is not None else ("?", [])
    start = int(fields[19]) if len(fields) > 19 else None  # field 22: starttime
    parent = int(fields[1]) if len(fields) > 1 else -1  # field 4: ppid
    try:
        cwd: str | None = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        cwd = None
    core_limit = None
    try:
        with open(f"/proc/{pid}/limits") as fh:
            for line in fh:
                if line.startswith("Max core file size"):
                    soft = line[26:].split()[0]
                    core_limit = -1 if soft == "unlimited" else int(soft)
    except (OSError, ValueError, IndexError):
        pass
    return ProcessFacts(pid, start, comm, cwd, core_limit, parent == os.getpid(), time.time(), time.monotonic(),
                        oom_kills=_oom_kill_count(pid))


def _cgroup_mounts() -> tuple[str | None, str | None]:
    """Where this host mounts the v1 memory hierarchy and the v2 unified one."""
    v1 = v2 = None
    try:
        with open("/proc/self/mounts") as fh:
            for line in fh:
                fields = line.split()
                if len(fields) < 4:
                    continue
                if fields[2] == "cgroup" and "memory" in fields[3].split(",") and v1 is None:
                    v1 = fields[1]
                elif fields[2] == "cgroup2" and v2 is None:
                    v2 = fields[1]
    except OSError:
        pass
    return v1, v2


# The kernel's count of OOM kills, all processes: where no memory cgroup counts them.
VMSTAT = "/proc/vmstat"


def _oom_kill_count(pid: int) -> tuple[str, int] | None:
    """The OOM kills its memory cgroup has counted (v1 ``memory.oom_control``, v2
    ``memory.events``), else the kernel's (``/proc/vmstat``): a rise while the process died
    of SIGKILL is the kernel's OOM killer, said without the kernel log (which a container
    often cannot read)."""
    try:
        with open(f"/proc/{pid}/cgroup") as fh:
            lines = fh.read().splitlines()
    except OSError:
        lines = []
    v1, v2 = _cgroup_mounts()
    candidates = []
    for line in lines:
        _id, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if v1 is not None and "memory" in controllers.split(","):
            candidates.append(os.path.join(v1, path.lstrip("/"), "memory.oom_control"))
        elif v2 is not None and controllers == "":
            candidates.append(os.path.join(v2, path.lstrip("/"), "memory.events"))
    for candidate in [*candidates, VMSTAT]:
        text = _read(candidate)
        for row in (text or "").splitlines():
            key, _, value = row.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return candidate, int(value)
    return None


def _oom_kills_since(facts: ProcessFacts) -> tuple[str, int, int] | None:
    """(file, count then, count now) when its cgroup counted OOM kills since ``facts``."""
    if facts.oom_kills is None:
        return None
    path, before = facts.oom_kills
    text = _read(path) or ""
    for row in text.splitlines():
        key, _, value = row.partition(" ")
        if key == "oom_kill" and value.strip().isdigit() and int(value) > before:
            return path, before, int(value)
    return None


@dataclass(frozen=True)
class Ending:
    signal: int | None = None
    exit_status: int | None = None
    core_dumped: bool | None = None
    source: str = ""
    kernel_log: str = ""
    oom_killed: bool = False
    cgroup_oom: str = ""


def _from_wait(facts: ProcessFacts) -> Ending | None:
    """leakhound is the parent: its exit status, without reaping it (the caller still waits)."""
    if not facts.is_child:
        return None
    deadline = time.monotonic() + 0.5
    while True:
        try:
            info = os.waitid(os.P_PID, facts.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return None
        if info is not None:
            break
        if time.monotonic() > deadline:
            return None
        time.sleep(0.01)
    source = "its exit status (leakhound is its parent)"
    if info.si_code == os.CLD_EXITED:
        return Ending(exit_status=info.si_status, core_dumped=False, source=source)
    return Ending(signal=info.si_status, core_dumped=info.si_code == os.CLD_DUMPED, source=source)


def _from_zombie(facts: ProcessFacts) -> Ending | None:
    """Not reaped yet: the kernel keeps the wait status in /proc/PID/stat (field 52)."""
    stat = _stat_fields(facts.pid)
    if stat is None:
        return None
    fields = stat[1]
    if len(fields) < 50 or fields[0] != "Z" or (facts.start_ticks is not None and int(fields[19]) != facts.start_ticks):
        return None
    status = int(fields[49])
    source = "the exit code the kernel keeps for it until its parent reaps it (/proc/PID/stat)"
    if status & 0x7F:
        return Ending(signal=status & 0x7F, core_dumped=bool(status & 0x80), source=source)
    return Ending(exit_status=(status >> 8) & 0xFF, core_dumped=False, source=source)


def _kernel_log(facts: ProcessFacts, since_monotonic: float) -> list[str] | None:
    """Kernel log lines about this pid since the request began; None when not readable."""
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    lines = []
    try:
        for _ in range(100000):
            try:
                record = os.read(fd, 8192).decode("utf-8", "replace")
            except BlockingIOError:
                break
            except BrokenPipeError:  # overwritten while reading: go on with the next
                continue
            prefix, _, message = record.partition(";")
            parts = prefix.split(",")
            if len(parts) < 3 or not parts[2].isdigit() or int(parts[2]) / 1e6 < since_monotonic - 2.0:
                continue
            message = message.split("\n", 1)[0].strip()
            if f"[{facts.pid}]" in message or re.search(rf"\b[Kk]illed process {facts.pid}\b", message):
                lines.append(message)
                continue
            # A fault is logged under the faulting thread's id (e.g. the payload's thread):
            # same name, an id that is no live process now, within the request's time.
            thread = re.match(rf"(?:traps: )?{re.escape(facts.comm)}\[(\d+)\]", message)
            if thread and not os.path.exists(f"/proc/{thread.group(1)}"):
                lines.append(message + " (a thread of the same name; most likely this process's)")
    except OSError:
        return None
    finally:
        os.close(fd)
    return lines


def _from_kernel_log(lines: list[str]) -> Ending | None:
    for line in lines:
        if re.search(r"[Kk]illed process \d+", line):
            return Ending(signal=signal.SIGKILL, core_dumped=False, source="the kernel log",
                          kernel_log=line, oom_killed="emory" in line or "oom" in line.lower())
    for line in lines:
        if "segfault at" in line or "general protection" in line:
            return Ending(signal=signal.SIGSEGV, source="the kernel log", kernel_log=line)
        if "trap" in line:
            return Ending(signal=signal.SIGTRAP, source="the kernel log", kernel_log=line)
    return Ending(source="the kernel log", kernel_log=lines[0]) if lines else None


def _read(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return None


def _core_files(facts: ProcessFacts, pattern: str) -> list[str]:
    spec = {"p": str(facts.pid), "P": str(facts.pid), "e": facts.comm, "%": "%"}
    path = re.sub(r"%(.)", lambda m: glob.escape(spec[m.group(1)]) if m.group(1) in spec else "*", pattern)
    if "%p" not in pattern and _read("/proc/sys/kernel/core_uses_pid") == "1":
        path += f".{facts.pid}"
    if not path.startswith("/"):
        if facts.cwd is None:
            return []
        path = os.path.join(glob.escape(facts.cwd), path)
    return [c for c in glob.glob(path)[:50] if _mtime(c) >= facts.at - 1.0]


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def _core_note(facts: ProcessFacts, ending: Ending) -> str:
    pattern = _read("/proc/sys/kernel/core_pattern")
    if ending.exit_status is not None:
        return "no core (it exited, it was not killed)"
    if ending.signal is not None and ending.signal not in CORE_SIGNALS:
        return f"no core ({_signal_name(ending.signal)} does not write one)"
    if ending.core_dumped is False and ("exit status" in ending.source or "exit code" in ending.source):
        return "no core was written (per its exit status)"
    if pattern is not None and pattern.startswith("|"):
        handler = pattern[1:].split()[0] if pattern[1:].split() else "?"
        said = "a core was written" if ending.core_dumped else "whether a core was written is not known"
        return f"{said}; cores go to the program {handler} (core_pattern), ask it (e.g. coredumpctl)"
    if facts.core_limit == 0 and not ending.core_dumped:
        return "no core (its core size limit was 0)"
    files = _core_files(facts, pattern) if pattern else []
    if files:
        return f"core written: {files[0]}"
    if ending.core_dumped:
        return f"a core was written (core_pattern {pattern!r}, in the target's own file system)"
    return f"no core file found (core_pattern {pattern!r})" if pattern else "whether a core was written is not known"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _how(ending: Ending) -> str:
    if ending.oom_killed:
        return "killed by the kernel's OOM killer (SIGKILL)"
    if ending.signal is not None:
        return f"killed by {_signal_name(ending.signal)}"
    if ending.exit_status == 0:
        return "it exited on its own with status 0 (a clean exit: no signal, not killed by the OOM killer)"
    if ending.exit_status is not None:
        return f"it exited on its own with status {ending.exit_status} (no signal, not killed by the OOM killer)"
    return ("how it ended is not known (leakhound is not its parent, it was already reaped, "
            "and the kernel log says nothing about it)")


def _verdict(ending: Ending, inside: str | None) -> str:
    if inside is None:
        return "leakhound was not inside it: leakhound did not cause this."
    if ending.oom_killed:
        return f"leakhound may have contributed: {inside}, and that adds memory in the target."
    if ending.exit_status == 0:
        return "a process ends with status 0 only by calling exit itself: not leakhound's doing."
    if ending.exit_status is not None:
        # An exception raised into the main thread (a pending call the payload added failing
        # there) is the one way leakhound could end a process with an exit status: status 1.
        return (f"it called exit({ending.exit_status}) itself: most likely not leakhound's doing "
                f"(though {inside}).")
    if ending.signal is not None and ending.signal not in CRASH_SIGNALS:
        return (f"the signal came from outside the process, and leakhound sends none to its targets: "
                f"not leakhound's doing (though {inside}).")
    return f"leakhound may have caused it: {inside}."


def explain(facts: ProcessFacts, *, inside: str | None, doing: str) -> TargetDied:
    """The error for a target that died while leakhound was ``doing`` something with it.
    ``inside``: what of leakhound was inside the target at the time, or None."""
    ending = _from_wait(facts) or _from_zombie(facts)
    lines = _kernel_log(facts, facts.at_monotonic)
    if ending is None:
        ending = _from_kernel_log(lines or []) or Ending()
    elif lines:
        found = _from_kernel_log(lines)
        if found is not None and found.oom_killed:
            ending = Ending(signal=ending.signal, exit_status=ending.exit_status, core_dumped=ending.core_dumped,
                            source=ending.source, kernel_log=found.kernel_log, oom_killed=True)
        elif found is not None:
            ending = Ending(signal=ending.signal, exit_status=ending.exit_status, core_dumped=ending.core_dumped,
                            source=ending.source, kernel_log=found.kernel_log)
    ended = "ended" if ending.exit_status is not None and not ending.oom_killed else "died"
    counted = _oom_kills_since(facts)
    if counted is not None and ending.exit_status is None and ending.signal in (None, signal.SIGKILL):
        path, before, after = counted
        if path != VMSTAT:
            ending = Ending(signal=signal.SIGKILL, core_dumped=False, source=ending.source or "its memory cgroup",
                            kernel_log=ending.kernel_log, oom_killed=True,
                            cgroup_oom=f"its memory cgroup counted {after - before} OOM kill(s) meanwhile ({path})")
        elif ending.signal == signal.SIGKILL and not ending.oom_killed:
            # Not its own cgroup's count: another process may have been the one killed.
            ending = Ending(signal=signal.SIGKILL, core_dumped=False, source=ending.source,
                            kernel_log=ending.kernel_log, oom_killed=True,
                            cgroup_oom=f"most likely: the kernel counted {after - before} OOM kill(s) meanwhile "
                                       f"({path} oom_kill; it does not say whose)")
    parts = [f"process {facts.pid} ({facts.comm}) {ended} while leakhound was {doing}: {_how(ending)}"]
    if ending.source:
        parts[0] += f" (from {ending.source})"
    parts.append(_core_note(facts, ending))
    if ending.cgroup_oom:
        parts.append(ending.cgroup_oom)
    if ending.kernel_log:
        parts.append(f"kernel log: {ending.kernel_log}")
    elif lines is None:
        parts.append("the kernel log is not readable here")
    message = "; ".join(parts) + ". " + _verdict(ending, inside)
    # The hint asks for a report when leakhound was inside a crash; a clean exit needs none.
    err = TargetDied(message, hint=EXITED_ON_ITS_OWN_HINT if ending.exit_status == 0 else None)
    err.signal = ending.signal
    err.exit_status = ending.exit_status
    err.core_dumped = ending.core_dumped
    err.leakhound_inside = inside is not None
    err.oom_killed = ending.oom_killed
    return err


def target_ended(facts: ProcessFacts | None, outcome: LeakhoundError, *, pid: int, name: str,
                 doing: str) -> TargetEnded:
    """How a watched or exported process ended: as the request that saw it die said, or else
    read now (it ended between requests: leakhound was not inside it)."""
    err = outcome if isinstance(outcome, TargetDied) or facts is None else explain(facts, inside=None, doing=doing)
    if isinstance(err, TargetDied):
        return TargetEnded(pid=pid, name=name, how=ended_how(err), message=str(err),
                           signal=err.signal, exit_status=err.exit_status)
    return TargetEnded(pid=pid, name=name, how=EndedHow.UNKNOWN, message=str(err))
