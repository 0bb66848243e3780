"""show and diff of a large snapshot file: fast and bounded, against how long decoding the
same file's JSON takes on this machine (the least any reader must spend). Times are CPU
seconds (the command's, and the decoding's in this process): a loaded machine stretches wall
clocks unevenly, not the work done."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.large_snapshot import write_large_snapshot

pytestmark = pytest.mark.integration

LEAKHOUND = str(Path(sys.executable).with_name("leakhound"))
OWNERS = 120_000  # a ~46 MB file


# Started from a small process: a child's peak RSS counts what it shared with its parent
# before exec, and this test's own process holds the files it wrote.
_MEASURE = """
import resource, subprocess, sys, time
code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode
used = resource.getrusage(resource.RUSAGE_CHILDREN)
print(used.ru_utime + used.ru_stime, used.ru_maxrss * 1024, code)
"""


def _run(*args: str) -> tuple[float, int]:
    """CPU seconds and peak RSS (bytes) of ``leakhound ARGS``."""
    out = subprocess.run([sys.executable, "-c", _MEASURE, LEAKHOUND, *args], capture_output=True, text=True,
                         timeout=300, check=True)
    seconds, peak, code = out.stdout.split()
    assert code == "0", out.stderr
    return float(seconds), int(peak)


def test_show_and_diff_of_a_large_snapshot_are_fast_and_bounded(tmp_path: Path) -> None:
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    size = write_large_snapshot(before, owners=OWNERS)
    write_large_snapshot(after, owners=OWNERS, grown=4096)
    began = time.process_time()
    json.loads(before.read_text())
    decode = time.process_time() - began
    startup, _rss = _run("--version")

    show_seconds, show_rss = _run("show", str(before))
    diff_seconds, diff_rss = _run("diff", str(before), str(after))
    # Checking every value against the model cost 5x the decoding itself; sorting the diff's
    # frozen rows cost more again. Now each file is decoded once and checked in about that time.
    assert show_seconds - startup < 3 * decode + 1.0, (show_seconds, decode, size)
    assert diff_seconds - startup < 8 * decode + 2.0, (diff_seconds, decode, size)
    # Memory: about 3.6x the file per file read (the limit's documented rule), not more.
    assert show_rss < 4 * size + (80 << 20), (show_rss, size)
    assert diff_rss < 8 * size + (80 << 20), (diff_rss, size)
