"""The Prometheus exposition follows the naming conventions (checked by promtool), its labels are
bounded and stable, and the dashboard and alert rules shipped in docs/ use only what it emits."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from leakhound.analysis.growth import analyse_growth
from leakhound.model import Finding, Owner
from leakhound.model.growth import sample_from_snapshot
from leakhound.render.prometheus import (
    EndedView,
    ProcessView,
    SnapshotCollector,
    collect_metrics,
    labelled_sample,
    metric_names,
    owner_label,
    worker_label,
)
from tests.factories import make_snapshot

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
LABELS = {"pid", "worker", "owner", "type", "kind", "how", "reason"}


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is not installed (.ci/run installs it with apt: prometheus)")
    return path


def _snapshot(t: float, grown: int, line: int) -> object:
    """A worker whose task-held dict grows, seen at a different line of its coroutine each time."""
    return make_snapshot(
        taken_at=t,
        owners=(
            Owner(f"task:Task-1/run (worker.py:{line}).sessions", "dict", 1000 + grown, 10_000_000 + grown * 1000),
            Owner(f"task:Task-{40 + line}/rollout (env.py:{line + 7}).state", "dict", 12, 400_000),
            Owner(f"task:Task-{41 + line}/rollout (env.py:{line + 9}).state", "dict", 10, 300_000),
            Owner("__main__.CACHE", "dict", 1000, 10 * 1024 * 1024, 2001),
            Owner("<modules and classes>", "module", 0, 5_000_000),
        ),
        findings=(
            Finding("registry", "critical", 4000, 12, "m.Runtime.trajectories", "registry", "s"),
            Finding("intercepts", "warning", 900, 3, "m.Server.intercepts", "intercepts", "s"),
            Finding("intercepts", "info", 100, 1, "m.Server.intercepts", "intercepts", "s"),
            Finding("arena_fragmentation", "skipped", 0, 0, "", "", "no glibc"),
        ),
    )


def _exposition(line: int = 120) -> str:
    snaps = [_snapshot(1000.0 + 60 * i, 500 * i, line + i) for i in range(4)]
    # as the exporter keeps its history
    growth = analyse_growth([labelled_sample(sample_from_snapshot(s)) for s in snaps])  # type: ignore[arg-type]
    views = [
        ProcessView(pid=41, worker="worker.py", snapshot=snaps[-1], growth=growth, rss_bytes=300 << 20),  # type: ignore[arg-type]
        ProcessView(pid=42, worker="worker.py", snapshot=None, rss_bytes=200 << 20),  # not censused yet
        ProcessView(pid=43, worker="leakhound.simulate.worker", snapshot=None, up=False, errors=2),
    ]
    ended = [EndedView(pid=44, worker="worker.py", how="oom_killed", at=1_800_000_000.0)]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(lambda: views, ended=lambda: ended))
    return generate_latest(registry).decode()


def _series(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def test_promtool_check_metrics_passes() -> None:
    # Before: snapshot_pause_ms ("abbreviated units") and finding_count ("_count" suffix on a gauge).
    text = _exposition()
    result = subprocess.run([_promtool(), "check", "metrics"], input=text, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "leakhound_owner_growth_bytes_per_second{" in text  # the growth family was populated


def test_base_units_and_one_help_per_metric() -> None:
    families = collect_metrics([])
    docs = [f.documentation for f in families]
    assert len(set(docs)) == len(docs), "two metrics share a HELP text"
    for family in families:
        name = family.name
        assert not re.search(r"_(ms|milliseconds|minutes?|per_minute|kb|mb|mib)(_|$)", name), name
        assert not name.endswith("_count") or family.type in ("histogram", "summary"), name
        if "seconds" in name or "bytes" in name:
            assert re.search(r"_(bytes|seconds|bytes_per_second)$", name), name


def test_labels_are_bounded_and_identify_the_worker() -> None:
    series = _series(_exposition())
    for name, samples in series.items():
        for labels, _ in samples:
            assert set(labels) <= LABELS, (name, labels)  # no verdict, severity or process name
            assert {"pid", "worker"} <= set(labels), (name, labels)
    kinds = {lab["kind"] for lab, _ in series["leakhound_finding_bytes"]}
    assert kinds == {"registry", "intercepts"}
    # The two intercept findings (warning and info before) are one series, summed.
    assert [v for lab, v in series["leakhound_finding_bytes"] if lab["kind"] == "intercepts"] == [1000.0]
    assert series["leakhound_intercepts_bodies"] == [
        ({"pid": "41", "worker": "worker.py", "owner": "m.Server.intercepts"}, 4.0)
    ]


def test_owner_labels_do_not_change_with_the_line_a_coroutine_is_at() -> None:
    # Before: every census put the task's owner at its coroutine's current line, a new series
    # each time; rollout tasks (Task-<n>) made one more per rollout.
    def owners(text: str) -> set[str]:
        return {lab["owner"] for lab, _ in _series(text)["leakhound_owner_retained_bytes"]}

    first, later = owners(_exposition(line=120)), owners(_exposition(line=377))
    assert first == later == {
        "task:Task-*/run (worker.py).sessions", "task:Task-*/rollout (env.py).state", "__main__.CACHE",
    }
    series = _series(_exposition())
    rollouts = [v for lab, v in series["leakhound_owner_retained_bytes"] if "rollout" in lab["owner"]]
    assert rollouts == [700_000.0]  # the two rollout tasks' owners, summed: nothing counted twice
    growth = {lab["owner"]: v for lab, v in series["leakhound_owner_growth_bytes_per_second"]}
    # 500 items of 1000 bytes a minute, per second
    assert growth["task:Task-*/run (worker.py).sessions"] == pytest.approx(500 * 1000 / 60.0)


def test_owner_label() -> None:
    assert owner_label("task:Task-1/run (worker.py:123).x") == "task:Task-*/run (worker.py).x"
    assert owner_label("thread:Thread-3 (pump)/loop (io.py:9).<dict>") == "thread:Thread-* (pump)/loop (io.py).<dict>"
    assert owner_label("thread:ThreadPoolExecutor-0_3/_worker (thread.py:89)") == (
        "thread:ThreadPoolExecutor-*/_worker (thread.py)"
    )
    assert owner_label("__main__.APP.bus._listeners") == "__main__.APP.bus._listeners"


@pytest.mark.parametrize(
    ("argv", "label"),
    [
        (["/usr/bin/python3", "-u", "-X", "dev", "-m", "leakhound.simulate.worker", "--seed", "1"],
         "leakhound.simulate.worker"),
        (["python3.11", "/srv/app/worker.py", "--port", "1"], "worker.py"),
        (["/venv/bin/python", "-W", "ignore", "/venv/bin/vf-eval", "env"], "vf-eval"),
        (["python3", "-c", "import app; app.main()"], "-c"),
        (["/usr/local/bin/uwsgi", "--ini", "a.ini"], "uwsgi"),
        ([], "python3"),
    ],
)
def test_worker_label(argv: list[str], label: str) -> None:
    assert worker_label(argv, "python3") == label


def test_up_is_1_before_the_first_census_and_0_after_a_failed_one() -> None:
    series = _series(_exposition())
    up = {lab["pid"]: v for lab, v in series["leakhound_up"]}
    assert up == {"41": 1.0, "42": 1.0, "43": 0.0}


def test_docs_list_every_metric() -> None:
    text = (DOCS / "export.md").read_text()
    documented = set(re.findall(r"`(leakhound_[a-z_]+)`", text))
    assert documented == set(metric_names())


def _names_in(expr: str) -> set[str]:
    return set(re.findall(r"\bleakhound_[a-z_]+\b", expr))


def test_alert_rules_pass_promtool_and_use_emitted_metrics() -> None:
    rules = DOCS / "prometheus-alerts.yml"
    check = subprocess.run([_promtool(), "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    # The rules fire on the exporter's series (and a filled cache stays quiet): promtool's unit test.
    unit = subprocess.run([_promtool(), "test", "rules", str(ROOT / "tests/prometheus/alerts_test.yml")],
                          capture_output=True, text=True, timeout=60)
    assert unit.returncode == 0, unit.stdout + unit.stderr
    used = _names_in("\n".join(re.findall(r"expr: (.*)", rules.read_text())))
    assert used and used <= set(metric_names()), used - set(metric_names())


def _exprs(node: object) -> list[str]:
    if isinstance(node, dict):
        found = [v for k, v in node.items() if k in ("expr", "definition") and isinstance(v, str)]
        return found + [e for v in node.values() for e in _exprs(v)]
    if isinstance(node, list):
        return [e for v in node for e in _exprs(v)]
    return []


def test_grafana_dashboard_queries_only_emitted_metrics_and_labels() -> None:
    dashboard = json.loads((DOCS / "grafana-dashboard.json").read_text())
    assert dashboard["panels"] and all(panel["targets"] for panel in dashboard["panels"])
    exprs = _exprs(dashboard)
    used = set().union(*(_names_in(e) for e in exprs))
    assert used <= set(metric_names()), used - set(metric_names())
    # Every metric a panel could need is charted somewhere.
    assert used >= set(metric_names()) - {"leakhound_live_heap_objects", "leakhound_malloc_free_bytes",
                                          "leakhound_pymalloc_free_bytes", "leakhound_finding_items",
                                          "leakhound_intercepts_bodies",
                                          "leakhound_target_ended_timestamp_seconds"}
    grouped = set().union(*(re.findall(r"\b(?:by|without) \(([^)]*)\)", e) for e in exprs))
    labels = {part.strip() for group in grouped for part in group.split(",")}
    legend = set().union(*(set(re.findall(r"\{\{(\w+)\}\}", p.get("legendFormat", "")))
                           for panel in dashboard["panels"] for p in panel["targets"]))
    selected = set().union(*(re.findall(r"(\w+)=~?\"", e) for e in exprs))
    assert labels | legend | selected <= LABELS, (labels | legend | selected) - LABELS
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(set(ids)) == len(ids)


def test_export_top_is_an_option() -> None:
    from typer.testing import CliRunner

    from leakhound.cli import app

    result = CliRunner().invoke(app, ["export", "--help"], env={"COLUMNS": "120"})
    assert result.exit_code == 0 and "--top" in result.output
    assert CliRunner().invoke(app, ["export", "1", "--top", "0"]).exit_code == 2


def test_an_ended_process_is_a_series_of_when_and_how() -> None:
    (ended,) = _series(_exposition())["leakhound_target_ended_timestamp_seconds"]
    assert ended == ({"pid": "44", "worker": "worker.py", "how": "oom_killed"}, 1_800_000_000.0)
