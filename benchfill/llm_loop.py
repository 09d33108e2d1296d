"""One event loop, on a thread of its own, for every litellm call this process makes.

litellm keeps one logging worker for the whole process, bound to the event loop it saw last, and each run
has a loop of its own. Two runs at once in one process (a host's two threads) pulled the worker's queue from
one loop to the other, and litellm printed hundreds of lines of its errors ("bound to a different event
loop", "cannot reuse already awaited coroutine"), the runs' results right. With its calls made on one loop,
the worker sees one loop.

litellm also caches its clients per loop. A run holds this loop while it works (``hold``); the last to let it
go (``let_go``) closes the clients cached on it, as each run closed its own loop's: a server that keeps
connections alive (vLLM, any real one) otherwise kept them open until exit, and under
``-W error::ResourceWarning`` the command failed at exit with its work done.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_GUARD = threading.Lock()
_LOOP: asyncio.AbstractEventLoop | None = None
_THREAD: threading.Thread | None = None
_PID = 0  # the process that made them: a forked child has the variables, not the thread
_HOLDERS = 0  # runs working, and calls in flight
_FORK_HOOKED = False


def _loop() -> asyncio.AbstractEventLoop:
    global _LOOP, _THREAD, _PID, _FORK_HOOKED
    with _GUARD:
        if _LOOP is None or _PID != os.getpid() or _LOOP.is_closed():
            loop = asyncio.new_event_loop()  # asyncio's own: the loopback guard sits on Python's sockets
            thread = threading.Thread(target=loop.run_forever, name="benchfill-litellm", daemon=True)
            thread.start()
            if _PID != os.getpid():
                atexit.register(_stop)
            _LOOP, _THREAD, _PID = loop, thread, os.getpid()
            if not _FORK_HOOKED:
                os.register_at_fork(after_in_child=_forked)
                _FORK_HOOKED = True
        return _LOOP


async def call(coro: Coroutine[Any, Any, T]) -> T:
    """``coro`` (a litellm call) run on the process's litellm loop, awaited on the caller's. Cancelled here
    (a timeout, Ctrl-C), it is cancelled there. The call holds the loop's clients open while it is in flight:
    a caller of ``benchfill.llm`` outside any run had its connection closed under it when a run ended."""
    global _HOLDERS
    loop = _loop()
    with _GUARD:
        _HOLDERS += 1
    try:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))
    finally:
        with _GUARD:
            _HOLDERS -= 1
        # last among the exit handlers, so first to run: litellm registers its own client cleanup when it makes
        # a client, and that one closes this loop's clients from the main thread, which leaves them half-closed
        atexit.unregister(_stop)
        atexit.register(_stop)


def _forked() -> None:
    """In a forked child: the parent's loop has no thread here. Its tasks (litellm's logging worker, which
    litellm moves to the child's own loop) are let go without "Task was destroyed but it is pending"."""
    global _LOOP, _THREAD, _HOLDERS, _GUARD
    _GUARD = threading.Lock()  # (held by another thread of the parent at the fork, it would stay held here)
    old = _LOOP
    if old is not None:
        for task in asyncio.all_tasks(old):
            task._log_destroy_pending = False  # (asyncio's own switch for a task it knows will not finish)
    _LOOP, _THREAD, _HOLDERS = None, None, 0


def hold() -> None:
    """A run that may call litellm starts: the clients cached on the loop stay open until it lets go."""
    global _HOLDERS
    with _GUARD:
        _HOLDERS += 1


async def let_go() -> None:
    """A run is done: where it was the last, the clients litellm cached on the loop are closed."""
    global _HOLDERS
    with _GUARD:
        _HOLDERS -= 1
        loop = _LOOP if _PID == os.getpid() and _LOOP is not None and not _LOOP.is_closed() else None
    if loop is None:  # no litellm call was made
        return
    try:
        await asyncio.wait_for(asyncio.wrap_future(asyncio.run_coroutine_threadsafe(_close_if_idle(), loop)), 10)
    except Exception:  # closing is best effort: the run's work is done
        pass


async def _close_if_idle() -> None:
    # On the loop itself, so that a run starting meanwhile is counted (it holds before it calls) or finds
    # the clients gone from the cache (it makes new ones): none is closed under a call in flight.
    if _HOLDERS:
        return
    import sys

    litellm = sys.modules.get("litellm")
    if litellm is None:
        return
    try:
        from litellm.caching.evicted_client_closer import running_loop_token

        token, cache = running_loop_token(), litellm.in_memory_llm_clients_cache
        mine = [k for k in list(cache.cache_dict) if token is not None and str(k).endswith(f"-{token}")]
    except Exception:  # another litellm's internals: left to litellm
        return
    for key in mine:
        client = cache.cache_dict.pop(key, None)
        getattr(cache, "ttl_dict", {}).pop(key, None)
        close = getattr(client, "close", None) or getattr(client, "aclose", None)
        if close is None:
            continue
        try:
            done = close()
            if asyncio.iscoroutine(done):
                await asyncio.wait_for(done, timeout=5)
        except Exception:  # closing is best effort
            pass


def _stop() -> None:
    """At exit: the loop's tasks (litellm's logging worker) cancelled and awaited, the loop closed, as
    ``asyncio.run`` ends a run's own loop; left running, they were reported destroyed while pending."""
    with _GUARD:
        loop, thread = (_LOOP, _THREAD) if _PID == os.getpid() else (None, None)
    if loop is None or thread is None or loop.is_closed():
        return

    async def cancel_all() -> None:
        await _close_if_idle()  # (a caller of benchfill.llm outside a run never let go)
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await loop.shutdown_asyncgens()

    try:
        asyncio.run_coroutine_threadsafe(cancel_all(), loop).result(timeout=5)
    except Exception:
        pass
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=5)
    if not thread.is_alive():
        loop.close()
