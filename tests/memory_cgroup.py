"""A cgroup v1 memory cgroup made for one test (``/sys/fs/cgroup/memory/leakhound-test-*``):
targets start inside it (``prefix``), the test sets its limit, and it is always removed
afterwards, its processes killed first."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

V1_MEMORY = Path("/sys/fs/cgroup/memory")


def v1_memory_available() -> bool:
    return os.geteuid() == 0 and (V1_MEMORY / "memory.limit_in_bytes").exists()


@dataclass
class MemoryCgroup:
    path: Path

    @property
    def prefix(self) -> list[str]:
        """argv that runs the rest of the command inside this cgroup (charged to it from its
        first page)."""
        return ["sh", "-c", f'echo $$ > {self.path}/cgroup.procs && exec "$@"', "sh"]

    def read(self, name: str) -> int:
        return int((self.path / name).read_text().split()[0])

    @property
    def usage(self) -> int:
        return self.read("memory.usage_in_bytes")

    @property
    def peak(self) -> int:
        return self.read("memory.max_usage_in_bytes")

    def reset_peak(self) -> None:
        (self.path / "memory.max_usage_in_bytes").write_text("0")

    def limit_to(self, limit: int) -> None:
        (self.path / "memory.limit_in_bytes").write_text(str(limit))

    def oom_kills(self) -> int:
        for line in (self.path / "memory.oom_control").read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        return 0

    def pids(self) -> list[int]:
        return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]


@contextlib.contextmanager
def memory_cgroup() -> Iterator[MemoryCgroup]:
    path = V1_MEMORY / f"leakhound-test-{secrets.token_hex(4)}"
    path.mkdir()
    group = MemoryCgroup(path)
    try:
        yield group
    finally:
        deadline = time.monotonic() + 10.0
        while True:
            for pid in group.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            try:
                path.rmdir()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
