"""The remote-exec method: ``sys.remote_exec`` (PEP 768), for targets on Python 3.14+.

CPython 3.14 runs the script at the target's next safe point by itself; it only needs an
interpreter of the same minor version to ask for it. That is leakhound's own: the target's
executable belongs to the target's owner, who may have replaced it, and leakhound never runs
anything of the target's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from leakhound.attach.base import AttachLog, Injection
from leakhound.attach.private_dir import PrivateDir
from leakhound.attach.process import Target
from leakhound.errors import AttachFailed, MethodUnavailable, PermissionDenied
from leakhound.model.names import Method


def available(target: Target) -> bool:
    return target.version >= (3, 14) and target.version == sys.version_info[:2]


def inject(
    target: Target, code: str, private: PrivateDir, target_dir: str, *, timeout: float, log: AttachLog
) -> Injection:
    """Write the bootstrap into the private directory (through its descriptor, a new file:
    nothing planted there is followed) and have the target run it from ``target_dir`` (the
    same directory as the target opens it)."""
    theirs = "{}.{}".format(*target.version)
    ours = "{}.{}".format(*sys.version_info[:2])
    if target.version < (3, 14):
        raise MethodUnavailable(f"remote-exec needs a Python 3.14+ target; process {target.pid} runs {theirs}")
    if not available(target):
        raise MethodUnavailable(
            f"remote-exec asks with leakhound's own interpreter, which must be the target's "
            f"version: process {target.pid} runs {theirs}, leakhound {ours}",
            hint=f"Run a leakhound installed under Python {theirs} (`pipx install --python "
            f"python{theirs} leakhound`), or use `--method ptrace`, `gdb` or `agent`. leakhound "
            "never runs the target's own interpreter: its owner may have replaced the file.",
        )
    try:
        private.create("remote_exec_boot.py", (code + "\n").encode(), uid=target.uid if target.uid else -1,
                       mode=0o600)
    except OSError as exc:
        raise AttachFailed(f"could not write the bootstrap into leakhound's private directory: {exc}") from None
    inside = os.path.join(target_dir, "remote_exec_boot.py")
    argv = [sys.executable, "-I", "-S", "-c", f"import sys; sys.remote_exec({target.pid}, {inside!r})"]
    log(f"$ {' '.join(argv)}")
    began = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    log((proc.stdout + proc.stderr).strip())
    if proc.returncode != 0:
        if "permission" in proc.stderr.lower():
            raise PermissionDenied(f"sys.remote_exec into {target.pid}: permission denied")
        raise AttachFailed(f"sys.remote_exec into {target.pid} failed: {proc.stderr.strip()[-300:]}")
    return Injection(method=Method.REMOTE_EXEC, attach_stop_ms=(time.monotonic() - began) * 1000.0)
