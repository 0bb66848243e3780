"""export: scrape the real endpoint, served by a real `leakhound export`, with the Prometheus
text parser; numbers checked against what the target reports about itself."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from leakhound.core.export import ListenError, parse_listen
from leakhound.core.request import RequestOptions
from leakhound.model import (
    ArenaStats,
    CyclicGarbage,
    Finding,
    HeapStats,
    Owner,
    ProcessStats,
    Snapshot,
)
from leakhound.render.prometheus import ProcessView, collect_metrics
from tests.utils import spawn_target, within

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def test_scrape_real_endpoint(tmp_path: Path) -> None:
    port = _free_port()
    with spawn_target("static_table", tmp_path) as child:
        exporter = subprocess.Popen(
            [sys.executable, "-m", "leakhound", "export", "--listen", f"127.0.0.1:{port}",
             "--match", str(tmp_path), "--interval", "30"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 30
            metrics: dict[str, list[tuple[dict[str, str], float]]] = {}
            while "leakhound_live_heap_bytes" not in metrics:
                assert exporter.poll() is None, exporter.communicate()[1].decode()
                assert time.monotonic() < deadline, "no census in the metrics"
                time.sleep(0.2)
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                        text = resp.read().decode()
                        metrics = _samples(text)
                except OSError:
                    continue
            truth = child.report()
        finally:
            exporter.terminate()
            exporter.wait(timeout=10)
    # The worker label names the fixture's script, not the interpreter.
    labels = {"pid": str(child.pid), "worker": "static_table.py"}
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool is not installed (.ci/run installs it with apt: prometheus)"
    check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    (up,) = metrics["leakhound_up"]
    assert up == (labels, 1.0)
    (rss,) = metrics["leakhound_rss_bytes"]
    assert rss[0] == labels and within(rss[1], truth["rss_bytes"], 0.15)
    table = [v for lab, v in metrics["leakhound_owner_retained_bytes"] if lab["owner"] == "__main__.TABLE"]
    assert len(table) == 1 and within(table[0], truth["truth"]["table_bytes"], 0.10)
    items = [v for lab, v in metrics["leakhound_owner_items"] if lab["owner"] == "__main__.TABLE"]
    assert items == [truth["truth"]["table_items"]]
    assert metrics["leakhound_trimmable_bytes"][0][1] >= 0
    assert metrics["leakhound_live_heap_bytes"][0][1] >= truth["truth"]["table_bytes"] * 0.9


def test_verifier_findings_become_named_metrics() -> None:
    snap = Snapshot(
        pid=7, taken_at=1.0, python_version="3.11.7", method="agent",
        process=ProcessStats(rss_bytes=100, uss_bytes=0, pss_bytes=0, swap_bytes=0, num_threads=1, name="env"),
        heap=HeapStats(objects=1, bytes=50, census_seconds=0.1, max_pause_ms=2.0),
        arena=ArenaStats(malloc_in_use_bytes=0, malloc_free_bytes=30, trimmable_bytes=20, pymalloc_free_bytes=5),
        types=(), owners=(Owner("env.REGISTRY", "dict", 12, 4000),),
        cyclic_garbage=CyclicGarbage(objects=0, bytes=0),
        findings=(
            Finding("registry", "critical", 4000, 12, "env.REGISTRY", "", "s"),
            Finding("intercepts", "warning", 900, 3, "env.INTERCEPTS", "", "s"),
            Finding("intercepts", "warning", 100, 1, "env.INTERCEPTS", "", "s"),
            Finding("arena_fragmentation", "skipped", 0, 0, "", "", "no glibc"),
        ),
    )
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.registry import Collector

    class _Fixed(Collector):
        def collect(self):  # type: ignore[no-untyped-def]  # noqa: ANN202
            return iter(collect_metrics([ProcessView(pid=7, worker="env", snapshot=snap, rss_bytes=123)]))

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed())
    metrics = _samples(generate_latest(registry).decode())
    base = {"pid": "7", "worker": "env"}
    assert metrics["leakhound_registry_entries"] == [({**base, "owner": "env.REGISTRY"}, 12.0)]
    assert metrics["leakhound_registry_bytes"] == [({**base, "owner": "env.REGISTRY"}, 4000.0)]
    assert metrics["leakhound_intercepts_bodies"] == [({**base, "owner": "env.INTERCEPTS"}, 4.0)]
    assert metrics["leakhound_intercepts_bytes"] == [({**base, "owner": "env.INTERCEPTS"}, 1000.0)]
    kinds = {lab["kind"] for lab, _ in metrics["leakhound_finding_bytes"]}
    assert kinds == {"registry", "intercepts"}
    assert metrics["leakhound_rss_bytes"] == [(base, 123.0)]


def test_listen_is_loopback_unless_told() -> None:
    assert parse_listen("127.0.0.1:9464", allow_remote=False) == ("127.0.0.1", 9464)
    assert parse_listen("[::1]:9000", allow_remote=False) == ("::1", 9000)
    with pytest.raises(ListenError):
        parse_listen("0.0.0.0:9464", allow_remote=False)
    assert parse_listen("0.0.0.0:9464", allow_remote=True) == ("0.0.0.0", 9464)
    with pytest.raises(ListenError):
        parse_listen("9464", allow_remote=False)


def test_cli_refuses_remote_listen_without_flag() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "leakhound", "export", str(os.getpid()), "--listen", "0.0.0.0:9464"],
        capture_output=True, text=True, timeout=30,
    )
    assert out.returncode == 2
    assert "refusing to listen" in out.stderr and "Traceback" not in out.stderr


def test_up_before_the_first_census(tmp_path: Path) -> None:
    # Before: leakhound_up was 0 from the start until the first census had finished, the same
    # value a failing worker gets: an alert on up == 0 fired for every new worker.
    from leakhound.core.export import Exporter

    with spawn_target("static_table", tmp_path) as child:
        exporter = Exporter(pids=(child.pid,), match=None, request=RequestOptions(timeout=30.0), interval=60.0)
        (view,) = exporter.views()
        families = {f.name: f for f in collect_metrics([view])}
    assert [s.value for s in families["leakhound_up"].samples] == [1.0]
    assert view.snapshot is None and [s.labels["worker"] for s in families["leakhound_up"].samples] == [
        "static_table.py"
    ]
