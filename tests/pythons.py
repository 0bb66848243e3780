"""The CPython interpreters installed here that targets may run on (pyenv's, and this one)."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

PYENV_VERSIONS = Path(os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))) / "versions"


def installed_pythons(minimum: tuple[int, int] = (3, 10)) -> dict[str, str]:
    """``{"3.12": path}`` per minor version at or above ``minimum``: pyenv's builds, else this
    interpreter for its own version."""
    found: dict[str, str] = {f"{sys.version_info[0]}.{sys.version_info[1]}": sys.executable}
    for python, version in _pyenv_versions():
        if version >= minimum:
            found.setdefault(f"{version[0]}.{version[1]}", python)
    return dict(sorted(found.items(), key=lambda item: tuple(int(p) for p in item[0].split("."))))


@functools.cache
def _pyenv_versions() -> tuple[tuple[str, tuple[int, int]], ...]:
    """(path, (major, minor)) of each pyenv build that runs, asked once per test process: 22
    test modules ask at import, 178 interpreters started, 6.8 s of the fast tier's collection."""
    versions = []
    for python in sorted(PYENV_VERSIONS.glob("3.*/bin/python")):
        try:
            out = subprocess.run([str(python), "-c", "import sys; print(*sys.version_info[:2])"],
                                 capture_output=True, text=True, timeout=30).stdout.split()
        except (OSError, subprocess.SubprocessError):
            continue
        if len(out) == 2:
            versions.append((str(python), (int(out[0]), int(out[1]))))
    return tuple(versions)
