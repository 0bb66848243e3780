"""boot.py, the bootstrap the debugger runs in the target: it loads the payload once per
process and answers a payload it cannot load with a ``LoadError`` result the CLI can read.
Each test runs the bootstrap in a fresh interpreter (it loads the payload into that process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from leakhound.attach.channel import PrivateChannel
from tests.pythons import installed_pythons

# The bootstrap as the debugger runs it, then the payload's thread waited for.
RUN_BOOT = """
import sys, threading
{setup}
exec({bootstrap!r})
for thread in threading.enumerate():
    if thread.name == "leakhound-payload":
        thread.join(60)
"""


@pytest.fixture
def channel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PrivateChannel]:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    with PrivateChannel(uid=os.geteuid(), request={"op": "ping", "timeout": 10}) as made:
        yield made


def _boot(channel: PrivateChannel, setup: str = "", python: str = sys.executable) -> dict[str, object]:
    script = RUN_BOOT.format(setup=textwrap.dedent(setup), bootstrap=channel.bootstrap_code())
    subprocess.run([python, "-c", script], check=True, timeout=60)
    result = channel.read_json("result.json")
    assert result is not None
    return result


def _recording_compile(compiled: Path) -> str:
    """Set-up for _boot: every compile() in the target appends its file name to ``compiled``."""
    return f"""
        import builtins
        _compile = builtins.compile
        def compile(source, filename, *args, **kwargs):
            with open({str(compiled)!r}, "a") as fh:
                fh.write(str(filename) + "\\n")
            return _compile(source, filename, *args, **kwargs)
        builtins.compile = compile
    """


def _compiled_names(compiled: Path) -> list[str]:
    return [Path(line).name for line in compiled.read_text().splitlines()] if compiled.exists() else []


def test_a_payload_that_cannot_load_is_a_load_error_in_json(channel: PrivateChannel) -> None:
    os.unlink(channel.dir / "payload" / "VERSION")
    result = _boot(channel)
    assert (result["ok"], result["kind"]) == (False, "LoadError")
    assert str(result["error"]).startswith("FileNotFoundError(")


def test_a_free_threaded_interpreter_is_answered_unsupported_and_loads_nothing(channel: PrivateChannel,
                                                                              tmp_path: Path) -> None:
    """A free-threaded build (3.13t: "t" in sys.abiflags) has another object header and no
    GIL to pause under: the bootstrap loads none of the payload (leakhound refuses such a
    process before attaching; this is the last word), and the CLI reads an Unsupported result.
    No 3.13t is to be had here: this interpreter is told it is one."""
    loaded = tmp_path / "loaded.json"
    result = _boot(channel, setup=f"""
        sys.abiflags = "t"
        import atexit, json
        atexit.register(lambda: open({str(loaded)!r}, "w").write(json.dumps(
            sorted(m for m in sys.modules if m.startswith("_leakhound_payload")))))
    """)
    assert (result["ok"], result["kind"]) == (False, "Unsupported")
    assert "free-threaded CPython" in str(result["error"])
    assert json.loads(loaded.read_text()) == ["_leakhound_payload.fork_guard"]  # (registered before, by design)


def test_a_child_forked_before_its_parent_imported_the_runner_loads_the_payload_again(
        channel: PrivateChannel) -> None:
    # What a child forked mid-load inherits: the package and a half-run submodule from its
    # parent's loading thread, no runner yet, the parent's pid as the loader's.
    half_loaded = f"""
    import types
    package = types.ModuleType("_leakhound_payload")
    package.__payload_version__ = {(channel.dir / "payload" / "VERSION").read_text()!r}
    package.__payload_loading_pid__ = 1
    sys.modules["_leakhound_payload"] = package
    sys.modules["_leakhound_payload.wire"] = types.ModuleType("_leakhound_payload.wire")
    """
    result = _boot(channel, half_loaded)
    assert result["ok"] is True, json.dumps(result)


def test_a_target_on_leakhounds_cpython_compiles_none_of_the_payload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the install has no valid .pyc (here: a copy of the payload without them),
    leakhound compiles them into the private directory: the target's import compiles nothing
    of the payload (compiling holds its GIL for each module, and ~2 MiB of its memory)."""
    import shutil

    from leakhound.attach import channel as channel_module

    source = tmp_path / "payload"
    shutil.copytree(channel_module.PAYLOAD_SOURCE, source, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(channel_module, "PAYLOAD_SOURCE", source)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    compiled = tmp_path / "compiled.txt"
    setup = _recording_compile(compiled)
    with PrivateChannel(uid=os.geteuid(), request={"op": "ping", "timeout": 10}) as made:
        pycache = Path(f"/proc/self/fd/{made.private.fd}") / "payload" / "__pycache__"
        assert (pycache / f"graph.{sys.implementation.cache_tag}.pyc").exists()
        result = _boot(made, setup)
    assert result.get("ok") is True, result
    names = _compiled_names(compiled)
    # boot.py comes compiled too (boot.pyc: its parser's memory was ~0.5-1 MiB of the
    # target's RSS at every inspection); the fork guard is compiled by boot.py, by design
    assert set(names) <= {"fork_guard.py"}, names


OTHER_PYTHONS = {v: p for v, p in installed_pythons().items() if v != "{}.{}".format(*sys.version_info[:2])}


@pytest.mark.parametrize("version", sorted(OTHER_PYTHONS) or [pytest.param("none", marks=pytest.mark.skip(
    reason="no CPython of another version installed"))])
def test_a_target_on_another_cpython_compiles_none_of_the_payload(
    version: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """For a target on another CPython the payload and boot.py are compiled by a trusted
    interpreter of its version (trusted_python: here pyenv's, root's own): measured on a 3.12
    target of 5M objects, VmHWM +6.2 MiB when it compiled them, +4.4 MiB with the .pyc."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    compiled = tmp_path / "compiled.txt"
    major, minor = (int(part) for part in version.split("."))
    with PrivateChannel(uid=os.geteuid(), request={"op": "ping", "timeout": 10}, version=(major, minor)) as made:
        pycache = Path(f"/proc/self/fd/{made.private.fd}") / "payload" / "__pycache__"
        assert (pycache / f"graph.cpython-{major}{minor}.pyc").exists()
        result = _boot(made, _recording_compile(compiled), python=OTHER_PYTHONS[version])
    assert result.get("ok") is True, result
    names = _compiled_names(compiled)
    assert set(names) <= {"fork_guard.py"}, names


def test_a_target_on_another_cpython_compiles_boot_py(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """boot.pyc is leakhound's CPython's: a target whose magic number is another's (here:
    the file's made another's) compiles boot.py, and the request is answered all the same."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    compiled = tmp_path / "compiled.txt"
    setup = _recording_compile(compiled)
    with PrivateChannel(uid=os.geteuid(), request={"op": "ping", "timeout": 10}) as made:
        boot = Path(f"/proc/self/fd/{made.private.fd}") / "boot.pyc"
        data = boot.read_bytes()
        boot.write_bytes(bytes([data[0] ^ 0xFF]) + data[1:])  # another version's magic number
        result = _boot(made, setup)
    assert result.get("ok") is True, result
    assert "boot.py" in _compiled_names(compiled)


# Set-up for _boot: a page mapped as the ptrace method maps its bootstrap's, listed in sys as
# its first statement lists it (attach/ptrace/stop.py); at exit, whether it is still mapped.
_LISTED_PAGE = """
    import atexit, ctypes
    _libc = ctypes.CDLL(None)
    _libc.mmap.restype = ctypes.c_void_p
    _libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
    _page = _libc.mmap(None, 8192, 3, 0x22, -1, 0)
    sys.__dict__.setdefault({pages!r}, []).append((_page, 8192))
    def _report():
        spans = [tuple(int(x, 16) for x in line.split()[0].split("-")) for line in open("/proc/self/maps")]
        with open({out!r}, "w") as fh:
            fh.write(repr((any(lo <= _page < hi for lo, hi in spans), {pages!r} in sys.__dict__)))
    atexit.register(_report)
    {after}
"""


def test_a_listed_bootstrap_page_is_unmapped_by_the_payload_without_ctypes(
        channel: PrivateChannel, tmp_path: Path) -> None:
    """The payload's thread unmaps the pages through its extension (_libc.c): with ctypes
    made unimportable once the page is mapped, the page is gone all the same."""
    from leakhound.payload import wire

    out = tmp_path / "page.txt"
    result = _boot(channel, _LISTED_PAGE.format(pages=wire.BOOTSTRAP_PAGES, out=str(out),
                                                after='sys.modules["ctypes"] = None'))
    assert result.get("ok") is True, result
    assert out.read_text() == "(False, False)"  # not mapped, nothing left listed


def test_a_listed_bootstrap_page_is_unmapped_when_the_payload_cannot_start(
        channel: PrivateChannel, tmp_path: Path) -> None:
    """Its directory gone (the CLI gave up before the main thread ran the bootstrap): the
    bootstrap unmaps the listed pages itself, with ctypes."""
    from leakhound.payload import wire

    out = tmp_path / "page.txt"
    os.unlink(channel.dir / "boot.pyc")
    os.unlink(channel.dir / "boot.py")
    script = RUN_BOOT.format(setup=textwrap.dedent(_LISTED_PAGE.format(
        pages=wire.BOOTSTRAP_PAGES, out=str(out), after="")), bootstrap=channel.bootstrap_code())
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    assert out.read_text() == "(False, False)"


@pytest.mark.parametrize("extension", [True, False], ids=["payload-extension-loaded", "no-payload-loaded"])
def test_a_bootstrap_meant_for_another_process_only_takes_its_page_back(
        channel: PrivateChannel, tmp_path: Path, extension: bool) -> None:
    """A child forked while the bootstrap was queued in its parent runs it too (a pending call
    is memory): there it loads nothing, starts no thread and writes nothing into the request's
    directory. It unmaps its copy of the page through the payload's extension where the parent
    had loaded it; else the page stays listed for the child's own first inspection (no ctypes
    imported into a child)."""
    from leakhound.payload import _walk, wire

    out = tmp_path / "page.txt"
    listed = textwrap.dedent(_LISTED_PAGE.format(pages=wire.BOOTSTRAP_PAGES, out=str(out), after=""))
    loaded = tmp_path / "loaded.txt"
    setup = listed + textwrap.dedent("""
        import importlib.util
        if {extension!r}:
            _spec = importlib.util.spec_from_file_location("_leakhound_payload._walk", {so!r})
            sys.modules["_leakhound_payload._walk"] = importlib.util.module_from_spec(_spec)
            _spec.loader.exec_module(sys.modules["_leakhound_payload._walk"])
        _before = set(sys.modules)
        def _loaded():
            with open({loaded!r}, "w") as fh:
                fh.write(repr(sorted(set(sys.modules) - _before)))
        atexit.register(_loaded)
    """).format(extension=extension, so=_walk.__file__, loaded=str(loaded))
    script = RUN_BOOT.format(setup=setup, bootstrap=channel.bootstrap_code(os.getpid()))
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    assert out.read_text() == ("(False, False)" if extension else "(True, True)")  # (mapped, listed)
    assert loaded.read_text() == "[]"  # nothing imported by the bootstrap
    assert channel.read_json("started.json") is None and channel.read_json("result.json") is None


def test_the_fixes_are_imported_by_the_first_patch_request_from_its_own_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The payload loads without its fixes (patches, and the ``inspect`` module they import:
    ~1 MiB of a target's memory no inspection needs). A patch request after an inspection
    imports them from its own private directory: the first request's is gone by then."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    script = ["import sys, threading, json"]
    docs = []
    with PrivateChannel(uid=os.geteuid(), request={"op": "ping", "timeout": 10}) as first:
        script.append(f"exec({first.bootstrap_code()!r})")
        script.append("[t.join(60) for t in threading.enumerate() if t.name == 'leakhound-payload']")
        script.append("print(json.dumps(sorted(m for m in sys.modules if 'patches' in m or m == 'inspect')))")
        first_dir = first.dir
        with PrivateChannel(uid=os.geteuid(), request={"op": "patch", "action": "status", "fixes": ["trim"],
                                                       "timeout": 10}) as second:
            # the first request's directory gone between the two, as after an inspection
            # (moved away: leakhound reads its answer through the directory's descriptor)
            script.insert(3, f"__import__('os').rename({str(first_dir)!r}, {str(first_dir) + '.gone'!r})")
            script.append(f"exec({second.bootstrap_code()!r})")
            script.append("[t.join(60) for t in threading.enumerate() if t.name == 'leakhound-payload']")
            done = subprocess.run([sys.executable, "-c", "\n".join(script)], capture_output=True, text=True,
                                  timeout=60, check=True)
            docs = [first.read_json("result.json"), second.read_json("result.json")]
            os.rename(str(first_dir) + ".gone", first_dir)
    assert docs[0] is not None and docs[0].get("ok") is True, docs[0]
    assert json.loads(done.stdout.splitlines()[0]) == []  # nothing of the fixes after an inspection
    assert docs[1] is not None and docs[1].get("ok") is True, docs[1]
    assert [r.get("fix") for r in docs[1]["results"]] == ["trim"], docs[1]


_INTERRUPTED_BOOT = """
import builtins, json, sys, time, _signal
_open = builtins.open
def open(name, *args, **kwargs):
    if str(name).endswith("boot.pyc"):  # as if a signal's handler raised right there
        builtins.open = _open
        raise KeyboardInterrupt("during the bootstrap")
    return _open(name, *args, **kwargs)
builtins.open = open
exec({bootstrap!r})
try:
    for _ in range(300):
        time.sleep(0.01)  # (a sleep: the handed-back signal ends it with EINTR, PEP 475)
    out = {{"raised": None}}
except KeyboardInterrupt as exc:
    out = {{"raised": str(exc), "default_back": _signal.getsignal({spare}) == _signal.SIG_DFL}}
print(json.dumps(out))
"""


@pytest.mark.parametrize("version", list(installed_pythons()))
def test_a_keyboardinterrupt_raised_in_the_bootstrap_is_handed_back_to_the_main_frame(
        channel: PrivateChannel, version: str, tmp_path: Path) -> None:
    # A signal's handler that raised on the main thread while the bootstrap ran there: the
    # bootstrap's own except used to swallow it (a Ctrl-C lost; a SystemExit not obeyed).
    from leakhound.attach.bootstrap_page import HANDBACK_SIGNAL

    script = tmp_path / "worker.py"  # (a file: its frames are told from the bootstrap's "<string>")
    script.write_text(_INTERRUPTED_BOOT.format(bootstrap=channel.bootstrap_code(), spare=HANDBACK_SIGNAL))
    done = subprocess.run([installed_pythons()[version], str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and not done.stderr, done.stderr
    assert json.loads(done.stdout) == {"raised": "during the bootstrap", "default_back": True}
