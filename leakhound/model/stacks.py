"""What py-spy read of a worker's threads: frozen, like the rest of the model."""

from __future__ import annotations

from dataclasses import dataclass

STACKS_SCHEMA = "leakhound.stacks/1"


@dataclass(frozen=True)
class Local:
    name: str
    repr: str  # py-spy's rendering of the value, read from outside (no __repr__ runs)
    arg: bool  # an argument of the function


@dataclass(frozen=True)
class Frame:
    function: str
    filename: str
    line: int
    short_filename: str = ""  # the path from the package down, as py-spy shortens it
    locals: tuple[Local, ...] = ()


@dataclass(frozen=True)
class ThreadStack:
    thread_id: int
    name: str
    os_thread_id: int
    active: bool
    owns_gil: bool
    frames: tuple[Frame, ...]
