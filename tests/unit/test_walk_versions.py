"""The compiled census walk on every CPython installed here, not only leakhound's own.

One build, ``_walk.abi3.so`` (stable ABI, hatch_build.py), is what a target on 3.10, 3.12 or
3.13 imports whatever Python leakhound runs on. Each interpreter runs tests/walk_hostile.py
(the compiled walk against the pure-Python loop, which must agree exactly, on hostile
structures) in a subprocess, with the interpreter's private helpers and on the stable ABI
only, and under AddressSanitizer; and the wheel ``pip`` builds must carry the extension, built
outside the source tree, that each of them loads and walks with.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from leakhound.payload import census
from tests.pythons import installed_pythons

ROOT = Path(__file__).resolve().parents[2]
PYTHONS = installed_pythons()
WALK_SO = Path(census.__file__).with_name("_walk.abi3.so")

pytestmark = [
    pytest.mark.integration,  # subprocesses of other interpreters, ~10 s each
    pytest.mark.skipif(not WALK_SO.exists(), reason="the C walk was not built here"),
]


def _hostile(python: str, *args: str, env: dict[str, str] | None = None,
             timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([python, "-m", "tests.walk_hostile", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("mode", ["abi3+private", "abi3"])
@pytest.mark.parametrize("version", list(PYTHONS))
def test_the_compiled_walk_matches_the_python_loop(version: str, mode: str) -> None:
    run = _hostile(PYTHONS[version], *(["--stable"] if mode == "abi3" else []))
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    # The package's own extension ran, in the mode asked for, on that interpreter.
    assert f"Python {version}." in run.stderr and f"_walk.abi3.so ({mode})" in run.stderr, run.stderr[-2000:]
    assert run.stdout.strip().endswith("ok")


def _asan_runtime() -> str | None:
    if shutil.which("gcc") is None:
        return None
    found = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    return found if os.path.isabs(found) and os.path.exists(found) else None


def build_asan_walk(ext: Path) -> Path:
    """The payload's one extension (every ``_*.c`` beside census.py, as hatch_build.py builds
    it) compiled with AddressSanitizer into ``ext``."""
    import sysconfig

    sources = sorted(str(p) for p in Path(census.__file__).parent.glob("_*.c"))
    subprocess.run(["gcc", "-fsanitize=address", "-fno-omit-frame-pointer", "-g", "-O1", "-fPIC", "-shared",
                    "-fno-strict-aliasing", "-I", sysconfig.get_paths()["include"], *sources, "-o", str(ext)],
                   check=True, capture_output=True, timeout=240)
    return ext


@pytest.fixture(scope="module")
def asan_walk(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_asan_walk(tmp_path_factory.mktemp("asan") / "_walk.abi3.so")


# Under ASan: every version with the private helpers (what runs on 3.10-3.13), the
# stable-only path on this interpreter's version (each version runs that path without ASan
# in test_the_compiled_walk_matches_the_python_loop). About 40 s a run: the suite's biggest
# cost, kept to what each run adds.
ASAN_CASES = [(v, "abi3+private") for v in PYTHONS] + [
    (v, "abi3") for v in PYTHONS if v == f"{sys.version_info[0]}.{sys.version_info[1]}"]


@pytest.mark.skipif(_asan_runtime() is None, reason="no gcc with libasan here")
@pytest.mark.parametrize(("version", "mode"), ASAN_CASES)
def test_the_hostile_workload_under_address_sanitizer(asan_walk: Path, version: str, mode: str) -> None:
    # Built once, with this interpreter's headers, loaded by each: the stable ABI at work.
    env = {"LD_PRELOAD": str(_asan_runtime()), "ASAN_OPTIONS": "detect_leaks=0",
           "PYTHONMALLOC": "malloc"}  # every object a malloc block that ASan watches
    # The compiled walk alone: its agreement with the Python loop, on every version and in both
    # modes, is test_the_compiled_walk_matches_the_python_loop's (ASan would not change it).
    run = _hostile(PYTHONS[version], "--so", str(asan_walk), "--compiled-only",
                   *(["--stable"] if mode == "abi3" else []), env=env)
    assert "AddressSanitizer" not in run.stderr, run.stderr[-4000:]
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert f"({mode})" in run.stderr


def _tree_extensions() -> dict[str, float]:
    return {p.name: p.stat().st_mtime for p in (ROOT / "leakhound" / "payload").glob("_walk*.so")}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.environ.get("LEAKHOUND_NO_COMPILE"):
        pytest.skip("LEAKHOUND_NO_COMPILE: the wheel is built without the C walk")
    out = tmp_path_factory.mktemp("wheel")
    before = _tree_extensions()
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(out)],
                           capture_output=True, text=True, timeout=600)
    if build.returncode != 0 and "hatchling" in build.stderr:
        pytest.skip(f"pip could not get hatchling to build with: {build.stderr[-300:]}")
    assert build.returncode == 0, build.stderr[-3000:]
    # Issue 14: building a wheel writes no compiled walk into the source tree.
    assert _tree_extensions() == before
    (found,) = out.glob("leakhound-*.whl")
    return found


def test_the_wheel_is_one_abi3_build(wheel: Path) -> None:
    assert wheel.name.split("-")[2:4] == ["cp310", "abi3"], wheel.name
    extensions = [n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".so")]
    # The payload's one build (no per-version _walk.cpython-3XX-*.so beside it); every
    # extension in the wheel is on the stable ABI its tag promises.
    assert [n for n in extensions if n.startswith("leakhound/payload/")] == ["leakhound/payload/_walk.abi3.so"]
    assert all(n.endswith(".abi3.so") for n in extensions), extensions


@pytest.mark.parametrize("version", list(PYTHONS))
def test_every_installed_python_loads_and_walks_with_the_wheels_extension(
        wheel: Path, tmp_path: Path, version: str) -> None:
    so = tmp_path / "_walk.abi3.so"
    so.write_bytes(zipfile.ZipFile(wheel).read("leakhound/payload/_walk.abi3.so"))
    run = _hostile(PYTHONS[version], "--so", str(so), "--only", "shapes")
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert f"Python {version}." in run.stderr and "(abi3+private)" in run.stderr
    assert run.stdout.strip() == "ok"


def test_pythons_older_than_310_use_the_python_loop() -> None:
    older = installed_pythons(minimum=(3, 8))
    olds = [v for v in older if tuple(int(p) for p in v.split(".")) < (3, 10)]
    if not olds:
        pytest.skip("no CPython 3.8/3.9 here")
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); from leakhound.payload import census; "
            "print(census._walk, census.Census(timeout=5).walker)")
    for version in olds:
        out = subprocess.run([older[version], "-c", code], capture_output=True, text=True, timeout=60)
        assert out.stdout.split() == ["None", "python"], out.stdout + out.stderr
