"""Growth analysis on hand-built series: exact rates, verdicts and findings."""

from __future__ import annotations

import pytest

from leakhound.analysis.growth import analyse_growth, estimate_owners, slope, trend
from leakhound.model import Owner, TypeStat
from leakhound.model.growth import (
    GROWING,
    PLATEAUED,
    STATIC,
    UNKNOWN,
    OwnerSample,
    Sample,
    sample_from_dict,
    sample_to_dict,
)

T0 = 1_700_000_000.0


def _sample(t: float, owners: dict[str, tuple[int, int]], *, rss: int = 50_000_000, full: bool = False) -> Sample:
    return Sample(
        pid=42,
        taken_at=T0 + t,
        rss_bytes=rss,
        heap_bytes=sum(b for b, _ in owners.values()) if full else None,
        owners=tuple(OwnerSample(path, "dict", items, size) for path, (size, items) in owners.items()),
        full=full,
        name="worker",
    )


def _series(fn, n: int = 12, step: float = 1.0) -> list[Sample]:  # noqa: ANN001
    return [_sample(i * step, fn(i * step), full=i in (0, n - 1)) for i in range(n)]


def test_slope_is_least_squares() -> None:
    assert slope([(0.0, 1.0), (1.0, 3.0), (2.0, 5.0)]) == 2.0
    assert slope([(0.0, 1.0), (1.0, 0.0), (2.0, 1.0)]) == 0.0
    assert slope([(5.0, 1.0)]) == 0.0
    assert slope([(5.0, 1.0), (5.0, 9.0)]) == 0.0


def test_steady_leak_is_growing_with_its_exact_rate() -> None:
    samples = _series(lambda t: {"__main__.SESSIONS": (int(300 * (1000 + 100 * t)), int(1000 + 100 * t)),
                                 "__main__.TABLE": (20_000_000, 60_000)})
    report = analyse_growth(samples)
    leak = report.owners[0]
    assert leak.name == "__main__.SESSIONS"
    assert leak.verdict == GROWING
    assert leak.items_per_min == pytest.approx(6000.0)
    assert leak.bytes_per_min == pytest.approx(1_800_000.0)
    assert leak.recent_items_per_min == pytest.approx(6000.0)
    assert (leak.first_items, leak.last_items, leak.points, leak.seconds) == (1000, 2100, 12, 11.0)
    assert {t.name: t.verdict for t in report.owners}["__main__.TABLE"] == STATIC
    assert report.verdict == GROWING
    assert report.full_samples == 2
    (finding,) = report.findings
    assert (finding.kind, finding.severity, finding.owner) == ("growth", "warning", "__main__.SESSIONS")
    assert (finding.bytes, finding.count) == (630_000, 2100)
    assert finding.details["bytes_per_min"] == 1_800_000.0
    assert finding.details["items_per_min"] == 6000.0
    assert finding.details["verdict"] == GROWING
    assert finding.summary == (
        "__main__.SESSIONS (dict) keeps growing: 1.7 MiB/min, 6,000 items/min over 11 s "
        "(now 615.2 KiB, 2,100 items)"  # as the watch's table says them
    )


def test_bounded_cache_plateaus() -> None:
    def cache(t: float) -> dict[str, tuple[int, int]]:
        items = int(min(100 * t, 500))
        return {"__main__.CACHE": (items * 400, items)}

    report = analyse_growth(_series(cache, n=15))
    (owner,) = report.owners
    assert owner.verdict == PLATEAUED
    assert owner.recent_items_per_min == 0.0
    assert owner.last_items == 500
    assert report.verdict == PLATEAUED
    (finding,) = report.findings
    assert (finding.severity, finding.owner) == ("info", "__main__.CACHE")
    assert "plateaued" in finding.summary


def test_large_static_table_and_churn_are_static() -> None:
    def static(t: float) -> dict[str, tuple[int, int]]:
        wobble = 200_000 if int(t) % 2 else 0  # request buffers come and go
        return {"__main__.TABLE": (80_000_000, 500_000), "thread:requests/run (w.py:9)": (wobble, 1)}

    report = analyse_growth(_series(static))
    assert {t.verdict for t in report.owners} == {STATIC}
    assert report.verdict == STATIC
    assert report.findings == ()


def test_small_growth_is_noise() -> None:
    # +50 items and +50 KB over the window: under both floors.
    report = analyse_growth(_series(lambda t: {"m.X": (1_000_000 + int(5000 * t), 1000 + int(5 * t))}, n=11))
    assert report.owners[0].verdict == STATIC


def test_too_few_samples_is_unknown() -> None:
    report = analyse_growth([_sample(0, {"m.X": (1, 1)}), _sample(1, {"m.X": (10**9, 10**6)})])
    assert report.owners[0].verdict == UNKNOWN
    assert report.verdict == UNKNOWN
    assert report.findings == ()


def test_rss_growth_no_owner_explains_is_a_finding() -> None:
    samples = [_sample(i, {"m.TABLE": (1_000_000, 100)}, rss=50_000_000 + i * 2_000_000) for i in range(10)]
    report = analyse_growth(samples)
    assert report.rss.verdict == GROWING
    assert report.rss.bytes_per_min == pytest.approx(120_000_000.0)
    (finding,) = report.findings
    assert (finding.owner, finding.severity) == ("<rss>", "warning")
    assert "no Python owner" in finding.summary


def test_an_owner_grown_between_two_full_censuses_in_bytes_alone_is_named_in_the_rss_finding() -> None:
    """A replay buffer filling (bytes, no items) is measured by the full censuses only: in a
    watch shorter than --full-every, two points, no verdict. The RSS finding names it rather
    than saying no Python owner grows."""
    samples = []
    for i in range(10):
        full = i in (0, 9)
        owners = {"m.REPLAY": (10_000_000 + i * 2_000_000, 0)} if full else {}
        samples.append(_sample(i * 10, owners, rss=50_000_000 + i * 2_000_000, full=full))
    report = analyse_growth(samples)
    assert report.rss.verdict == GROWING and report.owners[0].verdict == UNKNOWN
    (finding,) = report.findings
    assert finding.owner == "<rss>" and finding.details["unsure_owner"] == "m.REPLAY"
    assert "m.REPLAY (dict) grew 11.4 MiB/min" in finding.summary and "2 are too few" in finding.summary
    assert "no Python owner" not in finding.summary


def test_verdict_follows_items_when_bytes_are_flat() -> None:
    points = [(float(t), 1_000_000, 100 + 50 * t) for t in range(10)]
    assert trend("m.Q", "owner", points).verdict == GROWING


def test_estimate_owners_scales_bytes_by_items() -> None:
    reference = [Owner("m.A", "dict", 10, 1000, object_id=11), Owner("m.B", "dict", 0, 500),
                 Owner("m.C", "dict", 7, 7), Owner("m.D", "m.Box", 3, 900)]
    # found with 25 items; found with 3; not found again; found, but no length to scale by
    estimated = estimate_owners(reference, [(True, 25), (True, 3), (False, None), (True, None)])
    assert estimated == (
        OwnerSample("m.A", "dict", 25, 2500, estimated=True, object_id=11),
        OwnerSample("m.B", "dict", 3, 500, estimated=True),
    )


def test_type_trends_follow_one_scope() -> None:
    samples = [
        Sample(pid=1, taken_at=T0 + i, rss_bytes=1, types=(TypeStat("m.Node", 1000 + 500 * i, 0),),
               types_scope="tracked")
        for i in range(6)
    ] + [Sample(pid=1, taken_at=T0 + 2.5, rss_bytes=1, types=(TypeStat("m.Node", 10, 10),), types_scope="all")]
    report = analyse_growth(samples)
    (node,) = report.types
    assert node.points == 6
    assert node.items_per_min == pytest.approx(30000.0)
    assert node.verdict == GROWING


def test_sample_round_trips_through_json_dict() -> None:
    sample = _sample(3, {"m.A": (1000, 10)}, full=True)
    assert sample_from_dict(sample_to_dict(sample)) == sample


def test_samples_of_several_processes_are_refused() -> None:
    with pytest.raises(ValueError, match="several processes"):
        analyse_growth([_sample(0, {}), Sample(pid=7, taken_at=T0, rss_bytes=1)])


def test_steady_leak_on_a_big_owner_is_growing_not_plateaued() -> None:
    # The case: 3,098 items/min on an owner of 100,000 items, watched for a minute. It
    # grew by 3% in the window (over the 2% noise floor) and its recent rate equals its overall
    # rate; its recent third alone grew by 1%, which was judged as noise ("plateaued").
    def leak(t: float) -> dict[str, tuple[int, int]]:
        items = 100_000 + round(3098 * t / 60)
        return {"__main__.SESSIONS": (items * 300, items)}

    report = analyse_growth(_series(leak, n=13, step=5.0))
    (owner,) = report.owners
    assert owner.recent_items_per_min == pytest.approx(3098, rel=0.01)
    assert owner.items_per_min == pytest.approx(3098, rel=0.01)
    assert owner.verdict == GROWING
    assert report.verdict == GROWING
    assert [f.severity for f in report.findings] == ["warning"]


def test_a_cache_still_creeping_after_filling_up_plateaus() -> None:
    # Filled at 10,000 items/min for 40 s, then +20 items/min: recent rate under noise.
    def cache(t: float) -> dict[str, tuple[int, int]]:
        items = round(10_000 * min(t, 40) / 60 + 20 * max(0.0, t - 40) / 60)
        return {"__main__.CACHE": (items * 300, items)}

    report = analyse_growth(_series(cache, n=13, step=5.0))
    assert report.owners[0].verdict == PLATEAUED


def test_rss_steps_of_the_censuses_are_not_a_leak() -> None:
    # A static worker's RSS over a 12 s watch (KiB, measured): a step at the first census and a
    # small one at the second. Its recent part rises, but by less than noise, and slower than
    # over the whole window: not growing.
    kib = [42788, 46308, 46308, 46308, 46308, 46308, 46308, 46308, 46308, 46308, 46628, 46628, 46628]
    samples = [_sample(i, {"m.TABLE": (17_000_000, 100_000)}, rss=k * 1024) for i, k in enumerate(kib)]
    report = analyse_growth(samples)
    assert report.rss.verdict != GROWING
    assert report.verdict == STATIC


def _owned(t: float, owners: list[tuple[str, int, int, int]], *, full: bool, heap: int | None = None,
           rss: int = 50_000_000, garbage: int | None = None) -> Sample:
    return Sample(
        pid=42, taken_at=T0 + t, rss_bytes=rss, heap_bytes=heap if full else None,
        owners=tuple(OwnerSample(path, "list", items, size, object_id=oid) for path, size, items, oid in owners),
        full=full, owner_model="dominator", cyclic_garbage_bytes=garbage if full else None,
        cyclic_garbage_objects=(garbage or 0) // 100 if full else 0,
    )


def test_an_owner_renamed_between_samples_is_one_series() -> None:
    # The same list (same id) named through the client's hook at first, then as the recorder's.
    samples = [_owned(t, [("m.client._event_hooks['r'][].__self__.responses" if t < 5 else "m.RECORDER.responses",
                           1000 * (1000 + 100 * t), 1000 + 100 * t, 0xA0)], full=t % 4 == 0,
                         heap=2_000_000 + 100_000 * t)
               for t in range(12)]
    report = analyse_growth(samples)
    (owner,) = report.owners
    assert owner.name == "m.RECORDER.responses" and owner.points == 12 and owner.verdict == GROWING
    assert owner.was == ("m.client._event_hooks['r'][].__self__.responses",)
    (finding,) = report.findings
    assert finding.owner == "m.RECORDER.responses"


def test_a_name_rebound_to_a_new_object_is_one_series_a_position_or_task_is_not() -> None:
    # A linked list's head: every full sample another object by the same module name; beside it
    # a list at a position and a task's list, each another object every time.
    samples = [_owned(t, [("m.HISTORY", 1000 * (1000 + 100 * t), 1000 + 100 * t, 0x100 + t),
                          ("m.QUEUES[]", 5000, 5, 0x200 + t), ("task:Task-7/run.rows", 5000, 5, 0x300 + t)],
                      full=True, heap=2_000_000 + 100_000 * t)
               for t in range(0, 12, 3)]
    report = analyse_growth(samples)
    history = [o for o in report.owners if o.name == "m.HISTORY"]
    assert len(history) == 1 and history[0].points == 4 and history[0].verdict == GROWING
    assert len([o for o in report.owners if o.name == "m.QUEUES[]"]) == 4
    assert len([o for o in report.owners if o.name.startswith("task:")]) == 4


def test_a_path_the_samples_follow_by_its_steps_is_one_series_whatever_object_it_names() -> None:
    """A DataFrame concatenated anew: its block's array is another object in every census, its
    path through C fields (``.<tuple>[]``) no ``named_binding``. Where the samples follow it by
    its steps (attributes, keys, one referent of a type: ``by_steps``), one owner; where they
    do not, one per object, as before."""
    from dataclasses import replace

    from leakhound.model.growth import followed_by_steps

    path = "m.STORE.frame._mgr.<tuple>[].<ndarray>.<ndarray>"
    steps = ("d", "kSTORE", "aframe", "a_mgr", "=tuple", "=Block", "=numpy.ndarray", "=numpy.ndarray")
    assert followed_by_steps(path, steps)
    assert not followed_by_steps(path, (*steps[:-1], ""))  # a step with no label: not followed
    assert not followed_by_steps("task:Task-1/run.rows", ("arows",))
    assert not followed_by_steps("<held from C: list>", ("=list",))
    for by_steps, series in ((True, 1), (False, 4)):
        samples = [_owned(t, [(path, 1000 * (1000 + 100 * t), 0, 0x100 + t)], full=True,
                          heap=2_000_000 + 100_000 * t) for t in range(0, 12, 3)]
        samples = [replace(s, owners=tuple(replace(o, by_steps=by_steps) for o in s.owners)) for s in samples]
        owners = [o for o in analyse_growth(samples).owners if o.name == path]
        assert len(owners) == series, owners
        if by_steps:
            assert owners[0].points == 4 and owners[0].verdict == GROWING


def test_owners_nested_in_one_another_are_one_finding_and_findings_fit_the_heap() -> None:
    # The census named the registry's runtime at first, its trajectories later: the same bytes
    # under two names, never owners in one census. One finding, the inner one (it grew by all).
    def owners(t: float) -> list[tuple[str, int, int, int]]:
        name = "m.RUNTIME" if t < 6 else "m.RUNTIME.trajectories"
        return [(name, 1_000_000 * (10 + t), 10 + t, 0x10 if t < 6 else 0x20)]

    samples = [_owned(t, owners(t), full=True, heap=10_000_000 + 1_000_000 * t) for t in range(12)]
    report = analyse_growth(samples)
    assert {t.name: t.within for t in report.owners} == {"m.RUNTIME": "", "m.RUNTIME.trajectories": "m.RUNTIME"}
    (finding,) = report.findings
    assert finding.owner == "m.RUNTIME.trajectories"
    # Cheap estimates that sum past the heap's growth are scaled to fit it.
    inflated = [_owned(t, [("m.A", 3_000_000 * t, t, 1), ("m.B", 3_000_000 * t, t, 2)], full=t in (0, 11),
                       heap=1_000_000 * t + 10_000_000, rss=1_000_000 * t + 20_000_000) for t in range(12)]
    report = analyse_growth(inflated)
    grown = sum(f.details["grown_bytes"] for f in report.findings if f.owner != "<rss>")
    assert 0 < grown <= 11_000_000 + 1
    assert all(f.details.get("scaled_to_fit") for f in report.findings)


def test_the_parts_of_a_shared_owner_grow_with_it_one_finding() -> None:
    """A Mock left in production records every call in two lists of its own: what both hold
    together (the calls' arguments) is the shared owner; each list's own bytes (its _Call
    tuples) grow too, a hundredth as fast. One finding, the shared owner (it was three)."""
    shared = "<shared by m.CLIENT.send._mock_call_args_list, m.CLIENT.send._mock_mock_calls>"

    def owners(t: int) -> list[tuple[str, int, int, int]]:
        return [(shared, 1_000_000 * (10 + t), 10 + t, 0),
                ("m.CLIENT.send._mock_call_args_list", 10_000 * (10 + t), 10 + t, 0x10),
                ("m.CLIENT.send._mock_mock_calls", 10_000 * (10 + t), 10 + t, 0x20)]

    samples = [_owned(t, owners(t), full=True, heap=10_000_000 + 1_020_000 * t) for t in range(12)]
    report = analyse_growth(samples)
    assert {t.name: t.within for t in report.owners if t.name != shared} == {
        "m.CLIENT.send._mock_call_args_list": shared, "m.CLIENT.send._mock_mock_calls": shared}
    assert [f.owner for f in report.findings] == [shared]


def test_a_growing_owner_of_a_known_shape_carries_its_fix() -> None:
    from dataclasses import replace

    from leakhound.model import Finding
    from tests.factories import make_snapshot

    path = "task:Task-4/run.<EnvWorker>.env.runtime.trajectories"
    samples = [_owned(t, [(path, 1_000_000 * (1 + t), 1 + t, 5)], full=True, heap=2_000_000 * (1 + t))
               for t in range(6)]
    snap = replace(make_snapshot(), findings=(
        Finding("registry", "warning", 1, 1, "task:Task-7/run.<EnvWorker>.env.runtime.trajectories", "registry", "s"),
        Finding("steps", "skipped", 0, 0, path, "steps", "not checked"),
    ))
    (finding,) = analyse_growth(samples, snapshot=snap).findings
    assert finding.fix == "registry" and "--fix registry" in finding.summary
    (unfixed,) = analyse_growth(samples).findings
    assert unfixed.fix == ""


def test_growing_cyclic_garbage_is_a_finding_of_its_own() -> None:
    samples = [_owned(t, [("m.TABLE", 1_000_000, 10, 1)], full=True, heap=3_000_000 + 500_000 * t,
                      garbage=500_000 * t) for t in range(6)]
    report = analyse_growth(samples)
    assert report.verdict == GROWING
    (finding,) = report.findings
    assert (finding.kind, finding.owner, finding.severity) == ("growth", "<unreachable cycles>", "warning")
    assert finding.details["bytes_per_min"] == pytest.approx(30_000_000.0)


def test_samples_not_attributed_are_not_followed_beside_dominator_ones() -> None:
    from dataclasses import replace

    samples = [_owned(t, [("m.RECORDER.responses", 1000 * (10 + t), 10 + t, 1)], full=True, heap=100_000 + t)
               for t in range(6)]
    fallback = replace(samples[3], owners=(OwnerSample("<not attributed: graph over 1,000 nodes>", "", 2,
                                                       99_000_000),), owner_model="not-attributed")
    report = analyse_growth([*samples[:3], fallback, *samples[4:]])
    assert [t.name for t in report.owners] == ["m.RECORDER.responses"]
    assert any("1 full census(es) could not attribute owners" in w for w in report.warnings)


def test_what_was_made_during_a_walk_is_no_growth_finding() -> None:
    # A heap that grows takes longer to walk, and a target logging all along makes more records
    # during each walk: their pseudo-owner grows with the walk, not with a leak (CI, 3.13).
    samples = [_owned(t, [("m.HANDLER.records", 1_000_000 * (1 + t), 1 + t, 1),
                          ("<made during the walk: logging.LogRecord>", 40_000 * (1 + t), 1 + t, 0)],
                      full=True, heap=2_000_000 * (1 + t)) for t in range(8)]
    report = analyse_growth(samples)
    assert [f.owner for f in report.findings] == ["m.HANDLER.records"]


def test_an_owner_not_found_again_is_warned_about_unless_its_frame_ended() -> None:
    from dataclasses import replace

    samples = [_sample(t, {"m.CACHE": (1000 * (10 + t), 10 + t)}, full=t in (0, 5)) for t in range(6)]
    # A client being built in a thread when the census ran is in the cache by the next sample.
    ended = [replace(s, unresolved=("thread:tenants/load_default_certs.self",)) for s in samples]
    assert not any("could not find again" in w for w in analyse_growth(ended).warnings)
    lost = [replace(s, unresolved=("m.REGISTRY['a']",)) for s in samples]
    (warning,) = [w for w in analyse_growth(lost).warnings if "could not find again" in w]
    assert "1 owner(s)" in warning and "m.REGISTRY['a']" in warning
