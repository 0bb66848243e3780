"""The payload's modules compiled for the target's CPython, without docstrings (``OPTIMIZE``),
written into the private directory beside the sources: the target neither compiles the
payload nor loads an install's .pyc of it with its docstrings.

A target that compiles the payload itself does it on the payload's thread, but each module's
``compile`` is one C call that holds the target's GIL (tens of ms for the biggest), and it is
~2 MiB of the target's memory at its peak (the parse trees), measured: importing the payload
took a 3.11 target's RSS up 3.7 MiB from source, 1.6 MiB from .pyc files. The code it keeps
loaded after its first inspection is what the .pyc files hold: without docstrings, ~13% less
on 3.11 (752 -> 651 KB of code objects, tracemalloc).

For a target on leakhound's own CPython they are compiled here. A target on another CPython
ignores those (another cache tag and magic number): for it the payload and boot.py are
compiled by a trusted interpreter of the target's version found on leakhound's own
filesystem (trusted_python), never the target's, with ``-X no_debug_ranges`` too; where there
is none, the target compiles them as before. Measured on a 3.12 target of 5M objects: VmHWM
+6.2 MiB compiling, +4.8 MiB with the .pyc files (1.23% -> 0.95% of its RSS).

Compiled once per leakhound process (``watch`` attaches again and again).
"""

from __future__ import annotations

import base64
import importlib.util
import json
import marshal
import os
import re
import subprocess
import sys

from leakhound.attach import trusted_python

# The file name boot.pyc's code carries (what a traceback through it shows): one name for
# every request, not the request's directory, so that a foreign target's boot.pyc is compiled
# once per leakhound process (a subprocess of ~0.1 s each request before: watch asks every
# sample). In angle brackets: linecache reads no file for it.
BOOT_FILENAME = "<leakhound payload boot.py>"
_compiled: dict[tuple[str, int, int], bytes] = {}
# The payload's code carries no docstrings (the payload reads none and asserts nothing): the
# code a target keeps loaded after its first inspection is ~0.1 MiB (13%) smaller on 3.11.
OPTIMIZE = 2
# (interpreter, version, the sources' keys) -> (the .pyc files, boot.pyc)
_foreign: dict[tuple[str, tuple[int, int], tuple[tuple[str, int, int], ...], str], tuple[dict[str, bytes], bytes]] = {}
FOREIGN_TIMEOUT = 20.0
FOREIGN_OUTPUT_LIMIT = 64 << 20  # far more than the payload's .pyc files (~1 MB)

# Run by the trusted interpreter (python -I -S -c): reads the sources (and OPTIMIZE) as JSON on stdin, writes
# each compiled in a timestamp .pyc's layout (PEP 552), base64, as JSON on stdout.
_COMPILER = r"""
import base64, importlib.util, json, marshal, sys
req = json.load(sys.stdin)
magic = importlib.util.MAGIC_NUMBER
def pyc(text, filename, header):
    code = compile(text, filename, "exec", dont_inherit=True, optimize=req["optimize"])
    return base64.b64encode(header + marshal.dumps(code)).decode()
out = {"version": list(sys.version_info[:2]), "tag": sys.implementation.cache_tag,
       "files": [pyc(text, filename, magic + bytes(4) + (mtime & 0xFFFFFFFF).to_bytes(4, "little")
                     + (size & 0xFFFFFFFF).to_bytes(4, "little")) for filename, mtime, size, text in req["modules"]],
       "boot": pyc(req["boot"][1], req["boot"][0], magic + bytes(12))}
json.dump(out, sys.stdout)
"""


def _header(st: os.stat_result) -> bytes:
    """A timestamp .pyc's header (PEP 552): what the importer checks against the source."""
    return (importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little")
            + (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little") + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little"))


def _modules(source: str, skip: tuple[str, ...]) -> list[tuple[str, str, os.stat_result]]:
    """(path relative to ``source``, path, stat) of each module under ``source``, in order."""
    out = []
    for directory, subdirs, names in os.walk(source):
        subdirs[:] = sorted(d for d in subdirs if d != "__pycache__" and not d.startswith(skip))
        for name in sorted(names):
            if name.endswith(".py") and not name.startswith(skip):
                path = os.path.join(directory, name)
                out.append((os.path.relpath(path, source), path, os.stat(path, follow_symlinks=False)))
    return out


def _pyc_name(rel: str, tag: str) -> str:
    """``a/b.py`` -> ``a/__pycache__/b.<tag>.pyc``."""
    directory, name = os.path.split(rel)
    return os.path.join(directory, "__pycache__", f"{name[:-3]}.{tag}.pyc")


def foreign_bytecode(version: tuple[int, int], source: str, boot: bytes, boot_filename: str = BOOT_FILENAME, *,
                     skip: tuple[str, ...] = ()) -> tuple[dict[str, bytes], bytes] | None:
    """For a target on CPython ``version`` (not leakhound's): ({path relative to ``source``
    of a .pyc: its bytes} for every module under ``source``, boot.pyc's bytes), compiled by a
    trusted interpreter of that version (trusted_python); None where there is none, it
    fails, or it reports another version."""
    interpreter = trusted_python.find(version)
    if interpreter is None:
        return None
    modules = _modules(source, skip)
    key = (interpreter, version, tuple((path, st.st_mtime_ns, st.st_size) for _, path, st in modules), boot_filename)
    if key in _foreign:
        return _foreign[key]
    texts = []
    for _, path, st in modules:
        with open(path, "rb") as fh:
            texts.append([path, int(st.st_mtime), st.st_size, fh.read().decode("utf-8")])
    request = json.dumps({"modules": texts, "boot": [boot_filename, boot.decode("utf-8")],
                          "optimize": OPTIMIZE}).encode()
    try:
        # -X no_debug_ranges (3.11+; an older one keeps it in sys._xoptions): no column
        # positions in the code's location table, ~5% of it
        done = subprocess.run([interpreter, "-I", "-S", "-B", "-X", "utf8", "-X", "no_debug_ranges", "-c", _COMPILER],
                              input=request,
                              capture_output=True, env={}, cwd="/", timeout=FOREIGN_TIMEOUT, check=False)
        if done.returncode != 0 or len(done.stdout) > FOREIGN_OUTPUT_LIMIT:
            return None
        answer = json.loads(done.stdout)
        tag = answer["tag"]
        if answer["version"] != list(version) or not isinstance(tag, str) or not re.fullmatch(r"cpython-3\d+", tag):
            return None
        files = {_pyc_name(rel, tag): base64.b64decode(data, validate=True)
                 for (rel, _, _), data in zip(modules, answer["files"], strict=True)}
        made = files, base64.b64decode(answer["boot"], validate=True)
    except (OSError, subprocess.SubprocessError, ValueError, KeyError, TypeError):
        return None
    _foreign[key] = made
    return made


def payload_bytecode(source: str, *, skip: tuple[str, ...] = ()) -> dict[str, bytes]:
    """{path relative to ``source`` of a .pyc: its bytes} for each module under ``source``
    (names starting with one of ``skip`` left out, as the copy leaves them), compiled for this
    interpreter without docstrings (``OPTIMIZE``), in place of any its install has."""
    tag = sys.implementation.cache_tag
    if tag is None:
        return {}
    out: dict[str, bytes] = {}
    for rel, path, st in _modules(source, skip):
        key = (path, st.st_mtime_ns, st.st_size)
        data = _compiled.get(key)
        if data is None:
            with open(path, "rb") as fh:
                code = compile(fh.read(), path, "exec", dont_inherit=True, optimize=OPTIMIZE)
            data = _compiled[key] = _header(st) + marshal.dumps(code)
        out[_pyc_name(rel, tag)] = data
    return out


def boot_bytecode(source: bytes, filename: str = BOOT_FILENAME) -> bytes:
    """boot.py compiled for leakhound's own CPython as ``filename``, in a .pyc's layout
    (16-byte header, then the marshalled code): the bootstrap (channel.bootstrap_code) runs
    it where the magic number is the target's own, and compiles boot.py there otherwise.
    Compiling boot.py in the target cost it ~0.5-1 MiB of RSS at every inspection (the
    parser's memory, on its main thread), measured."""
    code = compile(source, filename, "exec", dont_inherit=True, optimize=OPTIMIZE)
    return importlib.util.MAGIC_NUMBER + bytes(12) + marshal.dumps(code)
