"""``--html FILE`` opened in a real browser: headless Chromium (Debian's ``chromium`` package,
driven by playwright; no browser is ever downloaded) with every network request refused.

What the page shows is read from its rendered DOM and checked against the ``--json`` of the
same run and against what the target measures about itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from leakhound.cli import app
from leakhound.model import Finding, Owner
from leakhound.model import snapshot_to_json as to_json
from leakhound.model.units import fmt_bytes
from leakhound.simulate.fleet import start_fleet
from tests.factories import make_snapshot
from tests.utils import ROOT, spawn_target, wait_for_agent_socket, within

pytestmark = [pytest.mark.integration]

CHROMIUM = shutil.which("chromium")
HOSTILE = "</script><script>window.__pwned=1</script><img src=x onerror=\"window.__pwned=2\"><!--"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if CHROMIUM is None:
        pytest.skip("no chromium on PATH (Debian: apt-get install chromium; .ci/run installs it)")
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        args = ["--no-sandbox"] if os.geteuid() == 0 else []
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=args)
        try:
            yield chromium
        finally:
            chromium.close()


@contextlib.contextmanager
def opened(browser: Any, path: Path) -> Iterator[Any]:
    """The page at ``path`` with the network off: every request but the file itself is
    refused and recorded; a request, a script error or a console error fails the test."""
    context = browser.new_context(offline=True, viewport={"width": 1280, "height": 900})
    context.grant_permissions(["clipboard-read", "clipboard-write"])
    page = context.new_page()
    attempted: list[str] = []
    errors: list[str] = []

    def refuse(route: Any) -> None:
        if route.request.url == path.as_uri():
            route.continue_()
        else:
            attempted.append(route.request.url)
            route.abort()

    page.route("**/*", refuse)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    try:
        page.goto(path.as_uri(), wait_until="load")
        page.wait_for_selector("body[data-rendered='1']")
        yield page
        assert attempted == [], f"the page tried to fetch {attempted}"
        assert errors == [], errors
    finally:
        context.close()


def _screenshot(page: Any, path: Path) -> None:
    """A full-page screenshot, and that it shows something (many colours, not a blank page)."""
    from PIL import Image

    page.screenshot(path=str(path), full_page=True)
    with Image.open(path) as image:
        width, height = image.size
        colours = image.convert("RGB").resize((width // 4, height // 4)).getcolors(maxcolors=1 << 20) or []
    assert width >= 1000 and height >= 900, (width, height)
    assert len(colours) >= 20, len(colours)
    assert path.stat().st_size > 20_000


def _dom_findings(page: Any, scope: str) -> list[dict[str, Any]]:
    return page.eval_on_selector_all(f"{scope} .finding", """nodes => nodes.map(n => ({
        kind: n.dataset.kind, severity: n.dataset.severity, bytes: Number(n.dataset.bytes),
        count: Number(n.dataset.count), text: (n.querySelector('.bytes') || {}).textContent || '',
        fix: (n.querySelector('code.fix') || {}).textContent || ''}))""")


def test_inspect_html_of_the_simulated_worker(tmp_path: Path, browser: Any, ptrace_ok: None) -> None:
    page_file, json_file = tmp_path / "incident.html", tmp_path / "snapshot.json"
    # Two rollouts park after their last turn: the registry holds four finished ones.
    with start_fleet(workers=1, concurrency=4, turns=6, rollouts=6, image_kb=16, group_size=1, fixes="none",
                     hold=120, report_dir=tmp_path, stats_interval=1.0,
                     extra_args=["--park", "2", "--exact-sizes"]) as fleet:
        fleet.wait_idle(timeout=120, stats_ticks=1)
        pid = fleet.pids[0]
        result = CliRunner().invoke(app, ["inspect", str(pid), "--html", str(page_file), "--save", str(json_file)])
        report = fleet.reports()[0]
        fleet.stop()
    assert result.exit_code == 0, result.output
    snap = json.loads(json_file.read_text())
    traj = report["trajectories"]
    assert page_file.stat().st_size < 2 * 1024 * 1024

    with opened(browser, page_file) as page:
        section = f"section.process[data-pid='{pid}']"
        first = page.locator(f"{section} table.owners tbody tr").first
        owner = snap["owners"][0]
        assert first.locator("td.path").inner_text() == owner["path"]
        assert int(first.get_attribute("data-bytes")) == owner["retained_bytes"]
        assert first.locator("td.retained").inner_text() == fmt_bytes(owner["retained_bytes"])
        # the treemap draws the same owner #1, its size the same
        tile = page.locator(f"{section} .treemap [data-owner-rank='1']").first
        tile.wait_for(state="attached")

        shown = _dom_findings(page, section)
        expected = [f for f in snap["findings"] if f["severity"] != "skipped"]
        assert [(f["kind"], f["severity"], f["bytes"], f["count"]) for f in shown] == \
            [(f["kind"], f["severity"], f["bytes"], f["count"]) for f in expected]
        registry = next(f for f in shown if f["kind"] == "registry")
        assert registry["fix"] == f"leakhound patch {pid} --fix registry"
        # the worker's own count of what its registry holds, finished rollouts
        assert registry["count"] == traj["finished_entries"] == 4
        # its copy button puts the command on the clipboard
        page.locator(f"{section} .finding[data-kind='registry'] button.copy").click()
        assert page.evaluate("navigator.clipboard.readText()") == registry["fix"]
        held = next(f for f in snap["findings"] if f["kind"] == "registry")
        assert within(held["details"]["retained_bytes"], traj["retained_bytes"])

        # the ledger bar: one row per ledger row, live heap first, in the snapshot's bytes
        live = int(page.locator(f"{section} table.ledger tbody tr").first.get_attribute("data-bytes"))
        assert live == snap["heap"]["bytes"] - snap["heap"]["native_bytes"]
        assert page.locator(f"{section} .ledger-bar .segment").count() >= 3

        # the registry's box opens into its rollouts, by key: the in-flight ones (their tasks
        # hold them too) are owners of their own; the finished ones, the registry's alone, are
        # its parts, or, when the graph's walk folded them into it (an entry one collection
        # alone holds is no node of its own), in its "(itself)" box
        registry_path = next(o["path"] for o in snap["owners"] if "runtime.trajectories" in o["path"])
        registry_path = registry_path[:registry_path.index("runtime.trajectories") + len("runtime.trajectories")]
        tiles = _zoom_to(page, section, registry_path)
        entries = [t["name"] for t in tiles if t["name"].startswith("['")]
        # (the finished ones are boxes of their own or folded into "(itself)", as the walk went)
        assert traj["inflight_entries"] <= len(entries) <= traj["entries"], tiles
        registry_owners = [o for o in snap["owners"] if o["path"].startswith(registry_path)]
        assert sum(t["bytes"] for t in tiles) == sum(o["retained_bytes"] for o in registry_owners)
        crumbs = page.locator(f"{section} .crumbs")
        # back by the breadcrumb
        crumbs.locator("a").first.click()
        assert crumbs.locator("a").count() == 0
        _screenshot(page, tmp_path / "inspect.png")


def _zoom_to(page: Any, section: str, path: str) -> list[dict[str, Any]]:
    """Click down the treemap to the node of ``path`` (a box's name is the steps it adds to its
    parent's); the boxes shown there."""
    for _ in range(8):
        here = "".join(page.locator(f"{section} .crumbs [data-name]").evaluate_all(
            "nodes => nodes.slice(1).map(n => n.dataset.name)"))
        tiles = page.locator(f"{section} .treemap > .tile").evaluate_all(
            "nodes => nodes.map(n => ({name: n.dataset.name, kind: n.dataset.kind, bytes: Number(n.dataset.bytes)}))")
        if here == path:
            return list(tiles)
        step = next(i for i, t in enumerate(tiles) if path.startswith(here + t["name"]))
        page.locator(f"{section} .treemap > .tile").nth(step).click()
    raise AssertionError(f"no way down to {path}")


def test_hostile_names_stay_text(tmp_path: Path, browser: Any) -> None:
    """Names from the target that look like markup are shown as the text they are: nothing
    of them runs, no element is made of them."""
    saved, page_file = tmp_path / "hostile.json", tmp_path / "hostile.html"
    owners = (Owner(HOSTILE, HOSTILE, 3, 50 * 1024 * 1024, 10, (HOSTILE, "__main__.x")),
              Owner("__main__.CACHE", "dict", 7, 10 * 1024 * 1024, 8))
    finding = Finding("registry", "critical", 50 * 1024 * 1024, 3, HOSTILE, "registry", HOSTILE)
    saved.write_text(to_json(make_snapshot(owners=owners, findings=(finding,))))
    result = CliRunner().invoke(app, ["show", str(saved), "--html", str(page_file)])
    assert result.exit_code == 0, result.output
    assert "</script><script>" not in page_file.read_text()
    with opened(browser, page_file) as page:
        assert page.evaluate("window.__pwned") is None
        assert page.locator("script").count() == 2  # the blob and the page's own
        assert page.locator("img").count() == 0
        assert page.locator("table.owners td.path").first.inner_text() == HOSTILE
        assert page.locator("table.owners td.type").first.inner_text() == HOSTILE
        assert page.locator("a[data-depth]").count() == 0


def _watch(pid: int, page_file: Path, *, pause_after: int, pause_seconds: float) -> dict[str, Any]:
    """``leakhound watch --json --html``, stopped (SIGSTOP) for ``pause_seconds`` right after
    its ``pause_after``-th sample: a stretch with no samples. The final report line."""
    command = [sys.executable, "-m", "leakhound", "watch", str(pid), "--method", "agent", "-i", "0.5",
               "-d", "9", "--full-every", "3", "--json", "--html", str(page_file)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    lines: list[dict[str, Any]] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(json.loads(line))
            if lines[-1].get("event") == "sample" and len(lines) == pause_after:
                # Between two samples: the watch sleeps out its interval now.
                os.kill(proc.pid, signal.SIGSTOP)
                time.sleep(pause_seconds)
                os.kill(proc.pid, signal.SIGCONT)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    return lines[-1]


def test_watch_html_draws_owners_over_time_with_a_gap(tmp_path: Path, browser: Any, ptrace_ok: None) -> None:
    page_file = tmp_path / "watch.html"
    with spawn_target("steady_leak", tmp_path, env={"LEAKHOUND_AGENT": "1"}) as child:
        wait_for_agent_socket(child.pid)
        final = _watch(child.pid, page_file, pause_after=4, pause_seconds=4.0)
        truth = child.report()["truth"]
    (process,) = final["processes"]
    assert page_file.stat().st_size < 2 * 1024 * 1024

    with opened(browser, page_file) as page:
        section = f"section.process[data-pid='{child.pid}']"
        series = page.locator(f"{section} .owners-chart path.series")
        legend = page.locator(f"{section} .owners-chart .legend-item .name")
        drawn = min(len(process["owners"]), 8)
        assert drawn >= 1
        assert series.count() == legend.count() == drawn  # one line, one colour, one legend entry each
        colours = {series.nth(i).get_attribute("stroke") for i in range(series.count())}
        assert len(colours) == drawn
        names = legend.all_inner_texts()
        assert names == [o["name"] for o in process["owners"][:drawn]]
        assert "__main__.SESSIONS" in names
        sessions = series.nth(names.index("__main__.SESSIONS"))
        # the 4 s without samples (interval 0.5 s) is a gap in the line: two runs, not one
        assert int(sessions.get_attribute("data-runs")) >= 2, sessions.get_attribute("d")
        rss = page.locator(f"{section} .memory-chart path.series").first
        assert int(rss.get_attribute("data-runs")) >= 2
        assert page.locator(f"{section} .owners-chart rect.gap").count() >= 1  # shaded, as --plot does
        # the legend is beside the plot, not over it
        plot_box = page.locator(f"{section} .owners-chart svg").bounding_box()
        legend_box = page.locator(f"{section} .owners-chart .legend").bounding_box()
        beside = legend_box["x"] >= plot_box["x"] + plot_box["width"]
        assert beside or legend_box["y"] >= plot_box["y"] + plot_box["height"]

        growth = _dom_findings(page, f"{section} .growth-findings")
        expected = [f for f in final["findings"] if f["severity"] != "skipped"]
        assert [(f["kind"], f["bytes"], f["count"]) for f in growth] == \
            [(f["kind"], f["bytes"], f["count"]) for f in expected]
        leak = next(f for f in expected if f["owner"] == "__main__.SESSIONS")
        # the map's own count at the end is past the finding's (taken a moment before)
        assert 0 < leak["count"] <= truth["sessions_items"]
        _screenshot(page, tmp_path / "watch.png")


def test_watch_sites_html_draws_each_growing_owners_sites_as_a_flame_graph(tmp_path: Path, browser: Any,
                                                                           ptrace_ok: None) -> None:
    page_file = tmp_path / "sites.html"
    with spawn_target("sites_ratio", tmp_path) as child:
        result = subprocess.run(
            [sys.executable, "-m", "leakhound", "watch", str(child.pid), "-d", "8", "-i", "2", "--sites",
             "--sites-rate", "16384", "--method", "ptrace", "--json", "--html", str(page_file)],
            capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    final = json.loads(result.stdout.splitlines()[-1])
    with_sites = [f for f in final["findings"] if f.get("sites")]
    assert [f["owner"] for f in with_sites] == ["__main__.RUNTIME.trajectories"]

    with opened(browser, page_file) as page:
        section = f"section.process[data-pid='{child.pid}']"
        flames = page.locator(f"{section} .flame")
        assert flames.count() == len(with_sites)
        for i, finding in enumerate(with_sites):
            flame = flames.nth(i)
            assert flame.get_attribute("data-owner") == finding["owner"]
            boxes = {b["id"]: b for b in flame.locator(".flame-box").evaluate_all("""nodes => nodes.map(n => ({
                id: Number(n.dataset.id), parent: Number(n.dataset.parent), depth: Number(n.dataset.depth),
                bytes: Number(n.dataset.bytes), self: Number(n.dataset.self), frame: n.dataset.frame,
                width: n.getBoundingClientRect().width, text: n.textContent}))""")}
            root = boxes[0]
            assert root["depth"] == 0 and root["bytes"] == sum(s["bytes"] for s in finding["sites"])
            # every site is the box of its innermost frame, under its callers' boxes in order,
            # its bytes that box's own, its width its share of the owner's
            drawn: dict[tuple[str, ...], int] = {}
            for box in boxes.values():
                if box["self"]:
                    path, at = [], box
                    while at["depth"] > 0:
                        path.append(at["frame"])
                        at = boxes[at["parent"]]
                    drawn[tuple(path)] = drawn.get(tuple(path), 0) + box["self"]
                    assert abs(box["width"] / root["width"] - box["bytes"] / root["bytes"]) < 0.01, box
            expected: dict[tuple[str, ...], int] = {}
            for site in finding["sites"]:
                key = tuple(f"{f['file']}:{f['line']} {f['function']}" for f in site["stack"])
                expected[key] = expected.get(key, 0) + site["bytes"]
            assert drawn == expected
            # a box's bytes are its callees' and its own
            for box in boxes.values():
                below = sum(b["bytes"] for b in boxes.values() if b["parent"] == box["id"])
                assert box["bytes"] == below + box["self"], box
            labels = flame.locator(".flame-box").all_inner_texts()
            assert any(text.startswith("record_step (sites_ratio.py:") for text in labels), labels
        _screenshot(page, tmp_path / "sites.png")


def test_unwritable_html_file_is_said_before_the_attach(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir" / "report.html"
    with spawn_target("static_table", tmp_path) as child:
        result = CliRunner().invoke(app, ["inspect", str(child.pid), "--html", str(missing)])
        assert result.exit_code == 21, result.output
        assert "no-such-dir" in result.output and "Traceback" not in result.output
        result = CliRunner().invoke(app, ["watch", str(child.pid), "-d", "1", "--html", str(tmp_path)])
        assert result.exit_code == 21, result.output
        assert "it is a directory" in result.output
