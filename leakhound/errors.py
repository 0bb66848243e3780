"""Every error a user can hit, with a hint and a documented exit code (docs/errors.md).

The CLI edge maps ``LeakhoundError`` to one line on stderr plus the hint, and exits with
``EXIT_CODE``; nothing below the CLI prints or exits.
"""

from __future__ import annotations


class LeakhoundError(Exception):
    EXIT_CODE = 1
    HELP_TEXT = ""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint if hint is not None else self.HELP_TEXT


class TargetNotFound(LeakhoundError):
    EXIT_CODE = 3
    HELP_TEXT = "Check the pid with `ps -p PID -o pid,user,cmd` (is it in another pid namespace?)."


class NotPython(LeakhoundError):
    EXIT_CODE = 4
    HELP_TEXT = "leakhound inspects CPython processes; point it at the Python worker's pid."


class UnsupportedPython(LeakhoundError):
    EXIT_CODE = 4
    HELP_TEXT = "Supported targets: CPython 3.8 or newer on Linux, built with the GIL (not a free-threaded 3.13t)."


class PermissionDenied(LeakhoundError):
    EXIT_CODE = 5
    HELP_TEXT = (
        "Attaching needs ptrace rights over the target: run as the target's user or root, "
        "with CAP_SYS_PTRACE (docker/k8s: `--cap-add SYS_PTRACE` / securityContext "
        "capabilities add SYS_PTRACE) and /proc/sys/kernel/yama/ptrace_scope <= 1 "
        "(`sysctl kernel.yama.ptrace_scope=0`). Where ptrace is not allowed at all, start the "
        "worker with LEAKHOUND_AGENT=1 and use `--method agent`."
    )


class AttachTimeout(LeakhoundError):
    EXIT_CODE = 6
    HELP_TEXT = "Raise --timeout, or inspect when the worker is less busy."


class RequestCancelled(AttachTimeout):
    """The request ran out of time and the payload confirmed it stopped (its lock released)."""

    HELP_TEXT = (
        "The request was stopped inside the target at its next step and left nothing running "
        "(a patch that is cancelled changes nothing). Raise --timeout, or retry when the "
        "worker is less busy."
    )


class TargetBlocked(AttachTimeout):
    HELP_TEXT = (
        "The payload runs when the main thread next executes Python code. If it is blocked in "
        "a long system call, retry later, or start the worker with LEAKHOUND_AGENT=1 and use "
        "`--method agent`, which does not need the main thread."
    )


class AttachFailed(LeakhoundError):
    EXIT_CODE = 7
    HELP_TEXT = "Run with -v to see the exact debugger command and its output."


class TracerStuck(AttachFailed):
    """The ptrace method could not let the target's main thread go: it never stopped (it sits
    in uninterruptible sleep). The kernel releases it when the tracer helper exits."""

    HELP_TEXT = (
        "The main thread was in uninterruptible sleep (state D: disk or network file system "
        "I/O) and never stopped. leakhound's tracer helper exits, which releases it untouched "
        "(or, if it was mid-step, waits for it to stop and puts it back); inspect again once the "
        "thread runs (`cat /proc/PID/task/PID/stat`), or use `--method agent`."
    )


class MethodUnavailable(AttachFailed):
    HELP_TEXT = (
        "Methods: ptrace (x86-64 Linux, ptrace rights), gdb (needs the gdb binary: "
        "`apt-get install gdb`, and ptrace rights), "
        "agent (start the worker with LEAKHOUND_AGENT=1; leakhound must be installed in "
        "its environment), remote-exec (target and a local interpreter on Python 3.14+)."
    )


class TargetFilesystemUnreachable(AttachFailed):
    HELP_TEXT = (
        "The ptrace, gdb and remote-exec methods hand the payload over in a private directory "
        "the target must open; a target in a container sees its own file system, reached "
        "through /proc/PID/root. Give the container a writable /tmp or /dev/shm (an emptyDir "
        "volume), run leakhound inside the container (`kubectl exec`, `docker exec`), or start "
        "the worker with LEAKHOUND_AGENT=1 and use `--method agent`."
    )


class ProtocolViolation(LeakhoundError):
    """What answered from the target is not what leakhound's agent or payload sends: another
    process (or another user's) at the agent's socket, a line that is not JSON or too long,
    a message or result of the wrong shape or types, more bytes than the request allows.
    leakhound stops reading at once; nothing it read is used."""

    EXIT_CODE = 20
    HELP_TEXT = (
        "The target's owner controls its agent's socket and what runs inside it. If the "
        "worker runs a real leakhound agent, check it is the same leakhound version as the "
        "CLI (`pip show leakhound` in both environments); otherwise inspect it with "
        "`--method ptrace` or `--method gdb`."
    )


class PayloadVersionMismatch(ProtocolViolation):
    """The target's agent answered with a payload version this leakhound does not read: it was
    started by another leakhound (leakhound/payload/wire.py PAYLOAD_VERSION). Nothing of the
    answer is used."""

    HELP_TEXT = (
        "The worker's agent comes from the leakhound installed in the worker's environment: "
        "install the CLI's version there (`pip show leakhound` in both) and restart the "
        "worker, or inspect it with `--method ptrace` or `--method gdb`, which load this "
        "leakhound's payload."
    )


class MissingSymbols(MethodUnavailable):
    HELP_TEXT = (
        "The ptrace and gdb methods start the payload by calling these CPython functions in "
        "the target, so they cannot work on a build that hides, strips or renames them. "
        "Start the worker with LEAKHOUND_AGENT=1 (leakhound installed in its environment) "
        "and use `--method agent`."
    )


class RemoteError(LeakhoundError):
    EXIT_CODE = 8
    HELP_TEXT = (
        "The payload failed inside the target; the target itself was left running. "
        "Run with -v for its traceback."
    )


class TargetBusy(LeakhoundError):
    EXIT_CODE = 9
    HELP_TEXT = "Another leakhound command is working on this process; wait for it to finish."


class PatchRefused(LeakhoundError):
    EXIT_CODE = 10
    HELP_TEXT = "The fix only applies to code it recognises; nothing in the target was changed."


class PatchPartlyRefused(LeakhoundError):
    """Some of the fixes asked for were applied, others refused (the outcomes are shown first)."""

    EXIT_CODE = 16
    HELP_TEXT = (
        "The fixes shown as applied are live in the worker; the refused ones changed nothing. "
        "Keep them, or take them out with `leakhound patch PID --revert --fix NAME`."
    )


class SnapshotFileError(LeakhoundError):
    EXIT_CODE = 11
    HELP_TEXT = "Pass files written by `leakhound inspect --save` or `--json`."


class SitesUnavailable(LeakhoundError):
    """``--sites``: the allocation-site tracker cannot run in the target."""

    EXIT_CODE = 22
    HELP_TEXT = (
        "The tracker is part of the payload's compiled module (_walk.abi3.so, built when leakhound is "
        "installed with a C compiler and Python headers) and needs a target on CPython 3.10-3.13 with the "
        "GIL. Reinstall leakhound where a compiler is available, or watch without --sites."
    )


class ReportFileError(LeakhoundError):
    """``--html FILE`` cannot be written (checked before the attach, and when written)."""

    EXIT_CODE = 21
    HELP_TEXT = "Give --html a file in a directory that exists and that you can write to, e.g. /tmp/incident.html."


class FleetError(LeakhoundError):
    """A simulated worker (simulate, demo, confirm, patch without a PID) died or was not ready
    in time; the message ends with the last lines of its log."""

    EXIT_CODE = 15
    HELP_TEXT = (
        "Each simulated worker needs a few hundred MB and runs `python -m "
        "leakhound.simulate.worker` with this leakhound's python; `leakhound simulate` keeps "
        "the full logs as worker-<n>.log in its report directory."
    )


class TargetExited(LeakhoundError):
    EXIT_CODE = 12
    HELP_TEXT = "The process exited while leakhound was working on it."


class TargetDied(TargetExited):
    """The target ended during a request: how (signal, core) and whether leakhound was in it."""

    HELP_TEXT = (
        "If leakhound was inside the process when it died, please report it with this message "
        "(and the core file, if one was written); otherwise look at what else acts on the "
        "worker (the OOM killer, its supervisor, a deploy)."
    )
    signal: int | None = None
    exit_status: int | None = None
    core_dumped: bool | None = None
    leakhound_inside: bool = False
    oom_killed: bool = False


class PatchIncomplete(LeakhoundError):
    """A patch request ran out of time, but fixes are applied in the target (read back)."""

    EXIT_CODE = 13
    HELP_TEXT = (
        "The fixes named as applied are live in the worker: keep them, or take them out with "
        "`leakhound patch PID --revert`. Raise --timeout to get their measurement."
    )


class OutcomeUnknown(LeakhoundError):
    """A request ran out of time and neither its cancellation nor its outcome could be read."""

    EXIT_CODE = 14
    HELP_TEXT = (
        "The request was told to stop and stops at its next step inside the target once it "
        "gets to run again; until then new requests get exit code 9. For a patch, check what "
        "is applied with `leakhound patch PID --status` (a patch that is cancelled lands nothing)."
    )


class PlottingUnavailable(LeakhoundError):
    """``--plot`` without matplotlib (the ``leakhound[plot]`` extra); said before any work."""

    EXIT_CODE = 17
    HELP_TEXT = (
        "Install the plotting extra: `pip install 'leakhound[plot]'` (matplotlib), or drop --plot "
        "(`--json` keeps every sample to plot elsewhere)."
    )


class PrivateDirTampered(LeakhoundError):
    """Something other than leakhound and its payload changed the request's private directory:
    a symlink, FIFO, hard link, oversized or malformed file, or a ``cancel`` leakhound did not
    write. Nothing of it was followed or trusted."""

    EXIT_CODE = 18
    HELP_TEXT = (
        "The private directory is handed to the target's user so its payload can answer; any "
        "process of that user can write into it. leakhound follows no link there, reads no file "
        "that is not a plain file within its size bound, and writes nothing outside it. Find the "
        "process of that user that did it, then inspect again, or use `--method agent`."
    )

class Interrupted(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP to leakhound: it cancels its request in the target, removes
    what it made, and exits with 128 + the signal number (130, 143, 129)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class HeadroomTooSmall(LeakhoundError):
    """The target has less memory left under its limit (cgroup, RLIMIT_AS/DATA) than
    leakhound's cost may reach: said before the target is touched."""

    EXIT_CODE = 19
    HELP_TEXT = (
        "leakhound needs max(16 MiB, 1% of the target's RSS) of headroom under the target's tightest "
        "memory limit, and keeps its own cost below that; with less, the kernel could kill the worker. "
        "Raise the limit, wait until the worker uses less, or pass --force to go ahead anyway "
        "(its cost is then capped at the headroom less 4 MiB, or at that amount if more)."
    )


class MemoryBudgetReached(HeadroomTooSmall):
    """The payload stopped a request whose cost in the target reached its memory budget."""

    HELP_TEXT = (
        "The request's cost in the target (its RSS growth, measured as it ran; the target's own growth "
        "meanwhile counts too) reached max(16 MiB, 1% of its RSS), or the headroom under its memory limit: "
        "it stopped there, and nothing of it is left running. Try `--owners census` (the census alone costs "
        "less than the object graph), inspect when the worker is quieter, or pass --force to let it use the "
        "headroom less 4 MiB (a census costs ~13 MiB on a 1 GB heap, ~39 MiB on a 4 GB one)."
    )
