"""The CPython interpreters installed here that targets may run on (pyenv's, and this one)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PYENV_VERSIONS = Path(os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))) / "versions"


def installed_pythons(minimum: tuple[int, int] = (3, 10)) -> dict[str, str]:
    """``{"3.12": path}`` per minor version at or above ``minimum``: pyenv's builds, else this
    interpreter for its own version."""
    found: dict[str, str] = {f"{sys.version_info[0]}.{sys.version_info[1]}": sys.executable}
    for python in sorted(PYENV_VERSIONS.glob("3.*/bin/python")):
        try:
            out = subprocess.run([str(python), "-c", "import sys; print(*sys.version_info[:2])"],
                                 capture_output=True, text=True, timeout=30).stdout.split()
        except (OSError, subprocess.SubprocessError):
            continue
        if len(out) == 2 and (int(out[0]), int(out[1])) >= minimum:
            found.setdefault(f"{out[0]}.{out[1]}", str(python))
    return dict(sorted(found.items(), key=lambda item: tuple(int(p) for p in item[0].split("."))))
