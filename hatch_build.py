"""Build hook: compile the census's optional C walk (leakhound/payload/_walk.c).

The extension is built for the interpreter that builds the wheel, with the C compiler that
interpreter was built with. Without a compiler (or its headers) the build goes on without it:
the census then uses its pure-Python loop, which computes the same numbers, slower.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sysconfig
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCE = Path("leakhound") / "payload" / "_walk.c"


def compile_walk(root: Path) -> Path:
    """Compile _walk.c next to its source; returns the extension's path."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    target = root / SOURCE.with_name("_walk" + suffix)
    source = root / SOURCE
    if target.exists() and target.stat().st_mtime >= source.stat().st_mtime:
        return target
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    include = sysconfig.get_paths()["include"]
    command = [*cc, "-O2", "-fPIC", "-shared", "-fno-strict-aliasing", "-I", include,
               str(source), "-o", str(target) + ".tmp"]
    subprocess.run(command, check=True, capture_output=True, text=True, timeout=120)
    os.replace(str(target) + ".tmp", target)
    return target


class WalkBuildHook(BuildHookInterface):  # type: ignore[misc]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or os.environ.get("LEAKHOUND_NO_COMPILE"):
            return
        root = Path(self.root)
        try:
            built = compile_walk(root)
        except (OSError, subprocess.SubprocessError) as exc:
            detail = getattr(exc, "stderr", "") or str(exc)
            self.app.display_warning(
                "leakhound: the optional C census walk was not built (%s); the census uses "
                "its pure-Python loop." % detail.strip().splitlines()[-1:]
            )
            return
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        if version != "editable":
            build_data["force_include"][str(built)] = built.relative_to(root).as_posix()
