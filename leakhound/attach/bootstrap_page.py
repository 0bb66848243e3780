"""The page a bootstrap string is written into, for both injecting methods (ptrace, gdb).

The debugger maps a page of its own in the target (an anonymous mapping: no allocator lock
is taken, nothing of the target's heap is used) and writes into it a statement that lists
the page in ``sys`` (wire.BOOTSTRAP_PAGES), then the bootstrap. PyRun_SimpleString compiles
the whole string before it runs any of it, so a listed page is free to go: the payload's
thread unmaps every listed page once it loaded (boot.py, through its extension), the
bootstrap itself when the payload cannot start (channel.bootstrap_code). A bootstrap that
runs late, after a timeout, leaves nothing behind either.
"""

from __future__ import annotations

from leakhound.payload import wire

PAGE = 0x1000
# A spare real-time signal (SIGRTMAX - 2 on Linux) on which an exception a target's signal
# handler raised on the main thread while leakhound's code ran there is handed back: a
# one-shot handler that puts the default back and raises it, set only where the target has
# none (ptrace/stop.hand_back; the bootstrap's own, channel.bootstrap_code).
HANDBACK_SIGNAL = 62


def handback_handler(exception: str, indent: str) -> str:
    """The lines that set the one-shot handler on HANDBACK_SIGNAL raising ``exception`` (a name
    bound where they run; ``_signal`` bound as ``g``), each indented by ``indent``: it puts the
    default back, then raises. The caller checks the signal has no handler of the target's."""
    return (f"{indent}def h(*a,e={exception},g=g):\n"
            f"{indent} g.signal({HANDBACK_SIGNAL},g.SIG_DFL)\n"
            f"{indent} raise e\n"
            f"{indent}g.signal({HANDBACK_SIGNAL},h)\n")


# The address a text is made with before its page exists (gdb maps it inside gdb's script):
# the same width as any address, so the text's length, and the page size, do not change.
PLACEHOLDER = 0


def bootstrap_text(code: str, page: int, size: int) -> bytes:
    """What the page holds: a statement listing the page in ``sys._leakhound_pages``, then
    ``code``; NUL-terminated. It binds no name in __main__."""
    listed = (
        "try:\n"
        f" __import__('sys').__dict__.setdefault({wire.BOOTSTRAP_PAGES!r},[]).append(({page:#018x},{size}))\n"
        "except BaseException:\n"
        " pass\n"
    )
    return (listed + code).encode() + b"\0"


def placeholder_address() -> bytes:
    """How PLACEHOLDER is spelled in a text (its first occurrence is the page's address)."""
    return f"{PLACEHOLDER:#018x}".encode()


def page_size_for(code: str) -> int:
    length = len(bootstrap_text(code, 0, 1 << 40))  # fixed-width address, widest size
    return (length + PAGE - 1) & ~(PAGE - 1)
