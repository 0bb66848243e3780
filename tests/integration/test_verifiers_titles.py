"""The real verifiers==0.1.14 env server and its worker, found the way an on-call engineer
looks for them: by title (``--match``, PID completion), and from the EnvServer's pid, which
has no runtime, to the worker's that does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from leakhound.attach.process import match_processes, title
from leakhound.cli import app
from leakhound.commands import demo
from leakhound.commands.options import complete_pids
from tests.verifiers_target import SERVER_TITLE, WORKER_TITLE, spawn_verifiers_worker

pytestmark = [
    pytest.mark.integration,
    pytest.mark.verifiers,
    pytest.mark.timeout(600),
    pytest.mark.usefixtures("ptrace_ok"),
]


def test_from_the_env_server_to_its_worker(tmp_path: Path) -> None:
    with spawn_verifiers_worker(tmp_path, rollouts=1, turns=2) as worker:
        server, child = worker.env_server_pid, worker.worker_pid
        # What the processes call themselves (setproctitle in verifiers.utils.process_utils).
        assert title(server) == SERVER_TITLE
        assert title(child) == f"{WORKER_TITLE}0"

        # --match reads titles in any case: the demo's "verifiers" finds both (the test
        # machine may run other verifiers workers too), "envworker" the worker only.
        assert {server, child} <= set(match_processes("verifiers"))
        assert child in match_processes("envworker") and server not in match_processes("envworker")
        # The demo's last line suggests a --match that finds the worker and not the server.
        assert child in match_processes(demo.WORKER_MATCH) and server not in match_processes(demo.WORKER_MATCH)
        assert (str(child), f"{WORKER_TITLE}0") in complete_pids(str(child))

        # inspect on the EnvServer: no runtime there, and the worker to inspect instead.
        result = CliRunner().invoke(app, ["inspect", str(server), "--owners", "census", "--json"])
        assert result.exit_code == 0, result.output
        doc = json.loads(result.stdout)
        skipped = {f["kind"]: f["summary"] for f in doc["findings"] if f["severity"] == "skipped"}
        expected = f"its env worker {child} ({WORKER_TITLE}0) runs it: leakhound inspect {child}"
        for kind in ("registry", "intercepts", "steps"):
            assert skipped[kind].startswith("no verifiers v1 runtime in this process"), skipped
            assert skipped[kind].endswith(expected), skipped[kind]
        assert doc["probes"]["verifiers"]["env_worker_children"] == [{"pid": child, "title": f"{WORKER_TITLE}0"}]

        # ... and the worker it names has the runtime: its findings are checked, not skipped.
        result = CliRunner().invoke(app, ["inspect", str(child), "--owners", "census", "--json"])
        assert result.exit_code == 0, result.output
        kinds = {f["kind"]: f["severity"] for f in json.loads(result.stdout)["findings"]}
        assert kinds.get("registry") != "skipped", kinds
