"""What the benchmark scripts share: spawning fixture targets, talking to their harness,
reading the kernel's memory numbers, timing commands, printing plain-text tables, and
writing every run's results file.

Every child is started in its own session (process group) and killed as a group, in
``finally`` blocks, whatever happens.

Every table a script prints is also kept (``record``) and, when its ``main`` returns, written
to ``benchmarks/results/<script>-<date>.json`` with the commit, the machine and the load
average at the start and the end (``main_guard``): a number is quoted from a results file,
never from a terminal. docs/performance.md's tables are generated from these files.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
VENV_BIN = ROOT / ".venv" / "bin"
VENV_PYTHON = VENV_BIN / "python"
LEAKHOUND = VENV_BIN / "leakhound"
PY_SPY = VENV_BIN / "py-spy"
# Peers live in their own venv, never in the project's dependencies.
PEERS_VENV = Path(os.environ.get("LEAKHOUND_BENCH_PEERS_VENV",
                                  Path.home() / ".cache" / "leakhound-bench" / "peers-venv"))
PEER_PACKAGES = ("objgraph", "guppy3", "pympler", "memray")

_children: list[subprocess.Popen[Any]] = []


def kill_group(proc: subprocess.Popen[Any], grace: float = 3.0) -> None:
    """SIGTERM the child's process group, then SIGKILL whatever is left."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass


def kill_all_children() -> None:
    while _children:
        kill_group(_children.pop())


def peers_site_packages() -> Path:
    ver = "python{}.{}".format(*sys.version_info[:2])
    return PEERS_VENV / "lib" / ver / "site-packages"


def ensure_peers_venv() -> Path:
    """The venv holding objgraph, guppy3, pympler and memray; created on first use."""
    python = PEERS_VENV / "bin" / "python"
    site = peers_site_packages()
    missing = [p for p in ("objgraph.py", "guppy", "pympler", "memray") if not (site / p).exists()]
    if not python.exists() or missing:
        print(f"# creating the peers venv at {PEERS_VENV} (pip install {' '.join(PEER_PACKAGES)})",
              file=sys.stderr)
        if not python.exists():
            base = getattr(sys, "_base_executable", sys.executable)
            subprocess.run([base, "-m", "venv", str(PEERS_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *PEER_PACKAGES], check=True)
    return PEERS_VENV


# -- /proc ---------------------------------------------------------------------------------


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM in bytes, from /proc/PID/status."""
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(("VmHWM:", "VmRSS:")):
                key, value = line.split(":", 1)
                out[key] = int(value.split()[0]) * 1024
    return out


def reset_peak(pid: int) -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0, clear_refs value 5)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


class StopSampler:
    """Samples the target main thread's scheduler state from outside, every ~0.5 ms, and
    adds up the time it spends ptrace-stopped ('t') or stopped ('T')."""

    def __init__(self, pid: int, period: float = 0.0005) -> None:
        self.path = f"/proc/{pid}/task/{pid}/stat"
        self.period = period
        self.stopped_s = 0.0
        self.longest_s = 0.0
        self.samples = 0
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stop-sampler", daemon=True)

    def _state(self) -> str:
        try:
            with open(self.path) as fh:
                data = fh.read()
        except OSError:
            return "?"
        return data[data.rindex(")") + 2]

    def _run(self) -> None:
        last = time.perf_counter()
        stretch = 0.0
        while not self._halt.is_set():
            state = self._state()
            now = time.perf_counter()
            self.samples += 1
            if state in "tT":
                self.stopped_s += now - last
                stretch += now - last
                self.longest_s = max(self.longest_s, stretch)
            else:
                stretch = 0.0
            last = now
            time.sleep(self.period)

    def __enter__(self) -> StopSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._halt.set()
        self._thread.join()


# -- fixture targets -------------------------------------------------------------------------


class Target:
    """A fixture process using fixtures/_target.py's harness (ready file + signals)."""

    def __init__(self, fixture: str, *, env: dict[str, str] | None = None,
                 python: Path = VENV_PYTHON, ready_timeout: float = 300.0) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="leakhound-bench-"))
        self.ready = self.tmp / "ready.json"
        full_env = {k: v for k, v in os.environ.items() if k != "LEAKHOUND_AGENT"}
        full_env.update(env or {})
        full_env["LEAKHOUND_READY_FILE"] = str(self.ready)
        full_env["PYTHONUNBUFFERED"] = "1"
        self.log = open(self.tmp / "target.log", "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [str(python), str(FIXTURES / fixture)], env=full_env, stdin=subprocess.DEVNULL,
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        _children.append(self.proc)
        self.pid = self.proc.pid
        self.doc = self._wait_file(self.ready, ready_timeout)

    def _wait_file(self, path: Path, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"target {self.pid} exited ({self.proc.returncode}): "
                                   + (self.tmp / "target.log").read_text()[-2000:])
            try:
                return dict(json.loads(path.read_text()))
            except (OSError, ValueError):
                time.sleep(0.01)
        raise TimeoutError(f"no {path.name} from target {self.pid} within {timeout:.0f}s")

    def report(self, sig: int = signal.SIGUSR1, timeout: float = 30.0) -> dict[str, Any]:
        """Ask for a fresh report (SIGUSR1) and return it."""
        self.ready.unlink(missing_ok=True)
        os.kill(self.pid, sig)
        self.doc = self._wait_file(self.ready, timeout)
        return self.doc

    def reset_lag(self) -> dict[str, Any]:
        """bench_heap's SIGUSR2: worst loop lag back to 0, then a fresh report."""
        return self.report(signal.SIGUSR2)

    def lag_after(self, settle: float = 0.05) -> float:
        """The worst loop lag since the last reset, read once the loop ticked again."""
        time.sleep(settle)
        return float(self.report()["max_lag_ms"])

    def renice(self, niceness: int) -> None:
        """Every thread of the target at ``niceness`` (threads it starts later inherit their
        starter's): a target at -10 measures its own lag with less of the machine's load in it."""
        for tid in os.listdir(f"/proc/{self.pid}/task"):
            os.setpriority(os.PRIO_PROCESS, int(tid), niceness)

    def run_peer(self, timeout: float = 1800.0) -> dict[str, Any]:
        """bench_heap's SIGHUP: run BENCH_PEER on the target's main thread."""
        peer_file = Path(str(self.ready) + ".peer")
        peer_file.unlink(missing_ok=True)
        os.kill(self.pid, signal.SIGHUP)
        return self._wait_file(peer_file, timeout)

    def settle(self, seconds: float = 1.0) -> None:
        """Let the allocator and the loop go quiet before a measurement starts."""
        time.sleep(seconds)

    def stop(self) -> None:
        kill_group(self.proc)
        if self.proc in _children:
            _children.remove(self.proc)
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


@contextmanager
def target(fixture: str, **kwargs: Any) -> Iterator[Target]:
    t = None
    try:
        t = Target(fixture, **kwargs)
        yield t
    finally:
        if t is not None:
            t.stop()


# -- commands -------------------------------------------------------------------------------


def run_timed(argv: Sequence[str], *, timeout: float = 900.0,
              env: dict[str, str] | None = None) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Run a command in its own process group; returns (wall seconds, completed process)."""
    full_env = {**os.environ, **(env or {})}
    full_env.pop("LEAKHOUND_AGENT", None)
    started = time.perf_counter()
    proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, env=full_env,
                            start_new_session=True)
    _children.append(proc)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        kill_group(proc, grace=1.0)
        _children.remove(proc)
    wall = time.perf_counter() - started
    return wall, subprocess.CompletedProcess(list(argv), proc.returncode, out, err)


def leakhound_inspect(pid: int, method: str, *, timeout: float = 900.0, extra: Sequence[str] = (),
                      env: dict[str, str] | None = None) -> tuple[float, dict[str, Any] | None, str]:
    """``leakhound inspect PID --method M --json``: (wall seconds, snapshot or None, error)."""
    argv = [str(LEAKHOUND), "inspect", str(pid), "--method", method, "--json",
            "--timeout", str(int(timeout)), *extra]
    wall, proc = run_timed(argv, timeout=timeout + 30, env=env)
    if proc.returncode != 0:
        return wall, None, (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
    return wall, json.loads(proc.stdout), ""


# -- output ---------------------------------------------------------------------------------


_PHASES = re.compile(r"(payload|census) phases: (.*)")
_HELD = re.compile(r"held the GIL at most ([\d.]+) ms between yields \((\d+) yields")


def verbose_phases(stderr: str) -> dict[tuple[str, str], tuple[float, float]]:
    """``leakhound -v``'s "payload phases: ..." and "census phases: ..." lines:
    (``payload`` or ``census``, phase) -> (wall s, CPU s of the payload's thread)."""
    out: dict[tuple[str, str], tuple[float, float]] = {}
    for line in stderr.splitlines():
        m = _PHASES.search(line)
        if m:
            for part in m.group(2).split(", "):
                name, spent, _unit = part.rsplit(" ", 2)
                wall, cpu = spent.split("/")
                out[(m.group(1), name)] = (float(wall), float(cpu))
    return out


def verbose_holds(stderr: str) -> tuple[float, int] | None:
    """The longest hold of the GIL between two yields (ms) and the yields, over ``-v``'s
    "census held the GIL ..." and "graph held the GIL ..." lines; None without them."""
    found = [(float(m.group(1)), int(m.group(2))) for m in map(_HELD.search, stderr.splitlines()) if m]
    if not found:
        return None
    return max(held for held, _ in found), sum(yields for _, yields in found)


def mib(n: float | None) -> str:
    return "-" if n is None else f"{n / 2**20:,.1f} MiB"


def ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:,.1f} ms"


def secs(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:,.2f} s"


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "-"
    return f"{a / b:,.2f}x"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str = "") -> str:
    """``rows`` as aligned plain text; kept for the run's results file (``record``)."""
    record(title, headers, rows)
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(r, widths, strict=True))).rstrip()

    out = [title] if title else []
    out.append(line(cells[0]))
    out.append("  ".join("-" * w for w in widths))
    out.extend(line(r) for r in cells[1:])
    return "\n".join(out)


PERFORMANCE_DOC = ROOT / "docs" / "performance.md"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table, ``-`` for a missing cell."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines.extend("| " + " | ".join("-" if v is None else str(v) for v in r) + " |" for r in rows)
    return "\n".join(lines)


def add_doc_options(parser: Any) -> None:
    """``--no-doc`` and ``--doc-from FILE``, for a script that writes a table of its own."""
    parser.add_argument("--no-doc", action="store_true", help="leave docs/performance.md as it is")
    parser.add_argument("--doc-from", type=Path, metavar="FILE",
                        help="measure nothing: write docs/performance.md's table from this results file")


def update_doc_table(name: str, results: Path, headers: Sequence[str], rows: Sequence[Sequence[Any]], *,
                     doc: Path = PERFORMANCE_DOC) -> bool:
    """Write ``rows`` as the table between ``<!-- table:NAME -->`` and ``<!-- /table:NAME -->``
    in ``doc``, under a line naming the results file it came from, its commit, machine and
    load. The page's prose around the markers is left as it is. False (and a note on stderr)
    when ``doc`` has no such section: the table goes nowhere else."""
    meta = json.loads(results.read_text())
    commit = str(meta.get("commit", "unknown")).split()[0]
    when = f", {meta['date']}" if meta.get("date") else ""
    source = (f"Generated by `benchmarks/{Path(sys.argv[0]).name}` from `{os.path.relpath(results, ROOT)}`: "
              f"commit `{commit}`{when}, {meta.get('machine', 'unknown machine')}, "
              f"load average at the end {meta.get('load_average_at_end', 'unknown')}.")
    return _write_section(name, source, markdown_table(headers, rows), doc=doc)


def _write_section(name: str, source: str, body: str, *, doc: Path) -> bool:
    """``source`` and ``body`` between ``doc``'s markers of ``name``; False (and a note on
    stderr) when it has no such section."""
    begin, end = f"<!-- table:{name} -->", f"<!-- /table:{name} -->"
    text = doc.read_text()
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        print(f"# no section {begin} ... {end} in {doc}: the table is not written", file=sys.stderr)
        return False
    head, _, rest = text.partition(begin)
    _, _, tail = rest.partition(end)
    doc.write_text(f"{head}{begin}\n{source}\n\n{body}\n{end}{tail}")
    print(f"# table {name} in {os.path.relpath(doc, ROOT)} updated")
    return True


def machine() -> str:
    cpu = ""
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), "")
    except OSError:
        pass
    mem = proc_meminfo_total()
    return (f"{os.cpu_count()} cores ({cpu or 'unknown CPU'}), {mem / 2**30:.0f} GiB RAM, "
            f"Python {sys.version.split()[0]}, Linux {os.uname().release}")


def proc_meminfo_total() -> int:
    with open("/proc/meminfo") as fh:
        for ln in fh:
            if ln.startswith("MemTotal:"):
                return int(ln.split()[1]) * 1024
    return 0


def header(title: str, argv: Sequence[str]) -> None:
    _RUN["title"], _RUN["load_average_at_start"], _RUN["started"] = title, load_average(), time.time()
    print(f"# {title}")
    print(f"# {time.strftime('%Y-%m-%d %H:%M %Z')} | {machine()}")
    print(f"# command: .venv/bin/python {' '.join(argv)}")
    print(f"# leakhound commit: {git_head()}")
    print(f"# load average at start: {load_average()} (other processes share these cores)")
    print()


def git_head() -> str:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%h %s"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out[:72] or "unknown"


def load_average() -> str:
    try:
        with open("/proc/loadavg") as fh:
            return " ".join(fh.read().split()[:3])
    except OSError:
        return "unknown"


# -- results files ----------------------------------------------------------------------------

RESULTS = ROOT / "benchmarks" / "results"
# What this run has printed and measured, for its results file.
_RUN: dict[str, Any] = {"tables": [], "summary": "", "smoke": False}
# The scripts whose newest results make docs/performance.md's "other benchmarks" table
# (scale.py and html_report.py have tables of their own there).
SUMMARIZED = ("dominators", "attach", "ptrace_stop", "gdb_stop", "census_1m", "census_versions", "peers",
              "memory_limit", "busy_real_worker", "busy_probes", "census_walk_variants", "census_walk_abi",
              "profile_census", "verifiers_scale", "sites_overhead")


def record(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Keep a table for the run's results file."""
    _RUN["tables"].append({"title": title, "headers": [str(h) for h in headers],
                           "rows": [["" if v is None else v if isinstance(v, (int, float)) else str(v) for v in row]
                                    for row in rows]})


def summarize(text: str, *, smoke: bool = False) -> None:
    """The one line docs/performance.md shows for this run (``smoke``: a short run that
    checks the script, not a measurement to quote)."""
    _RUN["summary"], _RUN["smoke"] = text, smoke


def write_results(name: str, *, out: Path | None = None, **extra: Any) -> Path | None:
    """This run's tables (and ``extra``) as ``benchmarks/results/NAME-<date>[-smoke].json``,
    with the commit, machine and load; then the page's "other benchmarks" table again.
    None when the run printed no table."""
    if not _RUN["tables"] and not extra:
        return None
    smoke = bool(_RUN["smoke"]) or "--quick" in sys.argv[1:]
    stem = name.replace("_", "-")
    out = out or RESULTS / f"{stem}-{time.strftime('%Y%m%d-%H%M')}{'-smoke' if smoke else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    started = _RUN.get("started")
    doc = {"benchmark": name, "title": _RUN.get("title", ""), "commit": git_head(), "machine": machine(),
           "date": time.strftime("%Y-%m-%d"), "argv": sys.argv, "smoke": smoke,
           "load_average_at_start": _RUN.get("load_average_at_start", "unknown"),
           "load_average_at_end": load_average(),
           "seconds": round(time.time() - started) if started else None,
           "summary": _RUN["summary"] or _default_summary(_RUN["tables"]), "tables": _RUN["tables"], **extra}
    out.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    print(f"# results written to {os.path.relpath(out, ROOT)}")
    if name in SUMMARIZED:
        update_summary_table()
    return out


def _default_summary(tables: Sequence[dict[str, Any]]) -> str:
    """The first table's first rows, "row: header value, ...": what a run shows first."""
    if not tables:
        return ""
    first = tables[0]
    headers = first["headers"]
    parts = ["{}: {}".format(row[0], ", ".join(f"{h} {v}" for h, v in zip(headers[1:4], row[1:4], strict=False)))
             for row in first["rows"][:3]]
    text = "; ".join(parts)
    return text if len(text) <= 240 else text[:237] + "..."


def newest_results(name: str, results: Path = RESULTS) -> Path | None:
    """The newest results file of ``name``: of a full run when there is one, else of a smoke run."""
    found = []
    for path in results.glob(f"{name.replace('_', '-')}-*.json"):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if doc.get("benchmark") == name:
            found.append((not doc.get("smoke"), str(doc.get("date", "")), path.name, path))
    return max(found)[3] if found else None


MAX_SAID = 240


def summary_rows(results: Path = RESULTS) -> list[list[str]]:
    """One row a script of ``SUMMARIZED``: its newest results file and what it says."""
    rows = []
    for name in SUMMARIZED:
        path = newest_results(name, results)
        if path is None:
            rows.append([f"`{name}.py`", "no results file yet", "-", "-"])
            continue
        doc = json.loads(path.read_text())
        run = (f"`{str(doc.get('commit', '?')).split()[0]}`, {doc.get('date', '?')}, "
               f"load {doc.get('load_average_at_start', '?')} -> {doc.get('load_average_at_end', '?')}")
        said = str(doc.get("summary") or "").replace("|", "/")
        if doc.get("smoke"):
            said = f"smoke run (checks the script; not a measurement): {said}"
        if len(said) > MAX_SAID:  # a table cell, not a report: the results file has the rest
            said = said[:MAX_SAID - 3] + "..."
        rows.append([f"`{name}.py`", f"`{path.name}`", run, said])
    return rows


def update_summary_table(*, doc: Path = PERFORMANCE_DOC, results: Path = RESULTS) -> bool:
    """docs/performance.md's "other benchmarks" table, from the newest results of each script."""
    return _write_section("other-benchmarks", "Generated by `benchmarks/_common.py` from the newest results "
                          "file of each script (`benchmarks/results/`), a full run before a smoke run.",
                          markdown_table(("script", "results file", "commit, date, load", "what it measured"),
                                         summary_rows(results)), doc=doc)


def main_guard(main: Any, *, results: str | None = None) -> None:
    """Run ``main()``; whatever happens, kill every child it started. When it returns, its
    tables go to its results file (``results``: its name; the script's by default). A script
    that writes its own results file passes ``results=""``."""
    name = Path(sys.argv[0]).stem if results is None else results

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        code = main()
        print(f"# load average at end: {load_average()}")
        if name:
            write_results(name)
    except KeyboardInterrupt:
        code = 130
    finally:
        kill_all_children()
    sys.exit(code or 0)
