"""How much memory a target may still take before the kernel stops it: the limits of its
memory cgroups (v1 ``memory.limit_in_bytes``; v2 ``memory.max`` and ``memory.high``; its own
cgroup and every ancestor, the tightest counts) and its ``RLIMIT_AS`` / ``RLIMIT_DATA``.

The cgroups are found from ``/proc/PID/cgroup`` through this host's cgroup mounts
(``/proc/self/mountinfo``). Every file is read with a bounded read, opened with
``O_NOFOLLOW``; a cgroup path the target's runtime chose is taken apart, never followed
through ``..``.

The rule (``request_budget``): an inspection, watch sample or patch goes ahead when the
headroom is at least ``max(16 MiB, 1% of the target's RSS)``, and its cost in the target is
then capped at that, and below the headroom minus ``SAFETY_MARGIN``; below it, leakhound
refuses (``HeadroomTooSmall``) unless forced. Measured on cgroup v1 with /tmp on tmpfs: a
default inspection charged a 100 MB heap's cgroup +54 MB (+127 MB on 300 MB) and killed it
at +7 and +50 MB of headroom; the census alone costs +6 MB there, +11 MB on 300 MB.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

from leakhound.errors import HeadroomTooSmall

MIB = 1 << 20
MIN_HEADROOM = 16 * MIB
HEADROOM_SHARE_OF_RSS = 0.01
# What the request's own measure (the target's RSS and graph.bin's pages) does not see: its
# thread's stack, page tables, the kernel's own memory, a few ms of the target's growth.
SAFETY_MARGIN = 4 * MIB
# cgroup v1 says "no limit" with the page counter's maximum (9223372036854771712 on 4 KiB
# pages): anything this big is no limit.
NO_LIMIT = 1 << 62
MAX_READ = 64 << 10

V1_LIMIT, V1_USAGE = "memory.limit_in_bytes", "memory.usage_in_bytes"
V2_MAX, V2_HIGH, V2_CURRENT = "memory.max", "memory.high", "memory.current"


@dataclass(frozen=True)
class MemoryLimit:
    """One limit on the target and what it uses of it. ``kind``: "cgroup v1", "cgroup v2
    memory.max", "cgroup v2 memory.high", "RLIMIT_AS" or "RLIMIT_DATA"; ``where``: the cgroup's
    directory (as reached here) or the limits file."""

    kind: str
    where: str
    limit_bytes: int
    used_bytes: int

    @property
    def headroom_bytes(self) -> int:
        return max(0, self.limit_bytes - self.used_bytes)

    def describe(self) -> str:
        return f"{self.kind} {self.where}: {_mib(self.used_bytes)} of {_mib(self.limit_bytes)} used"


@dataclass(frozen=True)
class MemoryRoom:
    """The target's limits, its RSS, and the file that says what its own memory cgroup is
    charged now (``usage_file``: sampled during a request to measure what the request cost)."""

    pid: int
    rss_bytes: int
    limits: tuple[MemoryLimit, ...] = ()
    usage_file: str | None = None
    # A limited memory cgroup of the target's that leakhound itself is charged to (run inside
    # the same container): its own memory counts against that limit, and in the measured cost.
    shared_with_leakhound: str | None = None

    @property
    def tightest(self) -> MemoryLimit | None:
        return min(self.limits, key=lambda limit: limit.headroom_bytes, default=None)

    @property
    def headroom_bytes(self) -> int | None:
        tightest = self.tightest
        return tightest.headroom_bytes if tightest is not None else None

    @property
    def needed_bytes(self) -> int:
        """The headroom below which leakhound refuses, and the cap on its cost."""
        return max(MIN_HEADROOM, int(self.rss_bytes * HEADROOM_SHARE_OF_RSS))


def request_budget(room: MemoryRoom, *, force: bool = False) -> int | None:
    """``max_extra_bytes`` for a request to ``room``'s target: None when it has no limit
    (nothing caps the request beyond its own budgets); ``HeadroomTooSmall`` below the
    headroom needed, unless ``force``: the cap is then the headroom less ``SAFETY_MARGIN``,
    and never below the usual cap (which may be more than the headroom). A census costs the
    target ~13 MiB on a 1 GB heap and ~39 MiB on a 4 GB one, most of it its walk's bitmap
    (8 KiB per MiB of heap), near its default cap there: ``--force`` is the way through when
    the headroom has it."""
    headroom = room.headroom_bytes
    if headroom is None:
        return None
    needed = room.needed_bytes
    if force:
        return max(needed, headroom - SAFETY_MARGIN)
    if headroom < needed:
        tightest = room.tightest
        assert tightest is not None
        raise HeadroomTooSmall(
            f"process {room.pid} has {_mib(headroom)} of memory left under its limit ({tightest.describe()}); "
            f"leakhound needs at least {_mib(needed)} (max(16 MiB, 1% of its RSS {_mib(room.rss_bytes)})) "
            "not to risk it being killed"
        )
    return max(0, min(needed, headroom - SAFETY_MARGIN))


def memory_room(pid: int, *, proc: str = "/proc", mountinfo: str | None = None) -> MemoryRoom:
    """The limits on ``pid`` as this host sees them (``proc`` and ``mountinfo``: other roots
    for tests)."""
    mounts = cgroup_mounts(_read(mountinfo or os.path.join(proc, "self", "mountinfo")) or "")
    memberships = _read(os.path.join(proc, str(pid), "cgroup")) or ""
    limits: list[MemoryLimit] = []
    usage_file = None
    for version, path, mountpoint in _memory_cgroups(memberships, mounts):
        found, own_usage = (_v1_limits if version == 1 else _v2_limits)(path, mountpoint)
        limits.extend(found)
        if own_usage is not None and usage_file is None:
            usage_file = own_usage
    status = _status(os.path.join(proc, str(pid), "status"))
    limits.extend(_rlimits(os.path.join(proc, str(pid), "limits"), status))
    ours = [path for _version, path, _top in _memory_cgroups(_read(os.path.join(proc, "self", "cgroup")) or "", mounts)]
    shared = next((limit.where for limit in limits if limit.kind.startswith("cgroup")
                   and any(_within(mine, limit.where) for mine in ours)), None)
    if shared is None and usage_file is not None and any(_within(mine, os.path.dirname(usage_file)) for mine in ours):
        # no limit, and leakhound charged to the same cgroup (a host without them, one service
        # running both): its usage would measure leakhound's own memory, not the request's cost
        usage_file = None
    return MemoryRoom(pid=pid, rss_bytes=status.get("VmRSS", 0), limits=tuple(limits), usage_file=usage_file,
                      shared_with_leakhound=shared)


def _within(path: str, directory: str) -> bool:
    path, directory = os.path.normpath(path), os.path.normpath(directory)
    return path == directory or path.startswith(directory + os.sep)


def read_usage(usage_file: str | None) -> int | None:
    """What a cgroup is charged now (its ``memory.usage_in_bytes`` or ``memory.current``)."""
    if usage_file is None:
        return None
    return _number(_read(usage_file))


# -- the kernel's files ---------------------------------------------------------------------------


def _read(path: str) -> str | None:
    """At most ``MAX_READ`` bytes of ``path``, never through a symlink at its last component."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, MAX_READ).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def _number(text: str | None) -> int | None:
    if text is None:
        return None
    word = text.strip()
    if word == "max":
        return NO_LIMIT
    return int(word) if word.isdigit() else None


@dataclass(frozen=True)
class CgroupMount:
    version: int
    root: str  # the part of the hierarchy mounted (mountinfo's root field)
    mountpoint: str


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def cgroup_mounts(mountinfo: str) -> tuple[CgroupMount, ...]:
    """This host's v1 memory and v2 cgroup mounts, from ``/proc/self/mountinfo``'s text."""
    found = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        sep = fields.index("-")
        if sep < 5 or len(fields) < sep + 3:
            continue
        fstype, superopts = fields[sep + 1], fields[sep + 3] if len(fields) > sep + 3 else ""
        root, mountpoint = _unescape(fields[3]), _unescape(fields[4])
        if fstype == "cgroup" and "memory" in superopts.split(","):
            found.append(CgroupMount(1, root, mountpoint))
        elif fstype == "cgroup2":
            found.append(CgroupMount(2, root, mountpoint))
    return tuple(found)


def _memory_cgroups(memberships: str, mounts: tuple[CgroupMount, ...]) -> list[tuple[int, str, str]]:
    """(version, directory here, its mount's top) of the target's memory cgroups: its v1 memory cgroup, its v2
    cgroup where the v2 hierarchy has the memory controller."""
    out = []
    for line in memberships.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        version = 2 if hierarchy == "0" and controllers == "" else 1
        if version == 1 and "memory" not in controllers.split(","):
            continue
        for mount in mounts:
            if mount.version != version:
                continue
            here = _under_mount(path, mount)
            if here is None:
                continue
            controllers_here = _read(os.path.join(mount.mountpoint, "cgroup.controllers")) or ""
            if version == 2 and "memory" not in controllers_here.split():
                continue
            out.append((version, here, mount.mountpoint))
            break
    return out


def _under_mount(path: str, mount: CgroupMount) -> str | None:
    """``path`` (a cgroup as /proc/PID/cgroup names it) in ``mount``'s directory, or None when
    that mount does not show it (another part of the hierarchy, or a path with ``..``)."""
    parts = [p for p in path.split("/") if p]
    root = [p for p in mount.root.split("/") if p]
    if any(p in (".", "..") for p in parts) or parts[:len(root)] != root:
        return None
    return os.path.join(mount.mountpoint, *parts[len(root):])


def _ancestors(directory: str, mountpoint: str) -> list[str]:
    """``directory`` and its parents up to the mount's top, nearest first."""
    out = [directory]
    while os.path.normpath(directory) != os.path.normpath(mountpoint):
        parent = os.path.dirname(directory)
        if parent == directory:
            break
        directory = parent
        out.append(directory)
    return out


def _v1_limits(directory: str, mountpoint: str) -> tuple[list[MemoryLimit], str | None]:
    limits = []
    for level in _ancestors(directory, mountpoint):
        limit = _number(_read(os.path.join(level, V1_LIMIT)))
        used = _number(_read(os.path.join(level, V1_USAGE)))
        if limit is not None and used is not None and limit < NO_LIMIT:
            limits.append(MemoryLimit("cgroup v1", level, limit, used))
    own = os.path.join(directory, V1_USAGE)
    return limits, own if _read(own) is not None else None


def _v2_limits(directory: str, mountpoint: str) -> tuple[list[MemoryLimit], str | None]:
    limits = []
    for level in _ancestors(directory, mountpoint):
        used = _number(_read(os.path.join(level, V2_CURRENT)))
        if used is None:
            continue  # the root has no memory.current, and no limit
        for name in (V2_MAX, V2_HIGH):
            limit = _number(_read(os.path.join(level, name)))
            if limit is not None and limit < NO_LIMIT:
                limits.append(MemoryLimit(f"cgroup v2 {name}", level, limit, used))
    own = os.path.join(directory, V2_CURRENT)
    return limits, own if _read(own) is not None else None


def _status(path: str) -> dict[str, int]:
    """The ``Vm*`` sizes of /proc/PID/status, in bytes."""
    out = {}
    for line in (_read(path) or "").splitlines():
        key, _, value = line.partition(":")
        words = value.split()
        if key.startswith("Vm") and len(words) == 2 and words[1] == "kB" and words[0].isdigit():
            out[key] = int(words[0]) * 1024
    return out


# The rlimits that bound memory, and the size in /proc/PID/status each bounds.
_RLIMITS = (("Max address space", "RLIMIT_AS", "VmSize"), ("Max data size", "RLIMIT_DATA", "VmData"))


def _rlimits(path: str, status: dict[str, int]) -> list[MemoryLimit]:
    out = []
    for line in (_read(path) or "").splitlines():
        for title, kind, size in _RLIMITS:
            if not line.startswith(title):
                continue
            soft = line[len(title):].split()[:1]
            if soft and soft[0].isdigit() and size in status:
                out.append(MemoryLimit(kind, path, int(soft[0]), status[size]))
    return out


def _mib(n: int) -> str:
    return f"{n / MIB:.1f} MiB"


# -- what a request cost ----------------------------------------------------------------------------

# How often the target's cgroup is sampled while a request runs: the file is a counter the
# kernel keeps, read in a few microseconds.
SAMPLE_EVERY = 0.005
# Beside the usage file, the cgroup's own high-water mark (v1, v2 on 5.19+): when it rises
# during the request it is the request's exact peak, which sampling can miss.
_PEAK_FILES = {V1_USAGE: "memory.max_usage_in_bytes", V2_CURRENT: "memory.peak"}


@dataclass(frozen=True)
class MemoryCost:
    """What one request cost the target, measured: the highest its memory cgroup was charged
    during the request over what it was before (None: no cgroup to read), its VmHWM's and
    RSS's growth, the peak RSS growth the payload measured in itself; and the budget it was
    given and the headroom it had (None: no limit)."""

    cgroup_peak_bytes: int | None
    hwm_bytes: int
    rss_bytes: int
    payload_peak_bytes: int | None
    budget_bytes: int | None
    headroom_bytes: int | None
    limit: str
    # the RSS the payload's first load added to the target, kept for the next request
    payload_load_bytes: int = 0
    # what the reader should know about these numbers (leakhound charged to the same cgroup)
    note: str = ""


class CostMeter:
    """Samples the target's memory cgroup (``room.usage_file``) on a thread of its own while a
    request runs, between ``start()`` and ``stop()``. Once the cgroup has grown more than the
    budget plus ``SAFETY_MARGIN`` over the request, ``on_over`` is called (once): the CLI
    cancels the request. The payload keeps to its budget itself; this is for what it cannot
    see (the target's cgroup-mates, the kernel's memory, a payload loaded by an older
    leakhound and kept for its patches)."""

    def __init__(self, room: MemoryRoom, budget: int | None) -> None:
        self.room, self.budget = room, budget
        self.on_over: Callable[[], None] | None = None
        self.tripped = False
        self._status = os.path.join("/proc", str(room.pid), "status")
        self._peak_file = None
        if room.usage_file is not None:
            peak = _PEAK_FILES.get(os.path.basename(room.usage_file))
            self._peak_file = os.path.join(os.path.dirname(room.usage_file), peak) if peak else None
        self._before = read_usage(room.usage_file)
        self._peak_before = _number(_read(self._peak_file)) if self._peak_file else None
        self._highest = self._before
        before = _status(self._status)
        self._hwm_before, self._rss_before = before.get("VmHWM", 0), before.get("VmRSS", 0)
        self._hwm_after, self._rss_after = self._hwm_before, self._rss_before
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> CostMeter:
        if self._before is not None:
            self._thread = threading.Thread(target=self._sample, name="leakhound-cost-meter", daemon=True)
            self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._done.wait(SAMPLE_EVERY):
            self._take()

    def _take(self) -> None:
        now = read_usage(self.room.usage_file)
        if now is not None and (self._highest is None or now > self._highest):
            self._highest = now
        if (now is not None and self._before is not None and self.budget is not None and not self.tripped
                and now - self._before > self.budget + SAFETY_MARGIN):
            self.tripped = True
            if self.on_over is not None:
                self.on_over()

    def stop(self) -> None:
        if self._done.is_set():
            return
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        self._take()
        if self._peak_file is not None and self._peak_before is not None:
            peak = _number(_read(self._peak_file))
            if peak is not None and peak > self._peak_before and (self._highest is None or peak > self._highest):
                self._highest = peak
        after = _status(self._status)
        self._hwm_after = after.get("VmHWM", self._hwm_before)
        self._rss_after = after.get("VmRSS", self._rss_before)

    def cost(self, payload_peak_bytes: int | None = None, payload_load_bytes: int = 0) -> MemoryCost:
        self.stop()
        tightest = self.room.tightest
        charged = None
        if self._before is not None and self._highest is not None:
            charged = max(0, self._highest - self._before)
        return MemoryCost(
            cgroup_peak_bytes=charged,
            hwm_bytes=max(0, self._hwm_after - self._hwm_before),
            rss_bytes=self._rss_after - self._rss_before,
            payload_peak_bytes=payload_peak_bytes,
            budget_bytes=self.budget,
            headroom_bytes=self.room.headroom_bytes,
            limit=tightest.describe() if tightest is not None else "",
            payload_load_bytes=payload_load_bytes,
            note=(f"leakhound runs inside the target's memory cgroup {self.room.shared_with_leakhound}: its own "
                  "memory counts against that limit, and in the cost measured there"
                  if self.room.shared_with_leakhound else ""),
        )
