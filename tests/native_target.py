"""Target venvs with numpy, pandas, Pillow (and torch on 3.11) for the native-buffer tests, with
pandas and pyarrow for the Arrow ones, with protobuf for its messages, cffi for its buffers, pydantic for its Rust
core's validators, tiktoken and tokenizers for their encoders, and with uvloop for the idle-loop tests.

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
    if torch and version != "3.11":
        pytest.skip("torch's CPU wheel on this machine's disk is for Python 3.11 only")
    steps = [(".complete", PACKAGES)]
    if torch:
        steps.append((".torch", (TORCH,)))
    return _venv_python(version, f"native-py{version}-venv", steps)


def arrow_python(version: str) -> str:
    """A venv of the pyenv CPython ``version`` with pandas and pyarrow (pandas 3 then keeps its
    strings in Arrow arrays), cached as ``arrow-pyX.Y-venv``."""
    return _venv_python(version, f"arrow-py{version}-venv", [(".complete", ("pandas", "pyarrow"))])


def protobuf_python(version: str, protobuf: str = "protobuf") -> str:
    """A venv of the pyenv CPython ``version`` with protobuf alone (its upb backend), the newest
    or ``protobuf`` (a pip requirement: an older release's arena layout), cached as
    ``protobuf-pyX.Y-venv`` or ``protobuf-<release>-pyX.Y-venv``."""
    release = protobuf.partition("==")[2]
    name = f"protobuf-{release}-py{version}-venv" if release else f"protobuf-py{version}-venv"
    return _venv_python(version, name, [(".complete", (protobuf,))])


def cffi_python(version: str) -> str:
    """A venv of the pyenv CPython ``version`` with cffi alone, cached as ``cffi-pyX.Y-venv``."""
    return _venv_python(version, f"cffi-py{version}-venv", [(".complete", ("cffi",))])


def pydantic_python(version: str) -> str:
    """A venv of the pyenv CPython ``version`` with pydantic (and its Rust core,
    pydantic-core), cached as ``pydantic-pyX.Y-venv``."""
    return _venv_python(version, f"pydantic-py{version}-venv", [(".complete", ("pydantic",))])


def tokenizer_python(version: str) -> str:
    """A venv of the pyenv CPython ``version`` with tiktoken and Hugging Face's tokenizers
    (Rust both), cached as ``tokenizers-pyX.Y-venv``."""
    return _venv_python(version, f"tokenizers-py{version}-venv", [(".complete", ("tiktoken", "tokenizers"))])


def lxml_python(version: str) -> str:
    """A venv of the pyenv CPython ``version`` with lxml alone (libxml2 linked in), cached as
    ``lxml-pyX.Y-venv``."""
    return _venv_python(version, f"lxml-py{version}-venv", [(".complete", ("lxml",))])


def zstd_python(version: str) -> str:
    """A venv of the pyenv CPython ``version`` with zstandard alone (its C extension, libzstd
    linked in), cached as ``zstd-pyX.Y-venv``."""
    return _venv_python(version, f"zstd-py{version}-venv", [(".complete", ("zstandard",))])


def faiss_python(version: str) -> str:
    """A venv of the pyenv CPython ``version`` with faiss-cpu and numpy (SWIG's proxies of C++
    indexes), cached as ``faiss-pyX.Y-venv``."""
    return _venv_python(version, f"faiss-py{version}-venv", [(".complete", ("faiss-cpu", "numpy"))])


def re2_python(version: str) -> str:
    """A venv of the pyenv CPython ``version`` with google-re2 alone (pybind11's objects owning
    C++ RE2s), cached as ``re2-pyX.Y-venv``."""
    return _venv_python(version, f"re2-py{version}-venv", [(".complete", ("google-re2",))])


def sentencepiece_python(version: str) -> str:
    """A venv of the pyenv CPython ``version`` with sentencepiece alone (SWIG's proxies of C++
    processors, protobuf linked in), cached as ``sentencepiece-pyX.Y-venv``."""
    return _venv_python(version, f"sentencepiece-py{version}-venv", [(".complete", ("sentencepiece",))])


def grpc_python(version: str) -> str:
    """A venv of the pyenv CPython ``version`` with grpcio alone (Cython's objects over grpc's
    C core, linked in), cached as ``grpc-pyX.Y-venv``."""
    return _venv_python(version, f"grpc-py{version}-venv", [(".complete", ("grpcio",))])


def mujoco_python(version: str) -> str:
    """A venv of the pyenv CPython ``version`` with mujoco alone (pybind11's objects over
    MuJoCo's models and simulation data), cached as ``mujoco-pyX.Y-venv``."""
    return _wheels_venv(version, "mujoco", "mujoco")


def pygame_python(version: str) -> str:
    """A venv of the pyenv CPython ``version`` with pygame alone (SDL's surfaces), cached as
    ``pygame-pyX.Y-venv``."""
    return _wheels_venv(version, "pygame", "pygame")


def shapely_python(version: str) -> str:
    """A venv of the pyenv CPython ``version`` with shapely 2 (GEOS's geometries, and numpy),
    cached as ``shapely-pyX.Y-venv``."""
    return _wheels_venv(version, "shapely", "shapely")


def numba_python(version: str) -> str:
    """A venv of the pyenv CPython ``version`` with numba (and numpy, llvmlite), cached as
    ``numba-pyX.Y-venv``."""
    return _wheels_venv(version, "numba", "numba")


def greenlet_python(version: str) -> str:
    """A venv of the pyenv CPython ``version`` with greenlet alone (gevent's coroutines),
    cached as ``greenlet-pyX.Y-venv``."""
    return _wheels_venv(version, "greenlet", "greenlet")


def box2d_python(version: str) -> str:
    """A venv of the pyenv CPython ``version`` with pybox2d alone (SWIG 4's proxies over Box2D's
    worlds), cached as ``box2d-pyX.Y-venv``."""
    return _wheels_venv(version, "box2d", "Box2D")


def opencv_python(version: str) -> str:
    """A venv of the pyenv CPython ``version`` with opencv-python-headless (and numpy), cached
    as ``opencv-pyX.Y-venv``."""
    return _wheels_venv(version, "opencv", "opencv-python-headless")


def uvloop_python(version: str) -> str:
    """A venv of the pyenv CPython ``version`` with uvloop alone (its libuv event loop), cached
    as ``uvloop-pyX.Y-venv``."""
    return _venv_python(version, f"uvloop-py{version}-venv", [(".complete", ("uvloop",))])


def numpy1_python(version: str) -> str:
    """A venv of the pyenv CPython ``version`` with numpy 1 (its last: 1.26), cached as
    ``numpy1-pyX.Y-venv``."""
    return _wheels_venv(version, "numpy1", "numpy<2")


def _wheels_venv(version: str, name: str, package: str) -> str:
    """A venv of the pyenv CPython ``version`` with ``package`` from wheels only (no build from
    source: on 3.10 pip once backtracked to building numpy), cached as ``NAME-pyX.Y-venv``."""
    return _venv_python(version, f"{name}-py{version}-venv", [(".complete", ("--only-binary=:all:", package))])


def _venv_python(version: str, name: str, steps: list[tuple[str, tuple[str, ...]]]) -> str:
    base = installed_pythons().get(version)
    if base is None:
        pytest.skip(f"no CPython {version} installed here")
    venv = _cache() / name
    python = venv / "bin" / "python"
    _cache().mkdir(parents=True, exist_ok=True)
    with open(str(venv) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for marker, packages in steps:
            if (venv / marker).exists():
                continue
            if not python.exists():
                subprocess.run([base, "-m", "venv", str(venv)], check=True, timeout=300)
            done = subprocess.run([str(python), "-m", "pip", "install", "-q", *packages],
                                  capture_output=True, text=True, timeout=1800)
            if done.returncode != 0:
                pytest.skip(f"could not install {' '.join(packages)} for Python {version}: "
                            f"{(done.stderr or done.stdout).strip().splitlines()[-1:]}")
            (venv / marker).touch()
    return str(python)
