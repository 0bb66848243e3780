"""tasks.await_chain never asks a running coroutine what it awaits: CPython reads that from
the top of the frame's value stack, which a running frame does not keep (_PyGen_yf reads
below its locals and increfs what it finds). A worker whose loop thread blocked inside a
coroutine (os.fork waiting for the import lock) was killed by SIGSEGV that way, 3.11 and
3.12 (tests/integration/test_fork_and_gc_state.py's fork storm)."""

from __future__ import annotations

import asyncio
import threading

from leakhound.payload.tasks import await_chain


class _Task:
    def __init__(self, coro: object) -> None:
        self.coro = coro

    def get_coro(self) -> object:
        return self.coro


def test_a_coroutine_running_in_another_thread_ends_the_chain() -> None:
    entered, release = threading.Event(), threading.Event()

    async def inner() -> None:
        await asyncio.sleep(0)

    async def blocking() -> None:
        entered.set()
        release.wait(10)  # the GIL let go inside the running coroutine
        await inner()

    coro = blocking()
    thread = threading.Thread(target=asyncio.run, args=(coro,))
    thread.start()
    try:
        assert entered.wait(10)
        assert coro.cr_running
        assert await_chain(_Task(coro)) == [coro]
    finally:
        release.set()
        thread.join(10)


def test_a_suspended_chain_is_followed_to_its_innermost_coroutine() -> None:
    async def inner() -> None:
        await asyncio.sleep(3600)

    async def outer() -> None:
        await inner()

    async def main() -> list[str]:
        task = asyncio.ensure_future(outer())
        await asyncio.sleep(0)
        names = [c.cr_code.co_name for c in await_chain(task)]
        task.cancel()
        return names

    assert asyncio.run(main()) == ["outer", "inner", "sleep"]


def test_another_implementations_running_coroutine_is_not_asked_what_it_awaits() -> None:
    asked = []

    class coroutine:  # noqa: N801 - named as Cython names its coroutine type
        cr_running = True

        @property
        def cr_await(self) -> None:
            asked.append("cr_await")
            return None

    running = coroutine()
    assert await_chain(_Task(running)) == [running]
    assert asked == []
