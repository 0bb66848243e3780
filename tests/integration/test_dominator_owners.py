"""Owners from the dominator tree on real targets, against what the target computes itself:
what freeing the owner would return (fixtures/dominator_shapes.py's ``dominated_bytes``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from leakhound.analysis import dominators
from leakhound.cli import app
from leakhound.core.capture import capture
from leakhound.core.request import RequestOptions
from leakhound.errors import ProtocolViolation
from leakhound.model.names import Method, Owners
from tests.pythons import installed_pythons
from tests.utils import spawn_target, wait_for_agent_socket

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
MEMLAB_READER = REPO / "tests" / "js" / "memlab_retained.js"


def within(got: int, want: int, share: float = 0.10) -> bool:
    return abs(got - want) <= share * want


@pytest.mark.parametrize("shape", ["callbacks", "weak_registry", "parent_tree", "shared"])
def test_owner_one_is_what_freeing_returns(shape: str, tmp_path: Path) -> None:
    with spawn_target("dominator_shapes", tmp_path, env={"SHAPE": shape}) as child:
        taken = capture(child.pid, top=10)
        truth = child.report()["truth"]
    snap = taken.snapshot
    assert snap.heap.owner_model == "dominator", snap.heap.owner_model_note
    first = snap.owners[0]
    if shape == "weak_registry":
        # the app as its task holds it, not the library's registry that also reaches it
        assert first.path.startswith("task:") and first.path.endswith(truth["expected_path"]), first.path
    elif shape == "parent_tree":
        # the tree, not the handle whose parent links reach it; the list of the root's children
        # holds nearly all of it
        assert first.path.startswith(truth["expected_path"]), first.path
    else:
        assert first.path == truth["expected_path"]
    assert within(first.retained_bytes, truth["owner_bytes"]), (first, truth)
    # owners never double count
    assert sum(o.retained_bytes for o in snap.owners) <= snap.heap.bytes * 1.01


def test_over_the_graph_budget_no_owner_is_named(tmp_path: Path) -> None:
    with spawn_target("dominator_shapes", tmp_path, env={"SHAPE": "callbacks"}) as child:
        taken = capture(child.pid, max_graph_nodes=1000)
        # Walked before the census (one attach), the graph is ruled out by the last graph
        # walked in that process, without a walk, from the second inspection on.
        again = capture(child.pid, max_graph_nodes=1000)
    assert "the last object graph walked in this process had more than" in again.snapshot.heap.owner_model_note
    heap = taken.snapshot.heap
    assert (heap.owner_model, heap.owner_model_reason) == ("not-attributed", "graph_over_nodes")
    assert "graph budget" in heap.owner_model_note
    assert taken.graph is None
    # The heap's bytes under one name that says so, not the census's first reachers.
    for snap in (taken.snapshot, again.snapshot):
        assert [(o.path, o.retained_bytes) for o in snap.owners] == [
            ("<not attributed: graph over 1,000 nodes>", snap.heap.bytes)]


def test_a_million_object_worker_gets_dominator_owners_by_default(tmp_path: Path) -> None:
    """The 1M-object benchmark heap gets the dominator tree without asking; what a collection
    alone holds is folded into it, so its graph has far fewer nodes than objects."""
    with spawn_target("bench_heap", tmp_path, env={"BENCH_OBJECTS": "1000000"}, timeout=120) as child:
        taken = capture(child.pid, request=RequestOptions(timeout=120))
    heap = taken.snapshot.heap
    assert heap.owner_model == "dominator", heap.owner_model_note
    assert 10_000 < heap.graph_nodes < heap.objects // 2, (heap.graph_nodes, heap.objects)
    # The longest hold the header reports covers the graph's walk too.
    assert taken.graph is not None
    assert heap.max_hold_ms >= round(float(taken.graph.info["max_held_ms"]), 2) > 0  # (rounded to 0.01 ms)


def test_auto_names_no_owner_over_the_graphs_memory_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import leakhound.core.capture as capture_module

    monkeypatch.setattr(capture_module, "MIN_GRAPH_MEMORY", 1 << 20)
    monkeypatch.setattr(capture_module, "GRAPH_MEMORY_SHARE", 0.001)
    with spawn_target("dominator_shapes", tmp_path, env={"SHAPE": "callbacks"}) as child:
        taken = capture(child.pid)
        asked = capture(child.pid, owners=Owners.DOMINATOR)  # no memory budget when asked for
    heap = taken.snapshot.heap
    assert (heap.owner_model, heap.owner_model_reason) == ("not-attributed", "graph_over_memory_budget")
    assert "over its memory budget" in heap.owner_model_note and "--owners dominator" in heap.owner_model_note
    assert taken.snapshot.owners[0].path == "<not attributed: graph over its memory budget>"
    assert asked.snapshot.heap.owner_model == "dominator"


@pytest.mark.parametrize("method", ["ptrace", "gdb", "agent"])
def test_one_attach_the_dominator_pass_beside_the_census(tmp_path: Path, method: str) -> None:
    """The graph is handed over as soon as it is walked (files in the private directory on
    the debugger paths, a line on the agent's socket): the CLI's dominator pass runs while the
    target counts, and the owners' names come back in the same request (it was a second
    attach, ~0.3 s on the busy real worker)."""
    lines: list[str] = []
    env = {"SHAPE": "callbacks", "LEAKHOUND_AGENT": "1" if method == "agent" else ""}
    with spawn_target("dominator_shapes", tmp_path, env=env) as child:
        if method == "agent":
            wait_for_agent_socket(child.pid)
        taken = capture(child.pid, top=10, request=RequestOptions(method=Method(method), log=lines.append))
        truth = child.report()["truth"]
    assert sum(1 for line in lines if line.startswith("method:")) == 1, lines
    assert any("payload phases: graph " in line and ", names " in line for line in lines), lines
    snap = taken.snapshot
    assert snap.heap.owner_model == "dominator", snap.heap.owner_model_note
    assert "did not answer names" not in snap.heap.owner_model_note
    assert snap.owners[0].path == truth["expected_path"]
    assert within(snap.owners[0].retained_bytes, truth["owner_bytes"])


def test_a_failed_dominator_pass_leaves_the_target_waiting_for_nothing(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The target waits for the CLI's names within the request: a CLI whose analysis fails
    still answers (no paths), so the request ends at once, and the error is the CLI's."""
    from leakhound.attach.channel import PrivateChannel

    posted: list[tuple[str, object]] = []
    real_post = PrivateChannel.post

    def post(self: PrivateChannel, name: str, doc: dict[str, object]) -> None:
        posted.append((name, doc))
        real_post(self, name, doc)

    def broken(*args: object, **kwargs: object) -> None:
        raise dominators.GraphError("broken on purpose")

    monkeypatch.setattr(PrivateChannel, "post", post)
    with spawn_target("dominator_shapes", tmp_path, env={"SHAPE": "callbacks"}) as child:
        with monkeypatch.context() as patched:
            patched.setattr(dominators, "plan_owners", broken)
            # A graph the passes cannot use is the target's to answer for: one clear error.
            with pytest.raises(ProtocolViolation, match="broken on purpose"):
                capture(child.pid, request=RequestOptions(timeout=60))
        again = capture(child.pid, request=RequestOptions(timeout=60))  # refused with TargetBusy if the first still ran
    assert posted[0] == ("names", {"paths": [], "types": []})
    assert again.snapshot.heap.owner_model == "dominator"


def test_inspect_cli_says_which_owner_model_and_why(tmp_path: Path) -> None:
    with spawn_target("dominator_shapes", tmp_path, env={"SHAPE": "callbacks"}) as child:
        runner = CliRunner()
        table = runner.invoke(app, ["inspect", str(child.pid), "--why", "App", "-n", "5"],
                              env={"COLUMNS": "200", "NO_COLOR": "1"})
        why = runner.invoke(app, ["inspect", str(child.pid), "--why", "App", "--json"])
        census = runner.invoke(app, ["inspect", str(child.pid), "--owners", "census", "--json"])
    assert table.exit_code == 0, table.output
    # --why prints only what was asked: the owner, how it is held, what else keeps it alive
    assert table.stdout.startswith("why App: ") and "memory ledger" not in table.stdout
    assert "held as: the attribute APP of __main__" in table.stdout
    assert "also kept alive by __main__.CALLBACKS[].__self__" in table.stdout
    doc = json.loads(why.stdout)
    assert doc["owner_model"] == "dominator"
    (match,) = doc["matches"]
    assert match["path"] == "__main__.APP"
    assert set(match["retainers"]) >= {"__main__.APP", "__main__.CALLBACKS[].__self__"}
    old = json.loads(census.stdout)
    assert old["schema"] == "leakhound.snapshot/2" and old["heap"]["owner_model"] == "first-reacher"
    # the finding, kept as the fallback's behaviour: the callback list takes the app
    assert old["owners"][0]["path"] == "__main__.CALLBACKS"


def _memlab() -> Path | None:
    """@memlab/core from the npm registry, installed once into the cache (None: no npm/offline)."""
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        return None
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "leakhound" / "memlab"
    if not (cache / "node_modules" / "@memlab" / "core").is_dir():
        cache.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--ignore-scripts", "@memlab/core@1"],
                              cwd=cache, capture_output=True, timeout=600,
                              env={**os.environ, "PUPPETEER_SKIP_DOWNLOAD": "1"})
        if done.returncode != 0:
            return None
    return cache


def test_heapsnapshot_parsed_by_memlab_with_the_same_retained_sizes(tmp_path: Path) -> None:
    cache = _memlab()
    if cache is None:
        pytest.skip("npm/node or the npm registry not available for memlab")
    out = tmp_path / "heap.heapsnapshot"
    with spawn_target("dominator_shapes", tmp_path, env={"SHAPE": "shared"}) as child:
        taken = capture(child.pid, top=5)
        from leakhound.render import heapsnapshot

        assert taken.graph is not None and taken.tree is not None
        heapsnapshot.write(out, taken.graph)
    graph, tree = taken.graph, taken.tree
    finder = dominators.OwnerFinder(graph, tree)
    nodes = finder.find(top=3)
    reader = tmp_path / "memlab_retained.js"
    reader.write_text(MEMLAB_READER.read_text().replace("__dirname", json.dumps(str(cache))))
    done = subprocess.run(["node", str(reader), str(out), "1", *(str(2 * v + 1) for v in nodes)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NODE_PATH": str(cache / "node_modules")})
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(done.stdout.strip().splitlines()[-1].split("\x1b[K")[-1])
    assert doc["nodes"] == graph.nodes and doc["edges"] == graph.edges
    assert doc["retained"]["1"]["retained"] == tree.retained[0]
    for v in nodes:
        assert doc["retained"][str(2 * v + 1)]["retained"] == tree.retained[v]


@pytest.mark.parametrize("version", list(installed_pythons()))
def test_instances_whose_dict_was_made_are_sized_on_every_cpython(version: str, tmp_path: Path) -> None:
    """A registry of instances each asked for its ``vars()`` (fixtures/scale_heap.py computes
    what only the registry holds). 3.13 keeps such a dict beside the inline values, in the
    managed pointer, and its traverse does not visit it: the walks once missed every one
    (owner #1 at 0.93 of the truth), and counting both the dict's values and the inline ones
    would count each attribute twice. Small enough that the listing of what is held from C
    runs too (a dict only the managed pointer holds must not be one)."""
    env = {"SCALE_OBJECTS": "120000", "SCALE_SHAPE": "registry"}
    with spawn_target("scale_heap", tmp_path, python=installed_pythons()[version], env=env) as child:
        taken = capture(child.pid, top=5)
        truth = child.report()["truth"]
    snap = taken.snapshot
    assert snap.heap.owner_model == "dominator", snap.heap.owner_model_note
    first = snap.owners[0]
    assert first.path == truth["culprit"], [(o.path, o.retained_bytes) for o in snap.owners]
    assert within(first.retained_bytes, truth["culprit_bytes"], 0.02), (first.retained_bytes, truth)
    # (what the interpreter holds from C, grouped by type: ~400 dicts, ~0.45 MB on 3.11; the
    # instances' dicts, were they missed, would be a third of the culprit)
    held_from_c = [o for o in snap.owners if o.path.startswith("<held from C")]
    assert sum(o.retained_bytes for o in held_from_c) < 0.05 * truth["culprit_bytes"], held_from_c
