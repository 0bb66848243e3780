"""The payload's modules compiled for leakhound's own CPython, where its install has no valid
.pyc of them (an editable install, ``pip install --no-compile``, a source tree run with
PYTHONDONTWRITEBYTECODE): written into the private directory beside the sources.

Otherwise a target on the same CPython compiles the payload itself as it imports it. That runs
on the payload's thread, but each module's ``compile`` is one C call that holds the target's
GIL (tens of ms for the biggest), and it is ~2 MiB of the target's memory at its peak (the
parse trees), measured: importing the payload took a 3.11 target's RSS up 3.7 MiB from source,
1.6 MiB from .pyc files. A target on another CPython ignores them (another cache tag) and
compiles; leakhound never runs the target's interpreter to compile for it.

Compiled here once per leakhound process (``watch`` attaches again and again); a module whose
install has a valid .pyc is left to it.
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import sys

_compiled: dict[tuple[str, int, int], bytes] = {}


def _header(st: os.stat_result) -> bytes:
    """A timestamp .pyc's header (PEP 552): what the importer checks against the source."""
    return (importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little")
            + (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little") + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little"))


def missing_bytecode(source: str, *, skip: tuple[str, ...] = ()) -> dict[str, bytes]:
    """{path relative to ``source`` of a .pyc: its bytes} for each module under ``source``
    whose own __pycache__ lacks a valid one for this interpreter (names starting with one of
    ``skip`` left out, as the copy leaves them)."""
    tag = sys.implementation.cache_tag
    if tag is None:
        return {}
    out: dict[str, bytes] = {}
    for directory, subdirs, names in os.walk(source):
        subdirs[:] = sorted(d for d in subdirs if d != "__pycache__" and not d.startswith(skip))
        for name in sorted(names):
            if not name.endswith(".py") or name.startswith(skip):
                continue
            path = os.path.join(directory, name)
            st = os.stat(path, follow_symlinks=False)
            header = _header(st)
            cached = os.path.join(directory, "__pycache__", f"{name[:-3]}.{tag}.pyc")
            try:
                with open(cached, "rb") as fh:
                    if fh.read(len(header)) == header:
                        continue
            except OSError:
                pass
            key = (path, st.st_mtime_ns, st.st_size)
            data = _compiled.get(key)
            if data is None:
                with open(path, "rb") as fh:
                    code = compile(fh.read(), path, "exec", dont_inherit=True, optimize=0)
                data = _compiled[key] = header + marshal.dumps(code)
            out[os.path.relpath(cached, source)] = data
    return out


def boot_bytecode(source: bytes, filename: str) -> bytes:
    """boot.py compiled for leakhound's own CPython as ``filename`` (where the target will
    read it), in a .pyc's layout (16-byte header, then the marshalled code): the bootstrap
    (channel.bootstrap_code) runs it where the magic number is the target's own, and
    compiles boot.py there otherwise. Compiling boot.py in the target cost it ~0.5-1 MiB of
    RSS at every inspection (the parser's memory, on its main thread), measured."""
    code = compile(source, filename, "exec", dont_inherit=True, optimize=0)
    return importlib.util.MAGIC_NUMBER + bytes(12) + marshal.dumps(code)
