"""A CPython of a given version that leakhound may run itself: found on its own filesystem,
never the target's interpreter nor anything under the target's root.

leakhound runs as root against processes other users own, so an interpreter is trusted only
when nobody but root (or leakhound's own user) could have put it there or changed it: the
file, resolved through its symlinks, and every directory from ``/`` down to it are owned by
root or by leakhound's effective user and writable by no group or other user. The resolved
path is what is run (a symlink on the way is never followed again), in isolated mode (``-I``:
no environment variables, no user site, no current directory on the path), without site
(``-S``) and with an empty environment.

Used to compile the payload for a target whose CPython is not leakhound's
(payload_bytecode.foreign_bytecode): the target would otherwise compile it itself, ~2 MiB of
its memory at its peak.
"""

from __future__ import annotations

import glob
import os
import stat

# Searched after PATH: where system, pyenv, uv and manylinux-style installs put interpreters.
_WELL_KNOWN = ("/usr/local/bin", "/usr/bin", "/bin")
_GLOBS = (
    "{pyenv}/versions/{major}.{minor}.*/bin",
    "{home}/.local/share/uv/python/cpython-{major}.{minor}.*/bin",
    "/opt/python/cp{major}{minor}-cp{major}{minor}/bin",
    "/usr/local/python{major}.{minor}*/bin",
)

_found: dict[tuple[int, int], str | None] = {}


def trusted(path: str) -> str | None:
    """``path`` resolved, if it is a regular executable ELF file (not a script: pyenv's shims
    are shell scripts that pick an interpreter by the environment) that only root or
    leakhound's user can have placed or changed (see the module's doc), else None."""
    real = os.path.realpath(path)
    if not os.path.isabs(real) or real.startswith("/proc/"):
        return None
    allowed = {0, os.geteuid()}
    try:
        st = os.lstat(real)
        if not stat.S_ISREG(st.st_mode) or not st.st_mode & 0o111:
            return None
        if st.st_uid not in allowed or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return None
        directory = os.path.dirname(real)
        while True:
            st = os.lstat(directory)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid not in allowed:
                return None
            if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                return None
            if directory == "/":
                break
            directory = os.path.dirname(directory)
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            if os.read(fd, 4) != b"\x7fELF":
                return None
        finally:
            os.close(fd)
    except OSError:
        return None
    return real


def candidates(version: tuple[int, int]) -> list[str]:
    """Where a ``python3.X`` of ``version`` may be, in the order tried: PATH, the usual
    system directories, then pyenv's, uv's and manylinux's install trees (newest first)."""
    major, minor = version
    name = f"python{major}.{minor}"
    home = os.path.expanduser("~")
    pyenv = os.environ.get("PYENV_ROOT") or os.path.join(home, ".pyenv")
    dirs: list[str] = [d for d in os.environ.get("PATH", "").split(os.pathsep) if os.path.isabs(d)]
    dirs += _WELL_KNOWN
    for pattern in _GLOBS:
        dirs += sorted(glob.glob(pattern.format(pyenv=pyenv, home=home, major=major, minor=minor)), reverse=True)
    seen: set[str] = set()
    out = []
    for directory in dirs:
        path = os.path.join(directory, name)
        if path not in seen:
            seen.add(path)
            out.append(path)
    return out


def find(version: tuple[int, int]) -> str | None:
    """The first trusted interpreter named for ``version`` (resolved), else None; looked up
    once per leakhound process. Its version is not known until it is run: the caller checks
    what it reports."""
    if version not in _found:
        _found[version] = next((real for path in candidates(version) if (real := trusted(path))), None)
    return _found[version]
