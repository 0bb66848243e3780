"""Which processes a command works on: the pids given, and those a pattern matches."""

from __future__ import annotations

from collections.abc import Sequence

from leakhound.attach.process import match_processes
from leakhound.errors import TargetNotFound


def chosen_pids(pids: Sequence[int], match: str | None) -> tuple[int, ...]:
    """``pids``, then every Python process whose command line matches ``match`` (not listed
    twice); TargetNotFound when a pattern was given and nothing at all was chosen."""
    chosen = list(pids)
    if match is not None:
        chosen.extend(p for p in match_processes(match) if p not in chosen)
        if not chosen:
            raise TargetNotFound(f"no Python process matches {match!r}")
    return tuple(chosen)
