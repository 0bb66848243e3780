"""What the target names (a class, a thread, a dict key, a payload's error) reaches the
on-call engineer's terminal as text: its control characters escaped, its brackets never read
as rich markup. A thread named ``\\x1b]0;title\\x07`` retitled the terminal through ``inspect``'s
table, ``watch``'s lines and ``stacks``, and ``[bold red]`` in it styled the rest."""

from __future__ import annotations

import io

from leakhound.analysis.ledger import ledger
from leakhound.model import Owner, TypeStat
from leakhound.model.stacks import ThreadStack
from leakhound.render import table
from leakhound.render.console import escaped
from leakhound.render.stacks import render_stacks
from tests.factories import make_snapshot

HOSTILE = "\x1b]0;owned\x07[bold red]x\x1b[31m"


def test_an_owner_and_a_type_named_by_the_target_are_shown_as_text() -> None:
    snap = make_snapshot(owners=(Owner(f"thread:{HOSTILE}/run.loc", f"__main__.{HOSTILE}", 300, 30 << 20, 301),),
                         types=(TypeStat(f"__main__.{HOSTILE}", 20_000, 1 << 20),))
    out = io.StringIO()
    table.render_snapshot(snap, ledger(snap), file=out)
    text = out.getvalue()
    assert "\x1b" not in text and "\x07" not in text
    assert "__main__.\\x1b]0;owned\\x07[bold red]x\\x1b[31m" in text, text  # (the types' row: one line)


def test_a_thread_name_in_stacks_is_shown_as_text() -> None:
    out = io.StringIO()
    render_stacks(42, (ThreadStack(thread_id=1, os_thread_id=43, name=HOSTILE, active=False, owns_gil=False,
                                   frames=()),), file=out)
    text = out.getvalue()
    assert "\x1b" not in text and "[bold red]x" in text, text


def test_escaped_keeps_newlines_tabs_and_printable_text() -> None:
    assert escaped("a\nb\tc é ✓") == "a\nb\tc é ✓"
    assert escaped("\x1b[31m\x9b\u2028") == "\\x1b[31m\\x9b\\u2028"
