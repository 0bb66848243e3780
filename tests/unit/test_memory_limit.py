"""The target's memory limits read from cgroup v1 and v2 layouts and /proc files made in a tmp dir."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from leakhound.attach.memory_limit import (
    MIB,
    SAFETY_MARGIN,
    MemoryLimit,
    MemoryRoom,
    cgroup_mounts,
    memory_room,
    read_usage,
    request_budget,
)
from leakhound.errors import HeadroomTooSmall

PID = 4242
V1_NO_LIMIT = "9223372036854771712"


def _proc(tmp_path: Path, cgroup: str, *, rss_kb: int = 100 * 1024, limits: str = "") -> Path:
    proc = tmp_path / "proc"
    (proc / str(PID)).mkdir(parents=True)
    (proc / str(PID) / "cgroup").write_text(cgroup)
    (proc / str(PID) / "status").write_text(
        f"Name:\tpython\nVmPeak:\t  900000 kB\nVmSize:\t  800000 kB\nVmHWM:\t  {rss_kb + 10} kB\n"
        f"VmRSS:\t  {rss_kb} kB\nVmData:\t  300000 kB\nThreads:\t1\n")
    (proc / str(PID) / "limits").write_text(
        "Limit                     Soft Limit           Hard Limit           Units     \n"
        "Max cpu time              unlimited            unlimited            seconds   \n"
        + (limits or "Max data size             unlimited            unlimited            bytes     \n"
                     "Max address space         unlimited            unlimited            bytes     \n"))
    return proc


def _mountinfo(tmp_path: Path, lines: list[str]) -> str:
    path = tmp_path / "mountinfo"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _write(directory: Path, **files: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name.replace("_", ".", 1)).write_text(text + "\n")


def test_v1_the_tightest_of_the_cgroup_and_its_ancestors(tmp_path: Path) -> None:
    mount = tmp_path / "memory"
    _write(mount, memory_limit_in_bytes=V1_NO_LIMIT, memory_usage_in_bytes=str(900 * MIB))
    _write(mount / "kubepods", memory_limit_in_bytes=str(400 * MIB), memory_usage_in_bytes=str(380 * MIB))
    _write(mount / "kubepods" / "pod1", memory_limit_in_bytes=str(300 * MIB), memory_usage_in_bytes=str(250 * MIB))
    mountinfo = _mountinfo(tmp_path, [
        f"35 31 0:32 / {mount} rw,relatime - cgroup cgroup rw,memory",
        f"32 31 0:29 / {tmp_path}/cpu rw,relatime - cgroup cgroup rw,cpu",
    ])
    proc = _proc(tmp_path, "5:cpu:/\n4:memory:/kubepods/pod1\n0::/\n")
    room = memory_room(PID, proc=str(proc), mountinfo=mountinfo)
    assert [(lim.where, lim.limit_bytes, lim.used_bytes) for lim in room.limits] == [
        (str(mount / "kubepods" / "pod1"), 300 * MIB, 250 * MIB),
        (str(mount / "kubepods"), 400 * MIB, 380 * MIB),
    ]
    # the parent has 20 MiB left, the pod 50: the parent's is the headroom
    assert room.tightest is not None and room.tightest.where == str(mount / "kubepods")
    assert room.headroom_bytes == 20 * MIB
    assert room.rss_bytes == 100 * MIB
    assert room.usage_file == str(mount / "kubepods" / "pod1" / "memory.usage_in_bytes")
    assert read_usage(room.usage_file) == 250 * MIB


def test_v1_a_mount_of_part_of_the_hierarchy(tmp_path: Path) -> None:
    # a container sees its own cgroup as the mount's root: mountinfo's root field says which
    mount = tmp_path / "memory"
    _write(mount, memory_limit_in_bytes=str(200 * MIB), memory_usage_in_bytes=str(150 * MIB))
    _write(mount / "worker", memory_limit_in_bytes=V1_NO_LIMIT, memory_usage_in_bytes=str(100 * MIB))
    mountinfo = _mountinfo(tmp_path, [f"35 31 0:32 /docker/abc {mount} rw - cgroup cgroup rw,memory"])
    room = memory_room(PID, proc=str(_proc(tmp_path, "4:memory:/docker/abc/worker\n")), mountinfo=mountinfo)
    assert [(lim.where, lim.headroom_bytes) for lim in room.limits] == [(str(mount), 50 * MIB)]


def test_v1_a_cgroup_outside_the_mount_or_with_dotdot_is_not_followed(tmp_path: Path) -> None:
    mount = tmp_path / "memory"
    _write(mount, memory_limit_in_bytes=str(200 * MIB), memory_usage_in_bytes=str(150 * MIB))
    mountinfo = _mountinfo(tmp_path, [f"35 31 0:32 /docker/abc {mount} rw - cgroup cgroup rw,memory"])
    for path in ("/other", "/docker/abc/../../etc"):
        room = memory_room(PID, proc=str(_proc(tmp_path / path.replace("/", "_"), f"4:memory:{path}\n")),
                           mountinfo=mountinfo)
        assert room.limits == () and room.usage_file is None


def test_v1_a_symlink_in_place_of_a_limit_file_is_not_read(tmp_path: Path) -> None:
    mount = tmp_path / "memory"
    _write(mount / "w", memory_usage_in_bytes=str(10 * MIB))
    (tmp_path / "elsewhere").write_text(str(11 * MIB))
    os.symlink(tmp_path / "elsewhere", mount / "w" / "memory.limit_in_bytes")
    mountinfo = _mountinfo(tmp_path, [f"35 31 0:32 / {mount} rw - cgroup cgroup rw,memory"])
    room = memory_room(PID, proc=str(_proc(tmp_path, "4:memory:/w\n")), mountinfo=mountinfo)
    assert room.limits == ()


def test_v2_max_and_high_of_the_cgroup_and_its_ancestors(tmp_path: Path) -> None:
    mount = tmp_path / "unified"
    _write(mount, **{"cgroup_controllers": "cpuset cpu io memory pids"})  # the root: no memory.current
    _write(mount / "system.slice", memory_max="max", memory_high="max", memory_current=str(700 * MIB))
    _write(mount / "system.slice" / "app.service", memory_max=str(512 * MIB), memory_high=str(480 * MIB),
           memory_current=str(460 * MIB))
    mountinfo = _mountinfo(tmp_path, [f"41 31 0:38 / {mount} rw,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate"])
    room = memory_room(PID, proc=str(_proc(tmp_path, "0::/system.slice/app.service\n")), mountinfo=mountinfo)
    assert [(lim.kind, lim.limit_bytes) for lim in room.limits] == [
        ("cgroup v2 memory.max", 512 * MIB), ("cgroup v2 memory.high", 480 * MIB)]
    assert room.headroom_bytes == 20 * MIB
    assert room.usage_file == str(mount / "system.slice" / "app.service" / "memory.current")


def test_v2_without_the_memory_controller_has_no_limit(tmp_path: Path) -> None:
    mount = tmp_path / "unified"
    _write(mount, **{"cgroup_controllers": "cpu io pids"})
    _write(mount / "a", memory_max=str(512 * MIB), memory_current=str(460 * MIB))
    mountinfo = _mountinfo(tmp_path, [f"41 31 0:38 / {mount} rw - cgroup2 cgroup2 rw"])
    room = memory_room(PID, proc=str(_proc(tmp_path, "0::/a\n")), mountinfo=mountinfo)
    assert room.limits == () and room.usage_file is None


def test_rlimit_as_and_data_against_vmsize_and_vmdata(tmp_path: Path) -> None:
    limits = ("Max data size             419430400            unlimited            bytes     \n"
              "Max address space         838860800            1073741824           bytes     \n")
    room = memory_room(PID, proc=str(_proc(tmp_path, "", limits=limits)), mountinfo=_mountinfo(tmp_path, []))
    assert [(lim.kind, lim.limit_bytes, lim.used_bytes) for lim in room.limits] == [
        ("RLIMIT_DATA", 400 * MIB, 300000 * 1024), ("RLIMIT_AS", 800 * MIB, 800000 * 1024)]
    assert room.tightest is not None and room.tightest.kind == "RLIMIT_AS"


def test_no_limit_no_cap() -> None:
    assert request_budget(MemoryRoom(pid=1, rss_bytes=100 * MIB)) is None


def _room(rss: int, headroom: int) -> MemoryRoom:
    return MemoryRoom(pid=1, rss_bytes=rss, limits=(MemoryLimit("cgroup v1", "/x", rss + headroom, rss),))


def test_budget_rule_go_capped_at_the_needed_headroom_and_below_the_headroom() -> None:
    # 100 MiB of RSS: 16 MiB needed; 50 MiB of headroom: capped at 16 MiB
    assert request_budget(_room(100 * MIB, 50 * MIB)) == 16 * MIB
    # exactly 16 MiB of headroom: go, kept below it by the safety margin
    assert request_budget(_room(100 * MIB, 16 * MIB)) == 16 * MIB - SAFETY_MARGIN
    # 4 GiB of RSS: 1% (~41 MiB) needed
    assert request_budget(_room(4096 * MIB, 100 * MIB)) == int(4096 * MIB * 0.01)


def test_budget_rule_refuses_below_the_needed_headroom_unless_forced() -> None:
    with pytest.raises(HeadroomTooSmall) as refused:
        request_budget(_room(100 * MIB, 7 * MIB))
    assert "7.0 MiB of memory left" in str(refused.value) and "at least 16.0 MiB" in str(refused.value)
    assert refused.value.EXIT_CODE == 19
    with pytest.raises(HeadroomTooSmall):
        request_budget(_room(4096 * MIB, 30 * MIB))  # 30 MiB < 1% of 4 GiB
    assert request_budget(_room(100 * MIB, 7 * MIB), force=True) == 16 * MIB
    # forced with room to spare: up to the headroom less the margin
    assert request_budget(_room(1024 * MIB, 100 * MIB), force=True) == 100 * MIB - SAFETY_MARGIN


def test_mountinfo_escapes_and_other_filesystems() -> None:
    mounts = cgroup_mounts(
        "20 1 0:1 / / rw - ext4 /dev/vda rw\n"
        "35 31 0:32 / /sys/fs/cgroup/mem\\040ory rw - cgroup cgroup rw,memory\n"
        "33 31 0:30 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct\n"
        "garbage\n")
    assert [(m.version, m.mountpoint) for m in mounts] == [(1, "/sys/fs/cgroup/mem ory")]


def test_leakhound_charged_to_a_limited_cgroup_of_the_targets_is_said(tmp_path: Path) -> None:
    mount = tmp_path / "memory"
    _write(mount / "pod", memory_limit_in_bytes=str(300 * MIB), memory_usage_in_bytes=str(250 * MIB))
    _write(mount / "pod" / "worker", memory_limit_in_bytes=V1_NO_LIMIT, memory_usage_in_bytes=str(200 * MIB))
    _write(mount / "pod" / "debug", memory_limit_in_bytes=V1_NO_LIMIT, memory_usage_in_bytes=str(40 * MIB))
    mountinfo = _mountinfo(tmp_path, [f"35 31 0:32 / {mount} rw - cgroup cgroup rw,memory"])
    proc = _proc(tmp_path, "4:memory:/pod/worker\n")
    (proc / "self").mkdir()
    (proc / "self" / "cgroup").write_text("4:memory:/pod/debug\n")
    room = memory_room(PID, proc=str(proc), mountinfo=mountinfo)
    assert room.shared_with_leakhound == str(mount / "pod")
    (proc / "self" / "cgroup").write_text("4:memory:/elsewhere\n")
    assert memory_room(PID, proc=str(proc), mountinfo=mountinfo).shared_with_leakhound is None
    # the target's own cgroup without a limit, leakhound in it: its usage is not the request's cost
    (mount / "pod" / "memory.limit_in_bytes").write_text(V1_NO_LIMIT)
    (proc / "self" / "cgroup").write_text("4:memory:/pod/worker\n")
    room = memory_room(PID, proc=str(proc), mountinfo=mountinfo)
    assert room.limits == () and room.shared_with_leakhound is None and room.usage_file is None
