"""Counts are said in the right number: "1 trim", "2 trims"."""

from __future__ import annotations

from leakhound.model.units import count
from leakhound.patches import FIXES, Measurement


def test_count_says_one_and_many() -> None:
    assert count(1, "trim") == "1 trim"
    assert count(0, "trim") == "0 trims"
    assert count(12_345, "object") == "12,345 objects"
    assert count(2, "Python thread") == "2 Python threads"
    assert count(3, "entry", "entries") == "3 entries"


def test_the_trim_effect_says_one_trim() -> None:
    measured = Measurement(rss_bytes=100 << 20)
    effect = FIXES["trim"].effect(measured, measured, {"trims": 1, "max_trim_ms": 3, "cadence": "loop"})
    assert "1 trim so far" in effect.summary and "1 trims" not in effect.summary
