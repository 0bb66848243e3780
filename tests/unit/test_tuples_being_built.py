"""The payload builds no tuple from a generator (payload/tracked.py).

``tuple(generator)`` grows its tuple with ``_PyTuple_Resize``, which CPython allows only while
the builder holds the one reference; the generator's own bytecode lets the GIL go between
items. A thread of the target that holds a list of every tracked object meanwhile (``for obj in
gc.get_objects(): ...``, as the real verifiers worker's truth thread does) makes the next
resize raise ``SystemError: bad argument to internal function`` in the payload: a ``patch
--verify`` failed so in CI. A list first, then ``tuple(list)``: one C call.
"""

from __future__ import annotations

import ast
import gc
import sys
import threading
import time
from pathlib import Path

from leakhound.payload import roots

PAYLOAD = Path(__file__).resolve().parents[2] / "leakhound" / "payload"
_ITERATORS = {"map", "filter", "zip", "iter", "reversed", "enumerate"}


def _built_from_a_generator(node: ast.Call) -> bool:
    if not node.args:
        return False
    arg = node.args[0]
    return isinstance(arg, ast.GeneratorExp) or (
        isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) and arg.func.id in _ITERATORS)


def test_no_tuple_of_the_payload_is_built_from_a_generator() -> None:
    found = []
    for path in sorted(PAYLOAD.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            if isinstance(node.func, ast.Name) and node.func.id == "tuple" and _built_from_a_generator(node):
                found.append(f"{path.relative_to(PAYLOAD)}:{node.lineno}")
            # f(*generator) builds its argument tuple the same way
            found += [f"{path.relative_to(PAYLOAD)}:{node.lineno} (*)" for arg in node.args
                      if isinstance(arg, ast.Starred) and isinstance(arg.value, ast.GeneratorExp)]
    assert found == []


def test_a_frames_variable_names_while_the_target_lists_every_tracked_object() -> None:
    def make():  # a code object with many cell variables: a tuple that grows several times
        a = b = c = d = e = f = g = h = i = j = k = m = n = o = p = q = r = s = t = u = 1

        def inner() -> int:
            return a + b + c + d + e + f + g + h + i + j + k + m + n + o + p + q + r + s + t + u
        return inner

    code = make.__code__
    stop = threading.Event()

    def lister() -> None:
        while not stop.is_set():
            for _ in gc.get_objects():
                pass

    thread = threading.Thread(target=lister, daemon=True)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    thread.start()
    errors = 0
    try:
        until = time.monotonic() + 1.0
        while time.monotonic() < until:
            try:
                names = roots._variable_names(code)
            except SystemError:  # noqa: PERF203 - what is counted
                errors += 1
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(interval)
    assert errors == 0  # ~2,000 a second with tuple(generator)
    assert set("abcdefghijkmnopqrstu") <= set(names)
