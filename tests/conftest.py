from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.utils import NOBODY, gdb_calls_broken


def pytest_configure(config: pytest.Config) -> None:
    """The tests send SIGINT and SIGHUP to leakhound and expect it to act on them. A shell's
    background job (``cmd &``: SIGINT ignored) or ``nohup`` (SIGHUP ignored) hands the
    tests' processes those signals ignored, and leakhound then keeps them ignored on purpose
    (interrupts.install, like any tool under nohup): put the defaults back for the children."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)


INTEGRATION_DIR = Path(__file__).parent / "integration"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The fast tier (exactly ``-m "not integration"``) does not import tests/integration, whose
    every test is marked integration (checked as they are collected, below): ~90 modules whose
    import and assertion rewriting cost each fast-tier process seconds, and whose objects
    (matplotlib, playwright) the payload's tests, walking the test process's heap, walk too."""
    if collection_path == INTEGRATION_DIR and config.getoption("markexpr").replace(" ", "") == "notintegration":
        return True
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Two tiers: the fast one is ``-m "not integration"`` (under a minute); a ``slow`` test
    runs in the other tier, with the integration tests."""
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(pytest.mark.integration)
        if INTEGRATION_DIR in item.path.parents and item.get_closest_marker("integration") is None:
            raise pytest.UsageError(f"{item.nodeid}: a test in tests/integration is marked integration")


@pytest.fixture
def nobody_dir() -> Iterator[Path]:
    """A directory of uid 65534's, for its processes and their files (pytest's tmp_path is
    private to root)."""
    path = Path(tempfile.mkdtemp(prefix="leakhound-nobody-"))
    os.chmod(path, 0o755)
    os.chown(path, NOBODY, NOBODY)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test of the gdb method (marked ``gdb``, or given ``"gdb"`` as a parameter) is skipped,
    with the reason, where gdb cannot call a function in a process (leakhound refuses the gdb
    method there before touching the target: test_gdb_refused.py checks that instead)."""
    callspec = getattr(item, "callspec", None)
    params = callspec.params.values() if callspec is not None else ()
    if item.get_closest_marker("gdb") is None and not any(isinstance(v, str) and v == "gdb" for v in params):
        return
    why = gdb_calls_broken()
    if why is not None:
        pytest.skip(f"gdb cannot call functions in a process on this machine ({why}): leakhound refuses "
                    "the gdb method here (tests/integration/test_gdb_refused.py)")


@pytest.fixture(scope="session")
def ptrace_ok() -> None:
    """Fail fast, with the reason, when this machine cannot ptrace (rather than N timeouts)."""
    if shutil.which("gdb") is None:
        pytest.fail("gdb is not installed (.ci/run installs it with apt)")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.2)
        out = subprocess.run(
            ["gdb", "-nx", "-batch", "--readnever", "-p", str(child.pid)],
            capture_output=True, text=True, timeout=30,
        )
        if "Operation not permitted" in out.stdout + out.stderr:
            pytest.fail("ptrace is blocked here (CAP_SYS_PTRACE / ptrace_scope); gdb tests cannot run")
    finally:
        child.kill()
        child.wait()
