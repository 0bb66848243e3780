"""The watch's cheap sample: owner paths resolved again in the target without running its code."""

from __future__ import annotations

import asyncio
import sys
import threading
from typing import Any

import pytest

from leakhound.payload import census, sampling, wire


class _Runtime:
    def __init__(self) -> None:
        self.trajectories: dict[int, list[str]] = {i: ["step"] * 10 for i in range(7)}


class _Worker:
    def __init__(self) -> None:
        self.runtime = _Runtime()


async def _serve(worker: _Worker, result: dict[str, Any], ready: asyncio.Event, done: asyncio.Event) -> None:
    ready.set()
    await done.wait()
    result["worker"] = worker


def test_a_task_owned_path_from_the_census_is_sampled_again() -> None:
    # watch's cheap samples resolved module globals only: every owner under a task (where a
    # worker's state lives) dropped out after the first census, and watch said no Python owner
    # grew while runtime.trajectories did.
    result: dict[str, Any] = {}

    async def main() -> None:
        ready, done = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(_serve(_Worker(), result, ready, done), name="serve")
        await ready.wait()

        def look() -> None:
            walk = census.Census(timeout=60)
            walk.run()
            paths = [o["path"] for o in walk.result(top_owners=10000)["owners"]]
            path = next(p for p in paths if p.startswith("task:serve/") and p.endswith(".runtime.trajectories"))
            result["path"] = path
            result["sample"] = sampling.sample({"op": "sample", "owners": [{"path": path, "type": "dict"}]},
                                               lambda phase, done: None)

        thread = threading.Thread(target=look)
        thread.start()
        while thread.is_alive():
            await asyncio.sleep(0.01)
        done.set()
        await task

    asyncio.run(main())
    assert result["sample"]["owners"] == [{"found": True, "items": 7}]


def test_type_counts_never_hash_a_class() -> None:
    calls = [0]

    class Meta(type):
        def __hash__(cls) -> int:
            calls[0] += 1
            raise RuntimeError("a metaclass __hash__ ran")

    class Odd(metaclass=Meta):
        pass

    keep = [Odd() for _ in range(10)]
    out = sampling.sample({"op": "sample", "owners": [], "top_types": 1000}, lambda phase, done: None)
    assert calls[0] == 0
    assert any(t["type"].endswith("Odd") and t["count"] >= 10 for t in out["types"])
    del keep


def test_an_owner_is_found_again_by_the_ids_along_its_path_not_by_its_name() -> None:
    import sys
    import types

    class _Holder:
        def __init__(self) -> None:
            self.items = [1, 2, 3]

    module = types.ModuleType("leakhound_test_sampled_module")
    module.HOLDER = _Holder()  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    try:
        holder = module.HOLDER  # type: ignore[attr-defined]
        ids = [id(module), id(vars(module)), id(holder), id(holder.items)]
        owner = {"ids": ids, "type": "list", "path": "somewhere.else.entirely"}
        assert sampling.owner_items([owner]) == [{"found": True, "items": 3}]
        holder.items.append(4)
        assert sampling.owner_items([owner]) == [{"found": True, "items": 4}]
        # Another object now where the path led (the list replaced): not the owner, not found,
        # and not read in its place; nor an object of another type.
        holder.items = [0] * 50
        assert sampling.owner_items([owner]) == [{"found": False, "items": None}]
        assert sampling.owner_items([{**owner, "ids": [*ids[:3], id(holder.items)], "type": "dict"}]) == [
            {"found": False, "items": None}]
        # An instance has no length: found, with no item count to scale bytes by.
        assert sampling.owner_items([{"ids": ids[:3], "type": type_name(_Holder)}]) == [
            {"found": True, "items": None}]
    finally:
        del sys.modules[module.__name__]


def test_an_owner_rebound_is_found_again_by_its_steps_label() -> None:
    """``self.items = self.items + [x]``: a new list each time in the same attribute. A step
    whose id no longer leads on is followed by its label (the owner's ``path_steps``): the
    attribute or str key holds the owner now, if it is of the owner's type. No key's ``__eq__``
    or hash runs, and a label that names no attribute or key leads nowhere."""
    import types

    class _Key:
        armed = False

        def __hash__(self) -> int:
            assert not _Key.armed, "a key's hash ran"
            return hash("rows")  # (as the key looked for: a lookup by hash would compare them)

        def __eq__(self, other: object) -> bool:
            assert not _Key.armed, "a key's __eq__ ran"
            return self is other

    class _Holder:
        def __init__(self) -> None:
            self.items = [1, 2, 3]

    class _Slotted:
        __slots__ = ("rows",)

    module = types.ModuleType("leakhound_test_rebound_module")
    module.HOLDER = _Holder()  # type: ignore[attr-defined]
    module.TABLE = {_Key(): 1, "rows": (1,)}  # type: ignore[attr-defined]
    module.SLOTTED = _Slotted()  # type: ignore[attr-defined]
    module.SLOTTED.rows = b"x"  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    try:
        holder = module.HOLDER  # type: ignore[attr-defined]
        ids = [id(module), id(vars(module)), id(holder), id(holder.items)]
        owner = {"ids": ids, "steps": ["d", "kHOLDER", "aitems"], "type": "list", "path": "x"}
        holder.items = holder.items + [4] * 47
        assert sampling.owner_items([owner]) == [{"found": True, "items": 50}]
        holder.items = {"now": "a dict"}  # another type there now: not the owner
        assert sampling.owner_items([owner]) == [{"found": False, "items": None}]
        table = module.TABLE  # type: ignore[attr-defined]
        at_key = {"ids": [id(module), id(vars(module)), id(table), id(table["rows"])],
                  "steps": ["d", "kTABLE", "krows"], "type": "tuple", "path": "x"}
        table["rows"] = table["rows"] + (2, 3)
        _Key.armed = True
        assert sampling.owner_items([at_key]) == [{"found": True, "items": 3}]
        _Key.armed = False
        slotted = module.SLOTTED  # type: ignore[attr-defined]
        in_slot = {"ids": [id(module), id(vars(module)), id(slotted), id(slotted.rows)],
                   "steps": ["d", "kSLOTTED", "arows"], "type": "bytes", "path": "x"}
        slotted.rows += b"yz"
        assert sampling.owner_items([in_slot]) == [{"found": True, "items": 3}]
        # a class's attribute (its namespace, read as resolve reads it)
        registry = {"ids": [id(module), id(vars(module)), id(_Holder), 0], "steps": ["d", "k_Holder", "aseen"],
                    "type": "list", "path": "x"}
        module._Holder = _Holder  # type: ignore[attr-defined]
        _Holder.seen = [1, 2]  # type: ignore[attr-defined]
        assert sampling.owner_items([registry]) == [{"found": True, "items": 2}]
        # a label that is no attribute or key ("" an entry, "t" a local's type): not followed
        for label in ("", "tlist", "a", "amissing"):
            holder.items = [0]
            assert sampling.owner_items([{**owner, "steps": ["d", "kHOLDER", label]}]) == [
                {"found": False, "items": None}]
    finally:
        del sys.modules[module.__name__]


def test_an_id_now_another_object_s_is_not_followed_past_its_step() -> None:
    """An owner's ids are its path's objects at the census; one freed since may have left its
    address to another object the step's parent now holds (a DataFrame concatenated anew: the
    new frame at the old one's address, its ``_flags`` where the old ``_mgr`` was). That
    referent is under another attribute, or of another type than a step by type names: the
    step is followed by its label instead (the sample went on from the flags and found
    nothing: 1-4 samples of 11 in a watch of a growing DataFrame)."""
    import types

    class _Manager:
        def __init__(self, rows: list[int]) -> None:
            self.blocks = (rows,)

    class _Flags:
        pass

    class _Frame:
        def __init__(self, rows: list[int]) -> None:
            self._flags = _Flags()
            self._mgr = _Manager(rows)

    module = types.ModuleType("leakhound_test_reused_ids")
    module.FRAME = _Frame([1, 2, 3])  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    try:
        frame = module.FRAME  # type: ignore[attr-defined]
        steps = ["d", "kFRAME", "a_mgr", "=tuple", "=list"]
        # the manager's address is the flags' now; the blocks' a list's, the rows' a tuple's
        reused = {"ids": [id(module), id(vars(module)), id(frame), id(frame._flags), id(frame._mgr.blocks[0]),
                          id(frame._mgr.blocks)], "steps": steps, "type": "list", "path": "x"}
        assert sampling.owner_items([reused]) == [{"found": True, "items": 3}]
        right = {**reused, "ids": [*reused["ids"][:3], id(frame._mgr), id(frame._mgr.blocks),
                                   id(frame._mgr.blocks[0])]}
        assert sampling.owner_items([right]) == [{"found": True, "items": 3}]
        # the frame's own address the flags' now: found through the frame, an entry of the
        # module's dict (a step through a folded entry), where the step was the key itself
        folded = {**right, "ids": [*right["ids"][:2], id(frame._flags), *right["ids"][3:]]}
        assert sampling.owner_items([folded]) == [{"found": True, "items": 3}]
    finally:
        del sys.modules[module.__name__]


def test_a_chain_s_links_are_counted_link_by_link_up_to_the_one_others_hold() -> None:
    """A chain owner (a linked list's head, a hook wrapping the one it replaced) has no length:
    a sample counts its links, each the one object of its type (a function of its code) the
    last holds, directly, in its ``__dict__``, or in its defaults or closure cells, up to the
    link whose id the census gave (a thread keeps the hook of its making, and those after
    it). Two ways on (a doubly linked list) or a cycle: not counted (None)."""
    import types

    from leakhound.payload.objects import type_name

    class _Node:
        def __init__(self, nxt: Any) -> None:
            self.nxt = nxt
            self.payload = b"x" * 10

    def wrap(previous: Any) -> Any:
        state = [1]

        def hook(*args: Any) -> Any:
            return previous(*args) if state else None

        return hook

    module = types.ModuleType("leakhound_test_chains")
    head = None
    for _ in range(50):
        head = _Node(head)
    module.HEAD = head  # type: ignore[attr-defined]
    hook: Any = print
    hooks = []
    for _ in range(40):
        hook = wrap(hook)
        hooks.append(hook)
    module.HOOK = hook  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    try:
        def count(path: str, kind: str, end: int = 0) -> Any:
            return sampling.owner_items([{"path": f"{module.__name__}.{path}", "type": kind, "chain": True,
                                          "chain_end": end}])[0]["items"]

        assert count("HEAD", type_name(_Node)) == 50
        assert count("HOOK", "function") == 40
        assert count("HOOK", "function", id(hooks[9])) == 30  # (the 10th hook and those it wraps: others')
        back = head.nxt
        back.prev = head  # type: ignore[attr-defined]  # two of its type
        assert count("HEAD", type_name(_Node)) is None
        del back.prev  # type: ignore[attr-defined]
        last = head
        while last.nxt is not None:
            last = last.nxt
        last.nxt = head  # a cycle
        assert count("HEAD", type_name(_Node)) is None
        last.nxt = None
    finally:
        del sys.modules[module.__name__]


def test_a_step_through_what_the_walks_read_besides_referents_is_followed_by_its_id() -> None:
    """A code object has no referents for gc (3.11+), and its constants are one tuple of
    several: a step from it to its ``co_consts`` (the walks read it: a lambda table, 300 KB,
    under ``torch.overrides.get_testing_overrides``) is found by its id among what the walks
    read besides referents, as is an ndarray view's base; it was "not found again" in every
    sample of a torch worker's watch."""
    import types

    def table() -> Any:
        return ("a constant", (1, 2, 3))

    module = types.ModuleType("leakhound_test_hidden_steps")
    module.TABLE = table  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    try:
        code = table.__code__
        owner = {"ids": [id(module), id(vars(module)), id(table), id(code), id(code.co_consts)],
                 "steps": ["d", "kTABLE", "=code", "=tuple"], "type": "tuple", "path": "x"}
        assert sampling.owner_items([owner]) == [{"found": True, "items": len(code.co_consts)}]
    finally:
        del sys.modules[module.__name__]


def test_a_step_through_a_c_field_is_followed_by_the_one_referent_of_its_type() -> None:
    """A step no name labels (a C field: a partial's arguments, a DataFrame's blocks; an
    ndarray view's base, which is no referent at all) is followed by its type ("=tuple"):
    the one referent of that type, else the one value of that type in the object's
    ``__dict__`` (3.11+ moves inline attributes there once it is made), else what the walks
    read besides its referents (a view's base). Two of that type: not followed."""
    import functools
    import types

    np = pytest.importorskip("numpy")
    module = types.ModuleType("leakhound_test_typed_steps")
    module.JOB = functools.partial(print, [1], [2])  # type: ignore[attr-defined]
    module.VIEW = np.zeros(10).T[::2]  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    try:
        job = module.JOB  # type: ignore[attr-defined]
        owner = {"ids": [id(module), id(vars(module)), id(job), id(job.args)],
                 "steps": ["d", "kJOB", "=tuple"], "type": "tuple", "path": "x"}
        job.__setstate__((print, ([1], [2], [3]), None, None))  # its args rebound (a C field)
        assert sampling.owner_items([owner]) == [{"found": True, "items": 3}]
        kept = job.args  # (alive, and its lists: no new object at their addresses)
        twice = {"ids": [*owner["ids"][:3], id(kept), id(kept[0])], "steps": [*owner["steps"], "=list"],
                 "type": "list", "path": "x"}
        job.__setstate__((print, ([4, 4],), None, None))
        assert sampling.owner_items([twice]) == [{"found": True, "items": 2}]
        job.__setstate__((print, ([1], [2]), None, None))  # two lists: which one is not known
        assert sampling.owner_items([twice]) == [{"found": False, "items": None}]
        del kept
        view = module.VIEW  # type: ignore[attr-defined]
        base = {"ids": [id(module), id(vars(module)), id(view), id(view.base)],
                "steps": ["d", "kVIEW", "=numpy.ndarray"], "type": "numpy.ndarray", "path": "x", "size": True}
        module.VIEW = np.zeros(1000).T[::2]  # type: ignore[attr-defined]
        found = sampling.owner_items([base])[0]
        assert found["found"] and found["bytes"] >= 8000, found
    finally:
        del sys.modules[module.__name__]


def test_a_step_to_what_a_c_object_holds_outside_its_referents_is_followed_by_type() -> None:
    """A 3.11 StringIO written to keeps the strs in a list of its C state (no referent: the
    walk reads it, sizes.hidden_referents): its owner ``.<list>`` was "not found again" in
    every sample (no id step reaches it); its step ``=list`` does."""
    import io
    import types

    from leakhound.payload.sizes import hidden_referents

    log = io.StringIO()
    for i in range(9):
        log.write(f"line {i}\n")
    lists = [r for r in hidden_referents(log) if type(r) is list]
    if len(lists) != 1:
        pytest.skip("no accumulating StringIO here (3.12+ keeps one writer)")
    module = types.ModuleType("leakhound_test_hidden_steps")
    module.LOG = log  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    try:
        owner = {"ids": [id(module), id(vars(module)), id(log), id(lists[0])], "steps": ["d", "kLOG", "=list"],
                 "type": "list", "path": "x"}
        assert sampling.owner_items([owner]) == [{"found": True, "items": 9}]
    finally:
        del sys.modules[module.__name__]


def test_an_element_trees_children_are_its_items_read_by_its_c_length() -> None:
    """A log kept as an XML tree (an ``Element`` each entry appended to) was measured by full
    censuses only: its children are its items in every sample, read with the C element's own
    length (a subclass's ``__len__`` never runs)."""
    import types
    import xml.etree.ElementTree as ET

    class Log(ET.Element):
        def __len__(self) -> int:
            raise AssertionError("a subclass's __len__ ran")

    module = types.ModuleType("leakhound_test_element_items")
    module.LOG = Log("log")  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    try:
        log = module.LOG  # type: ignore[attr-defined]
        for i in range(7):
            ET.SubElement(log, "entry", id=str(i))
        owner = {"ids": [id(module), id(vars(module)), id(log)], "type": type_name(Log), "path": "x"}
        assert sampling.owner_items([owner]) == [{"found": True, "items": 7}]
    finally:
        del sys.modules[module.__name__]


def test_a_step_rebound_before_it_was_named_is_named_by_the_one_attribute_of_its_type() -> None:
    """The walk met a list an instance held; before the owners were named the instance
    rebound the attribute (a new list): the step is named by the one attribute (or str key of
    a small dict) holding a list now (the walk's node was that attribute's object), not left
    unnamed (``.<list>``, which a sample can never follow); none when two hold lists."""
    from leakhound.payload import graph_wire

    class _Holder:
        def __init__(self) -> None:
            self.rows: list[int] = []
            self.name = "h"

    holder = _Holder()
    label, value = graph_wire.rebound_attribute(holder, "list")
    assert (label, value is holder.rows) == ("arows", True)
    assert graph_wire.rebound_attribute(holder, "dict") == (None, None)
    holder.other = [1]  # type: ignore[attr-defined]
    assert graph_wire.rebound_attribute(holder, "list") == (None, None)
    # a dict's str key (an instance's __dict__ once made, a dict of named parts), a small one's
    parts = {"rows": [], "name": "n", 3: []}
    assert graph_wire.rebound_attribute(parts, "list") == ("krows", parts["rows"])
    assert graph_wire.rebound_attribute({f"k{i}": [] for i in range(65)}, "list") == (None, None)
    assert graph_wire.rebound_attribute([[]], "list") == (None, None)
    # a module's globals, however many (``TOTAL = TOTAL + loss`` in a big script: a module of
    # 200 globals was named ``__main__[].grad_fn``), through name_paths: the dict's a module's
    import types

    module = types.ModuleType("leakhound_test_rebound_global")
    for i in range(200):
        setattr(module, f"G{i}", i)
    module.TOTAL = _Holder()  # type: ignore[attr-defined]
    old = module.TOTAL  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    try:
        path = [id(module), id(vars(module)), id(old)]
        module.TOTAL = _Holder()  # type: ignore[attr-defined]  # rebound since the walk
        wanted = ["dict", type_name(_Holder)]
        assert graph_wire.name_paths({"paths": [path], "types": [wanted]})["labels"] == [["d", "kTOTAL"]]
        assert graph_wire.rebound_attribute(vars(module), type_name(_Holder)) == (None, None)  # (no module's)
    finally:
        del sys.modules[module.__name__]


def type_name(tp: type) -> str:
    from leakhound.payload.objects import type_name as name

    return str(name(tp))


def test_type_counts_are_skipped_when_their_listing_would_break_the_pause_budget(monkeypatch: Any) -> None:
    # the last count in this process: 10M tracked objects, ~60 ns each to list: ~600 ms in one call
    monkeypatch.setitem(census._measured, "tracked", 10_000_000)
    monkeypatch.setitem(census._measured, "ns_per_object", 60.0)
    out = sampling.sample({"op": "sample", "owners": [], "top_types": 20, "max_pause_ms": 50.0},
                          lambda phase, done: None)
    assert out["types"] is None and out["max_step_ms"] == 0.0
    assert "600 ms" in out["types_skipped"] and "50 ms" in out["types_skipped"]
    # fits once, not twice: the heap may have doubled since it was counted (as the census's headroom)
    monkeypatch.setitem(census._measured, "tracked", 300_000)  # ~18 ms; 36 ms x the 2.0 margin: over 50 ms
    doubled = sampling.sample({"op": "sample", "owners": [], "top_types": 20, "max_pause_ms": 50.0},
                              lambda phase, done: None)
    assert doubled["types"] is None and "18 ms" in doubled["types_skipped"]
    # within the budget (or with no budget asked) they are counted
    monkeypatch.setitem(census._measured, "tracked", 10_000)
    fits = sampling.sample({"op": "sample", "owners": [], "top_types": 20, "max_pause_ms": 50.0},
                           lambda phase, done: None)
    assert fits["types"] and fits["types_skipped"] is None


def test_tasks_running_one_coroutine_are_counted_again_as_one_owner() -> None:
    """``task:Task-*/CORO`` (the dominator owners' tasks alike): the pending tasks of that type
    whose root names it matches, each sample; another coroutine's, a finished one's, another
    name's are not counted, and a path of one task names no group."""
    counted: dict[str, Any] = {}

    async def main() -> None:
        never = asyncio.get_running_loop().create_future()

        async def wait_for_reply() -> None:
            await never

        async def other() -> None:
            await never

        async def quick() -> None:
            return None

        tasks = [asyncio.create_task(wait_for_reply()) for _ in range(5)]
        tasks.append(asyncio.create_task(wait_for_reply(), name="named-by-hand"))
        tasks += [asyncio.create_task(other()), asyncio.create_task(quick())]
        await asyncio.sleep(0.01)
        for path in ("task:Task-*/wait_for_reply", "task:*/wait_for_reply", "task:Task-*/other",
                     "task:Task-*/quick", "task:Task-1/wait_for_reply"):
            counted[path] = sampling.alike_items(path, "_asyncio.Task")
        counted["another type"] = sampling.alike_items("task:Task-*/wait_for_reply", "m.Task")
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())
    assert counted == {"task:Task-*/wait_for_reply": 5, "task:*/wait_for_reply": 6, "task:Task-*/other": 1,
                       "task:Task-*/quick": 0, "task:Task-1/wait_for_reply": None, "another type": 0}


def test_modules_named_alike_are_counted_again_as_one_owner(monkeypatch: Any) -> None:
    """``plugin_*``: the modules of sys.modules named so, "*" a number; a plain module path names
    no group."""
    import types

    for i in range(3):
        monkeypatch.setitem(sys.modules, f"plugin_{i}", types.ModuleType(f"plugin_{i}"))
    monkeypatch.setitem(sys.modules, "plugin_x", types.ModuleType("plugin_x"))
    assert sampling.alike_items("plugin_*", "module") == 3
    assert sampling.alike_items("sys.path", "module") is None
    assert sampling.owner_items([{"ids": [], "type": "module", "path": "plugin_*"}]) == [{"found": True, "items": 3}]


def test_threads_named_alike_are_counted_again_as_one_owner() -> None:
    """``thread:Thread-* (serve)/serve``: the live threads whose names match ("*" any part of a
    name), whatever frame they are in now."""
    stop = threading.Event()
    threads = [threading.Thread(target=stop.wait, name=f"Thread-{90 + i} (serve)") for i in range(3)]
    threads.append(threading.Thread(target=stop.wait, name="other"))
    for t in threads:
        t.start()
    try:
        assert sampling.alike_items("thread:Thread-* (serve)/serve", "frame") == 3
        assert sampling.alike_items("thread:*/wait", "frame") == len(threading.enumerate())
        assert sampling.alike_items("thread:other/wait", "frame") is None
    finally:
        stop.set()
        for t in threads:
            t.join()


def test_a_threads_name_is_read_without_running_its_class_code() -> None:
    """The thread frames' root names and the threads counted again read ``_name`` as the instance
    holds it: a class that makes ``_name`` a property (code of the program's) is named by its
    ident, the property never run."""
    from leakhound.payload import roots

    ran = []

    class Odd(threading.Thread):
        @property
        def _name(self) -> str:  # type: ignore[override]
            ran.append(1)
            return "odd"

        @_name.setter
        def _name(self, value: str) -> None:
            pass

    assert roots.thread_name_of(threading.current_thread(), 1) == threading.current_thread().name
    assert roots.thread_name_of(Odd(), 7) == "7" and ran == []


@pytest.mark.parametrize("path", ["task:Task-*/wait_for_reply", "task:*/serve", "thread:Thread-* (serve)/serve",
                                  "plugin_*", "app.v*.models", "task:Task-1/run", "thread:MainThread/main",
                                  "app.CACHE", "<held from C: list>", "task:Task-*/run.self.x", "<shared by a, b>"])
def test_the_payload_reads_roots_alike_as_leakhound_names_them(path: str) -> None:
    """One grammar on both sides of the wire: what leakhound calls roots alike (model/names.py)
    is what the payload's cheap samples count again, and nothing else."""
    from leakhound.model.names import ROOTS_ALIKE

    ours, theirs = ROOTS_ALIKE.match(path), sampling._ROOTS_ALIKE.match(path)
    assert (ours is None) == (theirs is None)
    assert ours is None or ours.groupdict() == theirs.groupdict()


def test_atexits_callbacks_are_counted_by_the_interpreters_count() -> None:
    """``atexit.<callbacks>`` is a group of no object of the target: a cheap sample counts it
    by ``atexit._ncallbacks()`` (a watch found it again in full censuses only)."""
    import atexit

    from leakhound.model.names import ATEXIT_OWNER
    from leakhound.payload import roots

    assert ATEXIT_OWNER == roots.ATEXIT_OWNER
    before = atexit._ncallbacks()  # type: ignore[attr-defined]
    callbacks = [lambda data=bytes(10): None for _ in range(3)]
    for callback in callbacks:
        atexit.register(callback)
    try:
        (counted,) = sampling.owner_items([{"ids": [], "type": "function", "path": ATEXIT_OWNER}])
        assert counted == {"found": True, "items": before + 3}
    finally:
        for callback in callbacks:
            atexit.unregister(callback)
    assert sampling.atexit_items("atexit.other") is None


def test_an_owner_asked_for_its_size_is_measured_by_it() -> None:
    """An owner with no items that retains only itself (an array a stream appends to) is asked
    for its own size: the census's size of one object (watch scales its bytes by it)."""
    import array

    from leakhound.core.decode import decode_sample
    from leakhound.payload import sizes

    buffer = array.array("B", bytes(100_000))
    globals()["_SIZED_BUFFER"] = buffer  # (found by its path here: no ids)
    try:
        path = f"{__name__}._SIZED_BUFFER"
        answer = sampling.owner_items([{"ids": [], "type": "array.array", "path": path, "size": True},
                                       {"ids": [], "type": "array.array", "path": path}])
        assert answer[0] == {"found": True, "items": None, "bytes": sizes.object_size(buffer)}
        assert answer[0]["bytes"] > 100_000 and "bytes" not in answer[1]
        decoded = decode_sample(1, {"owners": answer, "max_step_ms": 0.0, "payload_version": wire.PAYLOAD_VERSION},
                                asked=2)
        assert decoded.owner_bytes == (sizes.object_size(buffer), None)
    finally:
        del globals()["_SIZED_BUFFER"]
