"""Which processes a command works on: the pids given, and those a pattern matches; and what to
suggest when that is not the process wanted."""

from __future__ import annotations

import re
from collections.abc import Sequence

from leakhound.attach.process import child_pids, match_processes, rss_bytes, title
from leakhound.attach.process import python_processes as python_processes  # for the commands: no attach
from leakhound.errors import LeakhoundError, TargetNotFound

# How many Python processes a --match that found none lists in its hint.
LISTED_PROCESSES = 8
# The processes that run a verifiers v1 Runtime, by the title each gives itself: upstream's
# ``Verifiers::EnvWorker<N>`` (verifiers.utils.process_utils.set_proc_title), and the
# simulated worker's module.
ENV_WORKER_TITLE = re.compile(r"EnvWorker|leakhound\.simulate\.worker", re.IGNORECASE)


def chosen_pids(pids: Sequence[int], match: str | None) -> tuple[int, ...]:
    """``pids``, then every Python process whose title or command line matches ``match`` (not
    listed twice); TargetNotFound when a pattern was given and nothing at all was chosen."""
    chosen = list(pids)
    if match is not None:
        chosen.extend(p for p in match_processes(match) if p not in chosen)
        if not chosen:
            raise no_process_matches(match)
    return tuple(chosen)


def no_process_matches(match: str) -> TargetNotFound:
    """The error for a ``--match`` that chose nothing, its hint listing the Python processes
    that could have been chosen, with their titles."""
    seen = sorted(python_processes(), key=lambda p: -_rss(p[0]))  # the worker that grows is likely the biggest
    listed = "; ".join(f"{pid} {_cut(text, 40)}" for pid, text in seen[:LISTED_PROCESSES])
    more = f" (and {len(seen) - LISTED_PROCESSES} more)" if len(seen) > LISTED_PROCESSES else ""
    hint = (
        "--match is a regular expression searched, ignoring case, in each Python process's title and "
        "command line (as `ps -eo pid,comm,args` shows them). "
        + (f"The largest Python processes leakhound can read: {listed}{more}." if seen else
           "leakhound can read no Python process here: run it as root or as the worker's user.")
        + " A worker in a container's pid namespace: give its PID as seen from here, or run leakhound inside it."
    )
    return TargetNotFound(f"no Python process matches {match!r}", hint=hint)


def _rss(pid: int) -> int:
    try:
        return rss_bytes(pid)
    except LeakhoundError:
        return 0


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def env_worker_children(pid: int) -> list[tuple[int, str]]:
    """(pid, title) of the processes ``pid`` started (children and theirs) whose title says
    they run a verifiers env worker: where its Runtime is when ``pid`` is the EnvServer that
    routes to them. Read from /proc only, bounded; nothing of theirs is run."""
    found = []
    for child in child_pids(pid, depth=2):
        text = title(child)
        if ENV_WORKER_TITLE.search(text):
            found.append((child, text))
    return found
