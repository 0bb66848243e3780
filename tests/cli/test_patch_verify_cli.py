"""``patch --verify`` / ``--baseline`` wiring: what reaches the core, what is printed where."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from leakhound.cli import app
from leakhound.model import PatchOutcome
from leakhound.model.verify import VerifyReport, WindowStats

OUTCOME = PatchOutcome(fix="registry", pid=41, status="applied", metric="finished rollouts")
WINDOW = WindowStats(started_at=100.0, ended_at=104.0, samples=9, rss_first_bytes=1, rss_last_bytes=2,
                     rss_bytes_per_min=0.0)
PROOF = VerifyReport(pid=41, fixes=("registry",), interval_seconds=0.5, before=WINDOW, after=WINDOW, per_fix=(),
                     verdict="not-proven", summary="not proven: RSS slope within noise")


class _Verify:
    """Stands in for core.verify.verify_process: records its arguments, says progress twice."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def __call__(self, pid: int, **kwargs: Any) -> tuple[tuple[PatchOutcome, ...], VerifyReport]:
        self.calls.append({"pid": pid, **kwargs})
        kwargs["say"]("pid 41: before the fix: 1/4s, RSS 10.0 MiB")
        kwargs["say"]("pid 41: after the fix: 1/4s, RSS 10.0 MiB")
        return (OUTCOME,), PROOF


@pytest.fixture
def verify(monkeypatch: pytest.MonkeyPatch) -> _Verify:
    fake = _Verify()
    monkeypatch.setattr("leakhound.commands.patch.verify_process", fake)
    return fake


def _invoke(args: list[str]) -> Any:
    return CliRunner().invoke(app, args, env={"NO_COLOR": "1", "COLUMNS": "120"})


def test_the_window_before_is_as_long_as_verify_unless_given(verify: _Verify) -> None:
    assert _invoke(["patch", "41", "--fix", "registry", "--verify", "4"]).exit_code == 0
    assert _invoke(["patch", "41", "--fix", "registry", "--verify", "4", "--baseline", "9"]).exit_code == 0
    first, second = verify.calls
    assert (first["pid"], first["fixes"], first["verify_seconds"], first["baseline_seconds"]) == (41, ["registry"],
                                                                                                  4.0, 4.0)
    assert second["baseline_seconds"] == 9.0


def test_baseline_needs_verify(verify: _Verify) -> None:
    result = _invoke(["patch", "41", "--fix", "registry", "--baseline", "9"])
    assert result.exit_code == 2 and "--verify" in result.output and verify.calls == []


def test_progress_goes_to_stderr_and_the_proof_to_stdout(verify: _Verify) -> None:
    result = _invoke(["patch", "41", "--fix", "registry", "--verify", "4"])
    assert result.exit_code == 0, result.output
    assert "leakhound: pid 41: before the fix: 1/4s, RSS 10.0 MiB" in result.stderr
    assert "leakhound: pid 41: after the fix: 1/4s" in result.stderr
    assert "verdict: not-proven: not proven: RSS slope within noise" in result.stdout
    assert "\x1b[" not in result.stdout + result.stderr


def test_json_carries_the_proof_and_no_progress(verify: _Verify) -> None:
    result = _invoke(["patch", "41", "--fix", "registry", "--verify", "4", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    (proof,) = doc["verify"]
    assert proof["verdict"] == "not-proven" and proof["before"]["seconds"] == 4.0
    assert doc["outcomes"][0]["stays"] and "before the fix" not in result.stderr


def test_without_verify_the_proof_is_not_taken(verify: _Verify, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("leakhound.commands.patch.patch_process", lambda *a, **k: (OUTCOME,))
    result = _invoke(["patch", "41", "--fix", "registry", "--json"])
    assert result.exit_code == 0 and "verify" not in json.loads(result.stdout) and verify.calls == []
