"""Target venvs with numpy, pandas, Pillow (and torch on 3.11) for the native-buffer tests.

``native_python(version)`` builds (once, under a lock) a venv for the pyenv CPython ``version``
holding those packages and not leakhound, cached under ``~/.cache/leakhound/native-pyX.Y-venv``,
and returns its interpreter; it skips the test with the reason when a package cannot be
installed. torch: ``pip install torch==2.13.0`` takes the CPU wheel kept on this machine's
disk, for Python 3.11 only (any other version would download a multi-GB CUDA build).
"""

from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path

import pytest

from tests.pythons import installed_pythons

PACKAGES = ("numpy", "pandas", "pillow")
TORCH = "torch==2.13.0"


def _cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "leakhound"


def native_python(version: str, *, torch: bool = False) -> str:
    base = installed_pythons().get(version)
    if base is None:
        pytest.skip(f"no CPython {version} installed here")
    if torch and version != "3.11":
        pytest.skip("torch's CPU wheel on this machine's disk is for Python 3.11 only")
    venv = _cache() / f"native-py{version}-venv"
    python = venv / "bin" / "python"
    _cache().mkdir(parents=True, exist_ok=True)
    with open(str(venv) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        steps: list[tuple[Path, list[str]]] = []
        if not (venv / ".complete").exists():
            steps.append((venv / ".complete", [str(python), "-m", "pip", "install", "-q", *PACKAGES]))
        if torch and not (venv / ".torch").exists():
            steps.append((venv / ".torch", [str(python), "-m", "pip", "install", "-q", TORCH]))
        for marker, command in steps:
            if not python.exists():
                subprocess.run([base, "-m", "venv", str(venv)], check=True, timeout=300)
            done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
            if done.returncode != 0:
                pytest.skip(f"could not install {' '.join(command[5:])} for Python {version}: "
                            f"{(done.stderr or done.stdout).strip().splitlines()[-1:]}")
            marker.touch()
    return str(python)
