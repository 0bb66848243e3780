"""One workload config for confirm, simulate and the fleet: one dataclass, one set of defaults,
and the simulated worker's own command line says ``--fix`` like every leakhound command."""

from __future__ import annotations

import dataclasses

from leakhound.simulate.env_worker import WorkerConfig
from leakhound.simulate.worker import parse_args
from leakhound.simulate.workload import Workload


def _workload_of(config: WorkerConfig) -> Workload:
    return Workload(**{f.name: getattr(config, f.name) for f in dataclasses.fields(Workload)})


def test_the_worker_defaults_are_the_workloads() -> None:
    assert _workload_of(parse_args([])) == Workload()
    assert parse_args([]).fixes == frozenset()


def test_a_workload_reaches_the_worker_whole() -> None:
    workload = Workload(concurrency=2, turns=6, rollouts=None, image_kb=8, group_size=3, stats_interval=0.3,
                        hold=5.0, seed=7, model_latency_ms=30.0, image_tokens=12, park=1)
    assert _workload_of(parse_args(workload.worker_args())) == workload


def test_the_worker_takes_fix_and_still_reads_fixes() -> None:
    assert parse_args(["--fix", "steps,trim"]).fixes == {"steps", "trim"}
    assert parse_args(["--fixes", "registry"]).fixes == {"registry"}


def test_confirm_and_simulate_share_the_workload_defaults() -> None:
    from typer.testing import CliRunner

    from leakhound.cli import app

    for command in ("confirm", "simulate"):
        out = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"}).output
        default = Workload()
        for option, value in (("--turns", default.turns), ("--concurrency", default.concurrency),
                              ("--image-kb", default.image_kb)):
            line = next(line for line in out.splitlines() if line.strip().startswith(option))
            assert f"default: {value}" in line, (command, line)
