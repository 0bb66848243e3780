"""The CPython version read from ELF files (attach/elf.py): the target's files are hostile
input, so a malformed one is "no version" (NotPython), never a traceback or a large read; and
remote-exec never runs the target's interpreter."""

from __future__ import annotations

import os
import random
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from leakhound.attach import elf, remote_exec
from leakhound.attach.private_dir import PrivateDir
from leakhound.attach.process import Target
from leakhound.errors import MethodUnavailable

STATIC_PYTHON = "/usr/bin/python3.11"  # Debian's: libpython linked in, stripped, non-PIE


def _libpythons() -> dict[str, str]:
    root = Path(os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))) / "versions"
    found = {}
    for lib in sorted(root.glob("3.*/lib/libpython3.*.so.1.0")):
        version = lib.name[len("libpython"):].split(".so")[0].rstrip("m")
        found[version] = str(lib)
    return found


LIBPYTHONS = _libpythons()


@pytest.mark.parametrize("version", sorted(LIBPYTHONS))
def test_libpython_version(version: str) -> None:
    major, minor = (int(part) for part in version.split("."))
    assert elf.python_version(elf.ElfFile(LIBPYTHONS[version])) == (major, minor)


@pytest.mark.skipif(not os.path.exists(STATIC_PYTHON), reason="needs Debian's python3.11")
def test_static_build_version_from_py_version_and_from_py_getversion() -> None:
    binary = elf.ElfFile(STATIC_PYTHON)
    assert elf.python_version(binary) == (3, 11)
    del binary.objects["Py_Version"]  # as a build before 3.11: Py_GetVersion's PY_VERSION
    assert elf.python_version(binary) == (3, 11)


def test_not_python() -> None:
    assert elf.python_version(elf.ElfFile("/bin/sleep")) is None


def _header(**fields: int) -> bytes:
    values = {"type": elf.ET_DYN, "machine": elf.EM_X86_64, "phoff": 64, "shoff": 0, "phentsize": 56,
              "phnum": 1, "shentsize": 64, "shnum": 0}
    values.update(fields)
    ident = b"\x7fELF\x02\x01\x01" + b"\0" * 9
    return struct.pack("<16sHHIQQQIHHHHHH", ident, values["type"], values["machine"], 1, 0, values["phoff"],
                       values["shoff"], 0, 64, values["phentsize"], values["phnum"], values["shentsize"],
                       values["shnum"], 0)


def _load(offset: int = 0, filesz: int = 0x1000) -> bytes:
    return struct.pack("<IIQQQQQQ", elf.PT_LOAD, 5, offset, 0, 0, filesz, filesz, 0x1000)


MALFORMED = {
    "empty": b"",
    "text": b"#!/bin/sh\nid > /tmp/x\n",
    "truncated header": _header()[:40],
    "32-bit": b"\x7fELF\x01\x01" + b"\0" * 58,
    "program headers past the end": _header(phoff=1 << 40),
    "65535 program headers of 65535 bytes": _header(phentsize=65535, phnum=65535),
    "65535 program headers, file too short": _header(phnum=65535),
    "no loadable segment": _header(phnum=0),
    "sections past the end": _header(shoff=1 << 50, shnum=100) + _load(),
    "sections of an odd size": _header(shoff=120, shnum=3, shentsize=4096) + _load(),
}


def _symtab_of_a_terabyte() -> bytes:
    """A .symtab claiming 1 TB, its string table 1 TB too."""
    head = _header(shoff=120, shnum=2) + _load()
    symtab = struct.pack("<IIQQQQIIQQ", 0, elf.SHT_SYMTAB, 0, 0, 0, 1 << 40, 1, 0, 8, 24)
    strtab = struct.pack("<IIQQQQIIQQ", 0, 3, 0, 0, 0, 1 << 40, 0, 0, 1, 0)
    return head + symtab + strtab


MALFORMED["a symbol table of a terabyte"] = _symtab_of_a_terabyte()


@pytest.mark.parametrize("content", list(MALFORMED.values()), ids=list(MALFORMED))
def test_malformed_files_are_not_python(content: bytes, tmp_path: Path) -> None:
    path = tmp_path / "python"
    path.write_bytes(content)
    with pytest.raises(elf.ElfError):
        elf.ElfFile(str(path))


def test_random_corruption_of_a_real_libpython_never_raises_anything_else(tmp_path: Path) -> None:
    """Bytes of the headers and tables flipped at random: an ElfError, a version or None."""
    source = LIBPYTHONS.get("3.10") or STATIC_PYTHON
    if not os.path.exists(source):
        pytest.skip("no CPython ELF file here")
    original = Path(source).read_bytes()
    shoff = struct.unpack_from("<Q", original, 0x28)[0]
    rng = random.Random(23)
    path = tmp_path / "libpython"
    for _ in range(40):
        data = bytearray(original)
        for _ in range(8):
            at = rng.choice([rng.randrange(0, 64), rng.randrange(64, 64 + 56 * 12),
                             rng.randrange(shoff, min(len(data), shoff + 64 * 40))])
            data[at] = rng.randrange(256)
        path.write_bytes(data)
        try:
            version = elf.python_version(elf.ElfFile(str(path)))
        except elf.ElfError:
            continue
        assert version is None or version[0] == 3


def test_a_fifo_is_not_opened_for_reading(tmp_path: Path) -> None:
    fifo = tmp_path / "libpython3.11.so.1.0"
    os.mkfifo(fifo)
    with pytest.raises(elf.ElfError):
        elf.ElfFile(str(fifo))


def _target(version: tuple[int, int]) -> Target:
    return Target(pid=os.getpid(), uid=os.geteuid(), exe="/home/user/python", version=version, name="python",
                  cmdline="")


def test_remote_exec_never_runs_the_targets_interpreter(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    ran: list[list[str]] = []

    def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        ran.append(argv)
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(subprocess, "run", run)
    ours = sys.version_info
    private = PrivateDir.make(os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY))
    try:
        monkeypatch.setattr(remote_exec.sys, "version_info", (3, 14, 0))
        remote_exec.inject(_target((3, 14)), "pass", private, "/nowhere", timeout=5, log=lambda _: None)
        assert ran and ran[0][0] == sys.executable and "/home/user/python" not in ran[0]
        monkeypatch.setattr(remote_exec.sys, "version_info", ours)
        assert not remote_exec.available(_target((3, 14)))
        with pytest.raises(MethodUnavailable, match="leakhound's own interpreter"):
            remote_exec.inject(_target((3, 14)), "pass", private, "/nowhere", timeout=5, log=lambda _: None)
    finally:
        private.remove()
        private.close()
    assert len(ran) == 1


def test_a_file_read_again_is_not_parsed_again_unless_it_changed(tmp_path: Path) -> None:
    """A ptrace request reads the target's executable or libpython and libc: their tables
    are kept by inode and change time, so watch's samples do not parse them each time; a
    file changed since (or too recently for its change time to tell) is read afresh."""
    settled = os.path.realpath(sys.executable)
    first, again = elf.ElfFile(settled), elf.ElfFile(settled)
    assert again.functions is first.functions and again.starts is first.starts
    assert elf.ElfFile(settled, exported_only=True).functions is not first.functions
    copy = tmp_path / "python"
    copy.write_bytes(Path(settled).read_bytes())
    fresh = elf.ElfFile(str(copy))
    assert fresh.functions == first.functions and fresh.functions is not first.functions
    libc = next(p for p in ("/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6")
                if os.path.exists(p))
    with open(copy, "r+b") as fh:  # the same inode, another file's bytes
        fh.truncate(0)
        fh.write(Path(libc).read_bytes())
    assert "malloc_trim" in elf.ElfFile(str(copy)).functions
