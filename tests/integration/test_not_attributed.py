"""Past the object graph's node budget (forced small: LEAKHOUND_MAX_GRAPH_NODES=1000 on a small
target, fixtures/root_shapes.py's BytesIO buffers) inspect, watch and export name no owner: the
heap's bytes are one ``<not attributed: graph over 1,000 nodes>`` owner, the header and the
JSON say why (owner_model, owner_model_reason) and what would allow it. On main they named the
census's first reachers as owners, with a note in small print."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from leakhound.cli import app
from tests.utils import Child, spawn_target, within

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]

BUDGET = {"LEAKHOUND_MAX_GRAPH_NODES": "1000"}
OWNER = "<not attributed: graph over 1,000 nodes>"
SHAPE = {"SHAPE": "bytesio", "FIXTURE_TASKS": "100"}  # ~9 MB of buffers in __main__.BUFFERS


def _inspect(pid: int, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    done = CliRunner().invoke(app, ["inspect", str(pid), "--json", *args], env=env)
    assert done.exit_code == 0, done.output
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def _ready(child: Child) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while not (truth := child.report(timeout=30)["truth"])["ready"]:
        assert time.monotonic() < deadline, "the target never built its shape"
        time.sleep(0.2)
    return dict(truth)


def test_inspect_past_the_node_budget_names_no_owner_and_says_why(tmp_path: Path) -> None:
    with spawn_target("root_shapes", tmp_path, env=SHAPE) as child:
        _ready(child)
        shown = CliRunner().invoke(app, ["inspect", str(child.pid)], env={**BUDGET, "COLUMNS": "300", "NO_COLOR": "1"})
        doc = _inspect(child.pid, env=BUDGET)  # (the payload remembers the last graph was over: not walked)
        census = _inspect(child.pid, "--owners", "census", env=BUDGET)
        fits = _inspect(child.pid)  # the default budget: walked again, the owner named
    assert shown.exit_code == 0, shown.output
    header = next(line for line in shown.output.splitlines() if line.startswith("owners:"))
    assert header.startswith("owners: not attributed: the object graph has more than 1,000 nodes: over the graph "
                             "budget; LEAKHOUND_MAX_GRAPH_NODES=N raises the node budget"), header
    assert "`inspect --owners census` lists first reachers instead" in header
    assert OWNER in shown.output and "__main__.BUFFERS" not in shown.output
    assert "_io.BytesIO" in shown.output  # the per-type view stands

    heap = doc["heap"]
    assert (heap["owner_model"], heap["owner_model_reason"]) == ("not-attributed", "graph_over_nodes")
    assert "the last object graph walked in this process had more than 1,000 nodes" in heap["owner_model_note"]
    assert [(o["path"], o["retained_bytes"]) for o in doc["owners"]] == [(OWNER, heap["bytes"])]
    # Asked for, first reachers are still there, called so; with room, the owner is named.
    assert census["heap"]["owner_model"] == "first-reacher" and census["owners"][0]["path"] == "__main__.BUFFERS"
    assert fits["heap"]["owner_model"] == "dominator" and fits["owners"][0]["path"] == "__main__.BUFFERS"


def test_watch_past_the_node_budget_says_the_heap_grows_with_no_owner_named(tmp_path: Path) -> None:
    env = {**SHAPE, "FIXTURE_GROW_RATE": "25"}  # ~2.2 MB/s of buffers
    with spawn_target("root_shapes", tmp_path, env=env) as child:
        before = _ready(child)
        watched = CliRunner().invoke(app, ["watch", str(child.pid), "-i", "1", "-d", "8", "--full-every", "2",
                                           "--json"], env=BUDGET)
        after = _ready(child)
    assert watched.exit_code == 0, watched.output
    report = json.loads(watched.stdout.splitlines()[-1])
    (process,) = report["processes"]
    assert (process["owner_model"], process["owner_model_reason"]) == ("not-attributed", "graph_over_nodes")
    said = [w for w in process["warnings"] if w.startswith("owners not attributed: ")]
    assert len(said) == 1 and "LEAKHOUND_MAX_GRAPH_NODES=N" in said[0], process["warnings"]
    assert [t["name"] for t in process["owners"]] == [OWNER]
    warnings = [f for f in report["findings"] if f["severity"] == "warning"]
    assert [(f["kind"], f["owner"]) for f in warnings] == [("growth", OWNER)], warnings
    assert warnings[0]["summary"].startswith("the heap keeps growing: ")
    # The heap's growth is the buffers' (what the target's forked child frees, over time).
    true_rate = (after["owner_bytes"] - before["owner_bytes"]) * 60.0 / (after["at"] - before["at"])
    assert within(warnings[0]["details"]["bytes_per_min"], true_rate, 0.25), (warnings[0]["details"], true_rate)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_export_past_the_node_budget_labels_the_heap_not_attributed(tmp_path: Path) -> None:
    port = _free_port()
    with spawn_target("root_shapes", tmp_path, env=SHAPE) as child:
        _ready(child)
        exporter = subprocess.Popen(
            [sys.executable, "-m", "leakhound", "export", "--listen", f"127.0.0.1:{port}", str(child.pid),
             "--interval", "1"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
            env={**os.environ, **BUDGET, "NO_COLOR": "1"},
        )
        try:
            deadline = time.monotonic() + 60
            owners: list[dict[str, str]] = []
            while not owners:
                assert exporter.poll() is None, exporter.communicate()[1].decode()
                assert time.monotonic() < deadline, "no owner in the metrics"
                time.sleep(0.5)
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                        text = resp.read().decode()
                except OSError:
                    continue
                owners = [dict(s.labels) for family in text_string_to_metric_families(text)
                          for s in family.samples if s.name == "leakhound_owner_retained_bytes"]
        finally:
            exporter.terminate()
            _out, err = exporter.communicate(timeout=10)
    assert [o["owner"] for o in owners] == [OWNER], owners
    assert f"process {child.pid}: owners not attributed: " in err.decode()
