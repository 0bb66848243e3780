"""A child the target forks while a leakhound thread is importing a module can import that
module itself (without the guard, its import waits for good on a lock a thread it does not
have holds: measured on 3.8-3.13; on 3.13 it may also find the half-run module)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.pythons import installed_pythons

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PYTHONS = installed_pythons(minimum=(3, 8))


def _guard_source() -> str:
    return (ROOT / "leakhound" / "payload" / "fork_guard.py").read_text()


def _child_import(python: str, *guard: str) -> dict:  # type: ignore[type-arg]
    run = subprocess.run([python, str(ROOT / "fixtures" / "fork_mid_import.py"), *guard],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("version", sorted(PYTHONS))
def test_a_child_forked_mid_import_imports_the_module_itself(version: str) -> None:
    assert _child_import(PYTHONS[version], _guard_source()) == {"imported": True, "error": None}


def test_without_the_guard_the_child_hangs() -> None:
    # the harm the guard mends, shown once (the fixture is right)
    assert _child_import(PYTHONS[max(PYTHONS, key=lambda v: tuple(map(int, v.split("."))))])["imported"] is False
