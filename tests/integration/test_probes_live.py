"""The verifiers probe in a real target (fixtures/probe_shapes.py): its facts against the sizes
the target computes itself, through the compiled walk and through deep_size in Python (issue
12: the probes size through the census's compiled walk where the data allows).

The target holds a verifiers-shaped registry, steps and intercepts of plain data (and, with
FIXTURE_ODD=1, objects the compiled walk would walk into differently: the probe then sizes
in Python); every number is compared exactly with the target's own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from leakhound.core.capture import take_snapshot
from leakhound.core.request import RequestOptions
from tests.pythons import installed_pythons
from tests.utils import spawn_target

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]

FACTS = ("registry", "steps", "intercepts")


def _probe_and_truth(tmp_path: Path, env: dict[str, str], python: str | None = None,
                     walker: str | None = None, monkeypatch: pytest.MonkeyPatch | None = None
                     ) -> tuple[dict[str, Any], dict[str, Any]]:
    if walker is not None and monkeypatch is not None:
        monkeypatch.setenv("LEAKHOUND_WALKER", walker)
    with spawn_target("probe_shapes", tmp_path, env=env, python=python, timeout=60) as target:
        before = target.report()["truth"]
        snapshot = take_snapshot(target.pid, request=RequestOptions(timeout=120))
        after = target.report()["truth"]
    assert before == after  # nothing moves in this target
    probe = snapshot.probes["verifiers"]
    assert "skipped" not in probe, probe
    return probe, after


def _assert_matches(probe: dict[str, Any], truth: dict[str, Any]) -> None:
    for section in FACTS:
        for key, value in truth[section].items():
            assert probe[section][key] == value, (section, key, probe[section], truth[section])


def test_the_probe_sizes_through_the_compiled_walk_what_the_target_computes(tmp_path: Path) -> None:
    probe, truth = _probe_and_truth(tmp_path, {})
    assert probe["sizing"] == ["compiled", "compiled"]
    assert truth["registry"]["inflight_entries"] == 2 and truth["steps"]["sidecar_steps"] > 0
    assert truth["intercepts"]["delivered"] > 0 and truth["intercepts"]["pending"] > 0
    _assert_matches(probe, truth)


def test_the_python_walker_reports_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    probe, truth = _probe_and_truth(tmp_path, {}, walker="python", monkeypatch=monkeypatch)
    assert probe["sizing"] == ["python", "python"]
    _assert_matches(probe, truth)


def test_objects_the_compiled_walk_would_walk_into_send_the_sizing_back_to_python(tmp_path: Path) -> None:
    # An instance with a 5,000-int list, its class and an OrderedDict in one step: deep_size
    # sizes the first two without walking into them; the compiled walk would.
    probe, truth = _probe_and_truth(tmp_path, {"FIXTURE_ODD": "1"})
    assert probe["sizing"] == ["python", "compiled"]
    _assert_matches(probe, truth)


@pytest.mark.parametrize("version", sorted(v for v in installed_pythons() if v in ("3.10", "3.12", "3.13")))
def test_on_other_cpythons(tmp_path: Path, version: str) -> None:
    probe, truth = _probe_and_truth(tmp_path, {"FIXTURE_TRAJECTORIES": "60"}, python=installed_pythons()[version])
    assert probe["sizing"] == ["compiled", "compiled"]
    # 3.10's coroutines list their frame object, not its locals: read through the frame
    assert truth["registry"]["inflight_entries"] == 2
    _assert_matches(probe, truth)
