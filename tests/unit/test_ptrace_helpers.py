"""The ptrace injector's live helpers are shared by every thread that injects (``watch P1 ...
P8`` runs one thread per target): threads injecting at once never trip over each other's
reaping (once ``ValueError: list.remove(x): x not in list`` in 2 of 8 runs)."""

from __future__ import annotations

import importlib
import sys
import threading
import time
from typing import Any

import pytest

# the module (the package exports its function under the same name)
inject = importlib.import_module("leakhound.attach.ptrace.inject")


class _ExitedHelper:
    """A helper that has already exited: the next injection reaps it."""

    pid = 0

    class _Pipe:
        def write(self, data: bytes) -> None:
            pass

        def flush(self) -> None:
            pass

        def close(self) -> None:
            pass

    def __init__(self) -> None:
        self.stdin = self._Pipe()
        self.stdout = self._Pipe()

    def poll(self) -> int:
        time.sleep(0)  # Popen.poll's waitpid lets go of the GIL, as this does
        return 0


class _NoPlan(Exception):
    pass


def test_threads_injecting_at_once_reap_the_helpers_without_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_plan(pid: int) -> Any:
        raise _NoPlan  # the injection ends here, its helper left to the next one to reap

    monkeypatch.setattr(inject, "_spawn", lambda *args: _ExitedHelper())
    monkeypatch.setattr(inject, "plan", no_plan)
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def one_injection() -> BaseException | None:
        try:
            inject.inject(1, "", timeout=1.0, log=lambda line: None)
        except _NoPlan:
            return None
        except BaseException as exc:  # noqa: BLE001 - any other is the failure
            return exc
        return None

    def injecting() -> None:
        start.wait()
        for _ in range(300):
            failed = one_injection()
            if failed is not None:
                errors.append(failed)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch as often as they can: the race, every run
    try:
        threads = [threading.Thread(target=injecting) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == [], errors[:3]
    inject._HELPERS.reap()  # every helper had exited
    assert len(inject._HELPERS) == 0
