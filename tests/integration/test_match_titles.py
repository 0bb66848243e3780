"""--match, PID completion and the no-match hint against a worker that names itself as
verifiers' env worker does (``Verifiers::EnvWorker0``, setproctitle's way: its argument
area rewritten, its comm set), found by its title in any case."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from leakhound.attach.process import match_processes, title
from leakhound.cli import app
from leakhound.commands.options import complete_pids
from leakhound.core.targets import chosen_pids
from tests.utils import Child, spawn_target

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]


@pytest.fixture
def titled(tmp_path: Path) -> Iterator[tuple[Child, str]]:
    # A title of its own, so that other verifiers workers on this machine do not match.
    name = f"Verifiers::EnvWorker0-{secrets.token_hex(4)}"
    with spawn_target("titled_worker", tmp_path, env={"FIXTURE_TITLE": name}) as child:
        truth = child.report(refresh=False)["truth"]
        # The fixture set its title as setproctitle does: what ps shows for the real worker.
        assert truth["cmdline"].rstrip("\0") == name and truth["comm"] == name[:15]
        yield child, name


def test_match_finds_the_worker_by_its_title_in_any_case(titled: tuple[Child, str]) -> None:
    child, name = titled
    token = name.rsplit("-", 1)[1]
    assert title(child.pid) == name
    for pattern in (name, name.lower(), f"verifiers::envworker0-{token.upper()}", f"ENVWORKER.*{token}"):
        assert match_processes(pattern) == [child.pid], pattern
        assert chosen_pids((), pattern) == (child.pid,)


def test_watch_match_in_lower_case_watches_it(titled: tuple[Child, str]) -> None:
    child, name = titled
    result = CliRunner().invoke(app, ["watch", "--match", name.lower(), "-i", "0.5", "-d", "1", "--json"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert {doc["pid"] for doc in lines if doc["event"] == "sample"} == {child.pid}


def test_its_pid_completes_with_its_title(titled: tuple[Child, str]) -> None:
    child, name = titled
    assert (str(child.pid), name) in complete_pids(str(child.pid))


def test_no_match_says_what_match_reads_and_lists_python_processes(titled: tuple[Child, str]) -> None:
    child, name = titled
    result = CliRunner().invoke(app, ["watch", "--match", f"no-such-{name}", "-d", "1"])
    assert result.exit_code == 3, result.output
    assert "no Python process matches" in result.output
    assert "ps -p PID" not in result.output
    assert "ignoring case, in each Python process's title and command line" in result.output
    assert "The largest Python processes leakhound can read: " in result.output
