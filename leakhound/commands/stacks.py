"""``leakhound stacks``: what the worker's threads are doing, from py-spy (read-only)."""

from __future__ import annotations

from typing import Annotated

import typer

from leakhound.commands.options import JsonOpt, PidArg, TimeoutOpt
from leakhound.core.stacks import dump_stacks
from leakhound.model.stacks import ThreadStack
from leakhound.render import json_doc as json_render
from leakhound.render.stacks import render_stacks, stacks_document


def command(
    pid: PidArg,
    timeout: TimeoutOpt = 20.0,
    as_json: JsonOpt = False,
    with_locals: Annotated[bool, typer.Option(
        "--locals", "-l", help="Each frame's local variables, as py-spy reads them from outside.")] = False,
    native: Annotated[bool, typer.Option(
        "--native", help="C, C++ and Cython frames too (py-spy --native).")] = False,
    full_paths: Annotated[bool, typer.Option(
        "--full-paths", help="Whole file names, not shortened to the package part.")] = False,
) -> None:
    """What the worker's threads are doing right now (py-spy dump; nothing runs inside it)."""
    run(pid=pid, timeout=timeout, as_json=as_json, with_locals=with_locals, native=native,
        full_paths=full_paths)


def run(*, pid: int, timeout: float, as_json: bool, with_locals: bool = False, native: bool = False,
        full_paths: bool = False) -> tuple[ThreadStack, ...]:
    threads = dump_stacks(pid, timeout=timeout, with_locals=with_locals, native=native)
    if as_json:
        json_render.render_document(stacks_document(pid, threads))
    else:
        render_stacks(pid, threads, full_paths=full_paths)
    return threads
