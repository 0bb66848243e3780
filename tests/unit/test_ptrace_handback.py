"""The page that hands a signal handler's exception back (stop.hand_back), run as the helper
runs it (PyRun_SimpleString, then PyErr_SetInterruptEx from C) in each installed CPython."""

from __future__ import annotations

import json
import subprocess

import pytest

from leakhound.attach.bootstrap_page import HANDBACK_SIGNAL
from leakhound.attach.ptrace.stop import _ARMED, _HANDBACK_PAGE, _RAISED
from tests.pythons import installed_pythons

PYTHONS = installed_pythons()

_SCRIPT = """
import ctypes, json, sys, _signal
page, raised, armed, spare, taken = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] == "1"
if taken:
    _signal.signal(spare, lambda *a: None)  # the target's own handler on the spare signal
before = set(vars(sys.modules["__main__"]))
sys.__dict__[raised] = KeyboardInterrupt("handed back")
rc = ctypes.pythonapi.PyRun_SimpleString(page.encode())
out = {"rc": rc, "armed": armed in sys.__dict__, "left": raised in sys.__dict__,
       "bound": sorted(set(vars(sys.modules["__main__"])) - before - {"before", "rc"})}
sys.__dict__.pop(armed, None)
if out["armed"]:
    try:
        ctypes.pythonapi.PyErr_SetInterruptEx(spare)  # from C: the handler runs at the next check
        for _ in range(1000):
            pass
        out["raised"] = None
    except KeyboardInterrupt as exc:
        out["raised"] = str(exc)
    out["handler_after"] = _signal.getsignal(spare) == _signal.SIG_DFL
print(json.dumps(out))
"""


def _run(python: str, taken: bool) -> dict[str, object]:
    out = subprocess.run([python, "-c", _SCRIPT, _HANDBACK_PAGE, _RAISED, _ARMED, str(HANDBACK_SIGNAL),
                          "1" if taken else "0"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and not out.stderr, out.stderr
    return dict(json.loads(out.stdout))


@pytest.mark.parametrize("version", list(PYTHONS))
def test_the_exception_is_raised_once_in_the_callers_frame_and_the_spare_signal_put_back(version: str) -> None:
    out = _run(PYTHONS[version], taken=False)
    assert out["rc"] == 0 and out["armed"] and not out["left"] and out["bound"] == [], out
    assert out["raised"] == "handed back" and out["handler_after"], out


@pytest.mark.parametrize("version", list(PYTHONS))
def test_a_spare_signal_the_target_handles_is_left_alone(version: str) -> None:
    out = _run(PYTHONS[version], taken=True)
    assert out["rc"] == 0 and not out["armed"] and not out["left"] and out["bound"] == [], out
