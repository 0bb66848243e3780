"""Build hook: compile the payload's optional C walks (leakhound/payload/_*.c) into one extension.

The census's walk (_census_walk.c), the object graph's (_graph_walk.c), their shared helpers
(_walk_objects.c, _walk.h) and the module (_walk.c) are one extension, ``_walk``, for every
target CPython from 3.10 on: its sources are written against the stable
ABI (Py_LIMITED_API 3.10), so the build needs only the installing interpreter's headers and
its C compiler, and the result, ``_walk.abi3.so``, loads in a target on 3.10, 3.11, 3.12,
3.13... whatever Python leakhound itself runs on. The wheel is tagged ``cp310-abi3``.

A wheel gets the extension from a private build directory (nothing is written into the
source tree); an editable install needs it importable from the source tree, so it is built
there (next to its sources, replacing builds of other names that would shadow it). Without a
compiler (or headers) the build goes on without it: the census then uses its pure-Python
loop, which computes the same numbers, slower. LEAKHOUND_NO_COMPILE=1 skips it.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

PAYLOAD = Path("leakhound") / "payload"
EXTENSION = "_walk.abi3.so"  # the name every CPython 3.x imports (importlib's EXTENSION_SUFFIXES)
ABI_TAG = "cp310-abi3"  # _walk.h: Py_LIMITED_API 0x030A0000
# The dominator pass (leakhound's own process, never a target): same ABI, same build, optional
# too (dominators/passes.py has a pure-Python twin).
DOMINATORS_SOURCE = Path("leakhound") / "analysis" / "_dominators.c"
DOMINATORS_EXTENSION = "_dominators.abi3.so"


def walk_sources(package: Path) -> list[Path]:
    """The C files of the payload's one extension: every ``_*.c`` of the payload package."""
    return sorted(package.glob("_*.c"))


def compile_walk(sources: list[Path], target: Path) -> Path:
    """Compile ``sources`` (with the headers beside them) into ``target``; returns ``target``."""
    folders = {source.parent for source in sources}
    newest = max(p.stat().st_mtime for folder in folders for p in (*folder.glob("_*.c"), *folder.glob("_*.h")))
    if target.exists() and target.stat().st_mtime >= newest:
        return target
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    include = sysconfig.get_paths()["include"]
    command = [*cc, "-O2", "-fPIC", "-shared", "-fno-strict-aliasing", "-I", include,
               *map(str, sources), "-o", str(target) + ".tmp"]
    subprocess.run(command, check=True, capture_output=True, text=True, timeout=120)
    os.replace(str(target) + ".tmp", target)
    return target


def _compile_bytecode(package: Path) -> None:
    """The package's .pyc files for the installing Python, in the source tree (an editable
    install): what pip writes for a regular install. Where PYTHONDONTWRITEBYTECODE is set (many
    container images, these machines) nothing else ever writes them, and every run compiled
    leakhound's modules again (~0.08 s of each CLI start) and a target on this Python the
    payload (it takes the payload's .pyc files along, docs/inspect.md). A stale one is
    recompiled in memory, as any."""
    import compileall

    compileall.compile_dir(str(package), quiet=2, workers=1)


def _platform_tag() -> str:
    from packaging.tags import sys_tags  # hatchling's own dependency

    return next(iter(sys_tags())).platform


class WalkBuildHook(BuildHookInterface):  # type: ignore[misc]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or os.environ.get("LEAKHOUND_NO_COMPILE"):
            return
        root = Path(self.root)
        if version == "editable":
            _compile_bytecode(root / "leakhound")
        self._build_dominators(root, version, build_data)
        package = root / PAYLOAD
        if version == "editable":
            target = package / EXTENSION
        else:
            self._build_dir = tempfile.TemporaryDirectory(prefix="leakhound-walk-")
            target = Path(self._build_dir.name) / EXTENSION
        try:
            built = compile_walk(walk_sources(package), target)
        except (OSError, subprocess.SubprocessError) as exc:
            detail = (getattr(exc, "stderr", "") or str(exc)).strip().splitlines()[-1:]
            self.app.display_warning(
                f"leakhound: the optional C census walk was not built ({detail}); the census uses "
                "its pure-Python loop."
            )
            return
        build_data["pure_python"] = False
        build_data["tag"] = f"{ABI_TAG}-{_platform_tag()}"
        if version == "editable":
            # A build for one version (the old per-interpreter name) would shadow the abi3 one.
            for stale in package.glob("_walk.cpython-*.so"):
                stale.unlink()
        else:
            build_data["force_include"][str(built)] = (PAYLOAD / EXTENSION).as_posix()

    def _build_dominators(self, root: Path, version: str, build_data: dict[str, Any]) -> None:
        source = root / DOMINATORS_SOURCE
        if version == "editable":
            target = source.with_name(DOMINATORS_EXTENSION)
        else:
            self._dominators_dir = tempfile.TemporaryDirectory(prefix="leakhound-dominators-")
            target = Path(self._dominators_dir.name) / DOMINATORS_EXTENSION
        try:
            built = compile_walk([source], target)
        except (OSError, subprocess.SubprocessError):
            self.app.display_warning("leakhound: the optional C dominator pass was not built; the "
                                     "pure-Python one is used.")
            return
        build_data["pure_python"] = False
        build_data["tag"] = f"{ABI_TAG}-{_platform_tag()}"
        if version != "editable":
            build_data["force_include"][str(built)] = (DOMINATORS_SOURCE.parent / DOMINATORS_EXTENSION).as_posix()

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        dominators_dir = getattr(self, "_dominators_dir", None)
        if dominators_dir is not None:
            dominators_dir.cleanup()
        build_dir = getattr(self, "_build_dir", None)
        if build_dir is not None:
            build_dir.cleanup()
