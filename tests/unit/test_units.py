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


def test_bytes_are_said_in_the_binary_units_they_are_computed_in() -> None:
    from leakhound.model.units import MiB, fmt_bytes

    assert fmt_bytes(512) == "512 B"
    assert fmt_bytes(1536) == "1.5 KiB"
    assert fmt_bytes(140 * MiB) == "140.0 MiB"
    assert fmt_bytes(-5 * MiB) == "-5.0 MiB"
    assert fmt_bytes(3 << 30) == "3.0 GiB"
    # A fixed unit for a column or a rate, with thousands separated.
    assert fmt_bytes(1053 * MiB, "MiB", decimals=0) == "1,053 MiB"
    assert fmt_bytes(MiB // 2, "MiB", decimals=2) == "0.50 MiB"


def test_no_message_calls_a_1024_based_number_mb() -> None:
    """Every formatter leakhound had (table, watch, detectors, fixes, growth, confirm) now says MiB."""
    from leakhound.analysis.detectors.base import mb as detector_mb
    from leakhound.analysis.growth import _mb as growth_mb
    from leakhound.model.units import MiB
    from leakhound.patches.base import mb as fix_mb
    from leakhound.render.patch import _mb as confirm_mb

    for say in (detector_mb, growth_mb, fix_mb, confirm_mb):
        assert say(3 * MiB).endswith(" MiB"), say
