"""The verifiers probe's sizing, pause budget and cancellation (leakhound/payload/probes.py,
issue 12), in this process: a simulated ``Runtime`` (leakhound.simulate.runtime, one of the
module names the probe reads) holding plain data built here, sized by this file's own walk.

The compiled walk (_walk.claim) and ``sizes.deep_size`` must give the same bytes: the same
objects, each once per seen-set. Real targets: tests/integration/test_probes_live.py.
"""

from __future__ import annotations

import collections
import importlib.util
import random
import time
import types
from collections.abc import Iterator
from typing import Any

import pytest

from leakhound.payload import probes, runner
from leakhound.payload.sizes import deep_size
from leakhound.simulate.runtime import Runtime
from tests.utils import FIXTURES

pytestmark = pytest.mark.skipif(getattr(probes._walk, "claim", None) is None,
                                reason="the compiled walk (_walk.abi3.so) is not built here")


def _fixture_target() -> Any:
    spec = importlib.util.spec_from_file_location("leakhound_fixture_target", FIXTURES / "_target.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# sys.getsizeof over what exact or subclassed dicts (keys and values), lists, tuples, sets and
# frozensets hold, each object once: the fixtures' own walk (fixtures/_target.py, the truth
# of fixtures/probe_shapes.py), written apart from deep_size.
reference_size = _fixture_target().plain_size


def _count(root: object, seen: set[int]) -> int:
    if id(root) in seen:
        return 0
    seen.add(id(root))
    if isinstance(root, dict):
        return 1 + sum(_count(k, seen) + _count(v, seen) for k, v in root.items())
    if isinstance(root, (list, tuple, set, frozenset)):
        return 1 + sum(_count(item, seen) for item in root)
    return 1


class Odd:
    def __init__(self) -> None:
        self.payload = list(range(3000))


def _step(rng: random.Random, t: int, k: int, shared: list[float], tokens: int, odd: bool) -> dict[str, Any]:
    ids = [rng.randrange(1 << 18) for _ in range(tokens)]
    if t % 4 == 3:  # the steps fix's sidecar
        message: dict[str, Any] = {"is_truncated": True, "tokens": {"prompt_ids": ids, "completion_ids": ids[:3]}}
    else:
        message = {"role": "assistant", "content": f"text {t} {k} " * 5, "tokens": {"prompt_ids": ids},
                   "logprobs": [rng.random() for _ in range(tokens // 4)], "shared": shared,
                   "set": {1, 2, "three", (4, 5)}, "frozen": frozenset({"a", 2.5}), "blob": b"x" * 100}
    step: dict[str, Any] = {"prompt": [{"role": "user", "content": f"turn {k}"}], "shared": shared,
                            "tokens": {"prompt_ids": ids}, "response": {"message": message, 7: "int key"}}
    if odd and t == 2 and k == 1:
        step["odd"] = [Odd(), Odd, collections.OrderedDict(a=[1.5]), collections.defaultdict(list, b=[2.5]),
                       len, (lambda: 0).__code__, types, _Sub([1, 2])]
    return step


class _Sub(list):  # type: ignore[type-arg]
    pass


def _runtime(trajectories: int = 40, steps: int = 3, tokens: int = 300, odd: bool = False,
             big: bool = False) -> Runtime:
    rng = random.Random(5)
    shared = [rng.random() for _ in range(40)]
    intercepts: dict[str, Any] = {}
    server = types.SimpleNamespace(intercepts=intercepts)
    runtime = Runtime(harness=types.SimpleNamespace(endpoint=types.SimpleNamespace(server=server)))
    for t in range(trajectories):
        runtime.trajectories[f"t{t}"] = [_step(rng, t, k, shared, tokens, odd) for k in range(steps)]
    runtime.trajectories["judge"] = runtime.trajectories["t0"]
    if big:  # more entries than the compiled walk reads in one piece (_walk.h: BIG_CONTAINER)
        runtime.trajectories["big"] = [{"response": {"message": {"n": i, "f": i / 3}}} for i in range(9000)]
    for i in range(6):
        intercepts[f"r{i}"] = {"messages": [{"role": "user", "content": "data:image/png;base64," + "Q" * 500}],
                                 "tools": shared, "prompt": [i, "p"] * 5,
                                 "input": [Odd()] if odd and i == 1 else None}
    return runtime


def _truth(runtime: Runtime) -> dict[str, int]:
    """What the probe reports, computed here (nothing is in flight: no task holds a state)."""
    lists = {id(t): list(t) for t in runtime.trajectories.values()}
    messages = [s["response"]["message"] for c in lists.values() for s in c]
    seen = {id(m) for m in messages}
    retained = sum(reference_size(c, seen) for c in lists.values())
    seen -= {id(m) for m in messages}
    slim = [set(m) <= {"is_truncated", "tokens"} and set(m["tokens"]) <= {"prompt_ids", "completion_ids"}
            for m in messages]
    sizes = [reference_size(m, seen) for m in messages]
    body_seen: set[int] = set()
    bodies = sum(reference_size(v, body_seen) for i in runtime.harness.endpoint.server.intercepts.values()
                 for f in probes.BODY_FIELDS if (v := i.get(f)) is not None)
    return {"retained_bytes": retained + sum(sizes),
            "redundant_bytes": sum(s for s, thin in zip(sizes, slim, strict=True) if not thin),
            "sidecar_bytes": sum(s for s, thin in zip(sizes, slim, strict=True) if thin),
            "body_bytes": bodies}


@pytest.fixture
def make_runtime() -> Iterator[Any]:
    made: list[Runtime] = []

    def make(**kwargs: Any) -> Runtime:
        made.append(_runtime(**kwargs))
        return made[-1]

    yield make
    for runtime in made:
        runtime.trajectories.clear()
    made.clear()


def _facts(found: dict[str, Any]) -> dict[str, int]:
    return {**{k: found["registry"][k] for k in ("retained_bytes", "finished_bytes")},
            **{k: found["steps"][k] for k in ("redundant_bytes", "sidecar_bytes")},
            "body_bytes": found["intercepts"]["body_bytes"]}


@pytest.mark.parametrize("big", [False, True])
def test_compiled_and_python_sizing_match_this_process_own_walk(make_runtime: Any, big: bool) -> None:
    runtime = make_runtime(big=big)
    compiled = probes.verifiers_probe()
    python = probes.verifiers_probe(compiled=False)
    assert compiled["sizing"] == ["compiled", "compiled"]
    assert python["sizing"] == ["python", "python"]
    truth = _truth(runtime)
    assert {k: v for k, v in _facts(compiled).items() if k != "finished_bytes"} == truth
    assert compiled["registry"]["finished_bytes"] == truth["retained_bytes"]
    for found in (compiled, python):
        found.pop("sizing")
        found.pop("pace")
        found["registry"].pop("read_at")  # when each probe read them: the two ran one after the other
        found["intercepts"].pop("read_at")
    assert compiled == python
    assert compiled["steps"]["sidecar_steps"] > 0 and compiled["steps"]["bloated_steps"] > 0


def test_what_the_compiled_walk_would_walk_into_is_sized_in_python(make_runtime: Any) -> None:
    # An instance (with a big list), a class, a code object, a module, a builtin function, a
    # list subclass, an OrderedDict and a defaultdict (whose traverse lists its factory):
    # deep_size walks into the dicts only, by their items; the compiled walk would walk into
    # all of them, so the probe sizes those sections in Python, and gets this process's bytes.
    runtime = make_runtime(odd=True)
    found = probes.verifiers_probe()
    assert found["sizing"] == ["python", "python"]
    assert {k: v for k, v in _facts(found).items() if k != "finished_bytes"} == _truth(runtime)


@pytest.mark.parametrize("compiled", [True, False])
def test_the_probe_yields_the_gil_between_short_pieces_of_work(make_runtime: Any, compiled: bool) -> None:
    runtime = make_runtime(trajectories=200, tokens=1000)
    objects = _count([list(t) for t in runtime.trajectories.values()], set())
    assert objects > 200_000
    clock = probes._Clock(max_hold=0.0)  # every look at the clock yields
    found = probes.verifiers_probe(clock=clock, compiled=compiled)
    assert found["sizing"][0] == ("compiled" if compiled else "python")
    # The clock is looked at after every call into the walk (at most WORK_PER_CALL units,
    # one per container and per referent) or every 1024 objects of deep_size.
    per_look = probes.WORK_PER_CALL if compiled else 1024
    assert clock.yields == clock.ticks >= objects // per_look
    # and after every part sized (a step list, a message, a body field), however small
    assert clock.ticks >= found["steps"]["steps"] + found["intercepts"]["entries"]
    assert found["pace"] == {"max_hold_ms": round(clock.max_held * 1000.0, 2), "yields": clock.yields}


def test_the_request_budget_sets_the_duty_cycle() -> None:
    assert probes._Clock().max_hold == probes.DEFAULT_MAX_HOLD == 0.025
    clocks: list[probes._Clock] = []
    real = probes._Clock

    class Recording(real):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any) -> None:
            real.__init__(self, *args)
            clocks.append(self)

    try:
        probes._Clock = Recording
        probes.run_all(max_pause_ms=10)
        probes.run_all(max_pause_ms=200)
        probes.run_all()
    finally:
        probes._Clock = real
    assert [c.max_hold for c in clocks] == [0.005, 0.025, 0.025]


@pytest.mark.parametrize("compiled", [True, False])
def test_a_cancelled_request_stops_the_probe(make_runtime: Any, compiled: bool) -> None:
    make_runtime(trajectories=100, tokens=1000)
    asked = [0]

    def explicit() -> bool:
        asked[0] += 1
        return asked[0] > 3

    # The request's cancellation point: the request answers Cancelled, in phase "probes".
    stop = runner._Stop(60.0, explicit, every=0.0)
    with pytest.raises(runner.Cancelled) as cancelled:
        probes.run_all(stop=stop, compiled=compiled)
    assert (cancelled.value.reason, cancelled.value.phase) == ("cancel", "probes")
    assert asked[0] == 4
    # A plain callable: the probe answers why it stopped.
    calls = [0]

    def plain() -> bool:
        calls[0] += 1
        return calls[0] > 3

    assert probes.run_all(stop=plain, compiled=compiled) == {
        "patches": {"applied": []},  # (first, and it takes no time)
        "verifiers": {"skipped": "the request was stopped at its deadline while the probes ran"}}
    assert calls[0] == 4


def test_a_request_past_its_deadline_stops_the_probe(make_runtime: Any) -> None:
    make_runtime(trajectories=10)
    stop = runner._Stop(1e-9)
    with pytest.raises(runner.Cancelled) as cancelled:
        probes.run_all(stop=stop)
    assert (cancelled.value.reason, cancelled.value.phase) == ("deadline", "probes")


def test_a_request_cancelled_during_the_probes_answers_cancelled_in_phase_probes(make_runtime: Any) -> None:
    # The whole request, in this process (a census of it, then the probes): the cancel comes
    # once the probes have started, and the answer says so; the lock is free again.
    make_runtime(trajectories=100, tokens=1000)
    real = probes.verifiers_probe
    started = [False]

    def probe(**kwargs: Any) -> dict[str, Any]:
        started[0] = True
        time.sleep(runner._Stop(1.0).every)  # the CLI's channel is polled at most this often
        return real(**kwargs)

    probes.PROBES["verifiers"] = probe
    try:
        answer = runner.handle({"op": "snapshot", "top_types": 5, "top_owners": 5, "timeout": 120},
                               cancelled=lambda: started[0])
    finally:
        probes.PROBES["verifiers"] = real
    assert answer["ok"] is False and answer["kind"] == "Cancelled", answer
    assert (answer["reason"], answer["phase"]) == ("cancel", "probes")
    assert runner._busy.acquire(blocking=False)
    runner._busy.release()


def test_deep_size_ticks_and_keeps_its_sizes() -> None:
    data = {"a": [list(range(3000)), (1.5, "x")], 2: {frozenset({1, 2}), "y"}}
    ticks = [0]

    def tick() -> None:
        ticks[0] += 1

    assert deep_size(data, tick=tick) == deep_size(data) == reference_size(data, set())
    assert ticks[0] == _count(data, set()) // 1024


def test_entries_in_flight_earlier_in_the_request_are_counted_in_flight(make_runtime: Any) -> None:
    # runner.py samples the rollouts in flight as the object graph's walk begins; one that
    # finished before the probes ran is still its task's in that graph.
    runtime = make_runtime(trajectories=6)
    before = probes.verifiers_probe()["registry"]
    assert before["inflight_entries"] == 0
    later = probes.verifiers_probe(in_flight={"t2", "gone"})["registry"]
    assert later["inflight_entries"] == 1 and later["finished_entries"] == before["finished_entries"] - 1
    assert later["finished_bytes"] < before["finished_bytes"] == later["retained_bytes"]
    assert probes.in_flight_before() == set()  # no task holds a state here
    assert runtime.trajectories


def test_entries_registered_after_the_walk_began_are_not_counted_finished(make_runtime: Any) -> None:
    """With the graph walked before the census, seconds pass before the probes: an entry
    registered (and finished) meanwhile is in no owner of the walk, so it is not finished
    as of the walk: counted in flight (owner #1 on the real worker was held to >= 80% of a
    finished count that had grown by a third that way)."""
    make_runtime()
    registered = probes.registered_before()
    assert registered is not None
    everything = probes.verifiers_probe()["registry"]
    later = probes.verifiers_probe(registered=set(list(registered)[:1]))["registry"]
    assert everything["finished_entries"] > 1
    assert later["finished_entries"] == 1
    assert later["inflight_entries"] == everything["entries"] - 1
