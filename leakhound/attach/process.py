"""What the kernel says about the target, read from outside with psutil and /proc."""

from __future__ import annotations

import os
import re
import time
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
    except (FileNotFoundError, ProcessLookupError):  # ESRCH: it exited while its maps were read
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


def _libpython_files(pid: int, span: str, path: str) -> tuple[str, str]:
    """Where a libpython ``pid`` maps is read: the mapping itself, else its path under the
    process's own root (never the path as leakhound's root would resolve it)."""
    return f"/proc/{pid}/map_files/{span}", f"/proc/{pid}/root{path}"


def python_version(pid: int, *, known: ElfVersions | None = None) -> tuple[int, int] | None:
    """The CPython version of a live process, read from its files and never by running
    anything of them: the libpython it maps (its data, else its name), else the executable
    it runs (a static build: no libpython), opened through /proc/PID/exe, so a file since
    put in its place is not what is read. A name alone never makes a process CPython.
    ``known``: the versions of files read before in the same scan, added to."""
    mapped = _libpython_mapping(pid)
    if mapped is not None:
        span, path, inode, named = mapped
        for candidate in _libpython_files(pid, span, path):
            version = _elf_version(candidate, inode, known)
            if version is not None:
                return version
        return named
    try:
        return _read_elf_version(f"/proc/{pid}/exe", known)
    except PermissionError:
        raise PermissionDenied(f"cannot read /proc/{pid}/exe: permission denied") from None
    except (FileNotFoundError, ProcessLookupError):
        raise TargetNotFound(f"no process with pid {pid}") from None
    except (OSError, elf.ElfError):
        return None


def free_threaded(pid: int) -> bool:
    """Whether a live process runs a free-threaded CPython (3.13t), read from the file
    python_version reads (its libpython, else its executable), never by running it; a
    libpython named so (``libpython3.13t.so``) is one even when its file cannot be read."""
    mapped = _libpython_mapping(pid)
    if mapped is not None:
        span, path, inode, _named = mapped
        if re.search(r"libpython\d\.\d+t", path):
            return True
        candidates: tuple[str, ...] = _libpython_files(pid, span, path)
    else:
        candidates = (f"/proc/{pid}/exe",)
    for candidate in candidates:
        try:
            if mapped is not None and os.stat(candidate).st_ino != inode:
                continue
            return elf.free_threaded(elf.ElfFile(candidate, exported_only=True))
        except (OSError, elf.ElfError):
            continue
    return False


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
    if free_threaded(pid):
        # Nothing is injected: the payload reads CPython's usual object header (one reference
        # count, no thread id) and holds the GIL to pause the walk, neither of which is there.
        raise UnsupportedPython(f"process {pid} runs a free-threaded CPython {version[0]}.{version[1]} "
                                f"({version[0]}.{version[1]}t): not supported")
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


# Reading the target's memory numbers must not stall it. /proc/PID/smaps and smaps_rollup walk
# every page table under the lock the target's mmap/munmap (and with a writer queued, its page
# faults) wait for, one mapping at a time: 94-108 ms on a 5 GB heap whose arenas are one 3.2 GB
# mapping, during which the payload freeing a pymalloc arena waited for that lock while it held
# the GIL (the target's event loop late 108 ms). /proc/PID/pagemap takes the lock for 2 MiB of
# address space at a time, and /proc/PID/status's counters take none.
PAGEMAP_PRESENT = 0x80  # bit 63 of an entry: the page is in RAM
PAGEMAP_EXCLUSIVE = 0x01  # bit 56: mapped by this process alone (what smaps calls private)
_PAGEMAP_CHUNK = 1 << 20  # bytes of pagemap read at once (128k pages, 512 MiB of address space)
# The address space pagemap is read over, at most (8 bytes a page: 1 TiB is 2 GiB to read):
# past it USS is not read (0), as when the file cannot be read.
PAGEMAP_MAX_SPAN = 1 << 40
# Under this RSS smaps_rollup's walk is short (~20 ms per GB measured): PSS is read from it.
PSS_MAX_RSS = 256 << 20
_PRESENT = bytes(1 if b & PAGEMAP_PRESENT else 0 for b in range(256))
_PRESENT_EXCLUSIVE = bytes(
    1 if b & (PAGEMAP_PRESENT | PAGEMAP_EXCLUSIVE) == PAGEMAP_PRESENT | PAGEMAP_EXCLUSIVE else 0 for b in range(256)
)


def _mappings(pid: int) -> list[tuple[int, int, str, str]]:
    """(start, end, permissions, path) of each mapping in /proc/PID/maps."""
    out = []
    with open(f"/proc/{pid}/maps") as fh:
        for line in fh:
            fields = line.split(None, 5)
            if len(fields) < 5 or "-" not in fields[0]:
                continue
            start, _, end = fields[0].partition("-")
            out.append((int(start, 16), int(end, 16), fields[1], fields[5].strip() if len(fields) > 5 else ""))
    return out


def page_counts(pagemap: int, start: int, end: int) -> tuple[int, int]:
    """(pages in RAM, pages in RAM mapped by this process alone) of [start, end), from the
    pagemap file open on fd ``pagemap`` (the top byte of each 8-byte entry, counted in C)."""
    page = os.sysconf("SC_PAGE_SIZE")
    present = exclusive = 0
    offset, stop = start // page * 8, end // page * 8
    while offset < stop:
        data = os.pread(pagemap, min(_PAGEMAP_CHUNK, stop - offset), offset)
        if not data:
            break
        offset += len(data)
        flags = data[7::8]  # little-endian: bits 56-63 of each entry
        present += flags.translate(_PRESENT).count(1)
        exclusive += flags.translate(_PRESENT_EXCLUSIVE).count(1)
    return present, exclusive


def status_bytes(pid: int) -> dict[str, int]:
    """The ``kB`` counters of /proc/PID/status, in bytes ({} if it cannot be read)."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                fields = value.split()
                if len(fields) == 2 and fields[1] == "kB":
                    out[key] = int(fields[0]) * 1024
    except (OSError, ValueError):
        return {}
    return out


def mapped_bytes(pid: int) -> tuple[int, int, int]:
    """(resident bytes of thread stacks, of file-backed mappings, USS: resident bytes this
    process alone maps), without walking the page tables under one lock (above). A stack is
    the main thread's ``[stack]`` or the mapping a thread's stack pointer is in; file-backed,
    a mapping with a path (the executable, libraries, mmapped files). (0, 0, 0) when they
    cannot be read."""
    pointers = _stack_pointers(pid)
    page = os.sysconf("SC_PAGE_SIZE")
    try:
        maps = _mappings(pid)
    except (OSError, ValueError):
        return 0, 0, 0
    # PROT_NONE reservations hold no pages (guard pages, a runtime's reserved address space)
    readable = [m for m in maps if m[2][:3] != "---"]
    span = sum(end - start for start, end, _, _ in readable)
    stacks = files = exclusive = 0
    try:
        pagemap = os.open(f"/proc/{pid}/pagemap", os.O_RDONLY)
    except OSError:
        return 0, 0, 0
    try:
        for start, end, _, path in readable:
            is_stack = path == "[stack]" or any(start <= sp < end for sp in pointers)
            if not is_stack and not path.startswith("/") and span > PAGEMAP_MAX_SPAN:
                continue
            present, alone = page_counts(pagemap, start, end)
            if is_stack:
                stacks += present * page
            elif path.startswith("/"):
                files += present * page
            exclusive += alone * page
    except OSError:
        return 0, 0, 0
    finally:
        os.close(pagemap)
    return stacks, files, exclusive if span <= PAGEMAP_MAX_SPAN else 0


def process_stats(pid: int) -> ProcessStats:
    proc = _proc(pid)
    try:
        with proc.oneshot():
            info = proc.memory_info()
            stacks, files, uss = mapped_bytes(pid)
            pss = 0
            if info.rss <= PSS_MAX_RSS:
                pss = int(getattr(proc.memory_full_info(), "pss", 0))
            return ProcessStats(
                rss_bytes=int(info.rss),
                uss_bytes=uss,
                pss_bytes=pss,
                swap_bytes=status_bytes(pid).get("VmSwap", 0),
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


_SYS_CLOCK_NANOSLEEP = 230
_SYS_PSELECT6 = 270
_CLOCK_MONOTONIC = 1
_TIMER_ABSTIME = 1
_SYSCALL_BYTES = 512


def _timespec(pid: int, address: int) -> float | None:
    """The ``struct timespec`` at ``address`` in the target, in seconds (None: unreadable)."""
    try:
        fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        raw = os.pread(fd, 16, address)
    except (OSError, OverflowError, ValueError):
        return None
    finally:
        os.close(fd)
    if len(raw) != 16:
        return None
    sec, nsec = int.from_bytes(raw[:8], "little", signed=True), int.from_bytes(raw[8:], "little", signed=True)
    return sec + nsec / 1e9 if sec >= 0 and 0 <= nsec < 1_000_000_000 else None


def _monotonic_offset(pid: int) -> float:
    """How far the target's CLOCK_MONOTONIC is ahead of ours (its time namespace's offset)."""
    for line in _read_bounded(f"/proc/{pid}/timens_offsets", 256).decode(errors="replace").splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[0] in ("monotonic", "1"):
            try:
                return int(fields[1]) + int(fields[2]) / 1e9
            except ValueError:
                return 0.0
    return 0.0


def main_thread_sleep(pid: int) -> float | None:
    """Seconds the main thread still sleeps in ``time.sleep`` (at most that: a relative sleep
    says only what it asked for), or None when it is not sleeping so. ``time.sleep`` is
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME) on 3.11+, a select() with no descriptors
    (pselect6) before; the bootstrap runs when it returns."""
    fields = _read_bounded(f"/proc/{pid}/syscall", _SYSCALL_BYTES).decode(errors="replace").split()
    if len(fields) < 7 or not fields[0].isdigit():
        return None
    try:
        nr, args = int(fields[0]), [int(f, 16) for f in fields[1:7]]
    except ValueError:
        return None
    if nr == _SYS_CLOCK_NANOSLEEP and args[0] == _CLOCK_MONOTONIC:
        at = _timespec(pid, args[2])
        if at is None:
            return None
        if args[1] & _TIMER_ABSTIME:
            return max(0.0, at - _monotonic_offset(pid) - time.clock_gettime(time.CLOCK_MONOTONIC))
        return at
    if nr == _SYS_PSELECT6 and args[0] == 0 and args[4]:
        return _timespec(pid, args[4])
    return None


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
