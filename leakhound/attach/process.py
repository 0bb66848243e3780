"""What the kernel says about the target, read from outside with psutil and /proc."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import psutil

from leakhound.attach import elf
from leakhound.errors import NotPython, PermissionDenied, TargetNotFound, UnsupportedPython
from leakhound.model import ProcessStats

_LIBPYTHON = re.compile(r"libpython(\d)\.(\d+)")


@dataclass(frozen=True)
class Target:
    pid: int
    uid: int
    exe: str
    version: tuple[int, int]
    name: str
    cmdline: str


def _proc(pid: int) -> psutil.Process:
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            raise TargetNotFound(f"process {pid} is a zombie (it exited; its parent has not reaped it)")
        return proc
    except psutil.NoSuchProcess:
        raise TargetNotFound(f"no process with pid {pid}") from None


def _libpython_mapping(pid: int) -> tuple[str, str, int, tuple[int, int]] | None:
    """(address range, path, inode, version its name says) of a libpython ``pid`` maps."""
    try:
        with open(f"/proc/{pid}/maps") as fh:
            for line in fh:
                match = _LIBPYTHON.search(line)
                fields = line.split(None, 5)
                if match and len(fields) == 6 and fields[4].isdigit():
                    path = fields[5].rstrip("\n").removesuffix(" (deleted)")
                    return fields[0], path, int(fields[4]), (int(match.group(1)), int(match.group(2)))
    except PermissionError:
        raise PermissionDenied(f"cannot read /proc/{pid}/maps: permission denied") from None
    except FileNotFoundError:
        raise TargetNotFound(f"no process with pid {pid}") from None
    return None


def _elf_version(path: str, inode: int | None = None) -> tuple[int, int] | None:
    """The CPython version in the ELF file at ``path`` (that inode, if given), or None."""
    try:
        if inode is not None and os.stat(path).st_ino != inode:
            return None
        return elf.python_version(elf.ElfFile(path, exported_only=True))
    except (OSError, elf.ElfError):
        return None


def python_version(pid: int) -> tuple[int, int] | None:
    """The CPython version of a live process, read from its files and never by running
    anything of them: the libpython it maps (its data, else its name), else the executable
    it runs (a static build: no libpython), opened through /proc/PID/exe, so a file since
    put in its place is not what is read. A name alone never makes a process CPython."""
    mapped = _libpython_mapping(pid)
    if mapped is not None:
        span, path, inode, named = mapped
        for candidate in (f"/proc/{pid}/map_files/{span}", f"/proc/{pid}/root{path}"):
            version = _elf_version(candidate, inode)
            if version is not None:
                return version
        return named
    try:
        return elf.python_version(elf.ElfFile(f"/proc/{pid}/exe", exported_only=True))
    except PermissionError:
        raise PermissionDenied(f"cannot read /proc/{pid}/exe: permission denied") from None
    except FileNotFoundError:
        raise TargetNotFound(f"no process with pid {pid}") from None
    except (OSError, elf.ElfError):
        return None


def resolve_target(pid: int) -> Target:
    proc = _proc(pid)
    try:
        exe = proc.exe()
        uid = proc.uids().real
        cmdline = " ".join(proc.cmdline())
        name = proc.name()
    except psutil.AccessDenied:
        raise PermissionDenied(f"cannot read process {pid}: permission denied") from None
    except psutil.NoSuchProcess:
        raise TargetNotFound(f"no process with pid {pid}") from None
    version = python_version(pid)
    if version is None:
        raise NotPython(f"process {pid} ({name}) is not a CPython process")
    if version < (3, 8):
        raise UnsupportedPython(f"process {pid} runs Python {version[0]}.{version[1]}")
    return Target(pid=pid, uid=uid, exe=exe, version=version, name=name, cmdline=cmdline)


def _stack_pointers(pid: int) -> list[int]:
    """Each blocked thread's stack pointer (/proc/PID/task/TID/syscall: "nr args... sp pc";
    "running" for a thread on a CPU right now)."""
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/syscall") as fh:
                fields = fh.read().split()
        except OSError:
            continue
        if len(fields) >= 3 and fields[0] != "running":
            try:
                out.append(int(fields[-2], 16))
            except ValueError:
                continue
    return out


def mapped_bytes(pid: int) -> tuple[int, int]:
    """(resident bytes of thread stacks, of file-backed mappings) from /proc/PID/smaps. A
    stack is the main thread's ``[stack]`` or the mapping a thread's stack pointer is in."""
    pointers = _stack_pointers(pid)
    stacks = files = 0
    low = high = 0
    path = ""
    try:
        with open(f"/proc/{pid}/smaps") as fh:
            for line in fh:
                head = line.split(None, 5)
                if head and "-" in head[0] and len(head) >= 5 and ":" in head[3]:
                    start, _, end = head[0].partition("-")
                    low, high = int(start, 16), int(end, 16)
                    path = head[5].strip() if len(head) > 5 else ""
                elif head and head[0] == "Rss:":
                    rss = int(head[1]) * 1024
                    if path == "[stack]" or any(low <= sp < high for sp in pointers):
                        stacks += rss
                    elif path.startswith("/"):
                        files += rss
    except (OSError, ValueError):
        return 0, 0
    return stacks, files


def process_stats(pid: int) -> ProcessStats:
    proc = _proc(pid)
    try:
        with proc.oneshot():
            full = proc.memory_full_info()
            stacks, files = mapped_bytes(pid)
            return ProcessStats(
                rss_bytes=int(full.rss),
                uss_bytes=int(getattr(full, "uss", 0)),
                pss_bytes=int(getattr(full, "pss", 0)),
                swap_bytes=int(getattr(full, "swap", 0)),
                num_threads=proc.num_threads(),
                name=proc.name(),
                cmdline=" ".join(proc.cmdline())[:500],
                stack_bytes=stacks,
                file_mapped_bytes=files,
            )
    except psutil.AccessDenied:
        raise PermissionDenied(f"cannot read memory of process {pid}: permission denied") from None
    except psutil.NoSuchProcess:
        raise TargetNotFound(f"process {pid} exited") from None


def rss_bytes(pid: int) -> int:
    try:
        return int(psutil.Process(pid).memory_info().rss)
    except psutil.NoSuchProcess:
        raise TargetNotFound(f"process {pid} exited") from None


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def stopped(pid: int) -> bool:
    """Whether ``pid`` is stopped (state T: SIGSTOP, a job-control stop) or held by a tracer (t)."""
    try:
        return psutil.Process(pid).status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
    except psutil.NoSuchProcess:
        return False


def namespace_pid(pid: int) -> int:
    """The pid the target sees for itself: the last field of NStgid (its innermost pid
    namespace, e.g. a container's), which is also what it names its agent socket after."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("NStgid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError, IndexError):
        pass
    return pid


def same_filesystem_view(pid: int) -> bool:
    """Whether a path means the same file here and in ``pid``: same mount namespace and same
    root (no container, no chroot). True when it cannot be told: reading either needs the
    rights over ``pid`` that attaching needs too, and attaching then says what is missing."""
    try:
        if os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt"):
            return False
        ours, theirs = os.stat("/"), os.stat(f"/proc/{pid}/root")
    except OSError:
        return True
    return (ours.st_dev, ours.st_ino) == (theirs.st_dev, theirs.st_ino)


def environ_of(pid: int) -> dict[str, str]:
    """The environment ``pid`` was started with (/proc/PID/environ; empty when unreadable)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            raw = fh.read()
    except OSError:
        return {}
    env = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def match_processes(pattern: str, *, exclude: frozenset[int] = frozenset()) -> list[int]:
    """Pids of CPython processes whose command line matches ``pattern`` (a regular
    expression), leaving out leakhound itself and its parents."""
    regex = re.compile(pattern)
    skip = set(exclude) | {os.getpid()}
    try:
        skip.update(p.pid for p in psutil.Process().parents())
    except psutil.Error:
        pass
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        pid = int(proc.info["pid"])
        cmdline = " ".join(proc.info.get("cmdline") or ())
        if pid in skip or not cmdline or not regex.search(cmdline):
            continue
        try:
            resolve_target(pid)
        except (TargetNotFound, NotPython, UnsupportedPython, PermissionDenied):
            continue  # not Python, gone, or not ours to read: not a worker we can watch
        found.append(pid)
    return sorted(found)


def ignored_signals(pid: int) -> int:
    """The signals ``pid`` ignores (SIG_IGN), as the bit mask of /proc/PID/status SigIgn."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            return next((int(line.split()[1], 16) for line in fh if line.startswith("SigIgn:")), 0)
    except (OSError, ValueError):
        return 0


def tracer_pid(pid: int) -> int:
    """The pid ptrace-attached to ``pid`` right now (another gdb, py-spy, strace), or 0."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("TracerPid:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0
