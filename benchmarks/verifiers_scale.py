"""The real verifiers 0.1.14 EnvWorker grown past 2 GB, inspected, watched and exported as
on-call would, on each CPython asked for (default 3.11 and 3.12).

Per Python: spawn the worker (tests/verifiers_target.py: the real env server and worker, the
fake model server on loopback), grow it with batches of rollouts until its RSS passes
``--rss-gb``, then, with the worker idle:

- the truth, measured by the worker in a forked child (leakhound_vf_truth.py): the blocks
  sys.getsizeof's sizes take (fixtures/_target.py ``allocated``) over what every runtime's
  ``trajectories`` reaches (each object once: what it alone holds when no rollout runs, sized
  as leakhound sizes objects; "sized"), and what clearing them gives back to the heap (the
  allocators' bytes in use before and after; "freed");
- ``leakhound inspect PID --json``: wall clock (attach to report), ``heap.max_pause_ms``, the
  owner model, owner #1 and its retained bytes against both;

then, with batches of rollouts running the whole time (the registry growing):

- ``leakhound inspect PID --json`` again (wall, longest pause, owner #1);
- ``leakhound watch PID -d DURATION --json``: its growth findings (owner, rate, ``--fix``) and
  the registry entries the worker itself counted finished meanwhile;
- ``leakhound export PID``: the ``owner`` labels of ``leakhound_owner_retained_bytes`` after its
  first census, biggest first.

The worker grows as production env workers do: every step's stored prompt restates the whole
conversation (a screenshot a turn) and its response the whole prompt's token ids. What makes it
grow faster than the tests' workers is what a VLM on real screens answers: ``--image-tokens``
placeholder tokens an image (Qwen2.5-VL: ~1,300 for 1280x800, ~2,600 for 1920x1080) and longer
answers (``--completion-repeat``); a turn's request body stays under aiohttp's 1 MiB limit of
verifiers' interception server (``--screenshot-kb`` x ``--turns`` + the answers). The worker's
truth reports carry counts only while it runs (tests/verifiers_target.py COUNTS_ONLY_ENV):
measuring the registries on every change JSON-encodes them on its loop, which at 1 GB was most
of its time.

The pause each inspection cost the worker is read three ways: ``heap.max_pause_ms`` (the
payload's longest step, wall clock: on a loaded machine it includes waiting for a core),
``heap.max_hold_ms`` (its longest stretch between two yields of the GIL, in its thread's CPU
time: what it held), and ``heartbeat_ms``: the worst lateness of a thread in the worker that
sleeps 5 ms at a time (benchmarks/busy_site; how long any thread of the worker waited, for the
GIL or for a core), against ``heartbeat_before_ms``, its worst in as long a time just before
(the machine's own noise). ``--nice N`` (root; default -10) runs the worker's threads at
niceness N so less of the machine's load lands in those numbers. ``--inspect-only``: no watch
or export (the pause numbers alone).

Nothing asserts: it prints what it sees and writes the rows to
benchmarks/results/verifiers-scale-<date>.json.

    .venv/bin/python benchmarks/verifiers_scale.py [--pythons 3.11,3.12] [--rss-gb 2.1]
        [--watch 120] [--image-tokens 2560] [--completion-repeat 12] [--screenshot-kb 40]
        [--batch 16] [--turns 20] [--nice -10] [--inspect-only] [--out FILE] [--table SAVED.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _common as c  # noqa: E402
from tests.pythons import installed_pythons  # noqa: E402
from tests.verifiers_target import (  # noqa: E402
    COUNTS_ONLY_ENV,
    VerifiersWorker,
    continuous_rollouts,
    spawn_verifiers_worker,
)

RESULTS = Path(__file__).resolve().parent / "results"
SITE = Path(__file__).resolve().parent / "busy_site"


def late_beats(path: Path) -> list[tuple[float, float]]:
    """(time.monotonic(), lag ms) of the worker's heartbeat thread's late beats (busy_site)."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        parts = line.split()
        if len(parts) == 3 and parts[1] != "beats" and parts[2] == "thread":
            out.append((float(parts[0]), float(parts[1])))
    return out


def renice(pid: int, niceness: int) -> None:
    """Every thread of ``pid`` at ``niceness`` (threads started later inherit their starter's)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):  # (a thread that ended meanwhile)
            os.setpriority(os.PRIO_PROCESS, int(tid), niceness)


def rss_bytes(pid: int) -> int:
    return c.proc_status(pid)["VmRSS"]


def inspect(pid: int, beats: Path | None = None) -> dict[str, Any]:
    started = time.monotonic()
    wall, proc = c.run_timed([str(c.LEAKHOUND), "inspect", str(pid), "--json"], timeout=1200)
    ended = time.monotonic()
    row: dict[str, Any] = {"wall_s": round(wall, 2), "rc": proc.returncode, "rss_bytes": rss_bytes(pid),
                           "load_average": c.load_average()}
    if beats is not None:
        time.sleep(1.5)  # the heartbeat writes a late beat once it wakes
        late = late_beats(beats)
        row["heartbeat_ms"] = max((lag for when, lag in late if started <= when <= ended + 0.5), default=0.0)
        row["heartbeat_before_ms"] = max((lag for when, lag in late if 2 * started - ended <= when < started),
                                         default=0.0)
    if proc.returncode != 0:
        row["error"] = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return row
    doc = json.loads(proc.stdout)
    heap = doc["heap"]
    row.update(
        owner_model=heap.get("owner_model"),
        owner_model_note=heap.get("owner_model_note", ""),
        objects=heap.get("objects"),
        graph_nodes=heap.get("graph_nodes"),
        max_pause_ms=heap.get("max_pause_ms"),
        # the longest run between two yields (its thread's CPU time), and the target's own
        # collections that ran in the payload's thread (on 3.11 inside a step: in max_pause_ms)
        max_hold_ms=heap.get("max_hold_ms"),
        # where the longest stretch began and ended, and the phase marked last before it
        max_hold_where=heap.get("max_hold_where"),
        max_hold_after=heap.get("max_hold_after"),
        target_gc_in_payload_thread=heap.get("target_gc_in_payload_thread"),
        target_gc_in_payload_thread_max_ms=heap.get("target_gc_in_payload_thread_max_ms"),
        owners=[{"path": o["path"], "retained_bytes": o.get("retained_bytes")} for o in doc["owners"][:5]],
        findings=[{"kind": f.get("kind"), "severity": f.get("severity"), "fix": f.get("fix"),
                   "bytes": f.get("bytes")} for f in doc.get("findings", [])][:8],
    )
    return row


def watch(pid: int, seconds: float, worker: VerifiersWorker) -> dict[str, Any]:
    finished_before = int(worker.read_report()["rollouts"]["finished"])
    rss_before = rss_bytes(pid)
    wall, proc = c.run_timed([str(c.LEAKHOUND), "watch", str(pid), "-d", str(seconds), "--json"],
                             timeout=seconds + 1800)
    row: dict[str, Any] = {
        "wall_s": round(wall, 1), "rc": proc.returncode,
        "rss_grown_bytes": rss_bytes(pid) - rss_before,
        # the registry's entries are the rollouts finished: the worker's own count
        "registry_entries_added": int(worker.read_report()["rollouts"]["finished"]) - finished_before,
    }
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    report = next((line for line in lines if line.get("event") == "report"), None)
    if report is None:
        row["error"] = (proc.stderr.strip().splitlines() or ["no report"])[-1]
        return row
    samples = [line for line in lines if line.get("event") == "sample"]
    # what the watch said of samples it could not take (a run with too few samples for a trend)
    row["warnings"] = [w for p in report.get("processes", []) for w in p.get("warnings", [])][-10:]
    row["sample_times"] = [round(float(s.get("taken_at", 0.0)), 1) for s in samples]
    row["stderr_tail"] = proc.stderr.strip().splitlines()[-8:]
    row["samples"] = len(samples)
    row["full_samples"] = sum(1 for s in samples if s.get("full"))
    row["owner_model"] = next((s.get("owner_model") for s in samples if s.get("full")), None)
    row["first_full_owner1"] = next((s["owners"][0]["path"] for s in samples
                                     if s.get("full") and s.get("owners")), None)
    row["findings"] = [
        {"kind": f.get("kind"), "severity": f.get("severity"), "owner": f.get("owner"),
         "fix": f.get("fix"), "bytes_per_min": (f.get("details") or {}).get("bytes_per_min"),
         "grown_bytes": (f.get("details") or {}).get("grown_bytes")}
        for f in report.get("findings", [])
    ]
    return row


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


METRIC = re.compile(r'^leakhound_owner_retained_bytes\{(?P<labels>[^}]*)\} (?P<value>\S+)$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def export(pid: int, timeout: float = 900.0) -> dict[str, Any]:
    """``leakhound export PID`` until its first census is served: the owner labels, biggest first."""
    port = free_port()
    argv = [str(c.LEAKHOUND), "export", str(pid), "--listen", f"127.0.0.1:{port}", "-i", "600"]
    env = {k: v for k, v in os.environ.items() if k != "LEAKHOUND_AGENT"}
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    c._children.append(proc)
    started = time.perf_counter()
    owners: list[tuple[float, str]] = []
    try:
        while time.perf_counter() - started < timeout and proc.poll() is None:
            time.sleep(2.0)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as page:
                    text = page.read().decode()
            except OSError:
                continue
            owners = []
            for line in text.splitlines():
                match = METRIC.match(line)
                if match:
                    labels = dict(LABEL.findall(match["labels"]))
                    owners.append((float(match["value"]), labels.get("owner", "?")))
            if owners:
                break
    finally:
        c.kill_group(proc)
        c._children.remove(proc)
    owners.sort(reverse=True)
    row: dict[str, Any] = {"first_census_s": round(time.perf_counter() - started, 1),
                           "owners": [{"owner": name, "retained_bytes": int(value)} for value, name in owners[:5]]}
    if not owners:
        row["error"] = (proc.stderr.read() if proc.stderr else "")[-500:] or "no owner series"
    return row


def one_python(version: str, python: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    row: dict[str, Any] = {"python": version}
    hb_dir = tmp / version / "heartbeat"
    hb_dir.mkdir(parents=True, exist_ok=True)
    env = {**COUNTS_ONLY_ENV, "PYTHONPATH": str(SITE), "LEAKHOUND_BENCH_HEARTBEAT_DIR": str(hb_dir)}
    with spawn_verifiers_worker(
        tmp / version, rollouts=2, turns=2, park=1, screenshot_kb=args.screenshot_kb,
        image_tokens=args.image_tokens, completion_repeat=args.completion_repeat,
        extra_env=env, python=python, ready_timeout=300,
    ) as worker:
        pid = worker.worker_pid
        beats = hb_dir / f"hb-{pid}.txt"
        if args.nice is not None and os.geteuid() == 0:
            renice(pid, args.nice)
            row["worker_nice"] = args.nice
        started = time.monotonic()
        while rss_bytes(pid) < args.rss_gb * 1e9:
            worker.run_batch(rollouts=args.batch, turns=args.turns, timeout=1800)
            print(f"# {version}: {time.monotonic() - started:5.0f} s, RSS {rss_bytes(pid) / 2**30:.2f} GiB",
                  file=sys.stderr, flush=True)
        row["grow_s"] = round(time.monotonic() - started)
        row["rss_bytes"] = rss_bytes(pid)
        row["truth"] = worker.registry_freed()
        print(f"# {version}: truth {row['truth']}", file=sys.stderr, flush=True)
        row["inspect_idle"] = inspect(pid, beats)
        print(f"# {version}: idle inspect {row['inspect_idle']}", file=sys.stderr, flush=True)
        with continuous_rollouts(worker, rollouts=4, turns=args.turns, timeout=1800):
            time.sleep(10)
            row["inspect_busy"] = inspect(pid, beats)
            print(f"# {version}: busy inspect {row['inspect_busy']}", file=sys.stderr, flush=True)
            if args.inspect_only:
                time.sleep(5)
                row["inspect_busy_2"] = inspect(pid, beats)
                print(f"# {version}: busy inspect {row['inspect_busy_2']}", file=sys.stderr, flush=True)
                row["rss_bytes_end"] = rss_bytes(pid)
                return row
            row["watch"] = watch(pid, args.watch, worker)
            print(f"# {version}: watch {row['watch']}", file=sys.stderr, flush=True)
            row["export"] = export(pid)
            print(f"# {version}: export {row['export']}", file=sys.stderr, flush=True)
            row["rss_bytes_end"] = rss_bytes(pid)
    return row


def summary(rows: list[dict[str, Any]]) -> str:
    out = []
    for row in rows:
        idle, busy = row.get("inspect_idle", {}), row.get("inspect_busy", {})
        sized = row.get("truth", {}).get("registry_sizeof_bytes")
        freed = row.get("truth", {}).get("registry_freed_bytes")
        first = (idle.get("owners") or [{}])[0]
        growth = [f for f in row.get("watch", {}).get("findings", []) if f["kind"] == "growth"]
        out.append([
            row["python"], c.mib(row.get("rss_bytes")), f"{row.get('grow_s', '-')} s",
            f"{idle.get('wall_s', '-')} s / {busy.get('wall_s', '-')} s",
            " / ".join(f"{r.get('max_pause_ms', '-')}, {r.get('max_hold_ms', '-')}, {r.get('heartbeat_ms', '-')}"
                       f" ({r.get('heartbeat_before_ms', '-')})" for r in (idle, busy)),
            f"{first.get('path', '-')} / {(busy.get('owners') or [{}])[0].get('path', '-')}",
            f"{c.ratio(first.get('retained_bytes'), sized)} / {c.ratio(first.get('retained_bytes'), freed)}",
            "; ".join(f"{f['owner']} {f['bytes_per_min'] or 0:,.0f} B/min fix={f['fix'] or '-'}"
                      for f in growth) or "-",
            ", ".join(o["owner"] for o in row.get("export", {}).get("owners", [])[:2]) or "-",
        ])
    return c.table(["python", "RSS", "grown in", "inspect idle/busy",
                    "pause ms idle / busy: step (wall), hold (CPU), heartbeat (before)", "owner #1 idle/busy",
                    "#1/sized, /freed", "watch growth findings", "export owners"], out)


DOC_HEADERS = ("Python", "RSS", "inspect idle / busy", "max pause idle / busy", "owner #1 (idle)",
               "#1 / sized, / freed", "`watch` growth", "`export` owner #1")


def _short(path: str) -> str:
    return f"`...{path.rsplit('.', 2)[-2]}.{path.rsplit('.', 1)[-1]}`" if path.count(".") >= 2 else f"`{path}`"


def doc_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    """docs/performance.md's table: one row a Python of a run."""
    out = []
    for row in rows:
        if "error" in row:
            out.append([row["python"], f"failed: {str(row['error'])[:80]}", *[""] * (len(DOC_HEADERS) - 2)])
            continue
        idle, busy = row.get("inspect_idle", {}), row.get("inspect_busy", {})
        first = (idle.get("owners") or [{}])[0]
        truth = row.get("truth", {})
        growth = [f for f in row.get("watch", {}).get("findings", []) if f["kind"] == "growth"]
        exported = row.get("export", {}).get("owners", [])
        out.append([
            row["python"], c.mib(row.get("rss_bytes")),
            f"{idle.get('wall_s', '-')} s / {busy.get('wall_s', '-')} s",
            f"{idle.get('max_pause_ms', '-')} / {busy.get('max_pause_ms', '-')} ms",
            _short(str(first.get("path", "-"))),
            f"{c.ratio(first.get('retained_bytes'), truth.get('registry_sizeof_bytes'))} / "
            f"{c.ratio(first.get('retained_bytes'), truth.get('registry_freed_bytes'))}",
            "; ".join(f"{_short(f['owner'])} {(f['bytes_per_min'] or 0) / 2**20:,.0f} MiB/min, `--fix {f['fix']}`"
                      if f["fix"] else f"{_short(f['owner'])} {(f['bytes_per_min'] or 0) / 2**20:,.0f} MiB/min"
                      for f in growth) or "none",
            _short(str(exported[0]["owner"])) if exported else "-",
        ])
    return out


PAUSE_HEADERS = ("Python", "inspect", "wall", "longest hold (CPU)", "longest step (wall)", "heartbeat (before)")


def pause_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    """docs/performance.md's pause table: each inspection's longest hold of the GIL (CPU), its
    longest step (wall clock) and how late the worker's heartbeat thread woke meanwhile."""
    out = []
    for row in rows:
        for label, keys in (("idle", ("inspect_idle",)), ("under rollouts", ("inspect_busy", "inspect_busy_2"))):
            runs = [row[k] for k in keys if isinstance(row.get(k), dict) and "heartbeat_ms" in row[k]]
            if runs:
                out.append([row["python"], label, ", ".join(f"{r['wall_s']:.1f} s" for r in runs),
                            ", ".join(f"{r['max_hold_ms']:,.0f} ms" for r in runs),
                            ", ".join(f"{r['max_pause_ms']:,.0f} ms" for r in runs),
                            ", ".join(f"{r['heartbeat_ms']:,.0f} ms ({r['heartbeat_before_ms']:,.0f} ms)"
                                      for r in runs)])
    return out


def write_doc(results: Path) -> None:
    """The page's tables this run has the numbers of: the worker past 2 GB (inspect, watch,
    export), and the pauses (the heartbeat read around each inspection)."""
    rows = json.loads(results.read_text())["rows"]
    if any("watch" in row or "export" in row for row in rows):
        c.update_doc_table("verifiers-scale", results, DOC_HEADERS, doc_rows(rows))
    if pause_rows(rows):
        c.update_doc_table("verifiers-pause", results, PAUSE_HEADERS, pause_rows(rows))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pythons", default="3.11,3.12")
    parser.add_argument("--rss-gb", type=float, default=2.1)
    parser.add_argument("--watch", type=float, default=120.0)
    parser.add_argument("--image-tokens", type=int, default=2560)
    parser.add_argument("--completion-repeat", type=int, default=12)
    parser.add_argument("--screenshot-kb", type=int, default=40)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--nice", type=int, default=-10, help="the worker's niceness (as root)")
    parser.add_argument("--inspect-only", action="store_true", help="no watch, no export: the pauses alone")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--table", type=Path, default=None, help="only print the table of a saved run")
    c.add_doc_options(parser)
    args = parser.parse_args()
    if args.table:
        print(summary([row for row in json.loads(args.table.read_text())["rows"] if "error" not in row]))
        return 0
    if args.doc_from is not None:
        write_doc(args.doc_from)
        return 0
    c.header("the real verifiers 0.1.14 worker past 2 GB: inspect, watch, export", sys.argv)
    found = installed_pythons()
    rows = []
    tmp = Path(subprocess.run(["mktemp", "-d"], capture_output=True, text=True).stdout.strip())
    for version in args.pythons.split(","):
        if version not in found:
            print(f"# no CPython {version} here (pyenv versions)", file=sys.stderr)
            continue
        try:
            rows.append(one_python(version, found[version], args, tmp))
        except Exception as exc:  # noqa: BLE001 - said, and the next Python goes on
            rows.append({"python": version, "error": repr(exc)[-2000:]})
            print(f"# {version}: {exc!r}"[:3000], file=sys.stderr)
        print(json.dumps(rows[-1], indent=1))
    print(summary([row for row in rows if "error" not in row]))
    out = c.write_results("verifiers_scale", out=args.out, rows=rows)
    if out is not None and not args.no_doc:
        write_doc(out)
    return 0


if __name__ == "__main__":
    c.main_guard(main, results="")  # (written by main, with its rows)
