"""The README's first command: the demo tells the whole story, proof and all, on its own worker."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def test_the_demo_proves_the_fixes_and_inspects_them_as_applied() -> None:
    done = subprocess.run([sys.executable, "-m", "leakhound", "demo", "--verify", "3"], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "NO_COLOR": "1", "COLUMNS": "100"})
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    # the proof: slopes before and after, and a verdict backed by them
    assert "before" in out and "after" in out and "verdict:" in out, out[-3000:]
    # the next inspection knows every fix it found a finding for is applied
    findings = out.split("4. leakhound inspect", 1)[1]
    assert "applied" in findings and "--fix registry" not in findings, findings
    assert "\x1b[" not in out  # NO_COLOR
