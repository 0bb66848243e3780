"""A class's registry of its subclasses (``object.<subclasses>``) grows by a weakref a class
made: whoever keeps the classes is the owner a watch names growing, not the registry too."""

from __future__ import annotations

from dataclasses import replace

from leakhound.analysis.growth import analyse_growth
from leakhound.model import Owner
from leakhound.model.growth import sample_from_snapshot
from tests.factories import MB, make_snapshot


def test_a_registry_of_subclasses_growing_is_no_finding() -> None:
    samples = []
    for k in range(4):
        base = make_snapshot(taken_at=1_800_000_000.0 + 10 * k)
        owners = (Owner("__main__.MODELS", "list", 1000 * (k + 1), (10 + 10 * k) * MB, 1000 * (k + 1)),
                  Owner("object.<subclasses>", "dict", 300 + 1000 * k, 40_000 + 140_000 * k, 300 + 1000 * k))
        samples.append(sample_from_snapshot(replace(base, owners=owners,
                                                    heap=replace(base.heap, bytes=(100 + 10 * k) * MB,
                                                                 owner_model="dominator"))))
    report = analyse_growth(samples)
    growing = [f.owner for f in report.findings if f.severity == "warning"]
    assert growing == ["__main__.MODELS"], report.findings
