"""The private directory's primitives (attach/private_dir.py): nothing planted in the directory
is followed, blocks, or is read past its bound, and removal never leaves it."""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from leakhound.attach import finish, private_dir
from leakhound.attach.channel import GRAPH_BIN_BYTES_PER_NODE, PrivateChannel
from leakhound.attach.deadline import Deadline
from leakhound.attach.private_dir import PrivateDir, UnsafeEntry, open_dir_in_root
from leakhound.attach.ptrace import stop
from leakhound.errors import PrivateDirTampered

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


@pytest.fixture
def parent(tmp_path: Path) -> Path:
    path = tmp_path / "parent"
    path.mkdir()
    os.chmod(path, 0o1777)
    return path


@pytest.fixture
def private(parent: Path) -> Iterator[PrivateDir]:
    made = PrivateDir.make(os.open(parent, os.O_RDONLY | os.O_DIRECTORY))
    try:
        yield made
    finally:
        made.remove()
        made.close()


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """What a planted link points at: a file (0644) and a directory with a file in it."""
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "canary").write_text("canary")
    os.chmod(tmp_path / "outside" / "canary", 0o644)
    return tmp_path / "outside"


def _here(parent: Path, private: PrivateDir) -> Path:
    return parent / private.name


def test_made_with_a_random_name_ours_and_0700(parent: Path, private: PrivateDir) -> None:
    st = os.lstat(_here(parent, private))
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o700
    assert private.name.startswith(f"leakhound-{os.getpid()}-") and len(private.name.split("-")) == 3
    assert (st.st_dev, st.st_ino) == (private.dev, private.ino)
    other = PrivateDir.make(os.open(parent, os.O_RDONLY | os.O_DIRECTORY))
    try:
        assert other.name != private.name
    finally:
        other.remove()
        other.close()


def test_create_never_follows_a_planted_link(parent: Path, private: PrivateDir, outside: Path) -> None:
    os.symlink(outside / "canary", _here(parent, private) / "ptrace-helper.pid")
    with pytest.raises(FileExistsError):
        private.create("ptrace-helper.pid", b"1234")
    assert not private.touch("ptrace-helper.pid")
    assert (outside / "canary").read_text() == "canary"


def test_replace_renames_over_a_planted_link(parent: Path, private: PrivateDir, outside: Path) -> None:
    here = _here(parent, private)
    os.symlink(outside / "canary", here / "names.request.json")
    os.symlink(outside / "canary", here / "names.request.json.tmp")  # the old fixed temp name
    private.replace("names.request.json", b'{"paths": []}')
    assert not os.path.islink(here / "names.request.json")
    assert (here / "names.request.json").read_bytes() == b'{"paths": []}'
    assert stat.S_IMODE(os.lstat(here / "names.request.json").st_mode) == 0o600
    assert (outside / "canary").read_text() == "canary"
    assert sorted(os.listdir(here)) == ["names.request.json", "names.request.json.tmp"]


@ROOT_ONLY
def test_files_and_the_directory_are_handed_over_by_descriptor(parent: Path, private: PrivateDir) -> None:
    private.create("request.json", b"{}", uid=65534)
    private.hand_over(65534)
    here = _here(parent, private)
    assert os.lstat(here).st_uid == 65534 and stat.S_IMODE(os.lstat(here).st_mode) == 0o700
    st = os.lstat(here / "request.json")
    assert st.st_uid == 65534 and stat.S_IMODE(st.st_mode) == 0o600


def test_reads_refuse_links_fifos_hard_links_and_oversize(parent: Path, private: PrivateDir, outside: Path) -> None:
    here = _here(parent, private)
    assert private.read("result.json", 100) is None
    os.symlink(outside / "canary", here / "started.json")
    os.mkfifo(here / "result.json")
    os.link(outside / "canary", here / "graph.json")  # (both under tmp_path: one filesystem)
    (here / "progress.json").write_bytes(b"x" * 101)
    with pytest.raises(UnsafeEntry) as link:
        private.read("started.json", 100)
    with pytest.raises(UnsafeEntry, match="FIFO"):
        private.read("result.json", 100)  # returns at once: never waits for a writer
    with pytest.raises(UnsafeEntry) as big:
        private.read("progress.json", 100)
    assert link.value.errno == errno.ELOOP and big.value.errno == errno.EFBIG
    with pytest.raises(UnsafeEntry, match="2 links"):
        private.read("graph.json", 100)
    assert private.read("progress.json", 101) == b"x" * 101


def test_removal_never_follows_links_and_leaves_nothing(parent: Path, private: PrivateDir, outside: Path) -> None:
    here = _here(parent, private)
    (here / "payload" / "sub").mkdir(parents=True)
    (here / "payload" / "sub" / "a.py").write_text("x")
    os.symlink(outside, here / "payload" / "link-to-dir")
    os.symlink(outside / "canary", here / "cancel")
    os.mkfifo(here / "result.json")
    assert private.remove()
    assert not os.path.lexists(here)
    assert sorted(os.listdir(outside)) == ["canary"] and (outside / "canary").read_text() == "canary"


def test_removal_leaves_a_directory_that_took_our_name(parent: Path, private: PrivateDir) -> None:
    here = _here(parent, private)
    os.rename(here, parent / "moved")
    here.mkdir()
    (here / "theirs").write_text("kept")
    assert private.remove()
    assert (here / "theirs").read_text() == "kept"
    assert os.listdir(parent / "moved") == []


@pytest.mark.parametrize("resolver", ["openat2", "walk"])
def test_a_path_in_another_root_follows_no_symlink(tmp_path: Path, resolver: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    if resolver == "walk":
        monkeypatch.setattr(private_dir, "_openat2", lambda root_fd, path: None)
    root = tmp_path / "root"
    (root / "tmp").mkdir(parents=True)
    (root / "var" / "tmp").mkdir(parents=True)
    (tmp_path / "host").mkdir()
    os.symlink(tmp_path / "host", root / "tmp" / "redirect")  # absolute: the host's, from here
    os.symlink("var", root / "link")
    fd = open_dir_in_root(str(root), "/var/tmp")
    try:
        assert os.fstat(fd).st_ino == os.lstat(root / "var" / "tmp").st_ino
    finally:
        os.close(fd)
    for path in ("/tmp/redirect", "/link/tmp"):
        with pytest.raises(UnsafeEntry):
            os.close(open_dir_in_root(str(root), path))
    if resolver == "walk":
        with pytest.raises(UnsafeEntry, match=r"\.\."):
            open_dir_in_root(str(root), "/tmp/../../host")
    else:  # openat2 keeps '..' inside the root
        fd = open_dir_in_root(str(root), "/tmp/../..")
        try:
            assert os.fstat(fd).st_ino == os.lstat(root).st_ino
        finally:
            os.close(fd)


def _channel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: dict[str, Any] | None = None) -> PrivateChannel:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    return PrivateChannel(uid=os.geteuid(), request=request or {"op": "snapshot", "timeout": 10})


def test_the_channel_fills_before_it_hands_over_and_says_tampering_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with _channel(tmp_path, monkeypatch) as channel:
        here = tmp_path / channel.private.name
        assert json.loads((here / "request.json").read_text())["op"] == "snapshot"
        assert (here / "boot.py").exists() and (here / "payload" / "VERSION").exists()
        assert not (here / "payload" / "agent.py").exists()
        (here / "result.json").write_text("[1, 2]")
        with pytest.raises(PrivateDirTampered, match="not the payload's JSON"):
            channel.read_json("result.json")
        os.unlink(here / "result.json")
        os.mkfifo(here / "result.json")
        with pytest.raises(PrivateDirTampered, match="FIFO"):
            channel.read_json("result.json")
    assert not here.exists()


def test_graph_bin_is_bounded_by_what_the_request_allowed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with _channel(tmp_path, monkeypatch, {"op": "snapshot", "max_graph_nodes": 2}) as channel:
        limit = 2 * GRAPH_BIN_BYTES_PER_NODE
        assert channel.graph_bin_limit == limit
        (tmp_path / channel.private.name / "graph.bin").write_bytes(b"\0" * (limit + 1))
        with pytest.raises(PrivateDirTampered, match="more than"):
            channel._read_graph({"graph": {"binary_file": "graph.bin"}})


def test_a_cancel_leakhound_did_not_ask_for_is_said_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cancelled = {"ok": False, "kind": "Cancelled", "reason": "cancel", "phase": "census"}
    with _channel(tmp_path, monkeypatch) as channel:
        with pytest.raises(PrivateDirTampered, match="did not ask for"):
            finish.wait_debugger(channel, os.getpid(), None, lambda: ({}, cancelled))  # type: ignore[arg-type]
        channel.request_cancel()
        assert (tmp_path / channel.private.name / "cancel").exists()
        assert finish.wait_debugger(channel, os.getpid(), None, lambda: ({}, cancelled))[1] is cancelled  # type: ignore[arg-type]


def test_the_helpers_sweep_removes_dead_directories_through_descriptors(tmp_path: Path, outside: Path) -> None:
    parent = tmp_path / "parent"
    parent.mkdir()
    dead = parent / "leakhound-999999999-abc"  # no such pid
    dead.mkdir()
    os.mkfifo(dead / stop.HELPER_FILE)  # must not block the (root) helper
    os.symlink(outside, dead / "payload")
    alive = parent / f"leakhound-{os.getpid()}-abc"
    alive.mkdir()
    fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert stop.sweep(fd) == [dead.name]
    finally:
        os.close(fd)
    assert sorted(os.listdir(parent)) == [alive.name]
    assert sorted(os.listdir(outside)) == ["canary"]


def test_remote_exec_writes_its_script_as_a_new_file(
    parent: Path, private: PrivateDir, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(No Python 3.14 here: /bin/true stands in for leakhound's own 3.14 interpreter.) A
    planted link under the script's name is never written through."""
    from leakhound.attach import remote_exec

    monkeypatch.setattr(remote_exec.sys, "version_info", (3, 14, 0))
    monkeypatch.setattr(remote_exec.sys, "executable", "/bin/true")
    from leakhound.attach.process import Target
    from leakhound.errors import AttachFailed

    target = Target(pid=os.getpid(), uid=os.geteuid(), exe="/bin/true", version=(3, 14), name="python",
                    cmdline="python")
    remote_exec.inject(target, "pass", private, "/nowhere", timeout=10, log=lambda _: None)
    assert (parent / private.name / "remote_exec_boot.py").read_text() == "pass\n"
    os.unlink(parent / private.name / "remote_exec_boot.py")
    os.symlink(outside / "canary", parent / private.name / "remote_exec_boot.py")
    with pytest.raises(AttachFailed, match="private directory"):
        remote_exec.inject(target, "pass", private, "/nowhere", timeout=10, log=lambda _: None)
    assert (outside / "canary").read_text() == "canary"


@pytest.mark.parametrize(("name", "text"), [("started.json", '{"main_thread_ms": "x"}'),
                                            ("progress.json", '{"phase": "walk", "done": "x"}'),
                                            ("result.json", "not json")])
def test_malformed_answers_are_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               name: str, text: str) -> None:
    with _channel(tmp_path, monkeypatch) as channel:
        here = tmp_path / channel.private.name
        (here / "started.json").write_text('{"main_thread_ms": 0.5}')
        (here / name).write_text(text)
        with pytest.raises(PrivateDirTampered, match=name):
            channel.wait(pid=os.getpid(), start_timeout=5, deadline=Deadline.fixed(5),
                         progress=lambda phase, done: None)


def test_a_document_replaced_while_it_is_opened_is_read_at_its_new_name(
        parent: Path, private: PrivateDir, monkeypatch: pytest.MonkeyPatch) -> None:
    """The payload renames a new document over the old one: opened just before, the old one
    has no link left. That is no tampering: it is opened again (progress.json, rewritten every
    second by the payload, was called tampered with twice in one CI run)."""
    here = _here(parent, private)
    (here / "progress.json").write_text('{"phase": "old"}')
    real_open = os.open
    replaced = []

    def open_then_replaced(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        fd = real_open(path, flags, *args, **kwargs)
        if path == "progress.json" and not replaced:
            (here / "progress.new").write_text('{"phase": "new"}')
            os.replace(here / "progress.new", here / "progress.json")
            replaced.append(True)
        return fd

    monkeypatch.setattr(os, "open", open_then_replaced)
    assert json.loads(private.read("progress.json", 1024) or b"") == {"phase": "new"}
    assert replaced


def test_a_document_replaced_just_after_its_look_is_read_as_it_was(
        parent: Path, private: PrivateDir, monkeypatch: pytest.MonkeyPatch) -> None:
    """Replaced after the one look at its links (the signal-storm CI run met it between two
    looks): the document as opened is read, its last link gone is no tampering."""
    here = _here(parent, private)
    (here / "progress.json").write_text('{"phase": "old"}')
    real_fstat = os.fstat
    replaced = []

    def fstat_then_replaced(fd: int) -> os.stat_result:
        st = real_fstat(fd)
        if not replaced:
            (here / "progress.new").write_text('{"phase": "new"}')
            os.replace(here / "progress.new", here / "progress.json")
            replaced.append(True)
        return st

    monkeypatch.setattr(os, "fstat", fstat_then_replaced)
    assert json.loads(private.read("progress.json", 1024) or b"") == {"phase": "old"}
    assert replaced
