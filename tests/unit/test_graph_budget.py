"""The object graph's default memory budget in the target: a quarter of its RSS, within a
floor and a ceiling (a sick worker near its limit must not be handed a graph of a quarter of
several GB)."""

from __future__ import annotations

import os

import pytest

from leakhound.core import capture


@pytest.mark.parametrize(("rss_mib", "budget_mib"), [(0, 64), (100, 64), (400, 100), (4096, 256)])
def test_a_quarter_of_rss_within_the_floor_and_the_ceiling(monkeypatch: pytest.MonkeyPatch,
                                                            rss_mib: int, budget_mib: int) -> None:
    page = os.sysconf("SC_PAGE_SIZE")
    real_open = open

    def fake_open(path: str, *args: object, **kwargs: object) -> object:
        if path == "/proc/4242/statm":
            import io  # noqa: PLC0415

            return io.StringIO(f"0 {rss_mib * (1 << 20) // page} 0 0 0 0 0\n")
        return real_open(path, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr("builtins.open", fake_open)
    assert capture.graph_memory_budget(4242) == budget_mib << 20
