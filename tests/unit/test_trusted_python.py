"""The interpreter leakhound runs to compile the payload for a target on another CPython
(attach/trusted_python.py): only an ELF file that nobody but root or leakhound's user could
have placed or changed, found on leakhound's own filesystem, resolved before it is run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from leakhound.attach import payload_bytecode, trusted_python
from tests.pythons import installed_pythons

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
OWN = (sys.version_info[0], sys.version_info[1])
OTHER = next((tuple(int(p) for p in v.split(".")) for v in installed_pythons() if v != "{}.{}".format(*OWN)), None)


@pytest.fixture
def home_dir() -> Iterator[Path]:
    """A directory no one else can write to (under $HOME, not /tmp: /tmp is 1777), with a
    copy of this interpreter's ELF file as ``bin/python``."""
    made = Path(tempfile.mkdtemp(dir=os.path.expanduser("~"), prefix=".lh-trust-"))
    try:
        if not _dir_chain_trusted(made):
            pytest.skip(f"{made.parent} is writable by others here")
        (made / "bin").mkdir(mode=0o755)
        shutil.copy2(os.path.realpath(sys.executable), made / "bin" / "python")
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


def _dir_chain_trusted(path: Path) -> bool:
    probe = path / "probe"
    shutil.copy2(os.path.realpath(sys.executable), probe)
    try:
        return trusted_python.trusted(str(probe)) is not None
    finally:
        probe.unlink()


def test_an_interpreter_only_root_or_leakhounds_user_could_place_is_trusted_and_resolved(home_dir: Path) -> None:
    python = home_dir / "bin" / "python"
    assert trusted_python.trusted(str(python)) == str(python)
    link = home_dir / "bin" / "python3.99"
    link.symlink_to("python")
    assert trusted_python.trusted(str(link)) == str(python)  # what is run is the file, not the link


def test_a_directory_on_the_way_that_others_can_write_is_not_trusted(home_dir: Path) -> None:
    python = home_dir / "bin" / "python"
    for directory, mode in ((home_dir / "bin", 0o775), (home_dir / "bin", 0o757), (home_dir, 0o777)):
        os.chmod(directory, mode)
        try:
            assert trusted_python.trusted(str(python)) is None, oct(mode)
        finally:
            os.chmod(directory, 0o755 if directory.name == "bin" else 0o700)
    os.chmod(python, 0o775)
    assert trusted_python.trusted(str(python)) is None  # the file itself writable by its group


@ROOT_ONLY
def test_an_interpreter_or_directory_another_user_owns_is_not_trusted(home_dir: Path) -> None:
    python = home_dir / "bin" / "python"
    os.chown(python, 65534, 65534)
    assert trusted_python.trusted(str(python)) is None
    os.chown(python, 0, 0)
    os.chown(home_dir / "bin", 65534, 65534)
    assert trusted_python.trusted(str(python)) is None


def test_a_link_from_a_trusted_place_to_an_untrusted_file_is_not_trusted(home_dir: Path, tmp_path: Path) -> None:
    planted = tmp_path / "python"  # under /tmp (1777): anyone may have put it there
    shutil.copy2(home_dir / "bin" / "python", planted)
    link = home_dir / "bin" / "python3.98"
    link.symlink_to(planted)
    assert trusted_python.trusted(str(link)) is None


def test_a_script_is_not_an_interpreter(home_dir: Path) -> None:
    """pyenv's shims are shell scripts that choose an interpreter by the environment."""
    script = home_dir / "bin" / "python3.97"
    script.write_text("#!/bin/sh\nexec /usr/bin/env python3 \"$@\"\n")
    os.chmod(script, 0o755)
    assert trusted_python.trusted(str(script)) is None


def test_a_relative_path_entry_is_never_searched(monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative PATH entry names a directory by the current one: whoever owns that."""
    monkeypatch.setenv("PATH", "bin:.:/usr/bin")
    assert all(os.path.isabs(path) for path in trusted_python.candidates((3, 12)))


@pytest.mark.skipif(OTHER is None, reason="no CPython of another version installed")
def test_the_payload_is_compiled_by_a_trusted_interpreter_of_the_targets_version() -> None:
    assert OTHER is not None
    version = (OTHER[0], OTHER[1])
    source = str(payload_bytecode.__file__).rsplit("/attach/", 1)[0] + "/payload"
    boot = Path(source, "boot.py").read_bytes()
    made = payload_bytecode.foreign_bytecode(version, source, boot, "/x/boot.py", skip=("agent.",))
    assert made is not None, trusted_python.candidates(version)
    files, boot_pyc = made
    tag = f"cpython-{version[0]}{version[1]}"
    assert f"__pycache__/graph.{tag}.pyc" in files
    assert f"patches/__pycache__/__init__.{tag}.pyc" in files
    assert not any("agent." in name for name in files)
    assert boot_pyc[:4] == files[f"__pycache__/graph.{tag}.pyc"][:4] != payload_bytecode.importlib.util.MAGIC_NUMBER


def test_an_interpreter_that_says_it_is_another_version_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """The interpreter's name is only a guess: what it reports decides (here leakhound's own
    interpreter stands where a 3.99 was looked for)."""
    monkeypatch.setitem(trusted_python._found, (3, 99), os.path.realpath(sys.executable))
    source = str(payload_bytecode.__file__).rsplit("/attach/", 1)[0] + "/payload"
    assert payload_bytecode.foreign_bytecode((3, 99), source, b"", "/x/boot.py") is None


@pytest.mark.skipif(OTHER is None, reason="no CPython of another version installed")
def test_the_foreign_payload_is_compiled_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every request of a watch or a soak carries the same .pyc files: boot.pyc's code is named
    the same for every request (not by its directory), so the compiler runs once, not once
    a request (~0.1 s each)."""
    assert OTHER is not None
    version = (OTHER[0], OTHER[1])
    source = str(payload_bytecode.__file__).rsplit("/attach/", 1)[0] + "/payload"
    boot = Path(source, "boot.py").read_bytes()
    runs = []
    real_run = payload_bytecode.subprocess.run

    def counted(*args: object, **kwargs: object) -> object:
        runs.append(args)
        return real_run(*args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(payload_bytecode, "_foreign", {})
    monkeypatch.setattr(payload_bytecode.subprocess, "run", counted)
    made = [payload_bytecode.foreign_bytecode(version, source, boot, skip=("agent.",)) for _ in range(3)]
    assert made[0] is not None and made[0] is made[1] is made[2]
    assert len(runs) == 1
    assert payload_bytecode.BOOT_FILENAME.encode() in made[0][1]


def _has_docstrings(code: Any) -> bool:
    """Whether a module's code (or any code within) keeps a docstring: the text of sizes.py's."""
    for const in code.co_consts:
        if isinstance(const, str) and "How this process's allocators round a request" in const:
            return True
        if hasattr(const, "co_consts") and _has_docstrings(const):
            return True
    return False


def test_the_payload_sent_has_no_docstrings() -> None:
    """What a target keeps loaded after its first inspection is the payload's code: compiled
    without docstrings (the payload reads none), for leakhound's CPython as for another."""
    import marshal

    source = str(payload_bytecode.__file__).rsplit("/attach/", 1)[0] + "/payload"
    with open(Path(source, "sizes.py"), "rb") as fh:
        assert _has_docstrings(compile(fh.read(), "sizes.py", "exec"))  # the check sees them
    files = payload_bytecode.payload_bytecode(source, skip=("agent.",))
    tag = sys.implementation.cache_tag
    assert not _has_docstrings(marshal.loads(files[f"__pycache__/sizes.{tag}.pyc"][16:]))
    assert f"__pycache__/graph.{tag}.pyc" in files and not any("agent." in name for name in files)
    if OTHER is not None:
        made = payload_bytecode.foreign_bytecode((OTHER[0], OTHER[1]), source, b"", "/x/boot.py", skip=("agent.",))
        assert made is not None
        pyc = made[0][f"__pycache__/sizes.cpython-{OTHER[0]}{OTHER[1]}.pyc"]
        program = ("import marshal, sys\n"
                   "seen = [marshal.loads(sys.stdin.buffer.read()[16:])]; n = 0\n"
                   "while seen:\n"
                   " c = seen.pop()\n"
                   " n += sum(isinstance(k, str) and 'allocators round a request' in k for k in c.co_consts)\n"
                   " seen += [k for k in c.co_consts if hasattr(k, 'co_consts')]\n"
                   "print(n)")
        check = subprocess.run([trusted_python.find((OTHER[0], OTHER[1])) or "", "-I", "-c", program],
                               input=pyc, capture_output=True, timeout=60)
        assert check.stdout.strip() == b"0", check.stderr
