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


#: ELF file (st_dev, st_ino) -> the CPython version in it: what one scan of many processes
#: has read already (most share a handful of executables; reading one is ~30 ms).
ElfVersions = dict[tuple[int, int], "tuple[int, int] | None"]


def _read_elf_version(path: str, known: ElfVersions | None) -> tuple[int, int] | None:
    """The CPython version in the ELF file at ``path`` (OSError, ElfError when unreadable)."""
    if known is None:
        return elf.python_version(elf.ElfFile(path, exported_only=True))
    st = os.stat(path)
    key = (st.st_dev, st.st_ino)
    if key not in known:
        known[key] = elf.python_version(elf.ElfFile(path, exported_only=True))
    return known[key]


def _elf_version(path: str, inode: int | None = None, known: ElfVersions | None = None) -> tuple[int, int] | None:
    """The CPython version in the ELF file at ``path`` (that inode, if given), or None."""
    try:
        if inode is not None and os.stat(path).st_ino != inode:
            return None
        return _read_elf_version(path, known)
    except (OSError, elf.ElfError):
        return None


def python_version(pid: int, *, known: ElfVersions | None = None) -> tuple[int, int] | None:
    """The CPython version of a live process, read from its files and never by running
    anything of them: the libpython it maps (its data, else its name), else the executable
    it runs (a static build: no libpython), opened through /proc/PID/exe, so a file since
    put in its place is not what is read. A name alone never makes a process CPython.
    ``known``: the versions of files read before in the same scan, added to."""
    mapped = _libpython_mapping(pid)
    if mapped is not None:
        span, path, inode, named = mapped
        for candidate in (f"/proc/{pid}/map_files/{span}", f"/proc/{pid}/root{path}"):
            version = _elf_version(candidate, inode, known)
            if version is not None:
                return version
        return named
    try:
        return _read_elf_version(f"/proc/{pid}/exe", known)
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


# Bounds on what is read of another user's process: its command line can be megabytes.
_CMDLINE_BYTES = 64 * 1024  # what --match searches
_TITLE_BYTES = 4096  # what is shown
_COMM_BYTES = 64
_STAT_BYTES = 4096
MAX_CHILDREN = 64


def _read_bounded(path: str, limit: int) -> bytes:
    """Up to ``limit`` bytes of a /proc file (b"" when it cannot be read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        return os.read(fd, limit)
    except OSError:
        return b""
    finally:
        os.close(fd)


def title(pid: int) -> str:
    """What ``pid`` calls itself: its command line (which setproctitle rewrites to the title,
    ``Verifiers::EnvWorker0``), else its name (/proc/PID/comm); at most 4 KiB read."""
    raw = _read_bounded(f"/proc/{pid}/cmdline", _TITLE_BYTES).replace(b"\0", b" ").strip()
    raw = raw or _read_bounded(f"/proc/{pid}/comm", _COMM_BYTES).strip()
    return raw.decode(errors="replace")


def _other_processes(exclude: frozenset[int]) -> list[tuple[int, str, str]]:
    """(pid, command line, name) of every process with a command line (not a kernel thread),
    leaving out ``exclude``, leakhound itself and its parents. Each read is bounded: a
    process's command line is someone else's input, and can be megabytes."""
    skip = set(exclude) | {os.getpid()}
    try:
        skip.update(p.pid for p in psutil.Process().parents())
    except psutil.Error:
        pass
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in skip:
            continue
        cmdline = _read_bounded(f"/proc/{entry}/cmdline", _CMDLINE_BYTES).replace(b"\0", b" ").strip()
        if cmdline:
            name = _read_bounded(f"/proc/{entry}/comm", _COMM_BYTES).strip()
            found.append((int(entry), cmdline.decode(errors="replace"), name.decode(errors="replace")))
    return found


def _readable_python(pid: int, known: ElfVersions, *, named_python: bool = False) -> bool:
    """Whether ``pid`` is CPython 3.8+ and ours to read (``resolve_target`` would take it).
    ``named_python``: only a process whose executable is named python* or that maps a
    libpython is read further (a quick look over every process: its files are not read)."""
    try:
        proc = _proc(pid)
        exe = proc.exe()
        proc.uids()
        if named_python and not os.path.basename(exe).startswith("python") and _libpython_mapping(pid) is None:
            return False
        version = python_version(pid, known=known)
    except (psutil.Error, TargetNotFound, PermissionDenied):
        return False  # gone, or not ours to read: not a worker we can attach to
    return version is not None and version >= (3, 8)


def match_processes(pattern: str, *, exclude: frozenset[int] = frozenset()) -> list[int]:
    """Pids of CPython processes whose title or command line matches ``pattern`` (a regular
    expression, case ignored), leaving out leakhound itself and its parents. The title is
    what the worker named itself (``Verifiers::EnvWorker0``, set with setproctitle, which
    also rewrites the command line) as /proc/PID/comm keeps it."""
    regex = re.compile(pattern, re.IGNORECASE)
    known: ElfVersions = {}
    return sorted(
        pid for pid, cmdline, name in _other_processes(exclude)
        if (regex.search(cmdline) or regex.search(name)) and _readable_python(pid, known)
    )


def python_processes(*, exclude: frozenset[int] = frozenset()) -> list[tuple[int, str]]:
    """(pid, title) of the CPython processes leakhound can read whose executable is
    named python* or that map a libpython, by pid, leaving out leakhound itself and its
    parents: what a person picks a pid from (shell completion, a --match that found none)."""
    known: ElfVersions = {}
    return sorted((pid, title(pid)) for pid, _cmdline, _name in _other_processes(exclude)
                  if _readable_python(pid, known, named_python=True))


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


def _parent_pids() -> dict[int, int]:
    """pid -> parent pid of every process, from /proc/PID/stat (the field after the name's
    closing parenthesis, which a name cannot fake: the last one is taken)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _read_bounded(f"/proc/{entry}/stat", _STAT_BYTES)
            fields = stat[stat.rfind(b")") + 1:].split()
            if len(fields) >= 2 and fields[1].isdigit():
                parents[int(entry)] = int(fields[1])
    return parents


def child_pids(pid: int, *, depth: int = 1) -> list[int]:
    """The processes ``pid`` started, and theirs down to ``depth`` generations, by pid; at
    most ``MAX_CHILDREN``."""
    parents = _parent_pids()
    found: list[int] = []
    generation = {pid}
    for _ in range(depth):
        generation = {child for child, parent in parents.items() if parent in generation} - {pid}
        found.extend(sorted(generation))
        if not generation or len(found) >= MAX_CHILDREN:
            break
    return found[:MAX_CHILDREN]
