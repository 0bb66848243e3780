"""The pending call's machine code (ptrace/trampoline.py), run in this process as the eval
loop runs a pending call: the GIL held, its text in __main__'s dict."""

from __future__ import annotations

import ctypes
import json
import subprocess

import pytest

from leakhound.attach.ptrace import trampoline
from tests.pythons import installed_pythons

_RUN = """
import ctypes, importlib.util, json, sys
spec = importlib.util.spec_from_file_location("trampoline", {path!r})  # (it imports struct only)
trampoline = importlib.util.module_from_spec(spec)
spec.loader.exec_module(trampoline)
libc = ctypes.CDLL(None)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
api = ctypes.pythonapi
addresses = {{name: ctypes.cast(getattr(api, name), ctypes.c_void_p).value for name in trampoline.FUNCTIONS}}
munmap = ctypes.cast(libc.munmap, ctypes.c_void_p).value

def run(text):
    page = libc.mmap(None, trampoline.PAGE, 3, 0x22, -1, 0)
    code = trampoline.code(page, addresses, munmap)
    ctypes.memmove(page, code, len(code))
    assert libc.mprotect(page, trampoline.PAGE, trampoline.PROT_RX) == 0
    f = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_char_p)(page)
    try:
        rc = f(text.encode())
    except BaseException as exc:
        return {{"raised": type(exc).__name__ + ": " + str(exc)}}
    with open("/proc/self/maps") as fh:
        mapped = any(line.startswith("%x-" % page) for line in fh)
    return {{"rc": rc, "mapped": mapped}}

out = {{"ok": run("import sys\\nsys._lh_ran = 1\\n"), "ran": getattr(sys, "_lh_ran", 0),
       "bound": "sys" in vars(sys.modules["__main__"]),
       "fails": run("raise KeyboardInterrupt('at the first bytecode')")}}
# (A KeyboardInterrupt out of a run sets CPython's "exit by SIGINT" flag, as any run's does; the
# next run clears it: this process then exits 0.)
api.PyRun_SimpleString(b"pass")
print(json.dumps(out))
"""


@pytest.mark.parametrize("version", list(installed_pythons()))
def test_the_text_runs_in_main_and_an_exception_stays_set_for_the_caller(version: str) -> None:
    script = _RUN.format(path=trampoline.__file__)
    done = subprocess.run([installed_pythons()[version], "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    # Success: 0, through munmap of its own page (gone); the text ran in __main__'s dict.
    assert out["ok"] == {"rc": 0, "mapped": False} and out["ran"] == 1 and out["bound"], out
    # A raise: -1 with the exception left set, so the caller raises it (ctypes here; the eval
    # loop in a target), never printed and dropped.
    assert out["fails"] == {"raised": "KeyboardInterrupt: at the first bytecode"}, out


def test_the_code_is_one_page_and_its_jumps_land_on_the_failure_path() -> None:
    made = trampoline.code(0x7F0000000000, dict.fromkeys(trampoline.FUNCTIONS, 0x7F1000000000), 0x7F2000000000)
    assert len(made) < trampoline.PAGE and made.endswith(b"__main__\0")
    assert ctypes.sizeof(ctypes.c_void_p) == 8
